//! The operator driven by native process functions: no wasm, no files.

use super::*;
use crate::runtime::{BatchEntry, BatchTaken, FiredTimer, OutputId};
use std::sync::{Arc, Mutex};
use weir_core::key::tie_order;
use weir_core::output::OutputRecord;
use weir_core::state::{StateId, StateKind};

/// What the test sink received: one line per record, `value@timestamp#sequence`.
type Received = Arc<Mutex<Vec<String>>>;

struct VecSink(Received);

impl Sink for VecSink {
    fn location(&self) -> &str {
        "memory"
    }

    fn write(&mut self, record: &OutputRecord<'_>) -> anyhow::Result<()> {
        let value = String::from_utf8_lossy(record.value);
        let line = format!("{value}@{}#{}", record.timestamp, record.sequence);
        self.0.lock().unwrap().push(line);
        Ok(())
    }

    fn flush(&mut self) -> anyhow::Result<()> {
        Ok(())
    }
}

/// Counts elements per key in a value state, registers an event-time timer `delay`
/// after each element, and says what it saw: `e:<key>:<count>` and `t:<key>`. An
/// element whose value is `fail` fails; one whose value is `undecodable` says its
/// state cannot be read.
struct Counter {
    name: &'static str,
    delay: i64,
    /// Fails on every element (a broken new version).
    always_fail: bool,
    /// Says it takes batches, and fails every batch (the operator must replay).
    failing_batches: bool,
    /// Says it takes batches, and takes the timers at their start and at most one
    /// element (as the SDKs do when a timer it registered may be due), recording the
    /// size of each batch it took.
    batches: Option<Arc<Mutex<Vec<usize>>>>,
    count: StateId,
    main: OutputId,
    /// An extra output to declare in `init` (to test unrouted outputs).
    extra_output: Option<&'static str>,
    /// The count's time-to-live, if any.
    ttl: Option<weir_core::state::StateTtl>,
}

impl Counter {
    fn new(name: &'static str, delay: i64) -> Self {
        Self {
            name,
            delay,
            always_fail: false,
            failing_batches: false,
            batches: None,
            count: 0,
            main: 0,
            extra_output: None,
            ttl: None,
        }
    }

    fn emit(&self, host: &mut HostServices, text: String) -> Result<(), CallError> {
        host.emit(self.main, text.into_bytes(), None, None)
            .map_err(|e| CallError::Trapped(e.to_string()))
    }
}

impl ProcessFunction for Counter {
    fn name(&self) -> &str {
        self.name
    }

    fn init(&mut self, host: &mut HostServices, _info: &InitInfo) -> Result<(), CallError> {
        self.count = host
            .declare_state("count", StateKind::Value, self.ttl)
            .map_err(CallError::Returned)?;
        self.main = host.declare_output("main").map_err(CallError::Returned)?;
        if let Some(extra) = self.extra_output {
            host.declare_output(extra).map_err(CallError::Returned)?;
        }
        Ok(())
    }

    fn process_element(
        &mut self,
        host: &mut HostServices,
        element: ElementRef<'_>,
    ) -> Result<(), CallError> {
        match element.value {
            _ if self.always_fail => return Err(CallError::Returned("broken".into())),
            b"fail" => return Err(CallError::Returned("asked to fail".into())),
            b"undecodable" => return Err(CallError::StateDecode("not a count".into())),
            _ => {}
        }
        let trap = |e: anyhow::Error| CallError::Trapped(e.to_string());
        let count = match host.value_get(self.count).map_err(trap)? {
            Some(bytes) => u64::from_le_bytes(bytes.try_into().expect("8 bytes")) + 1,
            None => 1,
        };
        host.value_set(self.count, count.to_le_bytes().to_vec())
            .map_err(trap)?;
        host.register_timer(TimeDomain::EventTime, element.timestamp + self.delay)
            .map_err(trap)?;
        let key = String::from_utf8_lossy(element.key);
        self.emit(host, format!("{}:e:{key}:{count}", self.name))
    }

    fn on_timer(
        &mut self,
        host: &mut HostServices,
        timer: FiredTimer<'_>,
    ) -> Result<(), CallError> {
        let key = String::from_utf8_lossy(timer.key);
        self.emit(host, format!("{}:t:{key}", self.name))
    }

