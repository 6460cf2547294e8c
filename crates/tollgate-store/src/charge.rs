//! Charges after the decision: a [`PolicyRefund`] gives one back, a [`PolicyDebit`]
//! adds to it, both answered with a [`ChangeReply`]; each carries the
//! [`Branches`] of its admission, so that both reach the store that charged.

use super::branches::Branches;
use super::decision::PolicyDecision;
use super::receipt::Receipt;
use std::fmt::Display;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;
use tollgate_internal::ChargeChange;

/// What [`Store::refund`](super::Store::refund) and
/// [`Store::debit`](super::Store::debit) answer, the reply to a
/// [`ChargeChange`]: a charge given back (or added) already, or on its
/// way. The one way to give a charge back or add to it, for every store:
/// a caller that must know whether it landed awaits
/// [`landed`](Self::landed).
#[must_use = "a pending refund can be awaited; dropping it does not cancel it"]
pub enum ChangeReply {
    /// Done (or, for a store that does not refund or debit, nothing to do).
    Done,
    /// Started; the future completes when the refund (or debit) has
    /// landed (`true`), or failed (`false`), which the store logs. It does
    /// not have to be polled for the change to happen.
    Pending(Pin<Box<dyn Future<Output = bool> + Send>>),
}

impl ChangeReply {
    /// A change that failed at once (the store logged why): what
    /// [`landed`](Self::landed) answers `false` for.
    pub fn failed() -> Self {
        ChangeReply::Pending(Box::pin(std::future::ready(false)))
    }

    /// Waits for the refund (or debit): `true` once it has landed (or
    /// was done at once), `false` when it failed, was given up on, or
    /// could not be sent; the store has logged why.
    pub async fn landed(self) -> bool {
        match self {
            ChangeReply::Done => true,
            ChangeReply::Pending(future) => future.await,
        }
    }
}

impl std::fmt::Debug for ChangeReply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ChangeReply::Done => "ChangeReply::Done",
            ChangeReply::Pending(_) => "ChangeReply::Pending(..)",
        })
    }
}

/// A charge to give back: `cost` units that a check admitted `ago` before
/// the refund, with the check's decision. The caller measures `ago` from
/// *before* it called [`Store::check`](super::Store::check), so it is never
/// shorter than the time since the charge; the store takes its own clock
/// less `ago` as the charge's time, which needs no agreement between
/// clocks (a Redis server's and this process's). Each limit's
/// `reset_after` tells the algorithms that keep a schedule where the
/// charge left it.
///
/// Made from the admission ([`PolicyRefund::of`]), or, for a store's own tests,
/// from a cost and an `ago` alone ([`PolicyRefund::new`]).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct PolicyRefund {
    /// What the check charged.
    pub cost: u32,
    /// How long before the refund the check was called.
    pub ago: Duration,
    /// Each limit's `reset_after` in the admission, in ns, in the policy's
    /// order (empty: unknown; the refund then gives back less once time
    /// has passed).
    pub resets: smallvec::SmallVec<[u64; 2]>,
    /// What the store handed out with the admission
    /// ([`PolicyDecision::receipt`]): when it charged, on its own clock
    /// (then `ago` is not needed, and the refund is exact), or a number of
    /// its own.
    pub receipt: Option<Receipt>,
    /// Which store of a composition charged it
    /// ([`PolicyDecision::charged_by`]).
    pub(crate) charged_by: Branches,
}

impl PolicyRefund {
    /// The refund of `decision`, an admission of `cost` whose check was
    /// called `ago` before now.
    pub fn of(decision: &PolicyDecision, cost: u32, ago: Duration) -> Self {
        PolicyRefund {
            cost,
            ago,
            resets: decision
                .each()
                .iter()
                .map(|d| d.reset_after_nanos())
                .collect(),
            receipt: decision.receipt(),
            charged_by: decision.charged_by(),
        }
    }

    /// A refund of `cost` units charged `ago` before now, knowing nothing
    /// else of the admission (no receipt, no `reset_after`, the default
    /// branches): it gives back less once time has passed.
    pub fn new(cost: u32, ago: Duration) -> Self {
        PolicyRefund {
            cost,
            ago,
            resets: smallvec::SmallVec::new(),
            receipt: None,
            charged_by: Branches::default(),
        }
    }

    /// When the charge was made, on the charging store's clock, if its
    /// receipt says.
    pub fn charged_at(&self) -> Option<u64> {
        self.receipt.and_then(Receipt::as_time)
    }

