#!/usr/bin/env bash
# The Python and JavaScript SDKs' own unit tests, and those of the UDFs and starter
# projects written with them, natively (CPython, Node.js): no component is built.
# Exits non-zero if any test fails. Part of `make test` (scripts/test.sh).
set -uo pipefail
cd "$(dirname "$0")/.."

status=0
python_tests() { # PYTHONPATH entry holding the tests, and the test module
  echo "== python: $2 ($1)"
  PYTHONDONTWRITEBYTECODE=1 PYTHONPATH="guest-sdk/python:$1" python3 -m unittest "$2" || status=1
}
python_tests guest-sdk/python/tests test_testing
python_tests guest-sdk/python/tests test_batch
python_tests guest-sdk/python/tests test_codec
python_tests guest-sdk/python/tests test_state_encoding
python_tests guest-sdk/python/tests test_ttl_and_timers
python_tests udfs/python/change-only-counter test_app
python_tests host/weir/templates/python test_app

echo "== javascript: SDK, udfs/js and the starter project"
guest-sdk/js/test.sh || status=1
exit "$status"
