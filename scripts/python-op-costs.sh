#!/usr/bin/env bash
# What each SDK operation costs inside a Python component: builds
# tests/udfs/python/op-costs (one operation per element, chosen by config `op`), runs it
# over the bench's 200,000 clicks once per operation, and prints each run's time per
# element over that of `op=noop` (the whole path of an element to a UDF doing nothing).
# The figures of docs/udf-python.md, section 8 ("Speed"). Runs are single; on a noisy
# machine run it twice.
#
# Usage: scripts/python-op-costs.sh [OP...]   (default: all of them)
# Needs target/release/weir (`make build`) and target/bench-data/clicks-200k.jsonl
# (`make bench`, or `cargo run --release -p weir-e2e --bin weir-bench languages`).
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
weir=$repo/target/release/weir
clicks=$repo/target/bench-data/clicks-200k.jsonl
wasm=$repo/target/guests/python-op-costs.wasm
[[ -x $weir ]] || { echo "python-op-costs: no $weir: run make build" >&2; exit 2; }
[[ -f $clicks ]] || { echo "python-op-costs: no $clicks: run make bench first" >&2; exit 2; }
"$repo/scripts/toolchain/build-python.sh" "$repo/tests/udfs/python/op-costs" "$wasm" >&2
ops=("$@")
if [[ ${#ops[@]} -eq 0 ]]; then
  ops=(call-x10 import-x10 raw-set raw-get-set json-decode json-encode marshal-decode
       marshal-encode dataclass emit timer)
fi
elements=$(wc -l <"$clicks")
# Nanoseconds of one run with operation $1.
nanos() {
  local start
  start=$(date +%s%N)
  "$weir" run -q --no-checkpoints --config "op=$1" --udf "$wasm" \
    "$repo/examples/ad-clicks/pipeline.toml" --input "clicks=$clicks" \
    --output main=/dev/null --dead-letter /dev/null
  echo $(($(date +%s%N) - start))
}
us() { awk -v n="$1" -v e="$elements" 'BEGIN { printf "%.2f", n / 1000 / e }'; }
nanos noop >/dev/null # compiles the component into the cache
base=$(nanos noop)
echo "op=noop us_per_element=$(us "$base")"
for op in "${ops[@]}"; do
  took=$(nanos "$op")
  echo "op=$op us_over_noop=$(us $((took - base)))"
done
