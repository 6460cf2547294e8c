#!/usr/bin/env bash
# Runs the proxy-header fuzz target for SECONDS (default 60).
#
# With a nightly toolchain and cargo-fuzz, the usual command works:
#   cargo +nightly fuzz run proxy_headers -- -max_total_time=60
# This script needs neither: it passes rustc the same coverage flags
# cargo-fuzz passes (all stable `-C` options) and runs libFuzzer directly.
# What it lacks is AddressSanitizer (a nightly `-Z` flag); the parsers are
# safe Rust, so the fuzzer looks for panics, overflows (checks are on) and
# hangs.
set -euo pipefail
cd "$(dirname "$0")"
seconds="${1:-60}"
target=x86_64-unknown-linux-gnu
RUSTFLAGS="--cfg fuzzing -Cpasses=sancov-module \
  -Cllvm-args=-sanitizer-coverage-level=4 \
  -Cllvm-args=-sanitizer-coverage-inline-8bit-counters \
  -Cllvm-args=-sanitizer-coverage-pc-table \
  -Cllvm-args=-sanitizer-coverage-trace-compares \
  -Cdebug-assertions -Coverflow-checks" \
  cargo build --release --target "$target" --bin proxy_headers
mkdir -p corpus/proxy_headers
"target/$target/release/proxy_headers" -max_total_time="$seconds" corpus/proxy_headers
