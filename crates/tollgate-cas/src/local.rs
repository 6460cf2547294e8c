//! The compare-and-swap store as the shared store of a local-first store
//! (`tollgate_local::LocalFirst`): its three operations are one call each,
//! read, decide in Rust ([`share`](super::share), as `share.lua` decides
//! them in Redis), write on condition; a lost race is tried again, as a
//! check is.

use super::backend::CasBackend;
use super::error::CasError;
use super::name::PolicyPart;
use super::step::Op;
use super::store::CasStore;
use std::sync::Arc;
use tollgate_store::AdminFuture;
use tollgate_store::shared::{ShareOp, ShareReply, SharedStore};
use tollgate_store::{Key, Policy, Store};

impl<B: CasBackend + std::fmt::Debug> SharedStore for CasStore<B> {
    async fn share(
        &self,
        policy: &Arc<Policy>,
        key: &Key,
        op: ShareOp,
    ) -> Result<ShareReply, CasError<B::Error>> {
        let read = op.reader();
        let reply = self.call(policy, key, Op::Share(op), None).await?;
        Ok(ShareReply {
            outcome: read(reply.head),
            decision: reply.decision,
            server_micros: reply.now / 1_000,
        })
    }

    /// `to`'s states charged in one write: the store keeps a policy's
    /// states together, under a name of their own.
    fn carry_counting(
        &self,
        from: &Arc<Policy>,
        to: &Arc<Policy>,
        key: &Key,
        unseen: i64,
    ) -> AdminFuture {
        self.carry_with(from, to, key, unseen)
    }

    /// Read from the policy's prepared form: one flag per request.
    fn shares(&self, policy: &Policy) -> bool {
        policy.prepared(PolicyPart::of).1
    }

    fn spent_error(message: String) -> CasError<B::Error> {
        CasError::LocalSpent { message }
    }
}

// `Store` is what `SharedStore` builds on.
const _: fn() = || {
    fn is_store<S: Store>() {}
    is_store::<CasStore<super::MemoryBackend>>();
};
