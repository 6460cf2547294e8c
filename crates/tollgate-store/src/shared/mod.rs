//! The shared store's side of local-first: the three operations a
//! local-first (`tollgate_local::LocalFirst`) store asks of the store it shares
//! through, and the trait that store implements.

mod support;

pub use support::supports;

use crate::{AdminFuture, Key, Policy, PolicyDecision, Store};
use smallvec::SmallVec;
use std::future::Future;
use std::sync::Arc;

/// A store that a local-first (`tollgate_local::LocalFirst`) store can stand in
/// front of: it decides like any [`Store`], and runs the three operations
/// of [`ShareOp`] on a key atomically: a reservation (exact mode), a sync
/// (periodic mode) and a give-back (exact mode), each reading the key's
/// states and the bookkeeping kept beside them (what each instance holds,
/// its last report number, the live shares) and writing both at once.
///
/// Implemented by `tollgate_redis::RedisStore` (the script `share.lua`)
/// and by `tollgate_cas::CasStore` (the same operations in Rust, one
/// conditional write). Every answer's decision and times are read on the
/// store's own clock; `server_micros` orders answers that arrive out of
/// order.
pub trait SharedStore: Store + Clone + std::fmt::Debug + Send + Sync + 'static {
    /// Runs `op` on `key` under `policy`, atomically.
    fn share(
        &self,
        policy: &Arc<Policy>,
        key: &Key,
        op: ShareOp,
    ) -> impl Future<Output = Result<ShareReply, Self::Error>> + Send;

    /// Whether [`share`](Self::share) can decide `policy`: every limit of an
    /// algorithm local-first supports ([`supports`]). A
    /// store may keep the answer in its prepared form of the policy, so
    /// that a request reads one flag.
    fn shares(&self, policy: &Policy) -> bool {
        supports(policy).is_ok()
    }

    /// Moves `key`'s usage from `from` to `to` as [`Store::carry`] defines
    /// it, counting `unseen` more units that this instance admitted and
    /// the store has not counted yet (a periodic report not sent). By
    /// default through the store's peek, reset and debits, each limit of
    /// `to` on its own (`crate::carry_by_parts`: right for a
    /// store that keeps each limit's state apart, as Redis does); a store
    /// that keeps a policy's states together charges them in one write.
    fn carry_counting(
        &self,
        from: &Arc<Policy>,
        to: &Arc<Policy>,
        key: &Key,
        unseen: i64,
    ) -> AdminFuture {
        crate::carry_by_parts(self, from, to, key, unseen)
    }

    /// The error a request gets when the shared store is away and what this
    /// instance held is spent.
    fn spent_error(message: String) -> Self::Error;

    /// The store's test clock in ns, if it runs on one: the local-first
    /// store then reads its time there too, so that a test moves both.
    #[doc(hidden)]
    fn test_nanos(&self) -> Option<u64> {
        None
    }
}

/// What the local-first store asks of its shared store: one atomic
/// operation on a key's states and the bookkeeping kept beside them (Redis:
/// one call of `share.lua`; the compare-and-swap store: one conditional
/// write).
#[derive(Clone, Debug)]
pub enum ShareOp {
    /// Exact mode: reserve units for an instance to spend on its own. The
    /// grant is at most a `fanout`th of what remains, never less than
    /// `need` (or nothing when even that would not pass), never more than
    /// `want`; it is charged at once.
    Reserve {
        /// The cost of the request that waits (0: a reservation ahead of
        /// need, whose share below one unit is none).
        need: u32,
        /// The most the instance wants: what the key was spent at over
        /// `ahead_micros` (less when a window ends sooner).
        want: u64,
        /// The share of what remains one grant may take (8: an eighth).
        fanout: u32,
        /// Who holds: an instance's slot of one policy.
        holder: u64,
        /// What the holder has unspent now (the grant is added to it).
        held: u64,
        /// How long the holder will spend what it then holds, in µs (0: it
        /// spends the grant at once and holds nothing).
        hold_micros: u64,
        /// The µs `want` was sized for.
        ahead_micros: u64,
        /// The reservation's number, increasing per holder (0: none to
        /// name), recorded beside the units held: a give-back names it.
        report: u64,
    },
    /// Exact mode: give back `cost` units a holder spent on its own, in each
    /// limit's state (as the store's refund does) and off the count of
    /// units it holds that reservation `report` recorded, if that count is
    /// still the holder's last.
    Refund {
        /// The units to give back.
        cost: u32,
        /// Who spent them (as a reservation's `holder`).
        holder: u64,
        /// The number of the holder's last reservation sent before they
        /// were spent.
        report: u64,
        /// How long ago the request was checked, in µs.
        ago_micros: u64,
        /// The admission's `reset_after` per limit, in ns.
        resets: SmallVec<[u64; 2]>,
    },
    /// Periodic mode: charge what an instance admitted on its own (once per
    /// `sequence`), read what remains, and give the instance its share of
    /// it until its next sync.
    Sync {
        /// The units admitted since the last report, charged whatever the
        /// state.
        spent: u64,
        /// Who reports: an instance's slot of one policy.
        instance: u64,
        /// The report's number, increasing per instance: a report sent
        /// again is counted once.
        sequence: u64,
        /// How long the share given now may be spent, in µs.
        life_micros: u64,
        /// How many instances share the key (0: those holding a live
        /// share).
        instances: u32,
        /// The least share worth giving: the cost of the request that
        /// waits (0: none does).
        need: u32,
        /// What the instance may still spend of its last share while the
        /// call is on its way.
        left: u64,
        /// What it expects to spend until its next sync (its recent rate;
        /// 0 when idle: the share it held is offered back).
        want: u64,
    },
}

