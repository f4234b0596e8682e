#!/usr/bin/env bash
# Builds {{name}}.wasm, the Weir component, from app.js with componentize-qjs.
#
#   ./build.sh            (weir dev runs it on every save of app.js: see pipeline.toml)
#
# Finds componentize-qjs (0.4.5) through $WEIR_JS_TOOLCHAIN (the executable, or a folder
# holding node_modules/.bin/componentize-qjs), else ./node_modules/.bin, else on PATH,
# else where the Weir checkout that made this project installs it
# (scripts/toolchain/js.sh, into .weir-tools/js). The SDK (`weir/`) and the contract
# (`wit/`) come from this folder, where `weir new` put them; $WEIR_WIT_DIR overrides the
# contract. app.js can import only files inside this folder.
set -euo pipefail
cd "$(dirname "$0")"

out={{name}}.wasm
wit=${WEIR_WIT_DIR:-wit}
# The Weir checkout whose `weir new` made this project (empty if it had none).
checkout='{{weir_checkout}}'

toolchain=${WEIR_JS_TOOLCHAIN:-}
if [[ -n $toolchain && -d $toolchain ]]; then
  cqjs=$toolchain/node_modules/.bin/componentize-qjs
elif [[ -n $toolchain ]]; then
  cqjs=$toolchain
elif [[ -x node_modules/.bin/componentize-qjs ]]; then
  cqjs=node_modules/.bin/componentize-qjs
elif command -v componentize-qjs >/dev/null 2>&1; then
  cqjs=$(command -v componentize-qjs)
else
  cqjs=$checkout/.weir-tools/js/node_modules/.bin/componentize-qjs
fi
if [[ ! -x $cqjs ]]; then
  if [[ -n $checkout && -x $checkout/scripts/toolchain/js.sh ]]; then
    cat >&2 <<MSG
build.sh: componentize-qjs not found. Install the pinned one with:
    $checkout/scripts/toolchain/js.sh
MSG
  else
    cat >&2 <<'MSG'
build.sh: componentize-qjs not found. Install it (it needs Node.js >= 18) with:
    npm install          # componentize-qjs 0.4.5, from package.json, into ./node_modules
MSG
  fi
  exit 1
fi
[[ -f weir/index.js ]] || { echo "build.sh: no weir SDK in ./weir (weir/index.js)" >&2; exit 1; }
[[ -d $wit ]] || { echo "build.sh: no WIT folder at $wit" >&2; exit 1; }

# componentize-qjs builds a module without the export too, and that component traps in init.
if ! grep -Eq 'export[[:space:]]+(const|let|var|function)[[:space:]]+processFunction\b|export[[:space:]]*\{[^}]*\bprocessFunction\b' app.js; then
  echo "build.sh: warning: app.js does not seem to export processFunction (export const processFunction = weir.processFunction(...)); the host would fail to initialise it" >&2
fi
# Written to a temporary name, then renamed: `weir dev` never sees half a component.
# --sync: the host calls the UDF synchronously. --stub-wasi: the component imports no
# WASI (the sandbox grants none); the SDK makes the clocks this removes throw an error
# that says so.
tmp=$(mktemp "$out.tmp.XXXXXX")
log=$(mktemp)
trap 'rm -f "$tmp" "$log"' EXIT
if ! "$cqjs" --wit "$wit" --world keyed-process --js app.js --module-root . \
    --stub-wasi --sync -o "$tmp" >"$log" 2>&1; then
  grep -v -e '^componentize-qjs$' -e '^  WIT:' -e '^  JS:' -e '^  Output:' -e '^Stubbing WASI' "$log" >&2 || true
  echo "build.sh: componentize-qjs failed" >&2
  exit 1
fi
chmod 644 "$tmp"
mv -f "$tmp" "$out"
echo "build.sh: wrote $out ($(( $(wc -c <"$out") / 1000 )) kB)" >&2
