//! [`KeyedLimiter::call`]: a call counted from when it is done, so that
//! the partner that counts its arrivals never counts more than the limit.

use super::{KeyedLimiter, UntilReadyError};
use crate::key::Key;
use crate::store::{Capability, PolicyDebit, PolicyDecision, PolicyRefund, Store};
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
    /// counted from its admission, and once it is done (its future
    /// ready, or dropped) from that moment instead: the limiter's log
    /// then holds every call at a time no earlier than its arrival, and
    /// any period of the partner's sees at most the limit, whatever the
    /// network did. (Calls that take longer than the period are counted
    /// from their admission only while it lasts: keep them shorter, or
    /// the period longer.)
    ///
    /// The store must give charges back and charge into debt
    /// ([`Capability::Refund`], [`Capability::Debit`]: the memory store,
    /// Redis); one that cannot is refused before any call is made
    /// ([`UntilReadyError::Unsupported`]).
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
        let done = Done {
            limiter: self,
            key,
            admission,
            asked,
        };
        let output = call.await;
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

/// A call admitted and under way: when dropped (the call done, or given
/// up), its charge moves from its admission to now.
struct Done<'a, St: Store> {
    limiter: &'a KeyedLimiter<St>,
    key: &'a Key,
    /// The store's decision that admitted it: its receipt names the
    /// charge exactly (when the store charged, on the store's clock).
    admission: PolicyDecision,
    /// When its check was sent, for a store that gives no receipt.
    asked: Instant,
}

impl<St: Store> Drop for Done<'_, St> {
    fn drop(&mut self) {
        let (store, policy) = (self.limiter.store(), self.limiter.policy());
        // Charged anew first, then the admission given back: in between,
        // the call counts twice, never zero times, so no other call can
        // slip in. Without a receipt the admission is named by its age,
        // measured from before the check was sent: a store that finds no
        // charge at exactly that time gives back the latest one before it,
        // never a later one's (which would leave this one early in the
        // log, where it would lapse too soon). A store doing I/O sends
        // both on its own; the replies are not awaited.
        let _ = store.debit(policy, self.key, PolicyDebit::of(&self.admission, 1));
        let refund = PolicyRefund::of(&self.admission, 1, self.asked.elapsed());
        let _ = store.refund(policy, self.key, refund);
    }
}
