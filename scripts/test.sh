#!/usr/bin/env bash
# The project's test command: everything `cargo test --workspace` runs, on a
# fresh machine that has only the Rust toolchain. Whatever else the tests need
# is installed here through the system package manager.
set -euo pipefail
cd "$(dirname "$0")/.."

cargo test --workspace --all-features --locked
