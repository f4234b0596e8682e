//! The sandbox: a UDF that traps, loops, eats memory or returns an error stops the run
//! with a clear message naming the UDF, the source and the record, emits nothing for
//! that record, and leaves the host able to go on with a fresh instance. The exact
//! messages and outputs of each failure, a leaking UDF, components that are refused and
//! what a UDF sees of files, environment and clock are golden cases: `tests/cases/udf-*`.
//! Here: the call deadline (which takes wall-clock time) and the host API directly.

use serde_json::{json, Value};
use std::time::{Duration, Instant};
use weir_e2e::{component, read_jsonl, weir, Workdir};
use weir_engine::runtime::wasm::{Limits, LoadedComponent, WasmFunction};
use weir_engine::runtime::{CallError, ElementRef, HostServices, InitInfo, ProcessFunction};

fn pipeline(work: &Workdir, lines: &[Value], udf_settings: &str) -> String {
    work.write_jsonl("in.jsonl", lines);
    weir_e2e::echo_pipeline(work, "in.jsonl", "k", udf_settings)
}

fn failing_run(fail: &str, udf_settings: &str) -> (weir_e2e::Finished, Vec<Value>, Duration) {
    let work = Workdir::new();
    let lines = vec![
        json!({"k": "a", "ts": 1, "n": 1}),
        json!({"k": "b", "ts": 2, "n": 2}),
        json!({"k": "a", "ts": 3, "fail": fail}),
        json!({"k": "b", "ts": 4, "n": 4}),
    ];
    let pipeline = pipeline(&work, &lines, udf_settings);
    let started = Instant::now();
    let run = weir(&["run", &pipeline]);
    let elapsed = started.elapsed();
    assert_eq!(
        run.code,
        Some(1),
        "a failing UDF fails the run cleanly:\n{}",
        run.stderr
    );
    assert!(
        !run.stderr.contains("panicked at host"),
        "the host must not panic:\n{}",
        run.stderr
    );
    let names_the_record = format!(
        "UDF \"misbehaving-udf\" failed on record 3 of source \"events\" (line 3 of {})",
        work.path("in.jsonl").display()
    );
    assert!(
        run.stderr.contains(&names_the_record),
        "expected {names_the_record:?} in:\n{}",
        run.stderr
    );
    assert!(
        run.stderr.contains("processed 2 records"),
        "the failing record is not processed:\n{}",
        run.stderr
    );
    let out = read_jsonl(work.path("out.jsonl"));
    assert_eq!(
        out,
        lines[..2].to_vec(),
        "records before the failure are written, nothing after"
    );
    (run, out, elapsed)
}

#[test]
fn a_looping_udf_is_stopped_at_its_deadline() {
    let (run, _, elapsed) = failing_run("loop", "call_timeout = \"300ms\"");
    assert!(
        run.stderr
            .contains("ran longer than its call timeout of 300 ms"),
        "{}",
        run.stderr
    );
    assert!(
        elapsed < Duration::from_secs(20),
        "stopped promptly, took {elapsed:?}"
    );
}

/// In one host process: after each kind of failure the next call runs on a fresh
/// instance, and host-owned state written before the failure is still there.
#[test]
fn the_host_stays_healthy_after_traps_timeouts_and_memory_bombs() {
    let loaded =
        LoadedComponent::from_file("misbehaving-udf", &component("misbehaving-udf")).unwrap();
    let limits = Limits {
        memory_bytes: 16 << 20,
        call_timeout: Duration::from_millis(200),
        state_cache_bytes: 2 << 20,
    };
    let mut function = WasmFunction::new(loaded, limits);
    let mut host = HostServices::new(0);
    let info = InitInfo {
        config: vec![],
        inputs: vec!["events".into()],
    };
    function.init(&mut host, &info).unwrap();
    let state = host
        .declare_state("probe", weir_core::state::StateKind::Value, None)
        .unwrap();

    let mut call = |host: &mut HostServices, value: &Value| {
        let bytes = serde_json::to_vec(value).unwrap();
        let key = host.keys_mut().intern(b"k");
        host.enter(key, 1);
        host.value_set(state, b"kept".to_vec()).unwrap();
        let result = function.process_element(
            host,
            ElementRef {
                input: 0,
                key: b"k",
                group: weir_core::key::key_group(b"k"),
                value: &bytes,
                timestamp: 1,
            },
        );
        host.leave();
        result
    };
    for fail in ["trap", "loop", "memory", "error"] {
        let result = call(&mut host, &json!({"fail": fail}));
        match (fail, &result) {
            ("trap", Err(CallError::Trapped(_)))
            | ("loop", Err(CallError::Timeout(_)))
            | ("memory", Err(CallError::OutOfMemory { .. }))
            | ("error", Err(CallError::Returned(_))) => {}
            _ => panic!("{fail}: unexpected {result:?}"),
        }
        host.clear_emitted();
        call(&mut host, &json!({"n": fail})).unwrap_or_else(|e| panic!("after {fail}: {e}"));
        assert_eq!(
            host.emitted().len(),
            1,
            "after {fail} the function works again"
        );
        let (_, record) = host.emitted().iter().next().unwrap();
        assert_eq!(
            record.value,
            serde_json::to_vec(&json!({"n": fail})).unwrap()
        );
        host.clear_emitted();
        let key = host.keys().find(b"k").unwrap();
        host.enter(key, 1);
        assert_eq!(
            host.value_get(state).unwrap(),
            Some(&b"kept"[..]),
            "host-owned state survives"
        );
        host.leave();
    }
}
