#!/usr/bin/env bash
# The whole test suite on a fresh machine: install and start every server it needs on
# loopback, then run every crate's tests against them. A missing server fails the run.
set -euo pipefail
cd "$(dirname "$0")/.."

# Each step says how long it took, so a slow run shows where its time went.
step_started=$SECONDS
step() {
  echo "[test] $(( SECONDS - step_started ))s: $*" >&2
  step_started=$SECONDS
}

command -v cargo >/dev/null || { echo "cargo is required (https://rustup.rs)" >&2; exit 1; }
if ! command -v cc >/dev/null 2>&1 || ! command -v curl >/dev/null 2>&1; then
  [ "$(id -u)" = 0 ] && { DEBIAN_FRONTEND=noninteractive apt-get update -qq && apt-get install -y -qq build-essential curl >/dev/null; }
fi

# librdkafka and its OpenSSL (postroom-kafka) are built from source by their own configure
# scripts: a C compiler, make and perl are all they need (no cmake, no -dev packages).
if ! command -v make >/dev/null 2>&1 || ! command -v perl >/dev/null 2>&1; then
  [ "$(id -u)" = 0 ] && { DEBIAN_FRONTEND=noninteractive apt-get update -qq && apt-get install -y -qq make perl >/dev/null; }
fi

# A cold run needs about 20 GB of disk (the workspace's build, the each-feature check, the
# fuzz build): say so at the start, where a full disk would otherwise surface later as a
# compiler's "No space left on device".
free_kb=$(df -Pk . | awk 'NR == 2 {print $4}')
echo "[test] disk free here: $(( free_kb / 1024 / 1024 )) GB" >&2
if [ "$free_kb" -lt $(( 20 * 1024 * 1024 )) ]; then
  echo "[test] warning: less than 20 GB free; a cold run may fill the disk" >&2
fi
# A run of the suite compiles each crate once: the incremental caches, several GB for a
# workspace this size, would only take disk. A developer's own CARGO_INCREMENTAL is kept.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"

bash scripts/services.sh all
step "services ready"

export POSTROOM_TEST_PG="${POSTROOM_TEST_PG:-postgres://postgres@127.0.0.1:5432/postgres}"
export POSTROOM_TEST_AMQP="${POSTROOM_TEST_AMQP:-amqp://guest:guest@127.0.0.1:5672/%2f}"
export POSTROOM_TEST_RABBIT_API="${POSTROOM_TEST_RABBIT_API:-http://guest:guest@127.0.0.1:15672}"
export POSTROOM_TEST_NATS="${POSTROOM_TEST_NATS:-nats://127.0.0.1:4222}"
# The local SQS endpoint (moto) takes any credentials: fixed fake ones, and a region.
export POSTROOM_TEST_SQS="${POSTROOM_TEST_SQS:-http://127.0.0.1:5000}"
export AWS_ACCESS_KEY_ID="${AWS_ACCESS_KEY_ID:-postroom-test}"
export AWS_SECRET_ACCESS_KEY="${AWS_SECRET_ACCESS_KEY:-postroom-test}"
export AWS_REGION="${AWS_REGION:-us-east-1}"
export POSTROOM_TEST_KAFKA="${POSTROOM_TEST_KAFKA:-127.0.0.1:9092}"

cargo fmt --all -- --check
step "formatting checked"
# cargo-nextest runs each test in a process of its own (crash points, metrics recorders and
# child processes stay with their test) and test binaries in parallel.
if ! cargo nextest --version >/dev/null 2>&1; then
  echo "[test] installing cargo-nextest" >&2
  cargo install cargo-nextest --locked
