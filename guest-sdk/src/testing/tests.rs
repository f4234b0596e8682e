//! The TestHost's semantics, driven by a scriptable UDF.

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::*;
use crate::prelude::*;

/// What an element asks the [`Script`] UDF to do.
#[derive(Deserialize, Default)]
#[serde(default)]
struct Command {
    /// Event-time timers to register.
    register: Vec<i64>,
    /// Event-time timers to delete.
    delete: Vec<i64>,
    /// Processing-time timers to register.
    register_processing: Vec<i64>,
    /// Processing-time timers to delete.
    delete_processing: Vec<i64>,
    /// When the timer at `.0` fires, register an event-time timer at `.1`.
    chain: Vec<(i64, i64)>,
    /// Value to store in the key's value state.
    set: Option<String>,
    /// Clear all state of the key.
    clear_all: bool,
    /// Fail with this message.
    fail: Option<String>,
}

/// Emits one record per firing timer; everything else is scripted by the elements.
struct Script {
    text: ValueState<String>,
    chains: MapState<i64, i64>,
    seen: ListState<i64>,
    out: Output<Value>,
    side: Output<Value>,
}

impl ProcessFunction for Script {
    fn init(ctx: &mut InitContext) -> Result<Self> {
        Ok(Script {
            text: ctx.value_state("text")?,
            chains: ctx.map_state("chains")?,
            seen: ctx.list_state("seen")?,
            out: ctx.main_output()?,
            side: ctx.output("side")?,
        })
    }

    fn process_element(&mut self, ctx: &mut Context, el: &Element) -> Result<()> {
        let cmd: Command = el.json()?;
        if let Some(message) = cmd.fail {
            return Err(anyhow!(message).context("scripted failure"));
        }
        self.seen.append(&el.timestamp())?;
        for ts in cmd.register {
            ctx.register_event_timer(ts);
        }
        for ts in cmd.delete {
            ctx.delete_event_timer(ts);
        }
        for ts in cmd.register_processing {
            ctx.register_processing_timer(ts);
        }
        for ts in cmd.delete_processing {
            ctx.delete_processing_timer(ts);
        }
        for (at, then) in cmd.chain {
            self.chains.put(&at, &then)?;
        }
        if let Some(text) = cmd.set {
            self.text.set(&text)?;
        }
        if cmd.clear_all {
            ctx.clear_all_state();
        }
        Ok(())
    }

    fn on_timer(&mut self, ctx: &mut Context, timer: &Timer) -> Result<()> {
        if let Some(then) = self.chains.get(&timer.timestamp())? {
            self.chains.remove(&timer.timestamp())?;
            ctx.register_event_timer(then);
        }
        let fired = json!({
            "key": timer.key_str()?,
            "domain": format!("{:?}", timer.domain()),
            "watermark": ctx.current_watermark(),
            "now": ctx.current_processing_time(),
        });
        self.out
            .emit_record(Record::new(fired).with_key(ctx.current_key()))
    }
}

fn host() -> TestHost<Script> {
    TestHost::new().unwrap()
}

/// `(key, timestamp)` of every timer that fired, in order.
fn fired(host: &mut TestHost<Script>) -> Vec<(String, i64)> {
    host.take_outputs("main")
        .into_iter()
        .map(|e| (e.value["key"].as_str().unwrap().to_owned(), e.timestamp))
        .collect()
}

fn k(key: &str, ts: i64) -> (String, i64) {
    (key.to_owned(), ts)
}

#[test]
fn event_timers_fire_in_timestamp_then_key_order() {
    let mut h = host();
    h.process("main", "b", json!({"register": [30, 10]}), 1)
        .unwrap();
    h.process("main", "a", json!({"register": [20, 10]}), 2)
        .unwrap();
    h.advance_watermark(25).unwrap();
    assert_eq!(fired(&mut h), vec![k("a", 10), k("b", 10), k("a", 20)]);
    assert_eq!(
        h.pending_timers(),
        vec![(b"b".to_vec(), TimeDomain::EventTime, 30)]
    );
    assert_eq!(h.watermark(), 25);
    h.advance_watermark(30).unwrap();
    assert_eq!(fired(&mut h), vec![k("b", 30)]);
    assert!(h.pending_timers().is_empty());
}

