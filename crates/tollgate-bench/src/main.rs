//! tollgate side by side with the limiters a user would pick instead, in
//! one run: `governor`, `tower_governor` and raw `redis-benchmark`; and
//! its PostgreSQL store beside its Redis store (`--only postgres`); the
//! rate-limit service over gRPC on each store (`--only rls`) and its
//! decision core beside the `limitador` crate's (`--only rls-core`); the
//! quota service, RLQS (`--only rlqs`).
//!
//! ```sh
//! cargo run --release -p tollgate-bench -- --json target/bench.json
//! cargo run --release -p tollgate-bench -- --quick          # under 2 minutes
//! cargo run --release -p tollgate-bench -- --only core,layer
//! ```
//!
//! `accuracy` is the exception: it times nothing, and compares each window
//! algorithm's decisions with the exact sliding log's on a seeded trace; its
//! own table follows the rows (and its chart, `accuracy.svg`, joins the
//! others with `--charts`).
//!
//! Every other scenario runs tollgate and its anchor back to back, in several
//! rounds that alternate which goes first, and reports the medians and the
//! ratio ours/anchor. The JSON file is an array of rows
//! `{"scenario", "ours", "anchor", "unit", "ratio"}`; the table printed at
//! the end (and written with `--markdown`) adds which way is better and the
//! issue's target where there is one. `BENCHMARKS.md` at the repository
//! root explains every row.

#![warn(missing_docs)]

use clap::Parser;
use std::path::PathBuf;
use std::time::Instant;
use tollgate_bench::measure::Settings;
use tollgate_bench::report::Outcome;
use tollgate_bench::{chart, report, scenario};

/// The command line.
#[derive(Debug, Parser)]
#[command(
    name = "tollgate-bench",
    about = "tollgate beside governor, tower_governor and redis-benchmark, in one run"
)]
struct Args {
    /// Where to write the JSON rows (a relative path is taken from the
    /// current directory).
    #[arg(long, value_name = "PATH", default_value = "target/bench.json")]
    json: PathBuf,
    /// Fewer rounds and smaller batches: the whole run takes under two
    /// minutes on a 2-core machine. Noisier; use the full run for figures.
    #[arg(long)]
    quick: bool,
    /// Only these scenarios, comma-separated: accuracy, core, memory,
    /// contention, layer, http, redis, redis-scripts, local, postgres,
    /// rls, rls-core, rlqs.
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    only: Vec<String>,
    /// Also write the Markdown table, with the machine, to this file.
    #[arg(long, value_name = "PATH")]
    markdown: Option<PathBuf>,
    /// Also draw SVG charts of the ratios into this directory
    /// (`BENCHMARKS.md` shows those in `docs/bench`).
    #[arg(long, value_name = "DIR")]
    charts: Option<PathBuf>,
    /// Internal: measure one side of a scenario in this child process
    /// (`memory-ours`, `memory-anchor`), or one process's share of a
    /// scenario (`layer`), and print its report.
    #[arg(long, hide = true)]
    child: Option<String>,
}