fi
cargo build --workspace --all-targets --locked
step "workspace built"
# The examples (examples/): complete services, each exiting 0 only when every message was applied exactly once.
# They run as the workspace build above made them: `cargo run -p postroom-examples` would
# compile the examples' dependencies again, with the features of that one package.
target_dir="$(cargo metadata --format-version 1 --no-deps --locked | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')"
example() { "$target_dir/debug/$1"; }
EXAMPLES_PG="${POSTROOM_TEST_PG%/*}/postroom_examples"
psql "$POSTROOM_TEST_PG" -tAc "SELECT 1 FROM pg_database WHERE datname = 'postroom_examples'" | grep -q 1 || psql -q "$POSTROOM_TEST_PG" -c "CREATE DATABASE postroom_examples"
example sqlite
DATABASE_URL="$EXAMPLES_PG" BROKER_URL="$POSTROOM_TEST_AMQP" POSTROOM_BROKER_API="$POSTROOM_TEST_RABBIT_API" example postgres_rabbitmq
DATABASE_URL="$EXAMPLES_PG" NATS_URL="$POSTROOM_TEST_NATS" example postgres_nats
DATABASE_URL="$EXAMPLES_PG" SQS_URL="sqs://${POSTROOM_TEST_SQS#*://}" example postgres_sqs
DATABASE_URL="$EXAMPLES_PG" KAFKA_URL="kafka://$POSTROOM_TEST_KAFKA" example postgres_kafka
step "examples ran"
# Each store and transport is a feature of the CLI: a PostgreSQL-only build has no lapin.
# Built rather than checked: a build reuses the dependencies the workspace build compiled
# (where their features agree), a check compiles every one again. The library only: the
# binary is a line over it, and building it here would put a PostgreSQL-only `postroom` where
# the tests below run the workspace's.
cargo build -p postroom-cli --lib --no-default-features --features postgres --locked
if cargo tree -p postroom-cli --no-default-features --features postgres -e normal,build --locked | grep -q 'lapin'; then
  echo "the PostgreSQL-only build of postroom-cli depends on lapin" >&2; exit 1
fi
step "PostgreSQL-only CLI checked"
# Each cargo feature of the facade, the command line and every store and transport crate
# builds on its own: a feature that forgets to bring what it needs (a driver, a dependency's
# feature) fails here, where a build with every feature would hide it.
if ! cargo hack --version >/dev/null 2>&1; then
  echo "[test] installing cargo-hack" >&2
  cargo install cargo-hack --locked
fi
cargo hack check --each-feature --locked \
  -p postroom -p postroom-cli -p postroom-sqlite -p postroom-postgres \
  -p postroom-rabbitmq -p postroom-nats -p postroom-sqs -p postroom-kafka
step "each feature checked on its own"
# The API documentation builds without a warning: no broken or ambiguous link, no public item
# without its documentation (the workspace's missing_docs lint, denied here).
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --locked
step "API documentation built"
# The run's output is kept: when tests fail, the end of the output repeats each failure's panic
# message (the long backtraces above would otherwise push them out of a truncated log).
nextest_log="$(mktemp)"
set +e
cargo nextest run --workspace --locked --no-fail-fast --test-threads "${POSTROOM_TEST_THREADS:-4}" 2>&1 | tee "$nextest_log"
status=${PIPESTATUS[0]}
set -e
step "tests ran"
if [ "$status" != 0 ]; then
  echo "[test] failures, the panic of each:" >&2
  grep -E -A2 "^\s+(FAIL|TIMEOUT) \[|panicked at" "$nextest_log" | grep -v -E "^--$|stack backtrace" | awk '!seen[$0]++' | tail -n 120 >&2
  # What the machine looked like when they failed: a full disk or a broker alarm blocks publishers.
  { echo "[test] machine:"; uptime; free -m; df -h . /tmp; rabbitmq-diagnostics -q alarms 2>&1 | tail -n 5; } >&2 || true
  exit "$status"
fi
cargo test --workspace --locked --doc
step "doc tests ran"
# Each fuzz target for 20 s from the repository's corpus (FUZZ_SECONDS; the script's own default
# is 30 s); fails on a crash. The suite keeps it short, like its soaks.
FUZZ_SECONDS="${FUZZ_SECONDS:-20}" bash scripts/fuzz.sh
step "fuzzing done"
echo "[test] all passed in ${SECONDS}s" >&2