    fn takes_batches(&self) -> bool {
        self.failing_batches || self.batches.is_some()
    }

    fn process_batch(
        &mut self,
        host: &mut HostServices,
        entries: &[BatchEntry<'_>],
    ) -> Result<BatchTaken, CallError> {
        let Some(batches) = self.batches.clone().filter(|_| !self.failing_batches) else {
            return Err(CallError::Trapped("this batch always fails".into()));
        };
        let mut consumed = 0;
        for entry in entries {
            match *entry {
                BatchEntry::Element { .. } if consumed > 0 => break,
                BatchEntry::Element { element, key, .. } => {
                    host.enter(key, element.timestamp);
                    self.process_element(host, element)?;
                }
                BatchEntry::Timer {
                    domain,
                    timestamp,
                    key,
                    ..
                } => {
                    host.timer_for(key, domain, timestamp, false);
                    let bytes = host.keys.entry(key).key().to_vec();
                    host.enter(key, timestamp);
                    let timer = FiredTimer {
                        domain,
                        timestamp,
                        key: &bytes,
                    };
                    self.on_timer(host, timer)?;
                }
            }
            host.leave();
            consumed += 1;
        }
        batches.lock().unwrap().push(consumed);
        Ok(BatchTaken {
            consumed,
            skipped: 0,
        })
    }
}

/// An operator over `function` with one source (no out-of-orderness) and one sink.
fn operator(function: Counter) -> (KeyedOperator, Received) {
    let mut operator = KeyedOperator::new(Box::new(function), &[0], 0);
    let outputs = operator.init(&InitInfo::default()).expect("init");
    assert_eq!(outputs, ["main"]);
    let received = Received::default();
    operator.bind_sinks(vec![Box::new(VecSink(Arc::clone(&received)))]);
    (operator, received)
}

/// Elements of source 0: (key, value, timestamp).
fn elements<'a>(records: &'a [(&'a str, &'a str, i64)]) -> Vec<(usize, ElementRef<'a>)> {
    records
        .iter()
        .map(|(key, value, timestamp)| {
            let element = ElementRef {
                input: 0,
                key: key.as_bytes(),
                group: weir_core::key::key_group(key.as_bytes()),
                value: value.as_bytes(),
                timestamp: *timestamp,
            };
            (0, element)
        })
        .collect()
}

fn taken(received: &Received) -> Vec<String> {
    std::mem::take(&mut received.lock().unwrap())
}

#[test]
fn timers_fire_once_the_watermark_passes_them_in_timestamp_order() {
    let (mut op, received) = operator(Counter::new("v1", 10));
    let records = [("a", "x", 1), ("b", "x", 5), ("a", "x", 20), ("c", "x", 21)];
    op.process_elements(&elements(&records)).unwrap();
    // The watermark follows the largest timestamp (no out-of-orderness): the element at
    // 20 passes a's timer at 11 and b's at 15, which fire after it, before c's element.
    assert_eq!(
        taken(&received),
        [
            "v1:e:a:1@1#0",
            "v1:e:b:1@5#1",
            "v1:e:a:2@20#2",
            "v1:t:a@11#3",
            "v1:t:b@15#4",
            "v1:e:c:1@21#5",
        ]
    );
    assert_eq!(op.counters().event_timers, 2);
    // The end of input fires the rest, in timestamp order.
    op.end_source(0).unwrap();
    op.finish().unwrap();
    assert_eq!(taken(&received), ["v1:t:a@30#6", "v1:t:c@31#7"]);
    assert_eq!(op.counters().elements, 4);
    assert_eq!(op.counters().late, 0);
}

