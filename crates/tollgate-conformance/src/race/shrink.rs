//! The shrinking of a failed race: the failing run played again, from the
//! same seed, with fewer clients, calls, instances and keys while it still
//! fails, so that a failure names the shortest trace found. A seed replays
//! a run's plan, not its interleaving, hence a few tries of each shape.

use super::plan::Shape;
use super::run::{Failed, Rig};
use crate::report::Failure;
use tollgate_core::Algorithm;
use tollgate_store::Store;

/// Plays smaller runs of the same seed while one still fails: the
/// failure of the smallest (the first, unshrunk, if `shrink` is off).
pub(super) async fn shrunk<St: Store>(
    rig: &mut Rig<St>,
    shrink: bool,
    seed: u64,
    algorithm: Algorithm,
    shape: Shape,
    failed: Failed,
) -> Failure {
    /// Runs tried in all while shrinking, and tries of each.
    const BUDGET: usize = 60;
    const TRIES: usize = 3;
    let (mut best, mut failed) = (shape, failed);
    let mut spent = 0;
    while shrink && spent < BUDGET {
        let mut smaller = None;
        'candidates: for candidate in smaller_shapes(best) {
            for _ in 0..TRIES {
                if spent >= BUDGET {
                    break 'candidates;
                }
                spent += 1;
                if let Err(again) = rig.play(seed, algorithm, candidate).await {
                    smaller = Some((candidate, again));
                    break 'candidates;
                }
            }
        }
        match smaller {
            Some((shape, again)) => (best, failed) = (shape, again),
            None => break,
        }
    }
    let shortest = match shrink {
        true => format!("shortest failing trace found: {best}"),
        false => format!("trace: {best}"),
    };
    Failure {
        message: format!(
            "{} (seed {seed}, {algorithm}, quotas {}; {shortest}, first failing {shape}; the \
             calls: {})",
            failed.what, failed.quotas, failed.plan
        ),
    }
}

/// The shapes one step smaller than `shape`, the biggest cuts first.
fn smaller_shapes(shape: Shape) -> Vec<Shape> {
    let mut out = Vec::new();
    let mut cut = |f: &dyn Fn(&mut Shape)| {
        let mut smaller = shape;
        f(&mut smaller);
        if smaller != shape && !out.contains(&smaller) {
            out.push(smaller);
        }
    };
    cut(&|s| s.keys = 1);
    cut(&|s| s.clients = (s.clients / 2).max(1));
    cut(&|s| s.calls /= 2);
    cut(&|s| s.instances = s.instances.saturating_sub(1).max(1));
    cut(&|s| s.clients = s.clients.saturating_sub(1).max(1));
    cut(&|s| s.calls = s.calls.saturating_sub(1));
    cut(&|s| s.keys = s.keys.saturating_sub(1).max(1));
    out
}
