#!/usr/bin/env bash
# Runs every JavaScript unit test with plain Node.js (>= 20), no wasm and no packages:
#
#   1. the SDK's own tests (guest-sdk/js/test/) and the JavaScript UDFs' (udfs/js/*/*.test.js):
#        node --test guest-sdk/js/ udfs/js/
#   2. the tests of the `weir new --lang js` starter (host/weir/templates/js/app.test.js), in a
#      project put together in a temporary folder as `weir new` makes one: the template
#      with its placeholders filled in, the SDK as weir/, the contract as wit/; then
#        node --test
#      in that folder.
#
# Usage: guest-sdk/js/test.sh (from anywhere). Exits with 1 if any test fails (after
# running both), 2 if Node.js is missing or too old.
set -uo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
command -v node >/dev/null 2>&1 || { echo "js tests: node not found (Node.js >= 20 is needed)" >&2; exit 2; }
node -e 'process.exit(Number(process.versions.node.split(".")[0]) < 20 ? 1 : 0)' ||
  { echo "js tests: node is $(node --version); the tests need Node.js >= 20" >&2; exit 2; }

status=0
(cd "$repo" && node --test guest-sdk/js/ udfs/js/) || status=1

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
project=$tmp/js-sessions
mkdir -p "$project"
cp -R "$repo/host/weir/templates/js/." "$project/"
rm -rf "$project/node_modules" "$project"/*.wasm
find "$project" -type f | while read -r file; do
  sed -e 's/{{name}}/js-sessions/g' -e 's/{{name_snake}}/js_sessions/g' "$file" >"$file.tmp" && mv "$file.tmp" "$file"
done
cp -R "$repo/guest-sdk/js/sdk" "$project/weir"
cp -R "$repo/wit" "$project/wit"
(cd "$project" && node --test) || status=1

if [[ $status != 0 ]]; then echo "js tests: FAILED" >&2; fi
exit $status
