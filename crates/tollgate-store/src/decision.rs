//! What a store answers for one request: a [`PolicyDecision`].

use super::branches::{Branch, Branches};
use super::receipt::Receipt;
use smallvec::SmallVec;
use tollgate_core::{Decision, DecisionFields};

/// The decisions of every limit of a policy for one request.
///
/// Built from each limit's decision ([`new`](Self::new),
/// [`single`](Self::single)), so that the folded decision
/// ([`merged`](Self::merged)) is always the merge of them; an admission
/// adds what its store needs to give the charge back, its
/// [`Receipt`] ([`charged`](Self::charged): when it charged).
///
/// ```
/// use tollgate_store::PolicyDecision;
/// use tollgate_core::{Decision, DecisionFields};
///
/// let per_second = Decision::from(DecisionFields { allowed: true, limit: 10, remaining: 4, ..Default::default() });
/// let per_day = Decision::from(DecisionFields { allowed: true, limit: 1000, remaining: 2, ..Default::default() });
/// let verdict = PolicyDecision::new([per_second, per_day]).charged(1_000);
/// assert!(verdict.merged().allowed());
/// assert_eq!(verdict.merged().remaining(), 2); // the limit closest to running out
/// assert_eq!(verdict.each().len(), 2);
/// assert_eq!(verdict.charged_at(), Some(1_000));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PolicyDecision {
    /// The merge of `each`, kept rather than folded again at each read:
    /// the layer reads it several times per request.
    merged: Decision,
    each: SmallVec<[Decision; 2]>,
    /// Beside the decisions rather than in them: only an admission has
    /// one.
    receipt: Option<Receipt>,
    charged_by: Branches,
}

impl PolicyDecision {
    /// The decision of a policy whose limits decided `each`, in the
    /// policy's order: allowed only if every limit allowed (and a policy of
    /// no limits allows). Not charged ([`charged`](Self::charged) says when
    /// it was).
    #[inline]
    pub fn new(each: impl IntoIterator<Item = Decision>) -> Self {
        Self::from_each(each.into_iter().collect())
    }

    /// The decision of a policy of one limit that decided `decision`.
    #[inline]
    pub fn single(decision: Decision) -> Self {
        Self::from_parts(decision, smallvec::smallvec![decision])
    }

    /// [`new`](Self::new) from a vector already made.
    #[inline]
    pub(crate) fn from_each(each: SmallVec<[Decision; 2]>) -> Self {
        let merged = match each.as_slice() {
            [one] => *one,
            _ => each.iter().copied().reduce(Decision::merge).unwrap_or(
                DecisionFields {
                    allowed: true,
                    ..DecisionFields::default()
                }
                .into(),
            ),
        };
        Self::from_parts(merged, each)
    }

    /// For a caller that has folded `each` already, as
    /// [`tollgate_core::check_all`] does.
    #[inline]
    pub(crate) fn from_parts(merged: Decision, each: SmallVec<[Decision; 2]>) -> Self {
        PolicyDecision {
            merged,
            each,
            receipt: None,
            charged_by: Branches::default(),
        }
    }

    /// A store's check at `now` that decided `each`, already folded into
    /// `merged`: charged at `now` if it admitted. One value built in
    /// place, for the memory store's hot path.
    #[inline]
    pub(crate) fn checked(merged: Decision, each: SmallVec<[Decision; 2]>, now: u64) -> Self {
        PolicyDecision {
            merged,
            each,
            receipt: merged.allowed().then_some(Receipt::at(now)),
            charged_by: Branches::default(),
        }
    }

    /// This decision, charged by the store at `at` (ns on the store's own
    /// clock): what a [`PolicyRefund`](super::PolicyRefund) of it gives back exactly.
    /// A store that does not record when it charged leaves it out, and a
    /// refund then goes by how long ago the admission was. The same as
    /// [`with_receipt`](Self::with_receipt)`(Receipt::at(at))`.
    #[must_use]
    #[inline]
    pub fn charged(self, at: u64) -> Self {
        self.with_receipt(Receipt::at(at))
    }

