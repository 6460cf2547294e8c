//! A slot's one call to the shared store at a time (a reservation, a
//! sync), as the store's resets, carries and refunds wait for it.

use std::pin::pin;
use std::time::Duration;
use tokio::sync::Notify;

/// What a key's slot says of its calls to the shared store, in either
/// mode.
pub(crate) trait Calls {
    /// Wakes the requests waiting on the slot when a call ends.
    fn done(&self) -> &Notify;

    /// Whether a call (a reservation, a sync) is in flight.
    fn calling(&self) -> bool;

    /// The calls ended so far.
    fn round(&self) -> u64;
}

/// The longest a reset waits for a slot's call in flight: a call is
/// bounded by the Redis store's own timeouts, this only keeps an
/// operator's reset from hanging on a stalled server.
const CALL_BOUND: Duration = Duration::from_secs(5);

/// Waits until `slot` (taken out of its table) has no call in flight, at
/// most [`CALL_BOUND`].
pub(crate) async fn call_ended<T: Calls>(slot: Option<&T>) {
    let Some(slot) = slot else {
        return;
    };
    let ended = async {
        loop {
            let notified = slot.done().notified();
            let mut notified = pin!(notified);
            // Registered before the flag is read: a call that ends in
            // between wakes it.
            notified.as_mut().enable();
            if !slot.calling() {
                return;
            }
            notified.await;
        }
    };
    let _ = tokio::time::timeout(CALL_BOUND, ended).await;
}

/// Waits until the call after round `round` of `slot` has ended (the
/// slot's count of calls ended passed it), at most [`CALL_BOUND`]: a call
/// in flight at `round`, or the next one to start.
pub(crate) async fn round_ended<T: Calls>(slot: &T, round: u64) {
    let ended = async {
        loop {
            let notified = slot.done().notified();
            let mut notified = pin!(notified);
            // Registered before the count is read: a call that ends in
            // between wakes it.
            notified.as_mut().enable();
            if slot.round() > round {
                return;
            }
            notified.await;
        }
    };
    let _ = tokio::time::timeout(CALL_BOUND, ended).await;
}