#[test]
fn timers_see_the_new_watermark_and_are_emitted_at_their_timestamp() {
    let mut h = host();
    h.process("main", "a", json!({"register": [10]}), 1)
        .unwrap();
    h.advance_watermark(12).unwrap();
    assert_eq!(
        h.outputs("main"),
        vec![Emitted::new(
            json!({"key": "a", "domain": "EventTime", "watermark": 12, "now": 0}),
            10
        )
        .with_key("a")]
    );
}

#[test]
fn timers_are_unique_per_key_domain_and_timestamp() {
    let mut h = host();
    h.process(
        "main",
        "a",
        json!({"register": [10, 10], "register_processing": [10]}),
        1,
    )
    .unwrap();
    h.process("main", "a", json!({"register": [10]}), 2)
        .unwrap();
    h.process("main", "b", json!({"register": [10]}), 3)
        .unwrap();
    assert_eq!(
        h.pending_timers(),
        vec![
            (b"a".to_vec(), TimeDomain::EventTime, 10),
            (b"b".to_vec(), TimeDomain::EventTime, 10),
            (b"a".to_vec(), TimeDomain::ProcessingTime, 10),
        ]
    );
    h.advance_watermark(100).unwrap();
    assert_eq!(fired(&mut h), vec![k("a", 10), k("b", 10)]);
}

#[test]
fn deleting_a_timer_and_deleting_a_missing_one() {
    let mut h = host();
    h.process("main", "a", json!({"register": [10, 20]}), 1)
        .unwrap();
    // Deletes only a's timer at 10; b has none, 99 does not exist, the domain differs.
    h.process("main", "b", json!({"delete": [10, 20]}), 2)
        .unwrap();
    h.process(
        "main",
        "a",
        json!({"delete": [10, 99], "delete_processing": [20]}),
        3,
    )
    .unwrap();
    h.advance_watermark(100).unwrap();
    assert_eq!(fired(&mut h), vec![k("a", 20)]);
}

#[test]
fn timers_registered_while_firing_fire_in_the_same_advance_if_due() {
    let mut h = host();
    // At 10: register 15 (due) ; at 15: register 5 (due, earlier than anything fired) ;
    // at 5: register 40 (not due).
    h.process(
        "main",
        "a",
        json!({"register": [10], "chain": [[10, 15], [15, 5], [5, 40]]}),
        1,
    )
    .unwrap();
    h.process("main", "b", json!({"register": [12]}), 1)
        .unwrap();
    h.advance_watermark(25).unwrap();
    assert_eq!(
        fired(&mut h),
        vec![k("a", 10), k("b", 12), k("a", 15), k("a", 5)]
    );
    assert_eq!(
        h.pending_timers(),
        vec![(b"a".to_vec(), TimeDomain::EventTime, 40)]
    );
}

#[test]
fn timers_at_or_before_the_watermark_wait_for_its_next_advance() {
    let mut h = host();
    h.advance_watermark(100).unwrap();
    h.process("main", "a", json!({"register": [50, 100]}), 1)
        .unwrap();
    h.advance_watermark(100).unwrap();
    h.advance_watermark(90).unwrap();
    assert!(fired(&mut h).is_empty());
    assert_eq!(h.watermark(), 100);
    h.advance_watermark(101).unwrap();
    let out = h.take_outputs("main");
    assert_eq!(
        out.iter().map(|e| e.timestamp).collect::<Vec<_>>(),
        vec![50, 100]
    );
    assert!(out.iter().all(|e| e.value["watermark"] == 101));
}

