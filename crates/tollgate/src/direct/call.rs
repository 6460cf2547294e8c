//! [`KeyedLimiter::call`]: a call counted from when it is done, so that
//! the partner that counts its arrivals never counts more than the limit.

use super::{KeyedLimiter, UntilReadyError};
use crate::key::Key;
use crate::store::{Capability, ChangeReply, PolicyDebit, PolicyDecision, PolicyRefund, Store};
use std::future::Future;
use std::time::Instant;

impl<St: Store> KeyedLimiter<St> {
    /// Waits until a call for `key` is allowed, makes it (`call`), and
    /// counts it from when it is done: the way to keep a partner's count,
    /// on a limiter that allows at most N in any period
    /// ([`KeyedLimiter::at_most`], a sliding log).
    ///
    /// A partner counts a call when it arrives, some time after the
    /// limiter admitted it; with delays that vary, an early call that
    /// arrives late and the calls admitted just after the limiter's
    /// window let it go could land in one of the partner's windows
    /// together, one more than the limit. So while the call runs it is
    /// counted from its admission, and once it is done from that moment
    /// instead: the limiter's log then holds every call at a time no
    /// earlier than its arrival, and no period of the partner's sees more
    /// than the limit, whatever the network did.
    ///
    /// What that needs of `call`: its future ends once the partner has
    /// received the request (its response came back, or it can no longer
    /// arrive). A call given up before it ends (its future dropped: a
    /// timeout around `call`, a task aborted) stays counted from its
    /// admission and is counted again from that moment, but a request
    /// already on its way may still land later than both. A call that
    /// takes longer than the period is counted from its admission only
    /// for a period: keep calls shorter than it. With another algorithm
    /// than the sliding log, the move is never more lenient than counting
    /// at admission (across a fixed window's edge the call counts in
    /// both windows).
    ///
    /// The store must give charges back and charge into debt
    /// ([`Capability::Refund`], [`Capability::Debit`]: the memory store,
    /// Redis); one that cannot is refused before any call is made
    /// ([`UntilReadyError::Unsupported`]). Over a store that does I/O,
    /// the new charge is sent first, and the admission is given back
    /// only once it has landed (on a task of its own).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Key, KeyedLimiter};
    /// use tollgate_core::Quota;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// // Each partner counts 5 calls in any second.
    /// let partners = KeyedLimiter::at_most(Quota::per_second(5));
    /// let partner = Key::from("partner-a");
    /// let reply = partners
    ///     .call(&partner, async {
    ///         // send the request to partner-a here
    ///         "200 OK"
    ///     })
    ///     .await?;
    /// assert_eq!(reply, "200 OK");
    /// assert_eq!(partners.peek_now(&partner).remaining(), 4);
    /// # Ok(()) }
    /// ```
    pub async fn call<F: Future>(
        &self,
        key: &Key,
        call: F,
    ) -> Result<F::Output, UntilReadyError<St::Error>> {
        for capability in [Capability::Refund, Capability::Debit] {
            self.store()
                .can(capability)
                .map_err(UntilReadyError::Unsupported)?;
        }
        let (admission, asked) = self.admit(key).await?;
        let mut done = Done {
            limiter: self,
            key,
            admission,
            asked,
            finished: false,
        };
        let output = call.await;
        done.finished = true;
        drop(done);
        Ok(output)
    }

    /// Waits until a call of cost 1 for `key` is admitted (as
    /// [`until_ready`](Self::until_ready) does), keeping what a refund of
    /// its charge needs: the store's decision (its receipt), and when its
    /// check was sent.
    async fn admit(
        &self,
        key: &Key,
    ) -> Result<(PolicyDecision, Instant), UntilReadyError<St::Error>> {
        let (store, policy) = (self.store(), self.policy());
        loop {
            let asked = Instant::now();
            let admission = store
                .check(policy, key, 1)
                .watched(store, policy, key, 1)
                .resolve()
                .await
                .map_err(UntilReadyError::Store)?;
            let decision = admission.merged();
            let wait = if decision.allowed() {
                decision.wait()
            } else if decision.can_ever_pass() {
                decision.retry_after()
            } else {
                return Err(UntilReadyError::NeverAdmitted { cost: 1 });
            };
            // An admission held (the leaky bucket's) or a refusal: wait.
            if !wait.is_zero() {
                tokio::time::sleep(wait).await;
            }
            if decision.allowed() {
                return Ok((admission, asked));
            }
        }
    }
}

/// A call admitted and under way: when dropped, its charge moves from its
/// admission to now (the call done), or is made again now (given up).
struct Done<'a, St: Store> {
    limiter: &'a KeyedLimiter<St>,
    key: &'a Key,
    /// The store's decision that admitted it: its receipt names the
    /// charge exactly (when the store charged, on the store's clock).
    admission: PolicyDecision,
    /// When its check was sent, for a store that gives no receipt.
    asked: Instant,
    /// Whether the call's future ended (rather than being dropped).
    finished: bool,
}

impl<St: Store> Drop for Done<'_, St> {
    fn drop(&mut self) {
        let (store, policy) = (self.limiter.store(), self.limiter.policy());
        // Charged anew first, the admission given back only once that has
        // landed: in between the call counts twice, never zero times, so no
        // other call can slip in. Without a receipt the admission is named
        // by its age, measured from before the check was sent: a store that
        // finds no charge at exactly that time gives back the latest one
        // before it, never a later one's (which would leave this one early
        // in the log, where it would lapse too soon).
        let debit = store.debit(policy, self.key, PolicyDebit::of(&self.admission, 1));
        if !self.finished {
            // Given up: the request may still be on its way. Both count.
            return;
        }
        let refund = PolicyRefund::of(&self.admission, 1, self.asked.elapsed());
        match debit {
            ChangeReply::Done => {
                let _ = store.refund(policy, self.key, refund);
            }
            ChangeReply::Pending(landed) => {
                // No runtime (a limiter dropped at shutdown): the call
                // stays counted twice, never less.
                let Ok(runtime) = tokio::runtime::Handle::try_current() else {
                    return;
                };
                let (store, policy, key) = (store.clone(), policy.clone(), self.key.clone());
                runtime.spawn(async move {
                    if landed.await {
                        store.refund(&policy, &key, refund).landed().await;
                    }
                });
            }
        }
    }
}
