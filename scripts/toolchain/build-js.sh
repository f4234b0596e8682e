#!/usr/bin/env bash
# Builds a JavaScript UDF into a Weir component: world `keyed-process` of wit/weir.wit (one
# call per element and per timer), or with WEIR_GUEST_BATCH=1 world
# `keyed-process-with-batch`, which adds `weir:udf/batch` (the UDF's code is the same).
# The batch path is not the default: measured on the order timeout it is slower than one
# call per element (docs/udf-javascript.md, "Limits").
#
# Usage: scripts/toolchain/build-js.sh SRC OUT.wasm
#
#   SRC       the UDF's entry module: a .js file, or a folder holding app.js. It is an ES
#             module that exports `processFunction = weir.processFunction(class {...})`
#             and imports the SDK (guest-sdk/js/sdk/index.js) and any modules of its own
#             by relative path, e.g. udfs/js/order-timeout/app.js does
#             `import * as weir from "../../../guest-sdk/js/sdk/index.js"`.
#   OUT.wasm  the component to write; written to a temporary name next to it, then
#             renamed, so a running `weir dev --watch OUT.wasm` never sees half a file
#
# Installs the toolchain first if needed (scripts/toolchain/js.sh: componentize-qjs in
# .weir-tools/js), then runs
#   componentize-qjs --wit wit --world keyed-process --js ENTRY --module-root ROOT \
#     --stub-wasi --sync -o OUT.wasm
# With WEIR_GUEST_BATCH=1 the world is keyed-process-with-batch and the module given is
# WRAPPER, written next to ENTRY for the build (and removed after): it re-exports ENTRY
# and adds the batch export the SDK attaches to `processFunction` (`batch`), so that the
# UDF's own code never names it.
# --sync: the contract has no async functions, and the host does not enable the
# component-model async ABI. --stub-wasi: the component imports no WASI at all (the host
# grants none anyway); the SDK makes the clocks that this removes throw a clear error.
# Only files under ROOT can be imported: the repository when ENTRY is inside it, else
# ENTRY's folder (set WEIR_JS_MODULE_ROOT to change it). Stack traces name files
# relative to ROOT. Prints one line: the output's path, size and build time. A build
# takes about 1 s and the component is about 1.9 MB (the QuickJS engine is most of it).
#
# Environment: WEIR_JS_TOOLCHAIN, a componentize-qjs executable or a folder holding
# node_modules/.bin/componentize-qjs, instead of the installer's; WEIR_GUEST_BATCH=1, the
# batch export.
set -euo pipefail

if [[ $# -ne 2 ]]; then
  echo "usage: $0 SRC OUT.wasm" >&2
  exit 2
fi
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
src=$1
out=$2
if [[ -d $src ]]; then
  entry=$src/app.js
else
  entry=$src
fi
[[ -f $entry ]] || { echo "build-js: no $entry" >&2; exit 2; }
entry=$(cd "$(dirname "$entry")" && pwd)/$(basename "$entry")

toolchain=${WEIR_JS_TOOLCHAIN:-}
if [[ -z $toolchain ]]; then
  cqjs=$("$repo/scripts/toolchain/js.sh" --print)
elif [[ -d $toolchain ]]; then
  cqjs=$toolchain/node_modules/.bin/componentize-qjs
else
  cqjs=$toolchain
fi

root=${WEIR_JS_MODULE_ROOT:-}
if [[ -z $root ]]; then
  case $entry in
    "$repo"/*) root=$repo ;;
    *) root=$(dirname "$entry") ;;
  esac
fi

start=$(date +%s.%N)
mkdir -p "$(dirname "$out")"
tmp=$(mktemp "$out.tmp.XXXXXX")
log=$(mktemp)
wrapper=
trap 'rm -f "$tmp" "$log" ${wrapper:+"$wrapper"}' EXIT
# componentize-qjs builds a module without the export too, and that component traps in init.
if ! grep -Eq 'export[[:space:]]+(const|let|var|function)[[:space:]]+processFunction\b|export[[:space:]]*\{[^}]*\bprocessFunction\b' "$entry"; then
  echo "build-js: warning: $entry does not seem to export processFunction (export const processFunction = weir.processFunction(...)); the host would fail to initialise it" >&2
  world=keyed-process
  js=$entry
elif [[ ${WEIR_GUEST_BATCH:-0} != 1 ]]; then
  world=keyed-process
  js=$entry
else
  world=keyed-process-with-batch
  wrapper=$(mktemp "$(dirname "$entry")/.weir-batched-XXXXXX.js")
  name=./$(basename "$entry")
  cat >"$wrapper" <<EOF
// Written by build-js.sh for one build: the UDF's exports and the SDK's batch export.
export * from "$name";
import { processFunction as weirProcessFunction } from "$name";
export const batch = weirProcessFunction.batch;
EOF
  js=$wrapper
fi
if ! "$cqjs" --wit "$repo/wit" --world "$world" --js "$js" --module-root "$root" \
    --stub-wasi --sync -o "$tmp" >"$log" 2>&1; then
  # Its banner and progress lines are noise; the error is what is left.
  grep -v -e '^componentize-qjs$' -e '^  WIT:' -e '^  JS:' -e '^  Output:' -e '^Stubbing WASI' "$log" >&2 || true
  echo "build-js: componentize-qjs failed for $entry" >&2
  exit 1
fi
chmod 644 "$tmp" # mktemp made it private
mv -f "$tmp" "$out"
trap - EXIT
rm -f "$log" ${wrapper:+"$wrapper"}
end=$(date +%s.%N)
awk -v out="$out" -v size="$(wc -c <"$out")" -v t0="$start" -v t1="$end" \
  'BEGIN { printf "build-js: %s (%.1f MB) in %.1f s\n", out, size / 1e6, t1 - t0 }'
