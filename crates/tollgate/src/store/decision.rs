//! What a store answers for one request: a [`PolicyDecision`].

use super::route::Route;
use smallvec::SmallVec;
use tollgate_core::Decision;

/// The decisions of every limit of a policy for one request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PolicyDecision {
    /// All limits folded into one ([`Decision::merge`]): allowed only if every
    /// limit allowed, and then every limit was charged.
    pub merged: Decision,
    /// Each limit's own decision, in the policy's order.
    pub each: SmallVec<[Decision; 2]>,
    /// For an admission, when the store charged it, on the store's own
    /// clock (ns): what a [`Refund`](super::Refund) gives back exactly. 0 when the store
    /// does not say (a refund then goes by how long ago it was). A plain
    /// number rather than an `Option`: every decision carries it, and the
    /// layer's hot path moves decisions.
    pub charged_at: u64,
    /// Which store of a composition decided (see [`Route`]): the
    /// [`Fallback`](super::Fallback)s it passed through mark the branch they took, so that
    /// a refund or a debit of this admission reaches the store that
    /// charged it. The default for a store that decides alone.
    pub charged_by: Route,
}
