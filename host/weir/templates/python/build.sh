#!/usr/bin/env bash
# Builds {{name}}.wasm, the Weir component, from app.py with componentize-py.
#
#   ./build.sh            (weir build runs it; weir dev only with --full-build: see README.md)
#
# Finds componentize-py (0.25.1) through $WEIR_PYTHON_TOOLCHAIN (the executable, or a venv
# holding it), else in ./.venv, else on PATH, else where the Weir checkout that made this
# project installs it (scripts/toolchain/python.sh, into .weir-tools/python). The SDK
# (the `weir` package) and the contract (`wit/`) come from this folder, where `weir new`
# put them; $WEIR_SDK_DIR (a folder holding `weir/`) and $WEIR_WIT_DIR override them.
# WEIR_GUEST_BATCH=1 builds with the batch export too (world `keyed-process-with-batch`),
# which pays for hot keys with big state: see README.md.
set -euo pipefail
cd "$(dirname "$0")"

out={{name}}.wasm
sdk=${WEIR_SDK_DIR:-.}
wit=${WEIR_WIT_DIR:-wit}
# The Weir checkout whose `weir new` made this project (empty if it had none).
checkout='{{weir_checkout}}'

toolchain=${WEIR_PYTHON_TOOLCHAIN:-}
if [[ -n $toolchain && -d $toolchain ]]; then
  cpy=$toolchain/bin/componentize-py
elif [[ -n $toolchain ]]; then
  cpy=$toolchain
elif [[ -x .venv/bin/componentize-py ]]; then
  cpy=.venv/bin/componentize-py
elif command -v componentize-py >/dev/null 2>&1; then
  cpy=$(command -v componentize-py)
else
  cpy=$checkout/.weir-tools/python/bin/componentize-py
fi
if [[ ! -x $cpy ]]; then
  if [[ -n $checkout && -x $checkout/scripts/toolchain/python.sh ]]; then
    cat >&2 <<EOF
build.sh: componentize-py not found. Install the pinned one with:
    $checkout/scripts/toolchain/python.sh
EOF
  else
    cat >&2 <<'EOF'
build.sh: componentize-py not found. Install it with:
    python3 -m venv .venv && .venv/bin/pip install componentize-py==0.25.1
EOF
  fi
  exit 1
fi
[[ -f $sdk/weir/__init__.py ]] || { echo "build.sh: no weir SDK package in $sdk/weir" >&2; exit 1; }
[[ -d $wit ]] || { echo "build.sh: no WIT folder at $wit" >&2; exit 1; }

# Written to a temporary name, then renamed: `weir dev` never sees half a component.
tmp=$(mktemp "$out.tmp.XXXXXX")
trap 'rm -f "$tmp"' EXIT
# Without VIRTUAL_ENV, componentize-py does not add a venv's site-packages to the path;
# without a backtrace of componentize-py itself, a build error is the Python one alone.
world=keyed-process
[[ ${WEIR_GUEST_BATCH:-} == 1 ]] && world=keyed-process-with-batch
env -u VIRTUAL_ENV RUST_LIB_BACKTRACE=0 "$cpy" -d "$wit" -w "$world" componentize \
  -p "$sdk" -p . -o "$tmp" app >/dev/null
chmod 644 "$tmp"
mv -f "$tmp" "$out"
trap - EXIT
echo "build.sh: wrote $out ($(( $(wc -c <"$out") / 1000000 )) MB)" >&2
