//! The `disk` state backend against the `memory` one: the same records in, the same
//! records out, with a tenth of the state in memory; a checkpoint of either backend
//! restores into the other across kills; a store that cannot be written fails the run
//! naming its folder. (The golden cases and model suites also run on the disk backend:
//! `scripts/test.sh` runs them again with `WEIR_STATE_BACKEND=disk`.)

use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;
use weir_e2e::crash::CrashLoop;
use weir_e2e::gen::{self, Click};
use weir_e2e::{component, weir, weir_with_env, Workdir};

/// The ad-clicks pipeline (seed 000's change-only counter, which keeps each ad's click
/// times in state) over `clicks.jsonl` beside it, writing `counts.jsonl`, with `state`
/// as its `[state]` section.
fn pipeline(work: &Workdir, file: &str, state: &str) -> String {
    let text = format!(
        r#"name = "ad-clicks"

[[source]]
name = "clicks"
type = "file"
path = "clicks.jsonl"
key = "ad_id"
timestamp = "clicked_at"
timestamp_format = "datetime"
out_of_orderness = "5s"

[udf]
path = "{udf}"
config = {{ window = "5m" }}

[[sink]]
output = "main"
type = "file"
path = "counts.jsonl"

{state}
"#,
        udf = component("change-only-counter").display()
    );
    work.write(file, &text)
}

fn write_clicks(work: &Workdir, clicks: &[Click]) {
    let records: Vec<Value> = clicks.iter().map(Click::to_json).collect();
    work.write_jsonl("clicks.jsonl", &records);
}

/// Each ad's lines of a file of counts, in their order.
fn per_ad(file: &[u8]) -> BTreeMap<String, Vec<String>> {
    let mut ads: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for line in String::from_utf8_lossy(file).lines() {
        let record: Value = serde_json::from_str(line).unwrap();
        let ad = record["ad_id"].as_str().unwrap().to_string();
        ads.entry(ad).or_default().push(line.to_string());
    }
    ads
}

/// The figure before `what` on the summary's state store line.
fn store_figure(stderr: &str, what: &str) -> u64 {
    let line = stderr
        .lines()
        .find(|l| l.contains("state store (disk backend):"))
        .unwrap_or_else(|| panic!("no state store line: {stderr}"));
    let before = &line[..line.find(what).unwrap_or_else(|| panic!("{what}: {line}"))];
    let number = before.split_whitespace().last().unwrap();
    number.trim_end_matches(',').parse().unwrap()
}

/// ~400 ads with ~75 click times each in a 5-minute window: ~10 times the 24 KiB of
/// state the disk backend may keep in memory. At parallelism 1 and 2 its output is the
/// memory backend's (byte for byte at 1, each ad's records at 2); keys' state went to
/// disk and came back, and the
/// store is gone once the run ended.
#[test]
fn the_disk_backend_with_a_tenth_of_the_state_in_memory_writes_what_the_memory_backend_writes() {
    let work = Workdir::new();
    write_clicks(&work, &gen::clicks(40_000, 400, 41, 20, 4_000, 0.01, 0.0));
    let memory = pipeline(&work, "memory.toml", "[state]\nbackend = \"memory\"");
    let disk = pipeline(
        &work,
        "disk.toml",
        "[state]\nbackend = \"disk\"\ncache = \"24KiB\"",
    );
    let state = work.path("state").display().to_string();
    for parallelism in ["1", "2"] {
        let run = |file: &str| {
            let run = weir(&[
                "run",
                file,
                "--parallelism",
                parallelism,
                "--state-dir",
                &state,
            ]);
            run.assert_success();
            (
                std::fs::read(work.path("counts.jsonl")).unwrap(),
                run.stderr,
            )
        };
        let (expected, _) = run(&memory);
        let (got, stderr) = run(&disk);
        assert!(expected.len() > 500_000, "enough output to mean something");
        // Shards interleave their ads' records in the file as they go: each ad's, in order.
        assert!(
            per_ad(&got) == per_ad(&expected) && (parallelism != "1" || got == expected),
            "parallelism {parallelism}: the disk backend's output differs from the memory backend's"
        );
        // Keys' state left memory and came back many times over (none is left at the
        // end: every window has drained).
        assert!(store_figure(&stderr, "written") > 1_000, "{stderr}");
        assert!(store_figure(&stderr, "loaded back") > 1_000, "{stderr}");
        let left: Vec<_> = std::fs::read_dir(work.path("state/store"))
            .map(|d| d.flatten().map(|e| e.file_name()).collect())
            .unwrap_or_default();
        assert!(left.is_empty(), "the store went with its run: {left:?}");
    }
}

