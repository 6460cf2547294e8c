//! What a run hands back: the [`Report`] of what the one-step kit checked,
//! the [`RaceReport`] of what a race played, and the [`Failure`] either
//! ends with. They live apart from the kits so that both can fill them in.

#[cfg(all(doc, feature = "cas"))]
use crate::faults::Faults;
use std::fmt;
use tollgate_core::Algorithm;

/// What a run of the kit checked.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct Report {
    /// The algorithms played (those the store supports, of those asked).
    pub algorithms: Vec<Algorithm>,
    /// Traces played, over all algorithms.
    pub traces: usize,
    /// Steps played, over all traces.
    pub steps: usize,
    /// What the store does not do, so was not played (`"refunds"`,
    /// `"debits"`, `"reset"`, `"carry"`).
    pub skipped: Vec<&'static str>,
}

/// Where a store and the memory store parted, or a promise it broke.
#[derive(Clone, Debug)]
pub struct Failure {
    pub(crate) message: String,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Failure {}

/// What a race played.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct RaceReport {
    /// The algorithms played (those the store supports, of those asked).
    pub algorithms: Vec<Algorithm>,
    /// Runs played, over all algorithms.
    pub runs: usize,
    /// Calls the clients made, over all runs.
    pub calls: u64,
    /// Admissions the callers kept.
    pub kept: u64,
    /// Refusals.
    pub refused: u64,
    /// Calls that failed for a reason the run explains.
    pub failed: u64,
    /// Calls whose callers stopped waiting.
    pub given_up: u64,
    /// Admissions of heard-out calls given back.
    pub given_back: u64,
    /// Writes the backend made for callers that had dropped them (over
    /// [`Faults`]).
    pub unheard: u64,
    /// Writes held until their deadline had passed (over [`Faults`]): each
    /// a chance for a backend to break the deadline.
    pub held_writes: u64,
    /// Calls refused by restarts (over [`Faults`]).
    pub refused_by_restarts: u64,
    /// What was not played: `"heard-out give-ups"` (the store cannot give
    /// charges back), `"dropped give-ups"` (no fault injector to tell what
    /// was made), `"reset"` (the store cannot reset a key).
    pub skipped: Vec<&'static str>,
}
