//! The demo: the same bursty traffic through each of the six algorithms, and
//! what each admitted.
//!
//! Run it with `cargo run --release -p tollgate-examples --bin demo`.

use tollgate_core::{Algorithm, Quota};
use tollgate_examples::{bursty_trace, run_trace};

fn main() {
    let quota = Quota::per_second(10);
    let trace = bursty_trace(10, 20, 5);
    // Start on a whole second of the clock so the windows line up with the trace.
    let origin = 1_700_000_000 * 1_000_000_000;
    println!(
        "quota {quota}, {} requests offered: steady at 2x the rate,",
        trace.len()
    );
    println!("a burst of 20, a pause, then 20 split across a window boundary\n");
    println!(
        "{:<16} {:>8} {:>9} {:>9} {:>22}",
        "algorithm", "offered", "admitted", "rejected", "max in any 1 s window"
    );
    for algorithm in Algorithm::ALL {
        let outcome = run_trace(algorithm, quota, origin, &trace);
        println!(
            "{:<16} {:>8} {:>9} {:>9} {:>22}",
            algorithm.name(),
            outcome.offered,
            outcome.admitted,
            outcome.offered - outcome.admitted,
            outcome.max_in_any_period
        );
    }
    println!("\nFixed window lets up to twice the limit through across a boundary;");
    println!("the sliding log never lets more than the limit through in any second.");
}
