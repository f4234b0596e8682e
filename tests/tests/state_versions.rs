//! State across UDF versions: a version whose state type changed either migrates the old
//! values (declared schema version and migration, converted on first read) or, without a
//! migration, sends the records of keys whose state it cannot read to the dead-letter
//! output, with the reason, while the pipeline goes on (under `on_error =
//! "dead-letter"`), or ends the run (by default). Driven through `weir dev --watch`,
//! which swaps a `.wasm` in whenever it is replaced.

use serde_json::{json, Value};
use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use weir_e2e::{component, parse_jsonl, weir_bin, StderrLog, Workdir};

fn wait_for(what: &str, done: impl FnMut() -> bool) {
    weir_e2e::wait_for(what, Duration::from_secs(30), done);
}

/// `weir dev --watch` on a pipeline of the versioned UDF (stdin → `out.jsonl`, dead
/// letters to `dead.jsonl`), starting with version 1; `udf_lines` are added to `[udf]`.
struct Dev {
    work: Workdir,
    child: std::process::Child,
    log: StderrLog,
    stdin: std::process::ChildStdin,
}

impl Dev {
    fn start(udf_lines: &str) -> Dev {
        let work = Workdir::new();
        let current = work.path("current.wasm");
        std::fs::copy(component("versioned-udf-v1"), &current).unwrap();
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
{udf_lines}
[[sink]]
output = "main"
type = "file"
path = "{output}"
[dead_letter]
path = "{dead}"
"#,
                current = current.display(),
                output = work.path("out.jsonl").display(),
                dead = work.path("dead.jsonl").display()
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
        let stdin = child.stdin.take().unwrap();
        wait_for("weir dev to start", || log.contains("watching"));
        Dev {
            work,
            child,
            log,
            stdin,
        }
    }

    fn reloads(&self) -> usize {
        self.log.count("weir dev: reloaded")
    }

    /// The records the UDF emitted for elements (not timers), in order.
    fn elements(&self) -> Vec<Value> {
        parse_jsonl(&std::fs::read_to_string(self.work.path("out.jsonl")).unwrap_or_default())
            .into_iter()
            .filter(|r| r.get("seq").is_some())
            .collect()
    }

    fn dead_letters(&self) -> Vec<Value> {
        parse_jsonl(&std::fs::read_to_string(self.work.path("dead.jsonl")).unwrap_or_default())
    }

    fn send(&mut self, key: &str, seq: u64) {
        writeln!(
            self.stdin,
            r#"{{"k": "{key}", "seq": {seq}, "ts": {}}}"#,
            seq * 10
        )
        .unwrap();
        self.stdin.flush().unwrap();
    }

    /// Replaces the component the way a build does: a new file renamed into place.
    fn swap_to(&self, crate_name: &str) {
        let reloads_before = self.reloads();
        let tmp = self.work.path("next.wasm");
        std::fs::copy(component(crate_name), &tmp).unwrap();
        std::fs::rename(&tmp, self.work.path("current.wasm")).unwrap();
        wait_for(&format!("the swap to {crate_name}"), || {
            self.reloads() > reloads_before
        });
    }
}

#[test]
fn new_versions_migrate_old_state_or_dead_letter_what_they_cannot_read() {
    let mut dev = Dev::start(r#"on_error = "dead-letter""#);
    dev.send("a", 1);
    dev.send("b", 2);
    wait_for("v1's counts", || dev.elements().len() == 2);

    // Version 6 keeps `count` as a struct under schema 1, migrating v1's numbers.
    dev.swap_to("versioned-udf-migrated");
    dev.send("a", 3);
    dev.send("c", 4);
    wait_for("v6's counts", || dev.elements().len() == 4);
    assert_eq!(
        dev.elements()[2..],
        [
            json!({"key": "a", "seq": 3, "n": 2, "migrated_from": 0, "v": 6}),
            json!({"key": "c", "seq": 4, "n": 1, "migrated_from": null, "v": 6}),
        ],
        "a's old count is migrated on first read; a new key starts at schema 1"
    );

    // Version 5 reads `count` as text and has no migration. Within its probation (weir
    // dev's 100 calls), a key whose state it cannot read would roll it back (see
    // serve.rs); 100 records of new keys see it through. After that, under `on_error =
    // "dead-letter"`, keys with state it cannot read go to the dead letters; a new key
    // works.
    dev.swap_to("versioned-udf-retyped");
    for seq in 5..105 {
        dev.send(&format!("new-{seq}"), seq);
    }
    wait_for("v5's first 100 counts", || dev.elements().len() == 104);
    dev.send("a", 105);
    dev.send("d", 106);
    dev.send("b", 107);
    let started = Instant::now();
    while !(dev.elements().len() == 105 && dev.dead_letters().len() == 2) {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "timed out waiting for v5's output and dead letters: {:?} {:?} {}",
            dev.elements(),
            dev.dead_letters(),
            dev.log.text()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        dev.elements()[104],
        json!({"key": "d", "seq": 106, "tally": "+", "v": 5})
    );
    let letters = dev.dead_letters();
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
    drop(dev.stdin);
    let status = dev.child.wait().unwrap();
    let log = dev.log.finish();
    assert!(status.success(), "{log}");
    assert!(log.contains("dead letters: 2"), "{log}");
    let timers = parse_jsonl(&std::fs::read_to_string(dev.work.path("out.jsonl")).unwrap())
        .into_iter()
        .filter(|r| r.get("timer").is_some())
        .count();
    assert_eq!(
        timers, 105,
        "timers of the 105 processed records' distinct times: {log}"
    );
}

#[test]
fn a_state_the_new_version_cannot_read_fails_the_run_by_default() {
    // As Flink fails a job whose state cannot be read: no record is dropped with exit 0.
    let mut dev = Dev::start("");
    dev.send("a", 1);
    dev.send("b", 2);
    wait_for("v1's counts", || dev.elements().len() == 2);
    // Version 5 reads `count` as text; 100 new keys see it through its probation.
    dev.swap_to("versioned-udf-retyped");
    for seq in 3..103 {
        dev.send(&format!("new-{seq}"), seq);
    }
    wait_for("v5's first 100 counts", || dev.elements().len() == 102);
    dev.send("a", 103);
    dev.send("d", 104);
    let status = dev.child.wait().unwrap();
    let (elements, dead_letters) = (dev.elements(), dev.dead_letters());
    let log = dev.log.finish();
    assert_eq!(status.code(), Some(1), "{log}");
    assert!(
        log.contains("failed on record 103 of source \"events\"")
            && log.contains("cannot read the state of key \"a\"")
            && log.contains("state `count`"),
        "the error names the record, the key and the state: {log}"
    );
    assert_eq!(elements.len(), 102, "nothing after the failure");
    assert_eq!(dead_letters, Vec::<Value>::new(), "nothing dead-lettered");
}
