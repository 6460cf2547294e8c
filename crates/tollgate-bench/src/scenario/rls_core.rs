//! The rate-limit service's decision core beside the `limitador` crate
//! (0.14): the same limit decided in memory (one thread) and over the same
//! Redis (64 tasks), in alternating rounds, in one process.
//!
//! That process is its own crate, `crates/tollgate-bench/limitador` (its
//! own workspace: limitador brings a second redis client, a CEL
//! interpreter and tonic-build 0.12, which tollgate's test command need
//! not build); this scenario builds it with the `cargo` that runs it,
//! starts a `redis-server` for it, and reads its rows. What each side does
//! per decision is in that crate's doc. Targets (issue 61): memory ≥ 1.5,
//! Redis ≥ 1.0. Beside the Redis row, the server's own work per decision
//! on each side (from `INFO` around each round): its CPU time, the
//! commands it ran (a script's inner calls included), and how busy it
//! was, which says whether a side was held back by Redis or by itself.

use crate::measure::Settings;
use crate::report::{Better, Outcome};
use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::process::Command;
use tollgate_tests::redis::RedisServer;

/// A row as the anchor process prints it.
#[derive(Deserialize)]
struct Printed {
    scenario: String,
    ours: f64,
    anchor: f64,
    unit: String,
}

fn manifest() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("limitador/Cargo.toml")
}

/// Builds the anchor process (once; cargo keeps it up to date), then runs
/// it against a fresh `redis-server`. The caller has checked that
/// `redis-server` is here.
pub fn run(settings: Settings) -> Vec<Outcome> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let target = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/limitador-anchor");
    let built = Command::new(&cargo)
        .args(["build", "--release", "--quiet", "--manifest-path"])
        .arg(manifest())
        .arg("--target-dir")
        .arg(&target)
        .status()
        .expect("run cargo to build the limitador anchor");
    assert!(built.success(), "the limitador anchor did not build");
    let server = RedisServer::start();
    let output = Command::new(target.join("release/tollgate-bench-limitador"))
        .args(["--redis", &server.url()])
        .args(["--seconds", &settings.pick(2.0, 0.5).to_string()])
        .args(["--rounds", &settings.pick(5, 3).to_string()])
        .output()
        .expect("run the limitador anchor");
    assert!(
        output.status.success(),
        "the limitador anchor failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|line| {
            let row: Printed = serde_json::from_str(line).expect("a row of the anchor");
            // The decisions per second carry the targets; the
            // Redis server's own work per decision (its CPU time, its
            // commands, how busy it was) says where each side's floor is.
            let rate = row.unit == "decisions/s";
            let better = if rate { Better::Higher } else { Better::Lower };
            let outcome = Outcome::new(&row.scenario, row.ours, row.anchor, &row.unit, better)
                .against("limitador 0.14, same process");
            match (rate, row.scenario.contains("memory")) {
                (true, true) => outcome.target(1.5),
                (true, false) => outcome.target(1.0),
                (false, _) => outcome,
            }
        })
        .collect()
}