#[test]
fn processing_time_timers_follow_the_clock() {
    let mut h = TestHost::<Script>::builder()
        .processing_time(1_000)
        .build()
        .unwrap();
    h.process(
        "main",
        "a",
        json!({"register_processing": [1_500, 2_000, 900]}),
        1,
    )
    .unwrap();
    h.process("main", "b", json!({"register_processing": [1_500]}), 1)
        .unwrap();
    // The overdue timer fires at the next look at the clock, even if it did not move.
    h.set_processing_time(1_000).unwrap();
    assert_eq!(fired(&mut h), vec![k("a", 900)]);
    // The clock never goes back.
    h.set_processing_time(500).unwrap();
    assert_eq!(h.processing_time(), 1_000);
    h.set_processing_time(1_600).unwrap();
    assert_eq!(fired(&mut h), vec![k("a", 1_500), k("b", 1_500)]);
    assert_eq!(h.processing_time(), 1_600);
    // Event time does not fire processing timers.
    h.advance_watermark(i64::MAX - 1).unwrap();
    assert!(fired(&mut h).is_empty());
    h.set_processing_time(5_000).unwrap();
    let out = h.take_outputs("main");
    assert_eq!(out.len(), 1);
    assert_eq!(
        (
            out[0].timestamp,
            &out[0].value["now"],
            &out[0].value["domain"]
        ),
        (2_000, &json!(5_000), &json!("ProcessingTime"))
    );
}

#[test]
fn finish_fires_event_timers_then_processing_timers() {
    let mut h = host();
    h.process(
        "main",
        "a",
        json!({"register_processing": [7, 3], "register": [1_000_000, 5]}),
        1,
    )
    .unwrap();
    h.process(
        "main",
        "b",
        json!({"register": [i64::MAX], "chain": [[i64::MAX, 6]]}),
        1,
    )
    .unwrap();
    h.finish().unwrap();
    let out = h.take_outputs("main");
    let order: Vec<_> = out
        .iter()
        .map(|e| (e.value["domain"].as_str().unwrap().to_owned(), e.timestamp))
        .collect();
    assert_eq!(
        order,
        vec![
            ("EventTime".to_owned(), 5),
            ("EventTime".to_owned(), 1_000_000),
            ("EventTime".to_owned(), i64::MAX),
            // Registered while firing, and due.
            ("EventTime".to_owned(), 6),
            ("ProcessingTime".to_owned(), 3),
            ("ProcessingTime".to_owned(), 7),
        ]
    );
    assert_eq!(out[4].value["now"], 3);
    assert!(h.pending_timers().is_empty());
    assert_eq!(h.watermark(), i64::MAX);
}

#[test]
fn state_is_per_key_and_clear_all_keeps_timers() {
    let mut h = host();
    h.process("main", "a", json!({"set": "x", "register": [10]}), 1)
        .unwrap();
    h.process("main", "b", json!({"set": "y"}), 2).unwrap();
    assert!(h.has_state("a") && h.has_state("b") && !h.has_state("c"));
    assert_eq!(h.keys_with_state(), vec![b"a".to_vec(), b"b".to_vec()]);
    h.process("main", "a", json!({"clear_all": true}), 3)
        .unwrap();
    assert!(!h.has_state("a") && h.has_state("b"));
    assert_eq!(
        h.pending_timers(),
        vec![(b"a".to_vec(), TimeDomain::EventTime, 10)]
    );
}

/// Reads and writes every kind of state from inside a key scope.
struct States {
    value: ValueState<(String, u32)>,
    list: ListState<String>,
    map: MapState<String, i64>,
    same_name: ValueState<u8>,
    out: Output<Value>,
}

impl ProcessFunction for States {
    fn init(ctx: &mut InitContext) -> Result<Self> {
        Ok(States {
            value: ctx.value_state("value")?,
            list: ctx.list_state("list")?,
            map: ctx.map_state("map")?,
            same_name: ctx.value_state("value")?,
            out: ctx.main_output()?,
        })
    }

