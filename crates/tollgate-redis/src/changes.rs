//! A charge changed after its decision, in Redis: given back (a refund,
//! `refund.lua`) or charged whatever the limits say (a debit, `debit.lua`).
//! The store's `refund` and `debit` spawn these calls; a caller that wants
//! to wait for one calls it itself.

use crate::RedisStore;
use crate::RedisStoreError;
use crate::calls::call_until_answered;
use std::sync::atomic::Ordering;
use tollgate_store::{Key, Policy, PolicyRefund};

impl RedisStore {
    /// Gives `refund` back in Redis (one call of `refund.lua`) and, once
    /// it is, forgets the key's remembered refusal: what
    /// [`Store::refund`](tollgate_store::Store::refund) spawns (a caller
    /// that wants to wait for it awaits its `ChangeReply::landed`). The
    /// refund's receipt, when it is a time
    /// ([`PolicyRefund::charged_at`](tollgate_store::PolicyRefund::charged_at)), is
    /// the server's time of the charge in ns (this store's decisions carry
    /// one): then the refund is exact.
    ///
    /// # Errors
    ///
    /// When Redis cannot be reached or answers an error: the charge stands.
    pub(crate) async fn refund_now(
        &self,
        policy: &Policy,
        key: &Key,
        refund: &PolicyRefund,
    ) -> Result<(), RedisStoreError> {
        if policy.limits().is_empty() || refund.cost == 0 {
            return Ok(());
        }
        let prepared = self.prepared(policy);
        let command = prepared.refund_command(
            &self.shared.prefix,
            key,
            refund,
            self.now_micros(),
            self.shared.functions.on(),
        );
        self.shared.calls.fetch_add(1, Ordering::Relaxed);
        crate::observe::redis_call("refund");
        let reply = call_until_answered(
            &self.shared.topology,
            &self.shared.functions,
            &prepared.refund_script,
            &command,
        )
        .await?;
        if let Some(server_now) = reply.first().and_then(|&t| u64::try_from(t).ok()) {
            self.shared.server_clock.observe(server_now);
        }
        // Forgotten once given back: a refusal of a request sent before
        // now was made without the refund.
        if let Some(blocked) = &self.shared.blocked {
            blocked.forget(policy, key, self.shared.local_now());
        }
        Ok(())
    }

    /// Charges `cost` to `key` under every limit of `policy` whatever they
    /// say (one call of `debit.lua`): what
    /// [`Store::debit`](tollgate_store::Store::debit) spawns, for a caller
    /// that wants to wait for it. The key may go into debt; its next
    /// checks are refused until it is paid off. A refusal remembered
    /// for the key (the block cache) stays true.
    ///
    /// # Errors
    ///
    /// When Redis cannot be reached or answers an error: nothing is
    /// charged.
    pub async fn charge_debt(
        &self,
        policy: &Policy,
        key: &Key,
        cost: u32,
    ) -> Result<(), RedisStoreError> {
        if policy.limits().is_empty() || cost == 0 {
            return Ok(());
        }
        let prepared = self.prepared(policy);
        let command = prepared.debit_command(
            &self.shared.prefix,
            key,
            cost,
            self.now_micros(),
            self.shared.functions.on(),
        );
        self.shared.calls.fetch_add(1, Ordering::Relaxed);
        crate::observe::redis_call("debit");
        let reply = call_until_answered(
            &self.shared.topology,
            &self.shared.functions,
            &prepared.debit_script,
            &command,
        )
        .await?;
        if let Some(server_now) = reply.first().and_then(|&t| u64::try_from(t).ok()) {
            self.shared.server_clock.observe(server_now);
        }
        // Forgotten once charged: a remembered refusal stays true, but its
        // retry time is too early for the debt.
        if let Some(blocked) = &self.shared.blocked {
            blocked.forget(policy, key, self.shared.local_now());
        }
        Ok(())
    }
}
