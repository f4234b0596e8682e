#!/usr/bin/env bash
# Builds a Python UDF into a Weir component: world `keyed-process` of wit/weir.wit (one call
# per element and per timer), or with WEIR_GUEST_BATCH=1 world `keyed-process-with-batch`,
# which adds `weir:udf/batch` (provided by `weir.export`: the UDF's code is the same).
# The batch path is not the default: it pays for hot keys with big state (about 2x on the
# counter at ~300 clicks per ad) and costs about 10% where keys rarely repeat within a
# batch (docs/udf-python.md, "Limits").
#
# Usage: scripts/toolchain/build-python.sh SRC_DIR OUT.wasm [MODULE]
#
#   SRC_DIR   the folder holding the UDF's app module (and any modules of its own)
#   OUT.wasm  the component to write; written to a temporary name next to it, then
#             renamed, so a running `weir dev --watch OUT.wasm` never sees half a file
#   MODULE    the app module's name (default `app`, i.e. SRC_DIR/app.py); it must define
#             `ProcessFunction = weir.export(MyFunction)`
#
# Installs the toolchain first if needed (scripts/toolchain/python.sh: componentize-py in
# .weir-tools/python), then runs
#   componentize-py -d wit -w WORLD componentize -p guest-sdk/python -p SRC_DIR MODULE
# The `weir` SDK package comes from guest-sdk/python. Prints one line: the output's path,
# size and build time. A build takes 5-8 s and the component is about 19 MB (CPython
# and the parts of its standard library the UDF imports are inside).
#
# Environment: WEIR_PYTHON_TOOLCHAIN, a componentize-py executable or a venv holding one,
# instead of the installer's venv; WEIR_GUEST_BATCH=1, the batch export.
set -euo pipefail

if [[ $# -lt 2 || $# -gt 3 ]]; then
  echo "usage: $0 SRC_DIR OUT.wasm [MODULE]" >&2
  exit 2
fi
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
src=$1
out=$2
module=${3:-app}
[[ -f $src/$module.py || -f $src/$module/__init__.py ]] ||
  { echo "build-python: no module $module in $src" >&2; exit 2; }

toolchain=${WEIR_PYTHON_TOOLCHAIN:-}
if [[ -z $toolchain ]]; then
  cpy=$("$repo/scripts/toolchain/python.sh" --print)
elif [[ -d $toolchain ]]; then
  cpy=$toolchain/bin/componentize-py
else
  cpy=$toolchain
fi

# componentize-py's build-time interpreter writes __pycache__/ into the module folders;
# remove those it adds, so that a build leaves the source tree as it was.
pycaches() { find "$repo/guest-sdk/python" "$src" -type d -name __pycache__ 2>/dev/null | sort; }
before=$(pycaches)
cleanup() {
  rm -f "$tmp"
  comm -13 <(echo "$before") <(pycaches) | while read -r dir; do rm -rf "$dir"; done
}

start=$(date +%s.%N)
mkdir -p "$(dirname "$out")"
tmp=$(mktemp "$out.tmp.XXXXXX")
trap cleanup EXIT
# No VIRTUAL_ENV: componentize-py would add its site-packages to the module path. No
# backtrace of componentize-py itself on a build error (RUST_BACKTRACE may be set).
world=keyed-process
if [[ ${WEIR_GUEST_BATCH:-0} == 1 ]]; then world=keyed-process-with-batch; fi
env -u VIRTUAL_ENV RUST_LIB_BACKTRACE=0 "$cpy" -d "$repo/wit" -w "$world" componentize \
  -p "$repo/guest-sdk/python" -p "$src" -o "$tmp" "$module" >/dev/null
chmod 644 "$tmp" # mktemp made it private
mv -f "$tmp" "$out"
end=$(date +%s.%N)
awk -v out="$out" -v size="$(wc -c <"$out")" -v t0="$start" -v t1="$end" \
  'BEGIN { printf "build-python: %s (%.1f MB) in %.1f s\n", out, size / 1e6, t1 - t0 }'