    /// `cost` more units for the same admission, to the store of a
    /// composition that charged it (a charge that grew after the check:
    /// a response that cost more than was asked).
    pub fn debit(&self, cost: u32) -> PolicyDebit {
        PolicyDebit {
            cost,
            charged_by: self.charged_by,
        }
    }

    /// The same refund for `cost` units of the charge (a part of it).
    #[must_use]
    pub fn part(mut self, cost: u32) -> Self {
        self.cost = cost;
        self
    }

    /// The core's refund of this charge for limit `index` of the policy,
    /// on a clock reading `now`.
    pub fn for_limit(&self, index: usize, now: u64) -> tollgate_core::Refund {
        let ago = u64::try_from(self.ago.as_nanos()).unwrap_or(u64::MAX);
        tollgate_core::Refund {
            at: self.charged_at().unwrap_or(now.saturating_sub(ago)),
            cost: self.cost,
            reset_after: self.resets.get(index).copied(),
        }
    }
}

/// A cost to charge into debt after an admission (see
/// [`Store::debit`](super::Store::debit)): `cost` more units, to the store
/// that charged the admission.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct PolicyDebit {
    /// The units to charge.
    pub cost: u32,
    /// Which store of a composition charged the admission
    /// ([`PolicyDecision::charged_by`]).
    pub(crate) charged_by: Branches,
}

impl PolicyDebit {
    /// `cost` more units for the admission `decision`.
    pub fn of(decision: &PolicyDecision, cost: u32) -> Self {
        PolicyDebit {
            cost,
            charged_by: decision.charged_by(),
        }
    }

    /// `cost` more units, for a store that decides alone (no fallback).
    pub fn new(cost: u32) -> Self {
        PolicyDebit {
            cost,
            charged_by: Branches::default(),
        }
    }
}

/// Runs `call` (a store's refund or debit) on a task of the current Tokio
/// runtime, given up after `timeout`, its failure logged as `store` (see
/// [`ChargeChange::failed`]): the answer of a [`Store::refund`] or
/// [`Store::debit`](super::Store::debit) that does I/O. Outside a runtime
/// nothing is sent, and that is logged.
///
/// [`Store::refund`]: super::Store::refund
pub fn spawn_change<E: Display>(
    store: &'static str,
    change: ChargeChange,
    timeout: Duration,
    call: impl Future<Output = Result<(), E>> + Send + 'static,
) -> ChangeReply {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        tracing::warn!(
            "{store}: a {} outside a Tokio runtime was not sent; {}",
            change.name(),
            change.consequence()
        );
        return ChangeReply::failed();
    };
    let task = runtime.spawn(async move {
        match tokio::time::timeout(timeout, call).await {
            Ok(Ok(())) => true,
            Ok(Err(error)) => {
                change.failed(store, &error);
                false
            }
            Err(_) => {
                tracing::warn!(
                    "{store}: a {} had no answer within {} s; {}",
                    change.name(),
                    timeout.as_secs(),
                    change.consequence()
                );
                false
            }
        }
    });
    // Dropping a task's handle does not cancel the task.
    ChangeReply::Pending(Box::pin(async move { task.await.unwrap_or(false) }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tollgate_core::{Decision, DecisionFields};

    fn admission() -> PolicyDecision {
        PolicyDecision::single(Decision::from(DecisionFields {
            allowed: true,
            limit: 10,
            remaining: 9,
            reset_after_nanos: 500,
            ..DecisionFields::default()
        }))
    }

    #[test]
    fn a_refund_gives_back_at_the_time_its_receipt_says() {
        let refund = PolicyRefund::of(&admission().charged(1_000), 1, Duration::from_nanos(300));
        assert_eq!(refund.charged_at(), Some(1_000));
        let core = refund.for_limit(0, 5_000);
        assert_eq!(
            (core.at, core.cost, core.reset_after),
            (1_000, 1, Some(500))
        );
    }

    #[test]
    fn a_token_is_never_read_as_a_time() {
        // A store's own number, however large, says nothing of when: the
        // refund goes by how long ago the check was.
        let token = Receipt::token(u64::MAX - 3);
        let refund = PolicyRefund::of(
            &admission().with_receipt(token),
            2,
            Duration::from_nanos(300),
        );
        assert_eq!((refund.receipt, refund.charged_at()), (Some(token), None));
        assert_eq!(refund.for_limit(0, 5_000).at, 4_700);
        // Nor is a refund that knows nothing.
        let bare = PolicyRefund::new(2, Duration::from_nanos(300));
        assert_eq!((bare.receipt, bare.for_limit(0, 5_000).at), (None, 4_700));
    }
}