    fn process_element(&mut self, _ctx: &mut Context, el: &Element) -> Result<()> {
        match el.json::<&str>()? {
            "write" => {
                assert_eq!(self.value.get()?, None);
                self.value.set(&("v".to_owned(), 7))?;
                self.list.append(&"one".to_owned())?;
                self.list.append(&"two".to_owned())?;
                self.map.put(&"b".to_owned(), &2)?;
                self.map.put(&"a".to_owned(), &1)?;
                self.map.put(&"b".to_owned(), &3)?;
            }
            "read" => {
                let list = self.list.get()?;
                let map = self.map.entries()?;
                let missing = self.map.get(&"zzz".to_owned())?;
                self.out.emit(&json!({
                    "value": self.value.get()?,
                    "list": list,
                    "map": map,
                    "b": self.map.get(&"b".to_owned())?,
                    "missing": missing,
                    "has_a": self.map.contains_key(&"a".to_owned())?,
                }))?;
            }
            "shrink" => {
                self.list.set(&["only".to_owned()])?;
                self.map.remove(&"a".to_owned())?;
                self.map.remove(&"nope".to_owned())?;
                self.value.clear();
            }
            "empty" => {
                self.list.set(&[])?;
                self.map.clear();
            }
            "mistyped" => {
                self.same_name.get()?;
            }
            other => bail!("unknown command {other}"),
        }
        Ok(())
    }
}

#[test]
fn value_list_and_map_state_round_trip() {
    let mut h = TestHost::<States>::new().unwrap();
    h.process("main", "k", "\"write\"", 1).unwrap();
    h.process("main", "k", "\"read\"", 2).unwrap();
    h.process("main", "other", "\"read\"", 3).unwrap();
    let out = h.take_outputs("main");
    assert_eq!(
        out[0].value,
        json!({"value": ["v", 7], "list": ["one", "two"], "map": [["a", 1], ["b", 3]], "b": 3, "missing": null, "has_a": true})
    );
    assert_eq!(out[0].key, None);
    assert_eq!(out[0].timestamp, 2);
    assert_eq!(
        out[1].value,
        json!({"value": null, "list": [], "map": [], "b": null, "missing": null, "has_a": false})
    );
    h.process("main", "k", "\"shrink\"", 4).unwrap();
    h.process("main", "k", "\"read\"", 5).unwrap();
    assert_eq!(
        h.take_outputs("main")[0].value,
        json!({"value": null, "list": ["only"], "map": [["b", 3]], "b": 3, "missing": null, "has_a": false})
    );
    assert!(h.has_state("k"));
    h.process("main", "k", "\"empty\"", 6).unwrap();
    assert!(
        !h.has_state("k"),
        "an empty list and an empty map are no state"
    );
}

#[test]
fn a_state_read_with_another_type_is_a_clear_error() {
    let mut h = TestHost::<States>::new().unwrap();
    h.process("main", "k", "\"write\"", 1).unwrap();
    let err = h.process("main", "k", "\"mistyped\"", 2).unwrap_err();
    let msg = format!("{err:#}");
    assert!(
        msg.starts_with("state `value`: cannot decode stored value as u8"),
        "{msg}"
    );
}

#[test]
fn a_state_read_with_another_type_is_a_state_decode_error() {
    let mut h = TestHost::<States>::new().unwrap();
    h.process("main", "k", "\"write\"", 1).unwrap();
    let err = h.process("main", "k", "\"mistyped\"", 2).unwrap_err();
    assert!(
        err.chain().any(|c| c.is::<crate::StateDecodeError>()),
        "the host routes it to the dead letters: {err:#}"
    );
}

/// Version 1 of a counter stored a plain number; version 2 stores a struct under schema 1
/// and migrates the numbers.
struct Counter<const V: u8> {
    plain: ValueState<u64>,
    counted: ValueState<Counted>,
    out: Output<serde_json::Value>,
}

#[derive(serde::Serialize, serde::Deserialize, Debug)]
struct Counted {
    n: u64,
    migrated: bool,
}

impl<const V: u8> ProcessFunction for Counter<V> {
    fn init(ctx: &mut InitContext) -> Result<Self> {
        Ok(Self {
            plain: ctx.value_state("count")?,
            counted: ctx
                .value_state("count")?
                .schema(1)
                .migrate_from(0, |n: u64| Counted { n, migrated: true }),
            out: ctx.main_output()?,
        })
    }

