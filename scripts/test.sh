#!/usr/bin/env bash
# The project's test command: everything `cargo test` runs for the whole
# workspace, with every feature, on a fresh machine that has only the Rust
# toolchain. Whatever else the tests need is installed here through the
# system package manager.
set -euo pipefail
cd "$(dirname "$0")/.."

log=$(mktemp)
trap 'rm -f "$log"' EXIT

cargo test --workspace --all-features --locked 2>&1 | tee "$log"

# cargo prints one "test result" line per test binary; the last one is often
# a crate with no doctests. Close with the totals over all of them.
awk '/^test result:/ { passed += $4; failed += $6; ignored += $8 }
     END { printf "tests: %d passed, %d failed, %d skipped\n", passed, failed, ignored }' "$log"
