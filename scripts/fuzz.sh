#!/usr/bin/env bash
# Fuzz postroom's readers of untrusted input for a bounded time each: the envelope decoder
# (native and foreign bodies), the parked-record header codec (any headers, and a round trip
# that keeps every diagnostic) and the RabbitMQ topology TOML parser. Fails on a crash, a
# panic, a timeout or an allocation over the memory limit; the input that did it is kept in
# fuzz/artifacts/<target>/ (replay: cargo fuzz run <target> fuzz/artifacts/<target>/<file>).
#
#   FUZZ_SECONDS  time per target (default 30)
#   FUZZ_RSS_MB   memory limit, also for any single allocation (default 2048)
#   FUZZ_TARGETS  targets to run (default: all of them)
#   FUZZ_KEEP=1   add the inputs that reached new code to the repository's corpus (then
#                 `RUSTC_BOOTSTRAP=1 cargo fuzz cmin <target>` and commit); by default they go
#                 to fuzz/artifacts/new-corpus/<target>/, which git ignores
#
# The corpus lives in the repository (fuzz/corpus/<target>/, minimized): each run starts from
# it.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds="${FUZZ_SECONDS:-30}"
rss_mb="${FUZZ_RSS_MB:-2048}"

# cargo-fuzz hands rustc nightly-only flags (-Zsanitizer=address, sanitizer coverage options).
# Only the stable toolchain is installed here, and none can be fetched: RUSTC_BOOTSTRAP=1 lets
# the stable compiler accept them (the sanitizer runtimes ship with the stable toolchain).
export RUSTC_BOOTSTRAP=1

if ! command -v cargo-fuzz >/dev/null 2>&1; then
  echo "[fuzz] installing cargo-fuzz" >&2
  cargo install cargo-fuzz --locked --version 0.13.2
fi

targets="${FUZZ_TARGETS:-$(cargo fuzz list)}"
# Release optimizations with debug assertions and overflow checks on (cargo-fuzz's default).
cargo fuzz build
mkdir -p fuzz/artifacts
for t in $targets; do
  mkdir -p "fuzz/corpus/$t"
  if [ "${FUZZ_KEEP:-0}" = 1 ]; then
    corpus=("fuzz/corpus/$t")
  else
    mkdir -p "fuzz/artifacts/new-corpus/$t"
    corpus=("fuzz/artifacts/new-corpus/$t" "fuzz/corpus/$t")
  fi
  log="fuzz/artifacts/$t.log"
  dict=()
  [ -f "fuzz/$t.dict" ] && dict=(-dict="fuzz/$t.dict")
  echo "[fuzz] $t for ${seconds}s (log: $log)" >&2
  if cargo fuzz run "$t" "${corpus[@]}" -- \
      -max_total_time="$seconds" -rss_limit_mb="$rss_mb" -malloc_limit_mb="$rss_mb" \
      -max_len=65536 -timeout=10 -print_final_stats=1 "${dict[@]}" >"$log" 2>&1; then
    grep -E '^(Done|stat::number_of_executed_units|stat::new_units_added)' "$log" >&2 || true
  else
    tail -n 80 "$log" >&2
    echo "[fuzz] $t failed; the input that did it is in fuzz/artifacts/$t/" >&2
    exit 1
  fi
done
echo "[fuzz] no crash in:" $targets >&2
