//! The compile cache: a component is compiled once and loaded afterwards; a damaged or
//! foreign entry is ignored and replaced, never used; `--no-compile-cache` writes nothing.

use std::path::{Path, PathBuf};
use weir_e2e::{repo_root, weir_with_env, Finished};

/// Runs the seed 000 example on its sample input with the cache in `cache`, logging
/// at debug level; returns the run and the entries in the cache afterwards.
fn run_counter(cache: &Path, extra: &[&str]) -> (Finished, Vec<PathBuf>) {
    let pipeline = repo_root().join("examples/ad-clicks/pipeline.toml");
    let mut args = vec!["run", pipeline.to_str().unwrap(), "--no-checkpoints", "-q"];
    args.extend(extra);
    let run = weir_with_env(
        &args,
        &[
            ("WEIR_CACHE_DIR", cache),
            ("WEIR_LOG", Path::new("weir=debug")),
        ],
    );
    assert_eq!(run.code, Some(0), "weir failed:\n{}", run.stderr);
    (run, entries(cache))
}

fn entries(cache: &Path) -> Vec<PathBuf> {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(cache.join("components"))
        .map(|dir| dir.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    entries.sort();
    entries
}

#[test]
fn a_component_is_compiled_once_and_a_bad_entry_is_never_used() {
    let cache = tempfile::tempdir().unwrap();
    let (first, stored) = run_counter(cache.path(), &[]);
    assert_eq!(stored.len(), 1, "one entry after the first run: {stored:?}");
    assert!(first.stderr.contains("compiled the"), "{}", first.stderr);
    let expected = first.stdout.clone();
    assert!(expected.lines().count() > 10, "the example emits records");

    let (second, _) = run_counter(cache.path(), &[]);
    assert!(
        second.stderr.contains("loaded the compiled component"),
        "the second run uses the cache:\n{}",
        second.stderr
    );
    assert_eq!(second.stdout, expected);

    // A flipped byte in the compiled code: refused by the checksum, compiled again,
    // and the entry replaced so the next run loads it.
    let entry = &stored[0];
    let mut bytes = std::fs::read(entry).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x55;
    std::fs::write(entry, &bytes).unwrap();
    let (damaged, _) = run_counter(cache.path(), &[]);
    assert!(
        damaged
            .stderr
            .contains("checksum does not match; compiling again"),
        "{}",
        damaged.stderr
    );
    assert_eq!(damaged.stdout, expected);
    let (repaired, _) = run_counter(cache.path(), &[]);
    assert!(repaired.stderr.contains("loaded the compiled component"));

    // Another component's entry under this one's name (a copied cache, say).
    let other = tempfile::tempdir().unwrap();
    let orders = repo_root().join("examples/orders/pipeline.toml");
    let run = weir_with_env(
        &["run", orders.to_str().unwrap(), "--no-checkpoints", "-q"],
        &[("WEIR_CACHE_DIR", other.path())],
    );
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    std::fs::copy(&entries(other.path())[0], entry).unwrap();
    let (foreign, _) = run_counter(cache.path(), &[]);
    assert!(
        foreign
            .stderr
            .contains("written for another component or engine"),
        "{}",
        foreign.stderr
    );
    assert_eq!(foreign.stdout, expected);

    // A cut-off entry (a crash while another process wrote it without the rename).
    std::fs::write(entry, &bytes[..100]).unwrap();
    let (truncated, _) = run_counter(cache.path(), &[]);
    assert!(
        truncated.stderr.contains("truncated"),
        "{}",
        truncated.stderr
    );
    assert_eq!(truncated.stdout, expected);
}

#[test]
fn no_compile_cache_writes_nothing() {
    let cache = tempfile::tempdir().unwrap();
    let (run, stored) = run_counter(cache.path(), &["--no-compile-cache"]);
    assert!(stored.is_empty(), "{stored:?}");
    assert!(run.stdout.lines().count() > 10);
}
