//! `weir dev` end to end: a temporary copy of the seed 000 UDF crate runs in a pipeline
//! fed on stdin; editing its source makes `weir dev` rebuild it and swap it in, the new
//! behaviour shows on the next record, the key's state carried over, and the timers the
//! old version registered fire in the new one. A source that does not compile is
//! reported and the running version stays.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;
use weir_e2e::{parse_jsonl, repo_root, target_dir, wait_for, weir_bin, StderrLog, Workdir};

/// The build settings of `make udfs`, so the copy reuses the workspace's compiled
/// dependencies instead of building them again.
fn cargo_env(command: &mut Command) -> &mut Command {
    command
        .env("CARGO_TARGET_DIR", target_dir())
        .env("CARGO_PROFILE_RELEASE_DEBUG", "false")
        .env("CARGO_PROFILE_RELEASE_STRIP", "debuginfo")
}

/// A standalone copy of udfs/change-only-counter named `dev-counter-<pid>`.
fn copy_crate(dir: &Path) -> String {
    let name = format!("dev-counter-{}", std::process::id());
    std::fs::create_dir_all(dir.join("src")).unwrap();
    std::fs::copy(
        repo_root().join("udfs/change-only-counter/src/lib.rs"),
        dir.join("src/lib.rs"),
    )
    .unwrap();
    std::fs::write(
        dir.join("Cargo.toml"),
        format!(
            r#"[package]
name = "{name}"
version = "0.1.0"
edition = "2021"

[lib]
crate-type = ["cdylib"]

[dependencies]
weir-sdk = {{ path = "{sdk}" }}
serde = {{ version = "1", features = ["derive"] }}
zerocopy = "0.8"
serde_json = {{ version = "1", features = ["raw_value"] }}

[profile.release]
debug = "line-tables-only"

[workspace]
"#,
            sdk = repo_root().join("guest-sdk").display()
        ),
    )
    .unwrap();
    // The lock file of the workspace pins the same dependency versions.
    std::fs::copy(repo_root().join("Cargo.lock"), dir.join("Cargo.lock")).unwrap();
    name
}