#[test]
fn timers_due_at_the_same_time_fire_in_the_keys_tie_order() {
    let (mut op, received) = operator(Counter::new("v1", 100));
    let keys = ["k1", "k2", "k3", "k4", "k5", "k6", "k7", "k8"];
    let records: Vec<_> = keys.iter().map(|k| (*k, "x", 0)).collect();
    op.process_elements(&elements(&records)).unwrap();
    taken(&received);
    op.end_source(0).unwrap();
    let fired = taken(&received);
    let mut expected: Vec<&str> = keys.to_vec();
    expected.sort_by_key(|k| tie_order(k.as_bytes()));
    let expected: Vec<String> = expected
        .iter()
        .enumerate()
        .map(|(i, k)| format!("v1:t:{k}@100#{}", i + keys.len()))
        .collect();
    assert_eq!(fired, expected);
    let byte_order: Vec<String> = keys
        .iter()
        .enumerate()
        .map(|(i, k)| format!("v1:t:{k}@100#{}", i + keys.len()))
        .collect();
    assert_ne!(
        fired, byte_order,
        "these keys' tie order is not their byte order"
    );
}

#[test]
fn a_late_element_is_processed_and_counted() {
    let (mut op, received) = operator(Counter::new("v1", 1000));
    op.process_elements(&elements(&[("a", "x", 50), ("a", "x", 40)]))
        .unwrap();
    assert_eq!(taken(&received), ["v1:e:a:1@50#0", "v1:e:a:2@40#1"]);
    assert_eq!(op.counters().late, 1);
}

#[test]
fn a_failing_batch_is_run_again_one_call_at_a_time() {
    let records = [("a", "x", 1), ("b", "x", 5), ("a", "x", 20), ("b", "x", 40)];
    let (mut single, single_out) = operator(Counter::new("v1", 10));
    single.process_elements(&elements(&records)).unwrap();
    let mut batching = Counter::new("v1", 10);
    batching.failing_batches = true;
    let (mut batched, batched_out) = operator(batching);
    batched.process_elements(&elements(&records)).unwrap();
    let expected = taken(&single_out);
    assert_eq!(
        expected.len(),
        7,
        "4 elements and the timers at 11, 15 and 30"
    );
    assert_eq!(taken(&batched_out), expected);
    assert_eq!(batched.counters().elements, 4);
    assert_eq!(batched.counters().event_timers, 3);
}

#[test]
fn a_failure_names_the_element_and_keeps_what_came_before() {
    let (mut op, received) = operator(Counter::new("v1", 1000));
    let records = [("a", "x", 1), ("b", "fail", 2), ("c", "x", 3)];
    let (index, error) = op.process_elements(&elements(&records)).unwrap_err();
    assert_eq!(index, 1);
    assert!(matches!(
        error,
        OperatorError::Udf {
            activity: Activity::Element,
            error: CallError::Returned(_)
        }
    ));
    assert_eq!(taken(&received), ["v1:e:a:1@1#0"]);
    assert_eq!(op.counters().elements, 1);
}

#[test]
fn a_state_that_cannot_be_read_is_reported_as_such() {
    let (mut op, _received) = operator(Counter::new("v1", 1000));
    let (index, error) = op
        .process_elements(&elements(&[("a", "undecodable", 1)]))
        .unwrap_err();
    assert_eq!(index, 0);
    let OperatorError::Udf {
        activity: Activity::Element,
        error: CallError::StateDecode(message),
    } = error
    else {
        panic!("not a state-decode error: {error}");
    };
    assert_eq!(message, "not a count");
}

#[test]
fn a_swapped_in_version_keeps_state_and_timers_and_is_rolled_back_within_probation() {
    let (mut op, received) = operator(Counter::new("v1", 10));
    op.process_elements(&elements(&[("a", "x", 1)])).unwrap();
    let mut broken = Counter::new("v2", 10);
    broken.always_fail = true;
    op.swap_function(Box::new(broken), &InitInfo::default(), 3)
        .unwrap();
    assert!(op.in_probation());
    assert_eq!(op.function_name(), "v2");
    let (index, _) = op
        .process_elements(&elements(&[("a", "x", 2)]))
        .unwrap_err();
    assert_eq!(index, 0);
    let failed = op.rollback().expect("the old version was kept");
    assert_eq!(failed.name(), "v2");
    assert_eq!(op.function_name(), "v1");
    // The old version goes on from the same state (a's count) and timers (a@11).
    op.process_elements(&elements(&[("a", "x", 20)])).unwrap();
    assert_eq!(
        taken(&received),
        ["v1:e:a:1@1#0", "v1:e:a:2@20#1", "v1:t:a@11#2"]
    );
}