    /// This decision, with what its store needs to give the charge back
    /// (see [`Receipt`]); the [`PolicyRefund`](super::PolicyRefund) of it carries the
    /// receipt back to the store.
    #[must_use]
    #[inline]
    pub fn with_receipt(mut self, receipt: Receipt) -> Self {
        self.receipt = Some(receipt);
        self
    }

    /// This decision with each limit's decision changed by `change`,
    /// merged again; when and by which store it was charged is kept.
    #[must_use]
    pub fn map_each(&self, change: impl FnMut(&Decision) -> Decision) -> Self {
        PolicyDecision {
            receipt: self.receipt,
            charged_by: self.charged_by,
            ..Self::from_each(self.each.iter().map(change).collect())
        }
    }

    /// This decision, passed up by a [`Fallback`](super::Fallback) that
    /// took `branch`.
    #[inline]
    pub(crate) fn took(mut self, branch: Branch) -> Self {
        self.charged_by = self.charged_by.took(branch);
        self
    }

    /// All limits folded into one ([`Decision::merge`]): allowed only if
    /// every limit allowed, and then every limit was charged.
    #[inline]
    pub fn merged(&self) -> Decision {
        self.merged
    }

    /// Each limit's own decision, in the policy's order.
    #[inline]
    pub fn each(&self) -> &[Decision] {
        &self.each
    }

    /// For an admission, what its store handed out to give the charge
    /// back; `None` for a refusal, or when the store keeps nothing.
    #[inline]
    pub fn receipt(&self) -> Option<Receipt> {
        self.receipt
    }

    /// For an admission, when the store charged it, on the store's own
    /// clock (ns), if its [`receipt`](Self::receipt) says; `None` for a
    /// refusal, or when the store does not say.
    #[inline]
    pub fn charged_at(&self) -> Option<u64> {
        self.receipt.and_then(Receipt::as_time)
    }

    /// Which store of a composition decided (see [`Branches`]): the
    /// [`Fallback`](super::Fallback)s it passed through mark the branch
    /// they took, so that a refund or a debit of this admission reaches
    /// the store that charged it. The default for a store that decides
    /// alone.
    #[inline]
    pub(crate) fn charged_by(&self) -> Branches {
        self.charged_by
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limit(allowed: bool, remaining: u64, retry_after_nanos: u64) -> Decision {
        DecisionFields {
            allowed,
            limit: 10,
            remaining,
            retry_after_nanos,
            ..DecisionFields::default()
        }
        .into()
    }

    #[test]
    fn the_merged_decision_is_always_the_merge_of_each() {
        let each = [limit(true, 5, 0), limit(false, 0, 7)];
        let verdict = PolicyDecision::new(each);
        assert_eq!(verdict.merged(), each[0].merge(each[1]));
        assert!(!verdict.merged().allowed());

        // Changed limit by limit, it is merged again.
        let admitted = verdict.map_each(|d| limit(true, d.remaining(), 0));
        assert!(admitted.merged().allowed());
        assert_eq!(admitted.merged().remaining(), 0);
        assert_eq!(admitted.each().len(), 2);

        let one = PolicyDecision::single(each[1]);
        assert_eq!((one.merged(), one.each()), (each[1], &each[1..]));
    }

    #[test]
    fn a_policy_of_no_limits_allows() {
        let none = PolicyDecision::new([]);
        assert!(none.merged().allowed());
        assert!(none.each().is_empty());
    }

    #[test]
    fn a_charge_time_is_kept_through_changes_and_zero_is_a_time() {
        let verdict = PolicyDecision::single(limit(true, 3, 0));
        assert_eq!(verdict.charged_at(), None);
        let charged = verdict.charged(0).took(Branch::Secondary);
        let changed = charged.map_each(|d| *d);
        assert_eq!(changed.charged_at(), Some(0));
        assert_eq!(changed.charged_by().pop().0, Branch::Secondary);
    }
}