    fn process_element(&mut self, _ctx: &mut Context, _element: &Element) -> Result<()> {
        if V == 1 {
            let n = self.plain.get()?.unwrap_or(0) + 1;
            self.plain.set(&n)?;
            return self.out.emit(&json!({"n": n}));
        }
        let mut counted = self.counted.get()?.unwrap_or(Counted {
            n: 0,
            migrated: false,
        });
        counted.n += 1;
        self.counted.set(&counted)?;
        self.out
            .emit(&json!({"n": counted.n, "migrated": counted.migrated}))
    }
}

#[test]
fn a_schema_migration_converts_old_values_on_first_read() {
    // The same bytes as a v1 host would leave: a plain number under no schema.
    let mut v1 = TestHost::<Counter<1>>::new().unwrap();
    v1.process("main", "k", "{}", 1).unwrap();
    v1.process("main", "k", "{}", 2).unwrap();
    let stored = v1.state_bytes("k", "count").expect("a value");
    let mut v2 = TestHost::<Counter<2>>::new().unwrap();
    v2.set_state_bytes("k", "count", stored);
    v2.process("main", "k", "{}", 3).unwrap();
    v2.process("main", "k", "{}", 4).unwrap();
    v2.process("main", "new", "{}", 5).unwrap();
    let out: Vec<_> = v2
        .take_outputs("main")
        .into_iter()
        .map(|o| o.value)
        .collect();
    assert_eq!(
        out,
        [
            json!({"n": 3, "migrated": true}),
            json!({"n": 4, "migrated": true}),
            json!({"n": 1, "migrated": false}),
        ]
    );
    // Written back under schema 1: the tag, then the struct.
    assert_eq!(
        &v2.state_bytes("k", "count").unwrap()[..3],
        &[0xfe, 0xed, 1]
    );
}

/// Keeps a key's numbers with `ValueState::modify`: each element's value is a number
/// to add, `0` clears them, and a negative one fails after changing the value in place.
struct Modifier {
    numbers: ValueState<Vec<i64>>,
    out: Output<serde_json::Value>,
}

impl ProcessFunction for Modifier {
    fn init(ctx: &mut InitContext) -> Result<Self> {
        Ok(Self {
            numbers: ctx.value_state("numbers")?,
            out: ctx.main_output()?,
        })
    }

    fn process_element(&mut self, _ctx: &mut Context, element: &Element) -> Result<()> {
        let n: i64 = element.json()?;
        let held = self.numbers.modify(|numbers| {
            if n == 0 {
                *numbers = None;
                return Ok(0);
            }
            let numbers = numbers.get_or_insert_with(Vec::new);
            numbers.push(n);
            ensure!(n > 0, "negative: {n}");
            Ok(numbers.len())
        })?;
        self.out.emit(&json!({"held": held}))
    }
}

#[test]
fn modify_creates_changes_and_clears_a_value_and_writes_nothing_when_it_fails() {
    let mut h = TestHost::<Modifier>::new().unwrap();
    h.process("main", "k", "5", 1).unwrap();
    h.process("main", "k", "7", 2).unwrap();
    let stored = h.state_bytes("k", "numbers").expect("a value");
    let err = h.process("main", "k", "-1", 3).unwrap_err();
    assert!(format!("{err:#}").contains("negative: -1"), "{err:#}");
    assert_eq!(
        h.state_bytes("k", "numbers").as_deref(),
        Some(stored.as_slice()),
        "a failed modify writes nothing"
    );
    h.process("main", "k", "9", 4).unwrap();
    assert_eq!(
        h.state_bytes("k", "numbers").unwrap(),
        [
            &[0xfe, 0xed, 0][..],
            &postcard::to_allocvec(&vec![5i64, 7, 9]).unwrap()
        ]
        .concat(),
        "stored as `set` would store it: the schema tag, version 0, the value"
    );
    h.process("main", "k", "0", 5).unwrap();
    assert!(!h.has_state("k"), "None clears the value");
    let held: Vec<_> = h
        .take_outputs("main")
        .into_iter()
        .map(|o| o.value["held"].clone())
        .collect();
    assert_eq!(held, [json!(1), json!(2), json!(3), json!(0)]);
}

/// Version 2 of a UDF whose list items and map values were plain numbers (no schema) and
/// are now `Counted` under schema 1.
struct Collections {
    items: ListState<Counted>,
    by_name: MapState<String, Counted>,
    out: Output<serde_json::Value>,
}

