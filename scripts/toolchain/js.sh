#!/usr/bin/env bash
# Installs the JavaScript UDF toolchain: componentize-qjs (QuickJS compiled to a wasm
# component, with its prebuilt native builder), pinned by guest-sdk/js/package.json and
# package-lock.json, into <repo>/.weir-tools/js (ignored by git).
#
# Usage: scripts/toolchain/js.sh [--print]
#
#   Idempotent: when the folder was installed from the current lock file it does nothing
#   and prints nothing (a stamp file holds the lock's sha256). Otherwise it copies
#   package.json and package-lock.json there and runs `npm ci` (exact versions, integrity
#   checked), with progress on stderr prefixed "js-toolchain:". `--print` prints the path
#   of the componentize-qjs executable on stdout, and nothing else, in both cases.
#
# Environment:
#   WEIR_JS_TOOLS_DIR   where the toolchain goes (default <repo>/.weir-tools/js)
#
# Needs: node >= 18 and npm, and access to the npm registry for the first install.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
manifest="$repo/guest-sdk/js/package.json"
lock="$repo/guest-sdk/js/package-lock.json"
dir=${WEIR_JS_TOOLS_DIR:-$repo/.weir-tools/js}
bin="$dir/node_modules/.bin/componentize-qjs"
print=0
case "${1:-}" in
  --print) print=1 ;;
  "") ;;
  *) echo "usage: $0 [--print]" >&2; exit 2 ;;
esac

say() { echo "js-toolchain: $*" >&2; }
die() { say "error: $*"; exit 1; }

want=$(cat "$manifest" "$lock" | sha256sum | cut -d' ' -f1)
installed() {
  [[ -x $bin && -f $dir/.weir-lock-sha256 ]] && [[ $(cat "$dir/.weir-lock-sha256") == "$want" ]]
}
done_() {
  if [[ $print == 1 ]]; then echo "$bin"; fi
  exit 0
}

installed && done_

# Serialise concurrent installs (parallel builds); the loser finds the folder ready.
mkdir -p "$(dirname "$dir")"
exec 9>"$dir.lock"
flock -w 600 9 || die "timed out waiting for $dir.lock"
installed && done_

command -v node >/dev/null 2>&1 || die "node not found (componentize-qjs needs Node.js >= 18 and npm)"
command -v npm >/dev/null 2>&1 || die "npm not found (componentize-qjs needs Node.js >= 18 and npm)"
node -e 'process.exit(Number(process.versions.node.split(".")[0]) < 18 ? 1 : 0)' ||
  die "node is $(node --version); componentize-qjs needs >= 18"

say "installing componentize-qjs into $dir"
rm -rf "$dir"
mkdir -p "$dir"
cp "$manifest" "$lock" "$dir/"
if ! (cd "$dir" && npm ci --no-audit --no-fund --ignore-scripts --loglevel=error) >"$dir/npm-ci.log" 2>&1; then
  tail -n 15 "$dir/npm-ci.log" >&2
  die "npm ci in $dir failed (log: $dir/npm-ci.log)"
fi
"$bin" --help >/dev/null 2>&1 || die "componentize-qjs does not run (is there a prebuilt binding for $(uname -sm)?)"
echo "$want" >"$dir/.weir-lock-sha256"
say "installed componentize-qjs $(node -p "require('$dir/node_modules/componentize-qjs/package.json').version")"
done_