/// Killed at random moments, each run on the other backend than the one before (disk
/// with 16 KiB in memory, then memory, ...): every run restores the checkpoint the other
/// backend wrote, and the output equals an uninterrupted run's.
#[test]
fn checkpoints_of_either_backend_restore_into_the_other_across_kills() {
    let work = Workdir::new();
    write_clicks(
        &work,
        &gen::clicks(200_000, 2_000, 43, 20, 2_000, 0.01, 0.0),
    );
    let memory = pipeline(&work, "memory.toml", "[state]\nbackend = \"memory\"");
    let disk = pipeline(
        &work,
        "disk.toml",
        "[state]\nbackend = \"disk\"\ncache = \"16KiB\"",
    );
    let started = Instant::now();
    weir(&["run", &memory, "-q", "--no-checkpoints"]).assert_success();
    let span = started.elapsed();
    let expected = std::fs::read(work.path("counts.jsonl")).unwrap();
    std::fs::remove_file(work.path("counts.jsonl")).unwrap();

    let state = work.path("state");
    let crashes = CrashLoop {
        args: &["run".to_string()],
        each_run: &[vec![disk], vec![memory]],
        state: &state,
        watch: &state,
        span,
        seed: 5,
        kills: 4,
    }
    .run();
    assert!(crashes.restored >= 1, "{crashes:?}");
    let got = std::fs::read(work.path("counts.jsonl")).unwrap();
    assert!(
        got == expected,
        "after {crashes:?} the output differs from an uninterrupted run's"
    );
}

/// A store that cannot be created (its folder is a file here) fails the run, exit 1,
/// with a message naming the folder.
#[test]
fn a_store_that_cannot_be_written_fails_the_run_naming_its_folder() {
    let work = Workdir::new();
    write_clicks(&work, &gen::clicks(100, 10, 3, 20, 2_000, 0.0, 0.0));
    let disk = pipeline(&work, "disk.toml", "[state]\nbackend = \"disk\"");
    let state = work.path("state");
    std::fs::create_dir_all(&state).unwrap();
    std::fs::write(state.join("store"), "not a folder").unwrap();
    let run = weir(&["run", &disk, "--state-dir", &state.display().to_string()]);
    assert_eq!(run.code, Some(1), "{}", run.stderr);
    assert!(
        run.stderr
            .contains(&state.join("store").display().to_string()),
        "{}",
        run.stderr
    );
}

/// `[state]` is checked like every section: an unknown backend, or a cache for the memory
/// backend, is refused at load (exit 2) saying what to give.
#[test]
fn a_bad_state_section_is_refused_at_load() {
    let work = Workdir::new();
    write_clicks(&work, &gen::clicks(10, 2, 3, 20, 2_000, 0.0, 0.0));
    for (state, says) in [
        (
            "[state]\nbackend = \"rocks\"",
            "give \"memory\" (the default) or \"disk\"",
        ),
        (
            "[state]\ncache = \"1MiB\"",
            "cache is a setting of backend = \"disk\"",
        ),
        ("[state]\nbackend = \"disk\"\ncache = \"lots\"", "cache"),
    ] {
        let file = pipeline(&work, "bad.toml", state);
        let run = weir_with_env(&["run", &file], &[("WEIR_STATE_BACKEND", Path::new(""))]);
        assert_eq!(run.code, Some(2), "{state}: {}", run.stderr);
        assert!(
            run.stderr.contains("[state]") && run.stderr.contains(says),
            "{state}: {}",
            run.stderr
        );
    }
}

/// Seed 002's order timeout over 20,000 orders, with a timeout of a minute (~400 orders
/// open at a time, timing out as the watermark passes) and of an hour (every order open
/// until the end of input fires all 20,000 timers): on the disk backend with 16 KiB in
/// memory (~60 keys), the keys and their timers live in the store and wake for their
/// records and their timers; the totals come out byte for byte as with the memory
/// backend, in the same order.
#[test]
fn open_orders_beyond_memory_time_out_in_the_order_the_memory_backend_gives() {
    let work = Workdir::new();
    let records: Vec<Value> = gen::purchases(20_000, 17, 0.0, 0.0)
        .iter()
        .map(gen::Purchase::to_json)
        .collect();
    let input = work.write_jsonl("orders.jsonl", &records);
    let pipeline = weir_e2e::repo_root().join("examples/orders/pipeline.toml");
    for timeout in ["1m", "1h"] {
        let run = |backend: &str, cache: &str| {
            let output = work.path(&format!("totals-{backend}-{timeout}.jsonl"));
            let run = weir_with_env(
                &[
                    "run",
                    &pipeline.display().to_string(),
                    "--input",
                    &format!("orders={input}"),
                    "--output",
                    &format!("main={}", output.display()),
                    "--config",
                    &format!("timeout={timeout}"),
                    "--no-checkpoints",
                ],
                &[
                    ("WEIR_STATE_BACKEND", Path::new(backend)),
                    ("WEIR_STATE_CACHE", Path::new(cache)),
                ],
            );
            run.assert_success();
            (std::fs::read(&output).unwrap(), run.stderr)
        };
        let (expected, _) = run("memory", "");
        let (got, stderr) = run("disk", "16KiB");
        assert_eq!(
            String::from_utf8_lossy(&expected).lines().count(),
            20_000,
            "one total per order"
        );
        assert!(
            got == expected,
            "timeout {timeout}: the disk backend's totals differ from the memory backend's"
        );
        assert!(store_figure(&stderr, "loaded back") > 10_000, "{stderr}");
    }
}

