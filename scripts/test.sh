#!/usr/bin/env bash
# Runs every test of the workspace in release (the profile `make build` uses, so wasmtime
# is compiled once), with the services the connector tests need, and ends with one line
# that totals all test binaries.
set -uo pipefail
cd "$(dirname "$0")/.."

log=$(mktemp)
trap 'rm -f "$log"' EXIT

# The connector tests use a real PostgreSQL server (and, later, a Kafka-protocol broker),
# installed and started by the project's own script and stopped afterwards.
scripts/services.sh start >/dev/null
# The status page of `weir serve` is tested in headless Chromium.
scripts/browser.sh >/dev/null
# Compiled components are cached inside the checkout, not in the user's ~/.cache.
export WEIR_CACHE_DIR="$PWD/target/weir-cache"
# cargo-nextest runs the tests of every binary side by side (the end-to-end tests spend
# much of their time waiting on the broker or a child process), two at a time as `cargo
# test` does within one binary, and all of them even after a failure; it does not run
# doc tests, so the SDK's (the only crate with any) run after it. Without nextest,
# `cargo test` runs the same tests one binary after another.
if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --release --workspace --no-fail-fast 2>&1 | tee "$log"
  status=${PIPESTATUS[0]}
  cargo test --release --doc -p weir-sdk 2>&1 | tee -a "$log"
  [[ ${PIPESTATUS[0]} = 0 ]] || status=1
else
  cargo test --release --workspace --no-fail-fast 2>&1 | tee "$log"
  status=${PIPESTATUS[0]}
fi
# The golden cases and the model suites again on the disk state backend: the cases with
# no state in memory between runs of records (every key spilled and loaded back), the
# model and crash suites with 64 KiB of it. Their outputs must not change.
if cargo nextest --version >/dev/null 2>&1; then
  WEIR_STATE_BACKEND=disk WEIR_STATE_CACHE=0 \
    cargo nextest run --release -p weir-e2e --no-fail-fast --test cases 2>&1 | tee -a "$log"
  [[ ${PIPESTATUS[0]} = 0 ]] || status=1
  WEIR_STATE_BACKEND=disk WEIR_STATE_CACHE=64KiB \
    cargo nextest run --release -p weir-e2e --no-fail-fast --test crash_recovery \
    --test orders --test session_report --test stream_join --test tumbling_window \
    --test state_versions --test stage_graph --test signals --test guest_batches 2>&1 | tee -a "$log"
  [[ ${PIPESTATUS[0]} = 0 ]] || status=1
fi
# The Python and JavaScript SDKs and UDFs, natively.
scripts/test-guests.sh 2>&1 | tee -a "$log"
[[ ${PIPESTATUS[0]} = 0 ]] || status=1
scripts/services.sh stop 2>/dev/null || true

echo
awk '/^test result:/ || /^ *Summary \[/ {
       for (i = 1; i <= NF; i++) {
         if ($(i + 1) ~ /^passed/) passed += $i
         if ($(i + 1) ~ /^failed/) failed += $i
         # nextest: "N timed out" counts as failed.
         if ($(i + 1) ~ /^timed/) failed += $i
       }
     }
     # Python unittest: "Ran N tests", then "OK" or "FAILED (failures=F, errors=E)".
     /^Ran [0-9]+ tests?/ { ran = $2 }
     /^OK/ && ran != "" { passed += ran; ran = "" }
     /^FAILED \(/ && ran != "" {
       bad = 0; s = $0
       while (match(s, /(failures|errors)=[0-9]+/)) { split(substr(s, RSTART, RLENGTH), kv, "="); bad += kv[2]; s = substr(s, RSTART + RLENGTH) }
       passed += ran - bad; failed += bad; ran = ""
     }
     # node --test: "# pass N" and "# fail N".
     /^# pass [0-9]+/ { passed += $3 }
     /^# fail [0-9]+/ { failed += $3 }
     END { printf "weir: %d passed, %d failed\n", passed, failed }' "$log"
exit "$status"
