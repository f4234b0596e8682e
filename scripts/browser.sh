#!/usr/bin/env bash
# Makes sure a headless-capable Chromium is installed, for the test that drives
# `weir serve`'s status page (tests/tests/serve.rs). Idempotent: does nothing when
# `chromium` (or `chromium-browser`) is already on PATH. Installing needs root and apt-get
# (Debian's `chromium` package); prints the browser's path on stdout.
set -euo pipefail

for name in chromium chromium-browser; do
  if path=$(command -v "$name"); then
    echo "$path"
    exit 0
  fi
done
if [[ $EUID -ne 0 ]] || ! command -v apt-get >/dev/null 2>&1; then
  echo "browser: chromium is missing; install it with: apt-get install chromium" >&2
  exit 1
fi
echo "browser: installing chromium with apt-get" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >&2
apt-get install -y -qq --no-install-recommends chromium >&2
command -v chromium