impl ProcessFunction for Collections {
    fn init(ctx: &mut InitContext) -> Result<Self> {
        let convert = |n: u64| Counted { n, migrated: true };
        Ok(Self {
            items: ctx.list_state("items")?.schema(1).migrate_from(0, convert),
            by_name: ctx.map_state("by_name")?.schema(1).migrate_from(0, convert),
            out: ctx.main_output()?,
        })
    }

    fn process_element(&mut self, _ctx: &mut Context, element: &Element) -> Result<()> {
        let items: Vec<_> = self
            .items
            .get()?
            .iter()
            .map(|c| (c.n, c.migrated))
            .collect();
        let a = self
            .by_name
            .get(&"a".to_owned())?
            .map(|c| (c.n, c.migrated));
        let entries: Vec<_> = self
            .by_name
            .entries()?
            .into_iter()
            .map(|(k, c)| (k, c.n, c.migrated))
            .collect();
        self.items.append(&Counted {
            n: element.timestamp() as u64,
            migrated: false,
        })?;
        self.out
            .emit(&json!({"items": items, "a": a, "entries": entries}))
    }
}

#[test]
fn list_items_and_map_values_migrate_like_values_and_are_written_back() {
    let plain = |n: u64| postcard::to_allocvec(&n).unwrap();
    let key = |k: &str| postcard::to_allocvec(k).unwrap();
    let mut h = TestHost::<Collections>::new().unwrap();
    h.set_list_state_bytes("k", "items", vec![plain(1), plain(2)]);
    h.set_map_state_bytes(
        "k",
        "by_name",
        vec![(key("a"), plain(5)), (key("b"), plain(6))],
    );
    h.process("main", "k", "{}", 10).unwrap();
    h.process("main", "k", "{}", 11).unwrap();
    let out: Vec<_> = h
        .take_outputs("main")
        .into_iter()
        .map(|o| o.value)
        .collect();
    assert_eq!(
        out,
        [
            json!({"items": [[1, true], [2, true]], "a": [5, true],
                   "entries": [["a", 5, true], ["b", 6, true]]}),
            // Written back on first read: still the migrated values, each once.
            json!({"items": [[1, true], [2, true], [10, false]], "a": [5, true],
                   "entries": [["a", 5, true], ["b", 6, true]]}),
        ]
    );
    for item in h.list_state_bytes("k", "items") {
        assert_eq!(&item[..3], &[0xfe, 0xed, 1], "every item is under schema 1");
    }
    for (_, value) in h.map_state_bytes("k", "by_name") {
        assert_eq!(
            &value[..3],
            &[0xfe, 0xed, 1],
            "every value is under schema 1"
        );
    }

    // A version this one has no migration from is a state-decode error.
    let mut newer = TestHost::<Collections>::new().unwrap();
    newer.set_list_state_bytes("k", "items", vec![vec![0xfe, 0xed, 7, 1]]);
    let err = newer.process("main", "k", "{}", 1).unwrap_err();
    assert!(
        err.chain().any(|c| c.is::<crate::StateDecodeError>()),
        "{err:#}"
    );
    assert!(
        format!("{err:#}").contains("schema version 7, this version of the UDF reads version 1"),
        "{err:#}"
    );
}

#[test]
fn udf_errors_keep_their_chain() {
    let mut h = host();
    let err = h
        .process("main", "a", json!({"fail": "boom"}), 1)
        .unwrap_err();
    assert_eq!(format!("{err:#}"), "scripted failure: boom");
    let err = h.process("main", "a", "{not json", 1).unwrap_err();
    assert!(
        format!("{err:#}").starts_with("input `main`: record is not a valid"),
        "{err:#}"
    );
    let err = h.process("nope", "a", json!({}), 1).unwrap_err();
    assert_eq!(
        err.to_string(),
        "TestHost: unknown input `nope`; inputs are [\"main\"]"
    );
}

