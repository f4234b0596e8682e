#!/usr/bin/env bash
# Installs the Python UDF toolchain: componentize-py, pinned by hash in
# guest-sdk/python/requirements.lock, in a venv at <repo>/.weir-tools/python (ignored by git).
#
# Usage: scripts/toolchain/python.sh [--print]
#
#   Idempotent: when the venv exists and was built from the current lock file it does
#   nothing and prints nothing (a stamp file in the venv holds the lock's sha256).
#   Otherwise it (re)creates the venv and runs
#   `pip install --require-hashes --only-binary=:all: -r requirements.lock`, with progress
#   on stderr prefixed "python-toolchain:". `--print` prints the path of the componentize-py
#   executable on stdout, and nothing else, in both cases.
#
# Environment:
#   WEIR_PYTHON         the host Python to build the venv with (default python3; >= 3.9)
#   WEIR_PYTHON_VENV    where the venv goes (default <repo>/.weir-tools/python)
#
# Needs: python3 with the venv module (python3-venv is apt-installed if missing and we are
# root) and access to PyPI for the first install.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
lock="$repo/guest-sdk/python/requirements.lock"
venv=${WEIR_PYTHON_VENV:-$repo/.weir-tools/python}
python=${WEIR_PYTHON:-python3}
print=0
case "${1:-}" in
  --print) print=1 ;;
  "") ;;
  *) echo "usage: $0 [--print]" >&2; exit 2 ;;
esac

say() { echo "python-toolchain: $*" >&2; }
die() { say "error: $*"; exit 1; }

want=$(sha256sum "$lock" | cut -d' ' -f1)
installed() {
  [[ -x $venv/bin/componentize-py && -f $venv/.weir-lock-sha256 ]] &&
    [[ $(cat "$venv/.weir-lock-sha256") == "$want" ]]
}
done_() {
  if [[ $print == 1 ]]; then echo "$venv/bin/componentize-py"; fi
  exit 0
}

installed && done_

# Serialise concurrent installs (parallel builds); the loser finds the venv ready.
mkdir -p "$(dirname "$venv")"
exec 9>"$venv.lock"
flock -w 600 9 || die "timed out waiting for $venv.lock"
installed && done_

command -v "$python" >/dev/null 2>&1 || die "$python not found (set WEIR_PYTHON to a Python >= 3.9)"
"$python" -c 'import sys; sys.exit(sys.version_info < (3, 9))' ||
  die "$python is $("$python" --version 2>&1); componentize-py needs >= 3.9"

say "installing componentize-py into $venv"
rm -rf "$venv"
if ! "$python" -m venv "$venv" >/dev/null 2>&1; then
  # Debian's python3 ships venv/ensurepip separately.
  rm -rf "$venv"
  if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null 2>&1; then
    say "installing python3-venv with apt-get"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >&2 && apt-get install -y -qq --no-install-recommends python3-venv >&2 ||
      die "apt-get install python3-venv failed"
    "$python" -m venv "$venv" >&2 || die "$python -m venv $venv failed"
  else
    die "$python -m venv failed; install python3-venv (Debian) or set WEIR_PYTHON"
  fi
fi

if ! "$venv/bin/python" -m pip install --disable-pip-version-check --no-input --progress-bar off \
    --require-hashes --only-binary=:all: --no-deps -r "$lock" >"$venv/pip-install.log" 2>&1; then
  tail -n 15 "$venv/pip-install.log" >&2
  die "pip install -r $lock failed (log: $venv/pip-install.log)"
fi
"$venv/bin/componentize-py" --version >/dev/null 2>&1 || die "componentize-py does not run"
echo "$want" >"$venv/.weir-lock-sha256"
say "installed $("$venv/bin/componentize-py" --version 2>&1)"
done_
