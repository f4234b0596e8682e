//! State across UDF versions: a version whose state type changed either migrates the old
//! values (declared schema version and migration, converted on first read) or, without a
//! migration, sends the records of keys whose state it cannot read to the dead-letter
//! output, with the reason, while the pipeline goes on. Driven through `weir dev
//! --watch`, which swaps a `.wasm` in whenever it is replaced.

use serde_json::{json, Value};
use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use weir_e2e::{component, parse_jsonl, weir_bin, StderrLog, Workdir};

fn wait_for(what: &str, done: impl FnMut() -> bool) {
    weir_e2e::wait_for(what, Duration::from_secs(30), done);
}

#[test]
fn new_versions_migrate_old_state_or_dead_letter_what_they_cannot_read() {
    let work = Workdir::new();
    let current = work.path("current.wasm");
    std::fs::copy(component("versioned-udf-v1"), &current).unwrap();
    let output = work.path("out.jsonl");
    let dead = work.path("dead.jsonl");
    let pipeline = work.write(
        "pipeline.toml",
        &format!(
            r#"name = "state-versions"
[[source]]
name = "events"
type = "stdin"
key = "k"
timestamp = "ts"
timestamp_format = "epoch_ms"
[udf]
path = "{current}"
[[sink]]
output = "main"
type = "file"
path = "{output}"
[dead_letter]
path = "{dead}"
"#,
            current = current.display(),
            output = output.display(),
            dead = dead.display()
        ),
    );
    let mut child = Command::new(weir_bin())
        .args(["dev", &pipeline, "--watch"])
        .arg(&current)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start weir dev");
    let log = StderrLog::capture(&mut child);
    let reloads = || log.count("weir dev: reloaded");
    let elements = || -> Vec<Value> {
        parse_jsonl(&std::fs::read_to_string(&output).unwrap_or_default())
            .into_iter()
            .filter(|r| r.get("seq").is_some())
            .collect()
    };
    let dead_letters = || parse_jsonl(&std::fs::read_to_string(&dead).unwrap_or_default());
    let mut stdin = child.stdin.take().unwrap();
    let mut send = |key: &str, seq: u64| {
        writeln!(
            stdin,
            r#"{{"k": "{key}", "seq": {seq}, "ts": {}}}"#,
            seq * 10
        )
        .unwrap();
        stdin.flush().unwrap();
    };
    // Replaces the component the way a build does: a new file renamed into place.
    let swap_to = |crate_name: &str, reloads_before: usize| {
        let tmp = work.path("next.wasm");
        std::fs::copy(component(crate_name), &tmp).unwrap();
        std::fs::rename(&tmp, &current).unwrap();
        wait_for(&format!("the swap to {crate_name}"), || {
            reloads() > reloads_before
        });
    };

    wait_for("weir dev to start", || log.contains("watching"));
    send("a", 1);
    send("b", 2);
    wait_for("v1's counts", || elements().len() == 2);

    // Version 6 keeps `count` as a struct under schema 1, migrating v1's numbers.
    swap_to("versioned-udf-migrated", 0);
    send("a", 3);
    send("c", 4);
    wait_for("v6's counts", || elements().len() == 4);
    assert_eq!(
        elements()[2..],
        [
            json!({"key": "a", "seq": 3, "n": 2, "migrated_from": 0, "v": 6}),
            json!({"key": "c", "seq": 4, "n": 1, "migrated_from": null, "v": 6}),
        ],
        "a's old count is migrated on first read; a new key starts at schema 1"
    );

    // Version 5 reads `count` as text and has no migration. Within its probation (weir
    // dev's 100 calls), a key whose state it cannot read would roll it back (see
    // serve.rs); 100 records of new keys see it through. After that, keys with state it
    // cannot read go to the dead letters; a new key works.
    swap_to("versioned-udf-retyped", 1);
    for seq in 5..105 {
        send(&format!("new-{seq}"), seq);
    }
    wait_for("v5's first 100 counts", || elements().len() == 104);
    send("a", 105);
    send("d", 106);
    send("b", 107);
    let started = Instant::now();
    while !(elements().len() == 105 && dead_letters().len() == 2) {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "timed out waiting for v5's output and dead letters: {:?} {:?} {}",
            elements(),
            dead_letters(),
            log.text()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        elements()[104],
        json!({"key": "d", "seq": 106, "tally": "+", "v": 5})
    );
    let letters = dead_letters();
    let reasons: Vec<&str> = letters
        .iter()
        .map(|l| l["reason"].as_str().unwrap())
        .collect();
    assert!(
        reasons[0].contains("cannot read the state of key \"a\"")
            && reasons[0].contains("schema version 1")
            && reasons[0].contains("no migration"),
        "{reasons:?}"
    );
    assert!(
        reasons[1].contains("cannot read the state of key \"b\"")
            && reasons[1].contains("cannot decode stored value"),
        "{reasons:?}"
    );
    let raws: Vec<Value> = letters
        .iter()
        .map(|l| serde_json::from_str(l["raw"].as_str().unwrap()).unwrap())
        .collect();
    assert_eq!(raws[0]["seq"], 105);
    assert_eq!(raws[1]["seq"], 107);

    // The run goes on to its end: every key's timer fires (the timers read no state).
    drop(stdin);
    let status = child.wait().unwrap();
    let log = log.finish();
    assert!(status.success(), "{log}");
    assert!(log.contains("dead letters: 2"), "{log}");
    let timers = parse_jsonl(&std::fs::read_to_string(&output).unwrap())
        .into_iter()
        .filter(|r| r.get("timer").is_some())
        .count();
    assert_eq!(
        timers, 105,
        "timers of the 105 processed records' distinct times: {log}"
    );
}