#[test]
fn inputs_are_resolved_by_name() {
    struct Inputs {
        out: Output<Value>,
    }
    impl ProcessFunction for Inputs {
        fn init(ctx: &mut InitContext) -> Result<Self> {
            assert_eq!(ctx.inputs(), ["orders", "payments"]);
            assert_eq!(ctx.config_value("x"), Some("2"));
            assert_eq!(ctx.config_value("y"), None);
            ctx.log_info("ready");
            Ok(Inputs {
                out: ctx.main_output()?,
            })
        }
        fn process_element(&mut self, ctx: &mut Context, el: &Element) -> Result<()> {
            ctx.log_warn(format!("from {}", el.input()));
            let record =
                json!({"input": el.input(), "index": el.input_index(), "key": el.key_str()?});
            self.out.emit_record(
                Record::new(&record)
                    .with_key("k")
                    .with_timestamp(el.timestamp() + 1),
            )
        }
    }
    let mut h = TestHost::<Inputs>::builder()
        .inputs(["orders", "payments"])
        .config("x", "1")
        .config("x", "2")
        .build()
        .unwrap();
    h.process("payments", "p1", "{}", 10).unwrap();
    assert_eq!(
        h.outputs("main"),
        vec![Emitted::new(json!({"input": "payments", "index": 1, "key": "p1"}), 11).with_key("k")]
    );
    let logs = h.logs();
    assert_eq!(
        logs[0],
        LogLine {
            level: LogLevel::Info,
            key: None,
            message: "ready".into()
        }
    );
    assert_eq!(
        logs[1],
        LogLine {
            level: LogLevel::Warn,
            key: Some(b"p1".to_vec()),
            message: "from payments".into()
        }
    );
}

#[test]
fn reinit_keeps_state_timers_and_outputs() {
    let mut h = host();
    h.process("main", "a", json!({"set": "x", "register": [10]}), 1)
        .unwrap();
    h.reinit().unwrap();
    assert!(h.has_state("a"));
    h.advance_watermark(10).unwrap();
    assert_eq!(fired(&mut h), vec![k("a", 10)]);
}

#[test]
fn several_hosts_on_one_thread_are_independent() {
    let mut one = host();
    let mut two = host();
    one.process("main", "a", json!({"set": "x", "register": [10]}), 1)
        .unwrap();
    assert!(!two.has_state("a"));
    two.advance_watermark(20).unwrap();
    assert!(fired(&mut two).is_empty());
    one.advance_watermark(20).unwrap();
    assert_eq!(fired(&mut one), vec![k("a", 10)]);
}

#[test]
#[should_panic(expected = "output `nope` was not declared")]
fn reading_an_undeclared_output_panics() {
    host().outputs("nope");
}

#[test]
fn side_outputs_are_separate() {
    let h = host();
    assert!(h.outputs("side").is_empty());
    let _ = &h.udf().side;
}

#[test]
#[should_panic(expected = "called from init; keyed state and timers are scoped to the current key")]
fn state_access_in_init_traps() {
    struct Eager;
    impl ProcessFunction for Eager {
        fn init(ctx: &mut InitContext) -> Result<Self> {
            let s: ValueState<u32> = ctx.value_state("s")?;
            s.get()?;
            Ok(Eager)
        }
        fn process_element(&mut self, _: &mut Context, _: &Element) -> Result<()> {
            Ok(())
        }
    }
    let _ = TestHost::<Eager>::new();
}

#[test]
#[should_panic(expected = "no host is running")]
fn state_access_without_a_host_panics() {
    ValueState::<u32>::new(0, "s").get().unwrap();
}

