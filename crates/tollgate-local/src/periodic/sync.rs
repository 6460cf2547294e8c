//! Periodic mode's calls to the shared store: a sync, which reports what a
//! slot admitted and reads its share anew, and a slot's last report as it
//! leaves.

use super::slot::{LastReading, PeriodicSlot};
use crate::shared::{Shared, holder};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use tollgate_store::shared::{ShareOp, ShareOutcome, SharedStore};

/// The last report of a slot taken out (its key's plan changed): what it
/// admitted and has not reported is charged, and its share is given back
/// (a sync that wants nothing and holds nothing), so that it does not
/// count against the slots after it until it lapses: a plan put back, or
/// another plan of the same limits, shares the key's records. Answers
/// the units this call did not report (admitted after a report whose
/// answer did not come, or all of them if the call failed), which the
/// carry charges itself: a count is never lost, at worst counted twice.
pub(crate) async fn depart<S: SharedStore>(inner: &Shared<S>, slot: &PeriodicSlot) -> u64 {
    let (spent, sequence, rest) = {
        let mut counts = slot.lock();
        let rest = std::mem::take(&mut counts.pending);
        match counts.unconfirmed.take() {
            Some((sequence, units)) => (units, sequence, rest),
            None if rest > 0 => {
                let sequence = inner.reports.fetch_add(1, Ordering::Relaxed) + 1;
                (rest, sequence, 0)
            }
            None => (0, 0, 0),
        }
    };
    let op = ShareOp::Sync {
        spent,
        instance: holder(inner.instance, slot.policy.id()),
        sequence,
        life_micros: inner.settings.share_life_nanos / 1_000,
        instances: inner.settings.instances,
        need: 0,
        left: 0,
        want: 0,
    };
    inner.stats.call();
    match inner.store.share(&slot.policy, &slot.key, op).await {
        Ok(_) => rest,
        Err(_) => spent.saturating_add(rest),
    }
}

/// Reports what `slot`'s key admitted since its last report and reads the
/// key again, then wakes the requests waiting for a first reading.
///
/// The share it asks for is sized by what was asked here since the last
/// sync (see `Counts::want`). An instance asked for nothing (no request
/// since, none waiting) that holds some of its share offers it back,
/// spending none of it while the call is on its way: it keeps at most
/// half of what the others leave free, and none that they want (until it
/// lapses as it was given), and the rest returns to the other instances
/// at once, not when it lapses. So an instance new to the key finds at
/// least half of what is free, and an idle one still has some to spend
/// if Redis goes away.
pub(crate) async fn sync<S: SharedStore>(inner: Arc<Shared<S>>, slot: Arc<PeriodicSlot>) {
    let now = inner.now();
    let interval = match inner.settings.mode {
        crate::LocalMode::Periodic { sync_interval } => {
            u64::try_from(sync_interval.as_nanos()).unwrap_or(u64::MAX)
        }
        crate::LocalMode::Exact => 0,
    };
    let (spent, sequence, need, left, want, idle) = {
        let mut counts = slot.lock();
        counts.touched = false;
        let need = std::mem::take(&mut counts.wanted);
        let want = counts.want(now, interval);
        counts.demand = 0;
        counts.sent = now;
        // What it may spend while the call is on its way: Redis counts it
        // as this instance's until the new share replaces it.
        let left = counts
            .last
            .as_ref()
            .filter(|last| now < last.until)
            .map_or(0, |last| counts.spendable(last));
        // Idle, holding some: it offers it back (Redis says what it
        // keeps), and spends none of it while the call is on its way.
        let mut idle = None;
        if want == 0
            && need == 0
            && left > 0
            && let Some(last) = counts.last.as_mut()
        {
            idle = Some(last.until);
            last.until = last.until.min(now);
        }
        // Read after every refund that landed so far.
        counts.refunded = false;
        match counts.unconfirmed {
            Some(report) => (report.1, report.0, need, left, want, idle),
            None if counts.pending > 0 => {
                // Numbered across the instance's slots, as reservations
                // are: a slot made again for the key (its plan changed
                // away and back) never reuses a number Redis recorded,
                // which would drop its report as sent already.
                counts.sequence = inner.reports.fetch_add(1, Ordering::Relaxed) + 1;
                let report = (counts.sequence, counts.pending);
                counts.unconfirmed = Some(report);
                counts.pending = 0;
                (report.1, report.0, need, left, want, idle)
            }
            None => (0, 0, need, left, want, idle),
        }
    };
    let life = inner.settings.share_life_nanos;
    let op = ShareOp::Sync {
        spent,
        instance: holder(inner.instance, slot.policy.id()),
        sequence,
        life_micros: life / 1_000,
        instances: inner.settings.instances,
        need,
        left,
        want,
    };
    inner.stats.call();
    // Redis counts the share from when the script runs, after this.
    let sent = inner.now();
    let result = inner.store.share(&slot.policy, &slot.key, op).await;
    let now = inner.now();
    {
        let mut counts = slot.lock();
        counts.syncing = false;
        counts.round += 1;
        match result {
            Ok(reply) => {
                counts.unconfirmed = None;
                let (share, sharing) = match reply.outcome {
                    ShareOutcome::Synced { share, sharing, .. } => (share, sharing),
                    _ => (0, 1),
                };
                counts.sharing = sharing;
                let until = match idle {
                    // What it kept, idle, lapses as it was given.
                    Some(until) => until,
                    None => sent.saturating_add(life / 1_000 * 1_000),
                };
                counts.last = Some(LastReading {
                    decision: reply.decision,
                    at: now,
                    share,
                    asked: need,
                    until,
                });
                if counts.failure.take().is_some() {
                    tracing::info!(
                        limits = slot.policy.label(),
                        "local-first store: Redis answers again; counts reported"
                    );
                }
            }
            Err(error) => {
                // An idle instance whose give-back was not answered keeps
                // its share (Redis away: it spends what it holds).
                if let (Some(until), Some(last)) = (idle, counts.last.as_mut()) {
                    last.until = last.until.max(until);
                }
                if counts.failure.is_none() {
                    tracing::warn!(
                        limits = slot.policy.label(),
                        %error,
                        "local-first store: a sync failed; requests are decided with what \
                         this instance last read, then by the store-error behaviour"
                    );
                }
                counts.failure = Some(error.to_string());
            }
        }
    }
    slot.done.notify_waiters();
}
