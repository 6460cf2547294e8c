#!/usr/bin/env bash
# The project's test command: everything `cargo test` runs for the whole
# workspace, with every feature, on a fresh machine that has only the Rust
# toolchain. Whatever else the tests need is installed here through the
# system package manager.
set -euo pipefail
cd "$(dirname "$0")/.."

# The Redis tests start their own redis-server processes (standalone and a
# Cluster), so the binaries must be here.
if ! command -v redis-server >/dev/null || ! command -v redis-cli >/dev/null; then
    echo "installing redis-server and redis-cli (the Redis tests start their own servers)"
    sudo=""
    if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
    if command -v apt-get >/dev/null; then
        $sudo apt-get update -qq
        DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq redis-server redis-tools >/dev/null
    elif command -v dnf >/dev/null; then
        $sudo dnf install -y -q redis
    elif command -v apk >/dev/null; then
        $sudo apk add --quiet redis
    elif command -v brew >/dev/null; then
        brew install redis
    else
        echo "no known package manager: install redis-server and redis-cli, then run again" >&2
        exit 1
    fi
fi

log=$(mktemp)
trap 'rm -f "$log"' EXIT

cargo test --workspace --all-features --locked 2>&1 | tee "$log"

# cargo prints one "test result" line per test binary; the last one is often
# a crate with no doctests. Close with the totals over all of them.
awk '/^test result:/ { passed += $4; failed += $6; ignored += $8 }
     END { printf "tests: %d passed, %d failed, %d skipped\n", passed, failed, ignored }' "$log"
