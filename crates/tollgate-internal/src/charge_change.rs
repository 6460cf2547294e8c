//! [`ChargeChange`]: what a store's change to a charge after the check is
//! called in its log, and what its failure leaves.

use std::fmt::Display;

/// A change to a charge after the check, as a store that does I/O runs it
/// on a task of its own (`tollgate_store::spawn_change`): what it is called and what its
/// failure means, for the log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChargeChange {
    /// A refund (`tollgate::store::PolicyRefund`): when it fails, the charge stands.
    Refund,
    /// A debit (`tollgate::store::PolicyDebit`): when it fails, the cost goes uncharged.
    Debit,
}

impl ChargeChange {
    /// `"refund"` or `"debit"`.
    pub fn name(self) -> &'static str {
        match self {
            ChargeChange::Refund => "refund",
            ChargeChange::Debit => "debit",
        }
    }

    /// What its failure leaves.
    pub fn consequence(self) -> &'static str {
        match self {
            ChargeChange::Refund => "the charge stands",
            ChargeChange::Debit => "the cost goes uncharged",
        }
    }

    /// Logs that it failed, with `error`, as `store` (the log's prefix,
    /// such as `"tollgate-redis"`).
    pub fn failed(self, store: &str, error: &dyn Display) {
        tracing::warn!(
            %error,
            "{store}: a {} failed; {}",
            self.name(),
            self.consequence()
        );
    }
}
