//! [`Presence`]: how many instances share a store, and where this one
//! stands among them; [`Share`]: what one instance's part of a limit is.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// Where one instance stands among the `instances` that share a store:
/// what a [`Split`](crate::Split) divides each limit by, and who gets the
/// remainder.
///
/// `units` split `instances` ways is `⌊units / instances⌋` each, and one
/// more for the instances of rank below `units mod instances` (ranks run
/// from 0 to `instances − 1`, each held by one instance), so that the
/// instances together have `units` exactly: 3 over 2 is 2 (rank 0) and 1
/// (rank 1). Without a rank (a count an operator gave, or one the store
/// is still settling), nobody takes the remainder: 3 over 2 is 1 and 1.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Share {
    instances: u32,
    rank: Option<u32>,
}

impl Share {
    /// One of `instances` (at least 1), with no rank: no remainder.
    pub fn of(instances: u32) -> Self {
        Share {
            instances: instances.max(1),
            rank: None,
        }
    }

    /// One of `instances` (at least 1), of rank `rank` among them (a rank
    /// of `instances` or more takes no remainder).
    pub fn ranked(instances: u32, rank: u32) -> Self {
        Share {
            instances: instances.max(1),
            rank: Some(rank),
        }
    }

    /// How many instances share (at least 1).
    pub fn instances(&self) -> u32 {
        self.instances
    }

    /// This instance's rank among them, if known.
    pub fn rank(&self) -> Option<u32> {
        self.rank
    }

    /// This instance's part of `units`: `⌊units / instances⌋`, plus one
    /// if its rank is below `units mod instances`. Over every rank the
    /// parts add up to `units`.
    ///
    /// ```
    /// use tollgate_store::Share;
    /// assert_eq!(Share::ranked(2, 0).part(3), 2);
    /// assert_eq!(Share::ranked(2, 1).part(3), 1);
    /// assert_eq!(Share::of(2).part(3), 1);
    /// assert_eq!(Share::ranked(4, 3).part(2), 0);
    /// ```
    pub fn part(&self, units: u64) -> u64 {
        let n = u64::from(self.instances);
        let extra = match self.rank {
            Some(rank) => u64::from(u64::from(rank) < units % n),
            None => 0,
        };
        units / n + extra
    }
}

/// How many instances share a store, as the store counts them: each
/// instance says so regularly through the store (the Redis store's and
/// the compare-and-swap store's presence beats), and the store writes
/// what it counted here, with this instance's rank among them. Clones
/// share one count.
///
/// Until the store has counted, the count is the one an operator gave
/// ([`expecting`](Self::expecting), 1 by default), with no rank. A store
/// that stops answering leaves its last count: an outage is when it is
/// read.
///
/// ```
/// use tollgate_store::{Presence, Share};
///
/// let presence = Presence::expecting(3);
/// assert_eq!(presence.share(), Share::of(3));
/// presence.count(2, 1); // what the store counted
/// assert_eq!(presence.share(), Share::ranked(2, 1));
/// ```
#[derive(Clone, Debug)]
pub struct Presence {
    inner: Arc<Counted>,
}

#[derive(Debug)]
struct Counted {
    /// The operator's count, until the store has counted.
    expected: AtomicU32,
    /// What the store counted: instances in the high half (0: not yet),
    /// rank + 1 in the low half (0: no rank).
    counted: AtomicU64,
}

impl Default for Presence {
    fn default() -> Self {
        Presence::expecting(1)
    }
}

impl Presence {
    /// A count of 1 until the store has counted.
    pub fn new() -> Self {
        Presence::default()
    }

    /// A count of `instances` (at least 1) until the store has counted:
    /// how many instances an operator runs, for an outage before the
    /// store was ever reached (a lazy start with the store away).
    pub fn expecting(instances: u32) -> Self {
        Presence {
            inner: Arc::new(Counted {
                expected: AtomicU32::new(instances.max(1)),
                counted: AtomicU64::new(0),
            }),
        }
    }

    /// Sets the operator's count (at least 1), used until the store has
    /// counted.
    pub fn expect(&self, instances: u32) {
        self.inner
            .expected
            .store(instances.max(1), Ordering::Relaxed);
    }

    /// Records what the store counted: `instances` (at least 1), this one
    /// of rank `rank` among them.
    pub fn count(&self, instances: u32, rank: u32) {
        self.record(instances, Some(rank));
    }

    /// Records a count without a rank (a count still settling).
    pub fn count_unranked(&self, instances: u32) {
        self.record(instances, None);
    }

    /// Records what a presence beat counted: `instances`, this one of
    /// rank `rank`, `fresh` if the beat found this instance absent (its
    /// first beat, or the store lost the instances' words: restarted,
    /// emptied). A fresh beat's count may miss instances that have not
    /// said so again yet, so it is kept unranked and never below the
    /// count before it (the store's last, or the operator's); the next
    /// beat counts exactly.
    pub fn beat(&self, instances: u32, rank: u32, fresh: bool) {
        if fresh {
            let before = self.share().instances();
            self.count_unranked(instances.max(before));
        } else {
            self.count(instances, rank);
        }
    }

    fn record(&self, instances: u32, rank: Option<u32>) {
        let rank = rank.map_or(0, |rank| u64::from(rank.saturating_add(1)));
        let packed = u64::from(instances.max(1)) << 32 | rank;
        self.inner.counted.store(packed, Ordering::Relaxed);
    }

    /// Whether the store has counted yet.
    pub fn counted(&self) -> bool {
        self.inner.counted.load(Ordering::Relaxed) >> 32 != 0
    }

    /// How many instances share the store now (at least 1).
    pub fn instances(&self) -> u32 {
        self.share().instances()
    }

    /// This instance's share: the store's last count and rank, or the
    /// operator's count before the store has counted.
    pub fn share(&self) -> Share {
        let packed = self.inner.counted.load(Ordering::Relaxed);
        let instances = (packed >> 32) as u32;
        if instances == 0 {
            return Share::of(self.inner.expected.load(Ordering::Relaxed));
        }
        match (packed & u64::from(u32::MAX)) as u32 {
            0 => Share::of(instances),
            rank => Share::ranked(instances, rank - 1),
        }
    }
}
