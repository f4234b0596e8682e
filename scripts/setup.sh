#!/usr/bin/env bash
# Installs what building Weir needs and a fresh machine lacks. Idempotent: safe to run
# again; it only adds what is missing.
set -euo pipefail

if ! command -v cargo >/dev/null 2>&1; then
  echo "setup: cargo is missing; install Rust with rustup first" >&2
  exit 1
fi

# UDFs are wasm components built for wasm32-wasip2.
if ! rustup target list --installed | grep -qx wasm32-wasip2; then
  echo "setup: adding the wasm32-wasip2 target"
  rustup target add wasm32-wasip2
fi