#[test]
fn editing_the_udf_reloads_it_with_state_and_timers_kept() {
    let work = Workdir::new();
    let crate_dir = work.path("crate");
    let name = copy_crate(&crate_dir);
    let status = cargo_env(
        Command::new("cargo")
            .args(["build", "--quiet", "--release", "--target", "wasm32-wasip2"])
            .current_dir(&crate_dir),
    )
    .status()
    .unwrap();
    assert!(status.success(), "the copy builds");
    let wasm = target_dir()
        .join("wasm32-wasip2/release")
        .join(format!("{}.wasm", name.replace('-', "_")));
    let output = work.path("counts.jsonl");
    let pipeline = work.write(
        "pipeline.toml",
        &format!(
            r#"name = "dev-test"
[[source]]
name = "clicks"
type = "stdin"
key = "ad_id"
timestamp = "clicked_at"
timestamp_format = "datetime"
[udf]
path = "{wasm}"
[udf.config]
window = "5m"
[[sink]]
output = "main"
type = "file"
path = "{output}"
"#,
            wasm = wasm.display(),
            output = output.display()
        ),
    );
    let mut child = cargo_env(&mut Command::new(weir_bin()))
        .args(["dev", &pipeline, "--crate"])
        .arg(&crate_dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start weir dev");
    let log = StderrLog::capture(&mut child);
    let logged = |text: &str| log.contains(text);
    let counts = || -> Vec<i64> {
        parse_jsonl(&std::fs::read_to_string(&output).unwrap_or_default())
            .iter()
            .map(|r| r["clicks"].as_i64().unwrap())
            .collect()
    };
    let mut stdin = child.stdin.take().unwrap();
    let mut click = |at: &str| {
        writeln!(
            stdin,
            r#"{{"ad_id": "ad-1", "clicked_at": "2026-11-29 {at}.000"}}"#
        )
        .unwrap();
        stdin.flush().unwrap();
    };

    wait_for("weir dev to start", Duration::from_secs(30), || {
        logged("watching")
    });
    click("10:00:00");
    wait_for("the first count", Duration::from_secs(20), || {
        counts() == [1]
    });

    // A source that does not compile: reported, the running version stays.
    let source = crate_dir.join("src/lib.rs");
    let original = std::fs::read_to_string(&source).unwrap();
    std::fs::write(&source, format!("{original}\nthis is not rust\n")).unwrap();
    wait_for("the failed build", Duration::from_secs(120), || {
        logged("the build failed")
    });

    // The new behaviour: counts are emitted plus 1000.
    let edited = original.replace("clicks: count,", "clicks: count + 1000,");
    assert_ne!(edited, original, "the UDF source changed shape");
    std::fs::write(&source, edited).unwrap();
    wait_for("the reload", Duration::from_secs(120), || {
        logged("weir dev: reloaded")
    });
    click("10:00:01");
    wait_for(
        "a count from the new version",
        Duration::from_secs(20),
        || counts().len() == 2,
    );
    assert_eq!(
        counts(),
        [1, 1002],
        "the new version counts on from the old state"
    );

    // End of input: both expiry timers (registered by the old version for the first
    // click, by the new one for the second) fire in the new version.
    drop(stdin);
    let status = child.wait().unwrap();
    let log = log.finish();
    assert!(status.success(), "{log}");
    assert_eq!(counts(), [1, 1002, 1001, 1000], "{log}");
    let _ = std::fs::remove_file(&wasm);
}

/// `weir dev` on a pipeline of two stages fed on stdin (the per-key counter of the
/// versioned test UDFs in both, the second keyed by a field of the first's records): a
/// component the host refuses, written over the second stage's file, leaves its running
/// version; a new version written over it is swapped into that stage alone while the
/// first runs on. Both stages keep their state: the first counts on, the second's new
/// version totals on from the count the old one left, over every record the first
/// emitted (its timers' included), and nothing is processed twice.
#[test]
fn a_new_component_of_one_stage_is_swapped_into_that_stage_and_every_stage_keeps_its_state() {
    let work = Workdir::new();
    for stage in ["first", "second"] {
        std::fs::copy(
            weir_e2e::component("versioned-udf-v1"),
            work.path(&format!("{stage}.wasm")),
        )
        .unwrap();
    }
    work.write("events.jsonl", "");
    let pipeline = work.write(
        "graph.toml",
        &weir_e2e::graphs::two_stage_pipeline("dev-graph", "first.wasm", "second.wasm", 1),
    );
    let mut child = Command::new(weir_bin())
        .args(["dev", &pipeline, "--input", "events=-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start weir dev");
    let log = StderrLog::capture(&mut child);
    let lines =
        |name: &str| parse_jsonl(&std::fs::read_to_string(work.path(name)).unwrap_or_default());
    // The records a stage emitted for elements (its timers emit `timer` instead).
    let counted = |name: &str| -> Vec<serde_json::Value> {
        lines(name)
            .into_iter()
            .filter(|r| r.get("timer").is_none())
            .collect()
    };
    let mut stdin = child.stdin.take().unwrap();
    let mut send = |seqs: std::ops::RangeInclusive<u64>| {
        for seq in seqs {
            writeln!(
                stdin,
                r#"{{"key": "a", "seq": {seq}, "ts": {}}}"#,
                seq * 10_000
            )
            .unwrap();
        }
        stdin.flush().unwrap();
    };

    wait_for("weir dev to start", Duration::from_secs(30), || {
        log.contains("watching each stage's component")
    });
    send(1..=3);
    // Stage 1: three counts and the two timers the later elements' watermark fired.
    wait_for(
        "stage 2 to count stage 1's records",
        Duration::from_secs(20),
        || counted("second.jsonl").len() == 5,
    );

    std::fs::write(work.path("second.wasm"), b"not a component").unwrap();
    wait_for("the refusal", Duration::from_secs(30), || {
        log.contains("weir dev: stage \"second\": the new version was refused")
    });
    let v2 = work.path("v2.wasm.tmp");
    std::fs::copy(weir_e2e::component("versioned-udf-v2"), &v2).unwrap();
    std::fs::rename(&v2, work.path("second.wasm")).unwrap();
    wait_for("the swap into stage 2", Duration::from_secs(30), || {
        log.contains("weir dev: stage \"second\": reloaded second (")
    });
    send(4..=6);
    drop(stdin);
    let status = child.wait().unwrap();
    let log = log.finish();
    assert!(status.success(), "{log}");

    let first = lines("first.jsonl");
    assert!(
        first.iter().all(|r| r["v"] == 1),
        "stage 1 was not swapped: {first:?}"
    );
    let first_counts: Vec<u64> = counted("first.jsonl")
        .iter()
        .map(|r| r["count"].as_u64().expect("a count"))
        .collect();
    assert_eq!(
        first_counts,
        [1, 2, 3, 4, 5, 6],
        "stage 1 counted on through the swap of stage 2"
    );

    // Stage 2 counted every record stage 1 emitted, once, in order: the old version up
    // to the swap, then the new one on from the count it left.
    let second = counted("second.jsonl");
    let numbers: Vec<(u64, u64)> = second
        .iter()
        .map(|r| {
            let n = r
                .get("count")
                .or_else(|| r.get("total"))
                .and_then(|n| n.as_u64());
            (
                r["v"].as_u64().expect("a version"),
                n.expect("a count or total"),
            )
        })
        .collect();
    assert_eq!(
        numbers.iter().map(|(_, n)| *n).collect::<Vec<_>>(),
        (1..=first.len() as u64).collect::<Vec<_>>(),
        "stage 2 counts each of stage 1's {} records once: {second:?}",
        first.len()
    );
    let swapped_at = numbers
        .iter()
        .position(|(v, _)| *v == 2)
        .expect("the new version ran");
    assert_eq!(
        swapped_at, 5,
        "the old version counted the five before the swap: {numbers:?}"
    );
    assert!(
        numbers[swapped_at..].iter().all(|(v, _)| *v == 2),
        "the new version stays: {numbers:?}"
    );
}
