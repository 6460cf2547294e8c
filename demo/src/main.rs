//! The demo: the same bursty traffic through each algorithm,
//! over an axum and a tonic server on loopback, and what each let through.
//!
//! ```sh
//! cargo run --release -p tollgate-demo
//! cargo run --release -p tollgate-demo -- --redis redis://127.0.0.1:6379
//! ```
//!
//! The logic lives in the `tollgate_demo` library; this file reads the flags
//! and prints.

use clap::Parser;
use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use tollgate_demo::{self as demo, Config};

/// The same bursty trace through every algorithm (GCRA, token buckets,
/// leaky bucket, fixed window, sliding log, sliding window and its
/// sub-window counters), over real HTTP and gRPC servers.
#[derive(Debug, Parser)]
#[command(name = "demo")]
struct Args {
    /// Run against Redis (redis://HOST:PORT or redis+cluster://...): one
    /// instance, two instances sharing the limit, two that do not; then two
    /// sharing it with one Redis call per request, and with the local-first
    /// store's exact and periodic modes.
    #[arg(long, value_name = "URL")]
    redis: Option<String>,
    /// Where to write algorithms.svg.
    #[arg(long, value_name = "DIR", default_value = "target/tollgate-demo")]
    out: PathBuf,
    /// Twice as fast: 10 requests per 500 ms, about 2 s of traffic.
    #[arg(long)]
    quick: bool,
}

fn main() -> ExitCode {
    // Usage errors exit 2 with clap's message; --help exits 0.
    let args = Args::parse();
    let mut config = if args.quick {
        Config::quick(&args.out)
    } else {
        Config::standard(&args.out)
    };
    config.progress = true;
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("demo: cannot start the tokio runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    let report = runtime.block_on(async {
        match &args.redis {
            Some(url) => demo::redis::run(url, &config)
                .await
                .map(|comparison| demo::redis::render(&comparison)),
            None => demo::run(&config).await.map(|demo| {
                let path = std::path::absolute(&demo.svg).unwrap_or(demo.svg.clone());
                format!(
                    "{}\nPicture: {}",
                    demo::report::render(&demo),
                    path.display()
                )
            }),
        }
    });
    match report {
        Ok(report) => {
            // A closed pipe (`demo | head`) is not worth a panic.
            let _ = writeln!(std::io::stdout().lock(), "{report}");
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("demo: {error}");
            ExitCode::FAILURE
        }
    }
}