#[test]
fn declarations_follow_the_host_rules() {
    #[derive(Serialize, Deserialize)]
    struct Late;
    impl ProcessFunction for Late {
        fn init(ctx: &mut InitContext) -> Result<Self> {
            let a: ValueState<u8> = ctx.value_state("s")?;
            let b: ValueState<u16> = ctx.value_state("s")?;
            assert_eq!((a.name(), b.name()), ("s", "s"));
            let err = ctx.list_state::<u8>("s").err().unwrap().to_string();
            assert_eq!(
                err,
                "cannot declare state `s`: state `s` is a value state, declared again as a list state"
            );
            let err = ctx.value_state::<u8>("").err().unwrap().to_string();
            assert_eq!(
                err,
                "cannot declare state ``: a state needs a non-empty name"
            );
            ctx.main_output::<Value>()?;
            Ok(Late)
        }
        fn process_element(&mut self, _: &mut Context, _: &Element) -> Result<()> {
            // Looking up a declared output is fine; declaring a new one is not.
            assert_eq!(Active::declare_output("main"), Ok(0));
            Active::declare_output("late").map_err(anyhow::Error::msg)?;
            Ok(())
        }
    }
    let mut h = TestHost::<Late>::new().unwrap();
    let err = h.process("main", "k", "{}", 1).unwrap_err();
    assert_eq!(err.to_string(), "output `late` must be declared in init");
}

#[test]
fn a_failed_call_emits_nothing() {
    struct EmitThenFail {
        out: Output<u32>,
    }
    impl ProcessFunction for EmitThenFail {
        fn init(ctx: &mut InitContext) -> Result<Self> {
            Ok(EmitThenFail {
                out: ctx.main_output()?,
            })
        }
        fn process_element(&mut self, _: &mut Context, el: &Element) -> Result<()> {
            self.out.emit(&1)?;
            ensure!(el.json::<bool>()?, "asked to fail");
            self.out.emit(&2)
        }
    }
    let mut h = TestHost::<EmitThenFail>::new().unwrap();
    assert!(h.process("main", "k", "false", 7).is_err());
    assert!(h.outputs("main").is_empty());
    h.process("main", "k", "true", 8).unwrap();
    assert_eq!(
        h.outputs("main"),
        vec![Emitted::new(json!(1), 8), Emitted::new(json!(2), 8)]
    );
}

#[test]
#[should_panic(expected = "keeps registering due timers while firing")]
fn a_timer_loop_is_reported() {
    struct Forever;
    impl ProcessFunction for Forever {
        fn init(_: &mut InitContext) -> Result<Self> {
            Ok(Forever)
        }
        fn process_element(&mut self, ctx: &mut Context, _: &Element) -> Result<()> {
            ctx.register_processing_timer(0);
            Ok(())
        }
        fn on_timer(&mut self, ctx: &mut Context, timer: &Timer) -> Result<()> {
            ctx.register_processing_timer(timer.timestamp() + 1);
            Ok(())
        }
    }
    let mut h = TestHost::<Forever>::new().unwrap();
    h.process("main", "k", "{}", 0).unwrap();
    h.finish().unwrap();
}

#[test]
fn a_rejected_record_is_taken_back_and_listed() {
    struct Picky {
        out: Output<u32>,
        seen: ValueState<u32>,
    }
    impl ProcessFunction for Picky {
        fn init(ctx: &mut InitContext) -> Result<Self> {
            Ok(Picky {
                out: ctx.main_output()?,
                seen: ctx.value_state("seen")?,
            })
        }
        fn process_element(&mut self, ctx: &mut Context, el: &Element) -> Result<()> {
            let n = self.seen.get()?.unwrap_or(0) + 1;
            self.seen.set(&n)?;
            ctx.register_event_timer(el.timestamp() + 10);
            self.out.emit(&n)?;
            if !el.json::<bool>()? {
                return crate::reject(format!("record {n} says false"));
            }
            Ok(())
        }
    }
    let mut h = TestHost::<Picky>::new().unwrap();
    h.process("main", "k", "true", 1).unwrap();
    h.process("main", "k", "false", 2).unwrap();
    h.process("main", "k", "true", 3).unwrap();
    assert_eq!(
        h.outputs("main"),
        vec![Emitted::new(json!(1), 1), Emitted::new(json!(2), 3)],
        "the rejected call's emit, state write and timer were taken back"
    );
    assert_eq!(
        h.rejected(),
        &[Rejected {
            key: b"k".to_vec(),
            timestamp: 2,
            reason: "record 2 says false".into()
        }]
    );
    assert_eq!(
        h.pending_timers(),
        vec![
            (b"k".to_vec(), TimeDomain::EventTime, 11),
            (b"k".to_vec(), TimeDomain::EventTime, 13)
        ]
    );
}
