#!/usr/bin/env bash
# The whole test suite on a fresh machine: install and start every server it needs on
# loopback, then run every crate's tests against them. A missing server fails the run.
set -euo pipefail
cd "$(dirname "$0")/.."

command -v cargo >/dev/null || { echo "cargo is required (https://rustup.rs)" >&2; exit 1; }
if ! command -v cc >/dev/null 2>&1 || ! command -v curl >/dev/null 2>&1; then
  [ "$(id -u)" = 0 ] && { DEBIAN_FRONTEND=noninteractive apt-get update -qq && apt-get install -y -qq build-essential curl >/dev/null; }
fi

bash scripts/services.sh all

export POSTROOM_TEST_PG="${POSTROOM_TEST_PG:-postgres://postgres@127.0.0.1:5432/postgres}"
export POSTROOM_TEST_AMQP="${POSTROOM_TEST_AMQP:-amqp://guest:guest@127.0.0.1:5672/%2f}"
export POSTROOM_TEST_RABBIT_API="${POSTROOM_TEST_RABBIT_API:-http://guest:guest@127.0.0.1:15672}"

cargo fmt --all -- --check
cargo build --workspace --all-targets --locked
cargo test --workspace --locked -- --test-threads "${POSTROOM_TEST_THREADS:-4}"