#[test]
fn a_rollback_gives_the_states_the_time_to_live_the_old_version_declared() {
    use weir_core::state::{StateTtl, TtlRefresh};
    let (mut op, _received) = operator(Counter::new("v1", 10));
    op.process_elements(&elements(&[("a", "x", 1)])).unwrap();
    let mut broken = Counter::new("v2", 10);
    broken.always_fail = true;
    broken.ttl = Some(StateTtl {
        millis: 5,
        domain: TimeDomain::EventTime,
        refresh: TtlRefresh::OnWrite,
    });
    op.swap_function(Box::new(broken), &InitInfo::default(), 3)
        .unwrap();
    let count = op.host().states().find("count").unwrap().0;
    assert!(op.host().states().ttl(count).is_some());
    op.process_elements(&elements(&[("a", "x", 2)]))
        .unwrap_err();
    op.rollback().expect("the old version was kept");
    assert_eq!(op.host().states().ttl(count), None, "v1 declared none");
    let a = op.host().keys().find(b"a").unwrap();
    assert_eq!(
        op.host().keys().entry(a).slot(count),
        Some(&weir_core::state::Slot::Value(1u64.to_le_bytes().to_vec())),
        "the count is kept, without a stamp"
    );
}

#[test]
fn probation_ends_after_its_calls_and_the_new_version_stays() {
    let (mut op, received) = operator(Counter::new("v1", 1000));
    op.swap_function(Box::new(Counter::new("v2", 1000)), &InitInfo::default(), 2)
        .unwrap();
    op.process_elements(&elements(&[("a", "x", 1)])).unwrap();
    assert!(op.in_probation(), "one call of two");
    op.process_elements(&elements(&[("a", "x", 2)])).unwrap();
    assert!(!op.in_probation());
    assert!(op.rollback().is_none(), "the old version is gone");
    assert_eq!(taken(&received), ["v2:e:a:1@1#0", "v2:e:a:2@2#1"]);
}

#[test]
fn a_version_declaring_an_output_without_a_sink_is_refused_and_the_old_one_stays() {
    let (mut op, _received) = operator(Counter::new("v1", 1000));
    let mut wider = Counter::new("v2", 1000);
    wider.extra_output = Some("alerts");
    let error = op
        .swap_function(Box::new(wider), &InitInfo::default(), 10)
        .unwrap_err();
    assert!(matches!(&error, OperatorError::Unrouted(outputs) if outputs == &["alerts"]));
    assert_eq!(op.function_name(), "v1");
    assert!(!op.in_probation());
}

/// Changes every kind of state and timer of its key on each element; an element whose
/// value is `fail` makes the same changes (and more) and then fails.
struct Scribbler {
    value: StateId,
    list: StateId,
    map: StateId,
}

impl ProcessFunction for Scribbler {
    fn name(&self) -> &str {
        "scribbler"
    }

    fn init(&mut self, host: &mut HostServices, _info: &InitInfo) -> Result<(), CallError> {
        let declare = |host: &mut HostServices, name, kind| {
            host.declare_state(name, kind, None)
                .map_err(CallError::Returned)
        };
        self.value = declare(host, "value", StateKind::Value)?;
        self.list = declare(host, "list", StateKind::List)?;
        self.map = declare(host, "map", StateKind::Map)?;
        host.declare_output("main").map_err(CallError::Returned)?;
        Ok(())
    }

