//! The sandbox: a UDF that traps, loops, eats memory or returns an error stops the run
//! with a clear message naming the UDF, the source and the record, emits nothing for
//! that record, and leaves the host able to go on with a fresh instance.

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
fn a_panicking_udf_reports_its_panic_message() {
    let (run, _, _) = failing_run("trap", "");
    assert!(run.stderr.contains("trapped"), "{}", run.stderr);
    assert!(
        run.stderr.contains("asked to trap on"),
        "the guest's panic message is shown:\n{}",
        run.stderr
    );
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

#[test]
fn a_memory_hungry_udf_is_stopped_at_its_limit() {
    let (run, _, _) = failing_run("memory", "memory_limit = \"16MiB\"");
    assert!(
        run.stderr.contains("ran out of memory") && run.stderr.contains("16 MiB"),
        "{}",
        run.stderr
    );
}

#[test]
fn a_leaking_udf_is_replaced_by_a_fresh_instance_before_its_limit() {
    // 64 KiB leaked per record: 600 records leak 37.5 MiB, past a limit of 16 MiB.
    let work = Workdir::new();
    let lines: Vec<Value> = (0..600)
        .map(|n| json!({"k": format!("k{}", n % 7), "ts": n, "fail": "leak"}))
        .collect();
    let pipeline = pipeline(&work, &lines, "memory_limit = \"16MiB\"\nmax_batch = 0");
    let run = weir(&["run", &pipeline]);
    run.assert_success();
    assert_eq!(
        read_jsonl(work.path("out.jsonl")),
        lines,
        "every record, once"
    );
}

#[test]
fn an_error_returned_by_the_udf_is_reported() {
    let (run, _, _) = failing_run("error", "");
    assert!(
        run.stderr.contains("returned an error: asked to fail on"),
        "{}",
        run.stderr
    );
}

#[test]
fn a_failing_init_is_reported_before_any_record() {
    let work = Workdir::new();
    let pipeline = pipeline(&work, &[json!({"k": "a", "ts": 1})], "");
    let run = weir(&["run", &pipeline, "--config", "fail_init=yes"]);
    assert_eq!(run.code, Some(1));
    assert!(run.stderr.contains("UDF \"misbehaving-udf\" failed to initialise: returned an error: init failed as configured"), "{}", run.stderr);
}

#[test]
fn a_non_component_is_refused_with_a_clear_error() {
    let work = Workdir::new();
    let core_module = work.path("core.wasm");
    std::fs::write(&core_module, b"\0asm\x01\0\0\0").unwrap();
    let pipeline = pipeline(&work, &[json!({"k": "a", "ts": 1})], "");
    let run = weir(&[
        "run",
        &pipeline,
        "--udf",
        &core_module.display().to_string(),
    ]);
    assert!(
        run.stderr
            .contains("is a core wasm module, not a component"),
        "{}",
        run.stderr
    );
    std::fs::write(&core_module, b"garbage").unwrap();
    let run = weir(&[
        "run",
        &pipeline,
        "--udf",
        &core_module.display().to_string(),
    ]);
    assert!(
        run.stderr.contains("not a valid wasm component"),
        "{}",
        run.stderr
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
    };
    let mut function = WasmFunction::new(loaded, limits);
    let mut host = HostServices::new(0);
    let info = InitInfo {
        config: vec![],
        inputs: vec!["events".into()],
    };
    function.init(&mut host, &info).unwrap();
    let state = host
        .declare_state("probe", weir_core::state::StateKind::Value)
        .unwrap();

    let mut call = |host: &mut HostServices, value: &Value| {
        let bytes = serde_json::to_vec(value).unwrap();
        let key = host.keys.intern(b"k");
        host.enter(key, 1);
        host.value_set(state, b"kept".to_vec()).unwrap();
        let result = function.process_element(
            host,
            ElementRef {
                input: 0,
                key: b"k",
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
        host.emitted.clear();
        call(&mut host, &json!({"n": fail})).unwrap_or_else(|e| panic!("after {fail}: {e}"));
        assert_eq!(
            host.emitted.len(),
            1,
            "after {fail} the function works again"
        );
        let (_, record) = host.emitted.iter().next().unwrap();
        assert_eq!(
            record.value,
            serde_json::to_vec(&json!({"n": fail})).unwrap()
        );
        host.emitted.clear();
        let key = host.keys.find(b"k").unwrap();
        host.enter(key, 1);
        assert_eq!(
            host.value_get(state).unwrap(),
            Some(&b"kept"[..]),
            "host-owned state survives"
        );
        host.leave();
    }
}

#[test]
fn a_udf_gets_no_files_environment_or_clock() {
    let work = Workdir::new();
    let pipeline = pipeline(&work, &[json!({"k": "a", "ts": 1, "fail": "escape"})], "");
    weir(&["run", &pipeline, "-q"]).assert_success();
    let out = read_jsonl(work.path("out.jsonl"));
    assert_eq!(
        out,
        vec![json!({"file": null, "dir": null, "env": null, "vars": 0, "clock_ms": 0})],
        "no preopened directories, no environment, a clock frozen at the epoch"
    );
}