/// Runs the scenarios asked for (or one child side), then writes the JSON
/// rows, prints the table, and draws the charts when asked.
fn main() {
    let args = Args::parse();
    let settings = Settings { quick: args.quick };
    if let Some(child) = &args.child {
        run_child(child, settings);
        return;
    }
    if let Some(unknown) = args
        .only
        .iter()
        .find(|name| !scenario::ALL.contains(&name.as_str()))
    {
        eprintln!(
            "unknown scenario {unknown:?}; the scenarios are: {}",
            scenario::ALL.join(", ")
        );
        std::process::exit(2);
    }

    let started = Instant::now();
    let machine = machine();
    let load_at_start = load_average();
    eprintln!(
        "tollgate-bench ({} run) on {machine}",
        if args.quick { "quick" } else { "full" }
    );
    let mut outcomes: Vec<Outcome> = Vec::new();
    let mut notes: Vec<String> = Vec::new();
    let mut tables: Vec<String> = Vec::new();
    for name in scenario::ALL {
        if !args.only.is_empty() && !args.only.iter().any(|o| o == name) {
            continue;
        }
        let scenario_started = Instant::now();
        eprintln!("{name}: running");
        let rows = match name {
            "accuracy" => {
                let accuracy = scenario::accuracy::run();
                if let Some(dir) = &args.charts {
                    std::fs::create_dir_all(dir).expect("create the chart directory");
                    accuracy
                        .draw(&dir.join("accuracy.svg"))
                        .expect("draw the accuracy chart");
                }
                // Its own table (not ratios to an anchor), after the rows.
                tables.push(accuracy.to_markdown());
                Vec::new()
            }
            "core" => scenario::core::run(settings),
            "memory" => scenario::memory::run(settings),
            "contention" => scenario::contention::run(settings),
            "layer" => scenario::layer::run(settings),
            "http" => scenario::http::run(settings),
            "redis" => match scenario::redis::missing_tools() {
                Some(why) => {
                    eprintln!("{why}");
                    notes.push(why);
                    Vec::new()
                }
                None => scenario::redis::run(settings),
            },
            "redis-scripts" => match scenario::redis::missing_tools() {
                Some(why) => {
                    eprintln!("{why}");
                    Vec::new()
                }
                None => scenario::redis_scripts::run(settings),
            },
            "local" => match scenario::redis::missing_tools() {
                Some(why) => {
                    eprintln!("{why}");
                    Vec::new()
                }
                None => {
                    let local = scenario::local::run(settings);
                    if let Some(dir) = &args.charts {
                        std::fs::create_dir_all(dir).expect("create the chart directory");
                        local
                            .draw(&dir.join(scenario::local::CHART))
                            .expect("draw the local-first chart");
                    }
                    // Its own tables (calls, over-admission), after the rows.
                    tables.push(local.to_markdown());
                    local.outcomes
                }
            },
            "postgres" => match scenario::postgres::missing_tools() {
                Some(why) => {
                    eprintln!("{why}");
                    notes.push(why);
                    Vec::new()
                }
                None => {
                    let run = scenario::postgres::run(settings);
                    // The hot key's contention, after the rows.
                    tables.push(run.table);
                    run.outcomes
                }
            },
            "rls" => match scenario::redis::missing_tools() {
                Some(why) => {
                    eprintln!("{why}");
                    Vec::new()
                }
                None => scenario::rls::run(settings),
            },
            "rlqs" => scenario::rlqs::run(settings),
            "rls-core" => match scenario::redis::missing_tools() {
                Some(why) => {
                    eprintln!("{why}");
                    Vec::new()
                }
                None => scenario::rls_core::run(settings),
            },
            _ => unreachable!("names were checked against scenario::ALL"),
        };
        for o in &rows {
            eprintln!(
                "  {:<52} {:>14.2} {:>14.2} {:<12} ratio {:.3} {}",
                o.row.scenario,
                o.row.ours,
                o.row.anchor,
                o.row.unit,
                o.row.ratio,
                o.verdict()
            );
        }
        eprintln!("{name}: {:.1} s", scenario_started.elapsed().as_secs_f64());
        outcomes.extend(rows);
    }

    if let Some(parent) = args.json.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).expect("create the JSON file's directory");
    }
    std::fs::write(&args.json, report::to_json(&outcomes) + "\n").expect("write the JSON file");

    let mut table = format!(
        "Machine: {machine}. Mode: {}. Load average at start: {load_at_start}, at the end: {}.\n\n{}",
        if args.quick { "`--quick`" } else { "full" },
        load_average(),
        report::to_markdown(&outcomes)
    );
    for note in &notes {
        table.push_str(&format!("\n{note}\n"));
    }
    for extra in &tables {
        table.push_str(&format!("\n{extra}"));
    }
    println!("{table}");
    if let Some(path) = &args.markdown {
        std::fs::write(path, &table).expect("write the Markdown file");
    }
    if let Some(dir) = &args.charts {
        chart::draw_all(dir, &outcomes).expect("draw the charts");
        eprintln!("charts in {}", dir.display());
    }
    eprintln!(
        "rows in {}; whole run {:.1} s",
        args.json.display(),
        started.elapsed().as_secs_f64()
    );
}

/// Runs the child side named on the command line.
fn run_child(name: &str, settings: Settings) {
    use scenario::memory::{Side, child};
    match name {
        "memory-ours" => child(Side::Ours, settings),
        "memory-anchor" => child(Side::Anchor, settings),
        "layer" => scenario::layer::child(settings),
        other => {
            eprintln!("unknown child {other:?}");
            std::process::exit(2);
        }
    }
}

/// The machine in one line: CPU model, logical CPUs, memory, kernel, read
/// from `/proc` (each part left out where it cannot be read).
fn machine() -> String {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .and_then(|rest| rest.split_once(':'))
        .map(|(_, model)| model.trim().to_string())
        .unwrap_or_else(|| "unknown CPU".to_string());
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let memory = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map(|kb| format!(", {:.0} GiB RAM", kb as f64 / 1024.0 / 1024.0))
        .unwrap_or_default();
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|k| format!(", Linux {}", k.trim()))
        .unwrap_or_default();
    format!("{model}, {cpus} logical CPUs{memory}{kernel}")
}

/// The 1-minute load average, as a warning sign: on a shared machine, a
/// busy neighbour during the run makes every figure noisier.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(str::to_string))
        .unwrap_or_else(|| "unknown".to_string())
}