    fn process_element(
        &mut self,
        host: &mut HostServices,
        element: ElementRef<'_>,
    ) -> Result<(), CallError> {
        let trap = |e: anyhow::Error| CallError::Trapped(e.to_string());
        let ts = element.timestamp;
        host.value_set(self.value, ts.to_le_bytes().to_vec())
            .map_err(trap)?;
        host.list_append(self.list, element.value.to_vec())
            .map_err(trap)?;
        host.map_put(self.map, b"latest".to_vec(), element.value.to_vec())
            .map_err(trap)?;
        host.map_put(self.map, ts.to_le_bytes().to_vec(), b"seen".to_vec())
            .map_err(trap)?;
        host.map_remove(self.map, &(ts - 1).to_le_bytes())
            .map_err(trap)?;
        host.register_timer(TimeDomain::EventTime, ts + 100)
            .map_err(trap)?;
        host.delete_timer(TimeDomain::EventTime, ts + 99)
            .map_err(trap)?;
        if element.value == b"fail" {
            host.list_set(self.list, Vec::new()).map_err(trap)?;
            host.clear_all().map_err(trap)?;
            host.value_set(self.value, b"scribbled".to_vec())
                .map_err(trap)?;
            return Err(CallError::Trapped(
                "failed after changing everything".into(),
            ));
        }
        Ok(())
    }

    fn on_timer(&mut self, _: &mut HostServices, _: FiredTimer<'_>) -> Result<(), CallError> {
        Ok(())
    }
}

/// Every key's slots and pending timers, sorted.
type Dump = Vec<(
    Vec<u8>,
    Vec<(StateId, weir_core::state::Slot)>,
    Vec<(TimeDomain, i64)>,
)>;

fn dump(host: &HostServices) -> Dump {
    let keys = host.keys();
    let mut all: Dump = keys
        .iter()
        .map(|(id, entry)| {
            let mut slots: Vec<_> = entry.slots().map(|(s, slot)| (s, slot.clone())).collect();
            slots.sort();
            let mut timers: Vec<_> = keys.timers(id).collect();
            timers.sort();
            (entry.key().to_vec(), slots, timers)
        })
        .collect();
    all.sort();
    all
}

#[test]
fn a_failed_call_leaves_no_state_or_timer_change_behind() {
    let scribbler = Scribbler {
        value: 0,
        list: 0,
        map: 0,
    };
    let mut op = KeyedOperator::new(Box::new(scribbler), &[1_000], 0);
    op.init(&InitInfo::default()).unwrap();
    let received = Received::default();
    op.bind_sinks(vec![Box::new(VecSink(Arc::clone(&received)))]);
    op.set_max_batch(0);
    // Key "a" gets state and timers (at 101 and 102; 99 + 1 + 1 = 101 deleted none).
    let before = [("a", "one", 1), ("a", "two", 2)];
    op.process_elements(&elements(&before)).unwrap();
    let after_two = dump(op.host());
    assert!(!after_two.is_empty());

    // At 3 the call would set the value, append, put, remove the map entry of 2, add a
    // timer at 103, delete the one at 102, then clear everything and fail: none of it
    // may stay. A key seen first in a failed call is not left behind either.
    let (failed_at, error) = op
        .process_elements(&elements(&[("a", "fail", 3)]))
        .unwrap_err();
    assert_eq!(failed_at, 0);
    assert!(error
        .to_string()
        .contains("failed after changing everything"));
    assert_eq!(
        dump(op.host()),
        after_two,
        "the failed call changed state or timers"
    );
    op.process_elements(&elements(&[("b", "fail", 3)]))
        .unwrap_err();
    assert_eq!(
        dump(op.host()),
        after_two,
        "a new key's failed call left it behind"
    );

    // The same element after a good one behaves as if the failed call never happened.
    op.process_elements(&elements(&[("a", "three", 3)]))
        .unwrap();
    let mut replayed = KeyedOperator::new(
        Box::new(Scribbler {
            value: 0,
            list: 0,
            map: 0,
        }),
        &[1_000],
        0,
    );
    replayed.init(&InitInfo::default()).unwrap();
    replayed.bind_sinks(vec![Box::new(VecSink(Received::default()))]);
    replayed.set_max_batch(0);
    replayed
        .process_elements(&elements(&[
            ("a", "one", 1),
            ("a", "two", 2),
            ("a", "three", 3),
        ]))
        .unwrap();
    assert_eq!(dump(op.host()), dump(replayed.host()));
}

/// Per key, the lines `received` got for it (the key is the third `:` field).
fn per_key(lines: Vec<String>) -> std::collections::BTreeMap<String, Vec<String>> {
    let mut keys: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    for line in lines {
        let key = line.split([':', '@']).nth(2).expect("a key").to_string();
        // Sequence numbers count per shard; the order within the key is what matters.
        let line = line.split('#').next().expect("a line").to_string();
        keys.entry(key).or_default().push(line);
    }
    keys
}