/// A shared store's answer to a [`ShareOp`].
#[derive(Clone, Debug)]
pub struct ShareReply {
    /// What the operation did, in its own terms.
    pub outcome: ShareOutcome,
    /// The limits' decisions: after the grant, or for the least asked when
    /// nothing was granted; sync and refund: for a cost of 0 after the
    /// report or the refund.
    pub decision: PolicyDecision,
    /// When the script ran, in the server's µs (0 if unknown): orders
    /// answers that may arrive out of order.
    pub server_micros: u64,
}

/// What a [`ShareOp`] did, one variant per operation. A shared store
/// answers three numbers (`share.lua`'s head, and the compare-and-swap
/// store's same operations); [`ShareOp::reader`] names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShareOutcome {
    /// What a [`ShareOp::Reserve`] granted.
    Reserved {
        /// The units granted (0: none).
        granted: u64,
        /// How long the grant may be spent, in µs (`None`: no lapse).
        grant_micros: Option<u64>,
        /// How long everything the holder holds may be spent, in µs, as
        /// the limits that count held units recorded it (`None`: none
        /// does).
        held_micros: Option<u64>,
    },
    /// What a [`ShareOp::Refund`] gave back.
    GivenBack {
        /// The units taken off the holder's held count.
        taken: u64,
    },
    /// What a [`ShareOp::Sync`] reported and read.
    Synced {
        /// Whether the report was applied now (not a report sent again).
        applied: bool,
        /// The share this instance may admit until its next sync.
        share: u64,
        /// How many instances hold a live share, this one included.
        sharing: u64,
    },
}

impl ShareOp {
    /// How the three numbers a shared store answers to this operation
    /// read: a function, so that a store keeps it while the operation
    /// itself goes to the store. A negative count reads as none, a
    /// negative time as no bound.
    ///
    /// ```
    /// use tollgate_store::shared::{ShareOp, ShareOutcome};
    ///
    /// let give_back = ShareOp::Refund {
    ///     cost: 2,
    ///     holder: 7,
    ///     report: 1,
    ///     ago_micros: 0,
    ///     resets: Default::default(),
    /// };
    /// let read = give_back.reader();
    /// assert_eq!(read([2, 0, 0]), ShareOutcome::GivenBack { taken: 2 });
    /// ```
    pub fn reader(&self) -> fn([i64; 3]) -> ShareOutcome {
        match self {
            ShareOp::Reserve { .. } => |head| ShareOutcome::Reserved {
                granted: u64::try_from(head[0]).unwrap_or(0),
                grant_micros: u64::try_from(head[1]).ok(),
                held_micros: u64::try_from(head[2]).ok(),
            },
            ShareOp::Refund { .. } => |head| ShareOutcome::GivenBack {
                taken: u64::try_from(head[0]).unwrap_or(0),
            },
            ShareOp::Sync { .. } => |head| ShareOutcome::Synced {
                applied: head[0] > 0,
                share: u64::try_from(head[1]).unwrap_or(0),
                sharing: u64::try_from(head[2]).unwrap_or(1),
            },
        }
    }
}
