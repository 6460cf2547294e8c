//! [`Wakeups`]: telling queued requests that a slot of their key came back.
//!
//! For slot stores (`tollgate::in_flight::Slots` implementations: the memory
//! slots, `tollgate-redis`'s, or your own), which build their
//! `freed` answers with it; a layer's user does not
//! need it.

use pin_project_lite::pin_project;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use tokio::sync::Notify;
use tokio::sync::futures::OwnedNotified;

/// How many groups waiters are split into: a slot given back wakes the
/// waiters of its group only.
const GROUPS: usize = 64;

/// Wake-ups for requests queued for a slot, in groups by the hash of their
/// (limit, key): [`waiter`](Self::waiter) makes a future that completes at
/// the next [`wake`](Self::wake) of its group. A slot store gives its
/// `Slots::freed` with it; a store over the network
/// wakes only the waiters of its own process (and polls for the others).
///
/// A wake costs one atomic load when nobody waits in the group.
#[derive(Clone, Debug)]
pub struct Wakeups {
    groups: Arc<[Group]>,
}

#[derive(Debug, Default)]
struct Group {
    notify: Arc<Notify>,
    /// How many waiters of this group exist: a wake with none skips the
    /// notification.
    waiting: Arc<AtomicUsize>,
}

impl Default for Wakeups {
    fn default() -> Self {
        Self::new()
    }
}

impl Wakeups {
    /// Wake-ups with nobody waiting.
    pub fn new() -> Self {
        Wakeups {
            groups: (0..GROUPS).map(|_| Group::default()).collect(),
        }
    }

    fn group(&self, hash: u64) -> &Group {
        // `GROUPS` is a power of two; the high bits, which the memory
        // store's shards do not use.
        &self.groups[(hash >> 58) as usize % GROUPS]
    }

    /// A future that completes at the next [`wake`](Self::wake) of `hash`'s
    /// group after this call (or of a wake that comes while it exists and
    /// before it is first polled).
    pub fn waiter(&self, hash: u64) -> Waiter {
        let group = self.group(hash);
        // Counted before the notification is registered, so a wake that
        // comes after this call sees a waiter (see `wake`).
        group.waiting.fetch_add(1, Ordering::SeqCst);
        Waiter {
            notified: group.notify.clone().notified_owned(),
            count: WaitingCount(group.waiting.clone()),
        }
    }

    /// Wakes every waiter of `hash`'s group: a slot of a key in it came
    /// back. Call it after the slot is given back.
    pub fn wake(&self, hash: u64) {
        let group = self.group(hash);
        if group.waiting.load(Ordering::SeqCst) > 0 {
            group.notify.notify_waiters();
        }
    }
}

/// Takes one waiter off its group's count when dropped.
#[derive(Debug)]
struct WaitingCount(Arc<AtomicUsize>);

impl Drop for WaitingCount {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

pin_project! {
    /// Completes at the next wake of its group: see [`Wakeups::waiter`].
    #[derive(Debug)]
    pub struct Waiter {
        #[pin]
        notified: OwnedNotified,
        count: WaitingCount,
    }
}

impl Future for Waiter {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        self.project().notified.poll(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn a_waiter_hears_a_wake_made_before_its_first_poll() {
        let wakeups = Wakeups::new();
        let waiter = wakeups.waiter(7);
        wakeups.wake(7);
        tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("woken");
    }

    #[tokio::test]
    async fn a_wake_of_another_group_or_before_the_waiter_is_not_heard() {
        let wakeups = Wakeups::new();
        wakeups.wake(7);
        let waiter = wakeups.waiter(7);
        wakeups.wake(7 | (1 << 58));
        let heard = tokio::time::timeout(Duration::from_millis(50), waiter).await;
        assert!(heard.is_err());
        // The count went with the waiter.
        assert!(
            wakeups
                .groups
                .iter()
                .all(|g| g.waiting.load(Ordering::SeqCst) == 0)
        );
    }
}
