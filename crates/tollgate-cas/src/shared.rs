//! What a compare-and-swap store's clones and futures share: the backend,
//! the retry settings, the random numbers, the turns of its keys and the
//! counts of lost races.

use super::retry::{Random, Retry};
use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use tokio::sync::Semaphore;

/// How many turns a store's keys share: the calls of one key take turns,
/// and two keys share one turn one time in this many.
const TURNS: usize = 1024;

/// A store's backend and settings, behind one `Arc`.
#[derive(Debug)]
pub(super) struct Shared<B> {
    pub(super) backend: B,
    pub(super) prefix: Box<str>,
    pub(super) retry: Retry,
    random: Random,
    /// One permit each: a call holds its key's from its read to its last
    /// write, pauses after lost races included, so that the calls of this
    /// process on one key go one after the other rather than against each
    /// other (only other processes' writes can then make one lose a
    /// race). A key that shares its turn with a key another call holds
    /// waits for that call, one time in `TURNS`.
    turns: Box<[Arc<Semaphore>]>,
    conflicts: AtomicU64,
    contended: AtomicU64,
    /// The instances counted by the presence beat, once asked for.
    pub(super) presence: std::sync::OnceLock<tollgate_store::Presence>,
    /// The operator's count until the beat has counted.
    pub(super) expected: u32,
}

impl<B> Shared<B> {
    pub(super) fn new(backend: B, prefix: Box<str>, retry: Retry, expected: u32) -> Self {
        Shared {
            backend,
            prefix,
            retry,
            random: Random::new(),
            turns: (0..TURNS).map(|_| Arc::new(Semaphore::new(1))).collect(),
            conflicts: AtomicU64::new(0),
            contended: AtomicU64::new(0),
            presence: std::sync::OnceLock::new(),
            expected,
        }
    }

    /// A version for a new value: random, never `replaced`.
    pub(super) fn version(&self, replaced: Option<u64>) -> u64 {
        let version = self.random.next();
        match Some(version) == replaced {
            true => version.wrapping_add(1),
            false => version,
        }
    }

    /// A random id.
    pub(super) fn random_id(&self) -> u64 {
        self.random.next()
    }

    /// The turn the calls on the value `name` take.
    pub(super) fn turn(&self, name: &str) -> &Arc<Semaphore> {
        // A fixed hasher: the turn of a name is the same for every clone.
        let hash = BuildHasherDefault::<DefaultHasher>::default().hash_one(name);
        // The remainder is below TURNS, which fits in usize.
        &self.turns[(hash % TURNS as u64) as usize]
    }

    /// The pause after the `lost`th lost race of one call.
    pub(super) fn pause(&self, lost: u32) -> std::time::Duration {
        self.retry.pause(lost, self.random.next())
    }

    /// A write under `policy` (its label) lost its race.
    pub(super) fn lost_race(&self, policy: &str) {
        self.conflicts.fetch_add(1, Ordering::Relaxed);
        crate::observe::conflict(policy);
    }

    /// A call under `policy` gave up after losing every race.
    pub(super) fn gave_up(&self, policy: &str) {
        self.contended.fetch_add(1, Ordering::Relaxed);
        crate::observe::contended(policy);
    }

    pub(super) fn conflicts(&self) -> u64 {
        self.conflicts.load(Ordering::Relaxed)
    }

    pub(super) fn contended(&self) -> u64 {
        self.contended.load(Ordering::Relaxed)
    }
}
