//! A keyed stage driven by native process functions: no wasm, no files.

use super::*;
use crate::runtime::{CallError, FiredTimer, HostServices, OutputId};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use weir_core::output::OutputRecord;
use weir_core::time::timers::TimeDomain;

/// What the test sink received: `value@timestamp`, in the order written.
type Received = Arc<Mutex<Vec<String>>>;

struct VecSink(Received);

impl Sink for VecSink {
    fn location(&self) -> &str {
        "memory"
    }

    fn write(&mut self, record: &OutputRecord<'_>) -> anyhow::Result<()> {
        let value = String::from_utf8_lossy(record.value);
        self.0
            .lock()
            .unwrap()
            .push(format!("{value}@{}", record.timestamp));
        Ok(())
    }

    fn flush(&mut self) -> anyhow::Result<()> {
        Ok(())
    }
}

/// Version `name`: says `name:<instance>:e:<key>` per element and registers a timer at
/// the element's time, then says `name:<instance>:t:<key>` when it fires; instance
/// `refused` refuses to initialise, and an element whose value is `fail` fails.
struct Version {
    name: &'static str,
    instance: usize,
    made: Arc<AtomicUsize>,
    refused: Option<usize>,
    main: OutputId,
}

impl Version {
    fn new(name: &'static str, refused: Option<usize>) -> Box<Self> {
        Box::new(Version {
            name,
            instance: 0,
            made: Arc::new(AtomicUsize::new(1)),
            refused,
            main: 0,
        })
    }

    fn say(&self, host: &mut HostServices, what: &str, key: &[u8]) -> Result<(), CallError> {
        let key = String::from_utf8_lossy(key);
        let line = format!("{}:{}:{what}:{key}", self.name, self.instance);
        host.emit(self.main, line.into_bytes(), None, None)
            .map_err(|e| CallError::Trapped(e.to_string()))
    }
}

impl ProcessFunction for Version {
    fn name(&self) -> &str {
        self.name
    }

    fn init(&mut self, host: &mut HostServices, _info: &InitInfo) -> Result<(), CallError> {
        if self.refused == Some(self.instance) {
            return Err(CallError::Returned(format!(
                "instance {} refuses",
                self.instance
            )));
        }
        self.main = host.declare_output("main").map_err(CallError::Returned)?;
        Ok(())
    }

    fn process_element(
        &mut self,
        host: &mut HostServices,
        element: ElementRef<'_>,
    ) -> Result<(), CallError> {
        if element.value == b"fail" {
            return Err(CallError::Returned("asked to fail".into()));
        }
        host.register_timer(TimeDomain::EventTime, element.timestamp)
            .map_err(|e| CallError::Trapped(e.to_string()))?;
        self.say(host, "e", element.key)
    }

    fn on_timer(
        &mut self,
        host: &mut HostServices,
        timer: FiredTimer<'_>,
    ) -> Result<(), CallError> {
        self.say(host, "t", timer.key)
    }

    fn another_instance(&self) -> Option<Box<dyn ProcessFunction>> {
        Some(Box::new(Version {
            name: self.name,
            instance: self.made.fetch_add(1, Ordering::SeqCst),
            made: Arc::clone(&self.made),
            refused: self.refused,
            main: 0,
        }))
    }
}

/// A stage of `parallelism` shards of v1, initialised, its output into the returned
/// list.
fn stage(parallelism: usize) -> (KeyedStage, Received) {
    let functions = KeyedStage::instances(Version::new("v1", None), parallelism).unwrap();
    let operators = functions
        .into_iter()
        .map(|function| KeyedOperator::new(function, &[0], 0))
        .collect();
    let mut stage = KeyedStage::new(operators).unwrap();
    let outputs = stage.init(&InitInfo::default()).expect("v1 starts");
    assert_eq!(outputs, ["main"]);
    let received = Received::default();
    stage.bind_sinks(vec![Box::new(VecSink(Arc::clone(&received)))]);
    (stage, received)
}

/// Elements `key-0`..`key-{n-1}`, element `i` at time `i`, all from input 0.
fn keys(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("key-{i}")).collect()
}

fn elements<'a>(keys: &'a [String], values: &'a [&'a [u8]]) -> Vec<(usize, ElementRef<'a>)> {
    keys.iter()
        .zip(values.iter().cycle())
        .enumerate()
        .map(|(i, (key, value))| {
            let element = ElementRef {
                input: 0,
                key: key.as_bytes(),
                group: weir_core::key::key_group(key.as_bytes()),
                value,
                timestamp: i as i64,
            };
            (0, element)
        })
        .collect()
}