#[test]
fn shards_together_give_each_key_what_one_operator_gives_it() {
    // 40 keys, timestamps out of order, timers 25 ms after each element: every element
    // of one shard moves the watermark of the other, whose timers must fire in between
    // exactly where they fire in one operator.
    let mut state = 7u64;
    let mut next = || {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        state >> 33
    };
    let keys: Vec<String> = (0..40).map(|i| format!("k{i}")).collect();
    let records: Vec<(&str, &str, i64)> = (0..2_000)
        .map(|i| {
            let key = keys[(next() % 40) as usize].as_str();
            (key, "x", i * 3 - (next() % 20) as i64)
        })
        .collect();
    let (mut one, one_out) = operator(Counter::new("v1", 25));
    let elements = elements(&records);
    for run in elements.chunks(97) {
        one.process_elements(run).unwrap();
    }
    one.end_source(0).unwrap();
    one.finish().unwrap();
    let expected = per_key(taken(&one_out));

    let parallelism = 3;
    let mut shards: Vec<(KeyedOperator, Received)> = (0..parallelism)
        .map(|shard| {
            let mut op = KeyedOperator::new(Box::new(Counter::new("v1", 25)), &[0], 0);
            op.set_shard(shard, parallelism);
            op.init(&InitInfo::default()).expect("init");
            let received = Received::default();
            op.bind_sinks(vec![Box::new(VecSink(Arc::clone(&received)))]);
            (op, received)
        })
        .collect();
    for run in elements.chunks(97) {
        for (op, _) in &mut shards {
            op.process_elements(run).unwrap();
        }
    }
    let mut together = Vec::new();
    let mut elements_seen = 0;
    for (op, received) in &mut shards {
        op.end_source(0).unwrap();
        op.finish().unwrap();
        assert_eq!(op.watermark(), one.watermark());
        elements_seen += op.counters().elements;
        let lines = taken(received);
        assert!(!lines.is_empty(), "every shard owns some of the 40 keys");
        together.extend(lines);
    }
    assert_eq!(
        elements_seen, 2_000,
        "each element is processed by one shard"
    );
    // The counter emits without a key: each shard numbers those records in a slot of its
    // own, so no two records of the output share a number (a `weir-id`).
    let numbers: std::collections::HashSet<&str> = together
        .iter()
        .map(|line| line.rsplit('#').next().expect("a number"))
        .collect();
    assert_eq!(
        numbers.len(),
        together.len(),
        "record numbers repeat across shards"
    );
    assert_eq!(per_key(together), expected);
}

#[test]
fn timers_due_at_the_end_of_input_fire_in_one_batch_as_they_would_one_call_each() {
    let records = [
        ("a", "x", 1),
        ("b", "x", 5),
        ("a", "x", 20),
        ("c", "x", 21),
        ("d", "x", 22),
    ];
    let (mut single, single_out) = operator(Counter::new("v1", 10));
    single.process_elements(&elements(&records)).unwrap();
    single.end_source(0).unwrap();

    let mut batching = Counter::new("v1", 10);
    let sizes: Arc<Mutex<Vec<usize>>> = Arc::default();
    batching.batches = Some(Arc::clone(&sizes));
    let (mut batched, batched_out) = operator(batching);
    batched.process_elements(&elements(&records)).unwrap();
    let before_end = sizes.lock().unwrap().len();
    batched.end_source(0).unwrap();

    let expected = taken(&single_out);
    assert_eq!(
        expected[expected.len() - 3..],
        ["v1:t:a@30#7", "v1:t:c@31#8", "v1:t:d@32#9"],
        "the end of input fires a's, c's and d's last timers"
    );
    assert_eq!(taken(&batched_out), expected);
    assert_eq!(
        sizes.lock().unwrap()[before_end..],
        [3],
        "the three timers in one batch"
    );
    assert_eq!(batched.counters().event_timers, 5);
    assert_eq!(
        batched.counters().event_timers,
        single.counters().event_timers
    );
}