/// Keys whose states have a time-to-live leave memory whole too, and their expired
/// entries leave the store through its expiry index: ~3,000 keys of the ttl-probe UDF
/// (a map refreshed on read and a list, 10 s of event time) put, read, append, count and
/// set timers over ~15 minutes of event time, with a 16 KiB cache. The output is the
/// memory backend's, byte for byte at parallelism 1 and as a whole at 2, entries read
/// after they expired included. (How keys listed for expiry wake: `weir-core`'s
/// `keys_listed_for_expiry_sleep_with_it_and_wake_when_it_is_due`.)
#[test]
fn keys_with_a_state_time_to_live_go_dormant_and_expire_in_the_store() {
    let work = Workdir::new();
    let mut seed: u64 = 0x5eed;
    let mut roll = |n: u64| {
        seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (seed >> 33) % n
    };
    let mut records = Vec::new();
    let mut ts: i64 = 1_000;
    for _ in 0..60_000 {
        ts += roll(30) as i64;
        let k = format!("key-{}", roll(3_000));
        let f = ["a", "b", "c"][roll(3) as usize];
        let record = match roll(8) {
            0 | 1 => {
                serde_json::json!({"k": k, "ts": ts, "op": "put", "f": f, "v": ts.to_string()})
            }
            2 => serde_json::json!({"k": k, "ts": ts, "op": "get", "f": f}),
            3 | 4 => serde_json::json!({"k": k, "ts": ts, "op": "append", "v": ts.to_string()}),
            5 => serde_json::json!({"k": k, "ts": ts, "op": "list"}),
            6 => serde_json::json!({"k": k, "ts": ts, "op": "count"}),
            _ => {
                serde_json::json!({"k": k, "ts": ts, "op": "later", "at": ts + roll(20_000) as i64})
            }
        };
        records.push(record);
    }
    let input = work.write_jsonl("commands.jsonl", &records);
    let pipeline = |file: &str, state: &str| {
        work.write(
            file,
            &format!(
                r#"name = "ttl"
[[source]]
name = "commands"
type = "file"
path = "{input}"
key = "k"
timestamp = "ts"
timestamp_format = "epoch_ms"
out_of_orderness = "0ms"
[udf]
path = "{udf}"
[[sink]]
output = "main"
type = "file"
path = "out.jsonl"
{state}
"#,
                udf = component("ttl-probe").display()
            ),
        )
    };
    let memory = pipeline("memory.toml", "[state]\nbackend = \"memory\"");
    let disk = pipeline(
        "disk.toml",
        "[state]\nbackend = \"disk\"\ncache = \"16KiB\"",
    );
    // The records carry no key: at parallelism 2, where shards interleave, compare them
    // as a multiset.
    let sorted = |out: &[u8]| {
        let mut lines: Vec<String> = String::from_utf8_lossy(out)
            .lines()
            .map(String::from)
            .collect();
        lines.sort();
        lines
    };
    for parallelism in ["1", "2"] {
        let run = |file: &str| {
            let run = weir(&[
                "run",
                file,
                "--parallelism",
                parallelism,
                "--no-checkpoints",
            ]);
            run.assert_success();
            (std::fs::read(work.path("out.jsonl")).unwrap(), run.stderr)
        };
        let (expected, _) = run(&memory);
        let (got, stderr) = run(&disk);
        assert!(
            String::from_utf8_lossy(&expected).lines().count() > 20_000,
            "enough output to mean something"
        );
        let nulls = String::from_utf8_lossy(&expected)
            .matches("\"got\":null")
            .count();
        assert!(
            nulls > 1_000,
            "entries expired before they were read: {nulls}"
        );
        assert!(
            sorted(&got) == sorted(&expected) && (parallelism != "1" || got == expected),
            "parallelism {parallelism}: the disk backend's output differs from the memory backend's"
        );
        assert!(store_figure(&stderr, "loaded back") > 10_000, "{stderr}");
    }
}