#[test]
fn every_key_goes_to_the_one_shard_that_owns_it_and_every_shard_sees_time_pass() {
    let keys = keys(200);
    let values: [&[u8]; 1] = [b"x"];
    let elements = elements(&keys, &values);
    for parallelism in [1, 2, 3, 4] {
        let (mut stage, received) = stage(parallelism);
        let (results, meanwhile) = stage.process(&elements, || "read ahead");
        assert_eq!(meanwhile, "read ahead");
        assert!(results.iter().all(Result::is_ok));
        stage.checkpoint_sinks().unwrap();
        let lines = received.lock().unwrap().clone();
        for key in &keys {
            let owner = weir_core::key::shard_of(key.as_bytes(), parallelism);
            let element = format!("v1:{owner}:e:{key}@");
            let seen: Vec<&String> = lines
                .iter()
                .filter(|l| l.contains(&format!(":e:{key}@")))
                .collect();
            assert_eq!(
                seen.len(),
                1,
                "{key} at parallelism {parallelism}: {seen:?}"
            );
            assert!(seen[0].starts_with(&element), "{key}: {seen:?}");
        }
        // Each shard's watermark moved with every element, its own or not: the timer
        // of every key but the last fired in the shard that owns it.
        for shard in 0..parallelism {
            assert_eq!(stage.shard(shard).watermark(), 198);
        }
        let fired = lines.iter().filter(|l| l.contains(":t:")).count();
        assert_eq!(fired, 199, "parallelism {parallelism}");
        assert_eq!(stage.counters().elements, 200);
        assert_eq!(stage.counters().event_timers, 199);
        let per_shard: u64 = stage.shards().map(|s| s.counters().elements).sum();
        assert_eq!(per_shard, 200);
    }
}

#[test]
fn a_failure_in_one_shard_is_reported_by_that_shard_alone() {
    let keys = keys(64);
    let values: [&[u8]; 1] = [b"x"];
    let mut elements = elements(&keys, &values);
    elements[40].1.value = b"fail";
    let (mut stage, _received) = stage(4);
    let (results, ()) = stage.process(&elements, || ());
    let owner = weir_core::key::shard_of(keys[40].as_bytes(), 4);
    for (shard, result) in results.iter().enumerate() {
        match result {
            Err((index, _)) => {
                assert_eq!(shard, owner);
                assert_eq!(*index, 40);
            }
            Ok(()) => assert_ne!(shard, owner),
        }
    }
}

/// Four shards on v1, and a swap to v2 whose instance `refused` refuses.
fn swap(probation_calls: u64, refused: Option<usize>) -> (KeyedStage, Result<(), String>) {
    let (mut stage, _) = stage(4);
    let result = stage.swap(
        Version::new("v2", refused),
        &InitInfo::default(),
        probation_calls,
    );
    (stage, result)
}

#[test]
fn a_swap_refused_by_one_shard_of_four_changes_no_shard() {
    for probation_calls in [0, 100] {
        let (stage, result) = swap(probation_calls, Some(2));
        let error = result.expect_err("shard 2 refuses");
        assert!(error.contains("instance 2 refuses"), "{error}");
        let names: Vec<&str> = stage.shards().map(KeyedOperator::function_name).collect();
        assert_eq!(names, ["v1"; 4], "probation {probation_calls}");
        assert!(stage.shards().all(|s| !s.in_probation()));
    }
}

#[test]
fn a_swap_every_shard_takes_changes_them_all_and_a_rollback_undoes_it_in_all() {
    for probation_calls in [0, 100] {
        let (mut stage, result) = swap(probation_calls, None);
        result.expect("every shard takes it");
        let names: Vec<&str> = stage.shards().map(KeyedOperator::function_name).collect();
        assert_eq!(names, ["v2"; 4]);
        assert!(stage
            .shards()
            .all(|s| s.in_probation() == (probation_calls > 0)));
        stage.rollback();
        let expected = if probation_calls > 0 { "v1" } else { "v2" };
        assert!(stage.shards().all(|s| s.function_name() == expected));
    }
}

#[test]
fn a_function_that_cannot_be_instantiated_again_runs_at_parallelism_one_only() {
    struct Once;
    impl ProcessFunction for Once {
        fn name(&self) -> &str {
            "once"
        }
        fn init(&mut self, _: &mut HostServices, _: &InitInfo) -> Result<(), CallError> {
            Ok(())
        }
        fn process_element(
            &mut self,
            _: &mut HostServices,
            _: ElementRef<'_>,
        ) -> Result<(), CallError> {
            Ok(())
        }
        fn on_timer(&mut self, _: &mut HostServices, _: FiredTimer<'_>) -> Result<(), CallError> {
            Ok(())
        }
    }
    assert!(KeyedStage::instances(Box::new(Once), 1).is_some());
    assert!(KeyedStage::instances(Box::new(Once), 2).is_none());
}
