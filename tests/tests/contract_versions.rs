//! Components built against an earlier minor version of the contract keep working: the
//! host's imports satisfy their imports, and their exports are found under the host's
//! version (wasmtime matches semver-compatible interface names).

use weir_e2e::{component, repo_root, weir, Workdir};
use weir_engine::runtime::wasm::LoadedComponent;

const OLD: &str = "tests/fixtures/contract-0.1.0/change_only_counter.wasm";

#[test]
fn a_component_of_contract_0_1_0_takes_the_cached_batch_path() {
    let old = LoadedComponent::from_file("old", &repo_root().join(OLD)).unwrap();
    assert_eq!(old.batch_interface(), Some("cached-batch"));
    let new = LoadedComponent::from_file("new", &component("change-only-counter")).unwrap();
    assert_eq!(new.batch_interface(), Some("cached-batch"));
}

#[test]
fn a_component_of_contract_0_1_0_gives_the_same_records_as_todays_build() {
    let work = Workdir::new();
    let pipeline = repo_root().join("examples/ad-clicks/pipeline.toml");
    let dead = work.path("dead.jsonl");
    let run = |udf: &str, out: &str| {
        let out = work.path(out);
        weir(&[
            "run",
            pipeline.to_str().unwrap(),
            "--udf",
            udf,
            "--output",
            &format!("main={}", out.display()),
            "--dead-letter",
            dead.to_str().unwrap(),
            "--no-checkpoints",
            "--quiet",
        ])
        .assert_success();
        std::fs::read_to_string(out).unwrap()
    };
    let old = run(repo_root().join(OLD).to_str().unwrap(), "old.jsonl");
    let new = run(
        component("change-only-counter").to_str().unwrap(),
        "new.jsonl",
    );
    assert!(old.lines().count() > 10, "{old}");
    assert_eq!(old, new);
}

/// A checkpoint written by a component of the SDKs' first state format (schema-0 values
/// untagged) restores into today's build, which tags every value: the state reads as it
/// was written, and the run goes on to the records an uninterrupted run gives (issue 36,
/// item 1).
#[test]
fn a_checkpoint_of_the_first_state_format_restores_into_todays_build() {
    use std::io::Write as _;
    use std::process::{Command, Stdio};
    let work = Workdir::new();
    let pipeline = repo_root().join("examples/ad-clicks/pipeline.toml");
    let clicks =
        std::fs::read_to_string(repo_root().join("examples/ad-clicks/clicks.jsonl")).unwrap();
    let lines: Vec<&str> = clicks.lines().collect();
    let (first, rest) = lines.split_at(9);
    let rest_file = work.write("rest.jsonl", &(rest.join("\n") + "\n"));
    let new = component("change-only-counter");
    let state = work.path("state");
    let args = |udf: &str, input: &str, out: &str| -> Vec<String> {
        [
            "run",
            pipeline.to_str().unwrap(),
            "--udf",
            udf,
            "--input",
            &format!("clicks={input}"),
            "--output",
            &format!("main={}", work.path(out).display()),
            "--dead-letter",
            work.path("dead.jsonl").to_str().unwrap(),
            "--state-dir",
            state.to_str().unwrap(),
        ]
        .map(String::from)
        .to_vec()
    };

    // The old build compiled once first (the compile cache keeps it), so that the run
    // stopped below starts at once and reads the nine clicks within its 700 ms however
    // loaded the machine is (a cold compile took 1.2 s under `make test`).
    let empty = work.write("empty.jsonl", "");
    weir(&[
        "run",
        pipeline.to_str().unwrap(),
        "--udf",
        repo_root().join(OLD).to_str().unwrap(),
        "--input",
        &format!("clicks={empty}"),
        "--output",
        &format!("main={}", work.path("warm.jsonl").display()),
        "--no-checkpoints",
    ])
    .assert_success();

    // The old build reads the first nine clicks, and is stopped: a checkpoint.
    let mut old = Command::new(weir_e2e::weir_bin())
        .args(args(
            repo_root().join(OLD).to_str().unwrap(),
            "-",
            "out.jsonl",
        ))
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = old.stdin.take().unwrap();
    for line in first {
        writeln!(stdin, "{line}").unwrap();
    }
    stdin.flush().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(700));
    Command::new("kill")
        .args(["-TERM", &old.id().to_string()])
        .status()
        .unwrap();
    let stopped = old.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&stopped.stderr);
    assert_eq!(stopped.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("source clicks: 9 records read"), "{stderr}");
    drop(stdin);

    // Today's build resumes from it on the rest.
    let resumed = weir(
        &args(new.to_str().unwrap(), rest_file.as_str(), "out.jsonl")
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
    );
    resumed.assert_success();
    assert!(
        resumed.stderr.contains("resumed from checkpoint"),
        "{}",
        resumed.stderr
    );
    assert!(
        resumed.stderr.contains("dead letters: 0"),
        "every key's state was read: {}",
        resumed.stderr
    );

    // As today's build gives without a stop.
    let all = weir(&[
        "run",
        pipeline.to_str().unwrap(),
        "--udf",
        new.to_str().unwrap(),
        "--output",
        &format!("main={}", work.path("all.jsonl").display()),
        "--dead-letter",
        work.path("dead-all.jsonl").to_str().unwrap(),
        "--no-checkpoints",
    ]);
    all.assert_success();
    let read = |name: &str| std::fs::read_to_string(work.path(name)).unwrap();
    assert!(read("all.jsonl").lines().count() > 17);
    assert_eq!(read("out.jsonl"), read("all.jsonl"));
}
