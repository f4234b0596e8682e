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
