//! Exact mode's calls to the shared store: a reservation, which grants a
//! slot the units its requests spend, and the give-back of units held past
//! their hold, unspent.

use super::slot::{ExactSlot, Grant, Holdings, Refusal, Returned};
use crate::shared::{Shared, holder};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use tollgate_store::shared::{ShareOp, ShareOutcome, SharedStore};

/// Reserves at least `need` units for `slot` from Redis, then wakes the
/// requests that wait on it.
pub(crate) async fn reserve<S: SharedStore>(
    inner: Arc<Shared<S>>,
    slot: Arc<ExactSlot>,
    need: u32,
) {
    let sent = inner.now();
    let (want, held, report) = {
        let mut state = slot.lock();
        // Numbered across the instance's slots, so that a slot made again
        // for the key never reuses a number Redis recorded.
        state.report = inner.reports.fetch_add(1, Ordering::Relaxed) + 1;
        let want = state.want(
            sent,
            need,
            inner.settings.reserve_ahead_nanos,
            inner.settings.max_reservation,
        );
        // What is still spendable at `sent`; spent further while the call
        // is away, so Redis's count stays at or above it. What lapsed by
        // then is dropped now: this reservation's count in Redis leaves it
        // out, so the hold it brings back must not cover it (a grant past
        // its hold, spent after it, would be spent on top of its own
        // refill). A reservation ahead of need is sent from a spawned
        // task, on a busy machine long after the spend that started it.
        // Given back whichever of the two calls Redis runs first: before
        // it, they come off the count that holds them; after it, off what
        // it recorded spent when it replaced that count (its `held`
        // leaves them out).
        state.drop_lapsed(&inner, sent, true);
        if let Some(returned) = state.returned.take() {
            give_back(&inner, &slot, returned, sent);
        }
        let held = state.grants.iter().map(|g| g.units).sum();
        (want, held, state.report)
    };
    let op = ShareOp::Reserve {
        need,
        want,
        fanout: inner.settings.fanout,
        holder: holder(inner.instance, slot.policy.id()),
        held,
        hold_micros: inner.settings.hold_nanos / 1_000,
        ahead_micros: inner.settings.reserve_ahead_nanos / 1_000,
        report,
    };
    inner.stats.call();
    let result = inner.store.share(&slot.policy, &slot.key, op).await;
    let now = inner.now();
    {
        let mut state = slot.lock();
        state.reserving = false;
        state.round += 1;
        match result {
            Ok(reply) => {
                let (granted, grant_micros, held_micros) = match reply.outcome {
                    ShareOutcome::Reserved {
                        granted,
                        grant_micros,
                        held_micros,
                    } => (granted, grant_micros, held_micros),
                    _ => (0, None, None),
                };
                if granted > 0 || reply.decision.merged().allowed() {
                    state.recorded = report;
                }
                if state.failure.take().is_some() {
                    tracing::info!(
                        limits = slot.policy.label(),
                        "local-first store: Redis answers again; reservations resume"
                    );
                }
                if granted > 0 {
                    // A lapse is counted from when the call left: the script
                    // ran later, so the grant lapses no later than Redis says.
                    let after = |micros: Option<u64>| {
                        micros.map_or(u64::MAX, |micros| {
                            sent.saturating_add(micros.saturating_mul(1_000))
                        })
                    };
                    state.grants.push(Grant {
                        units: granted,
                        sent,
                        lapse_at: after(grant_micros),
                    });
                    // Redis now counts all this slot holds, old grants
                    // too, as held until then.
                    state.held_until = after(held_micros);
                    if state.held_until != u64::MAX
                        && state.grants.iter().all(|g| g.lapse_at == u64::MAX)
                    {
                        watch_hold(&inner, &slot, &mut state);
                    }
                    state.grants.sort_by_key(|g| g.lapse_at);
                    if reply.server_micros >= state.last_server {
                        state.last = Some((reply.decision, now));
                        state.last_server = reply.server_micros;
                    }
                    state.refusal = None;
                    state.last_grant = granted;
                    state.last_need = u64::from(need);
                    state.spent = 0;
                    state.rate_since = now;
                    inner.stats.reserved(granted);
                } else if reply.decision.merged().allowed() {
                    // Ahead of need, and no share to grant: the next
                    // request reserves for itself.
                } else if sent >= state.refunded_at {
                    let retry = reply.decision.merged().retry_after_nanos();
                    state.refusal = Some(Refusal {
                        until: now.saturating_add(retry),
                        cost: need.max(1),
                        decision: reply.decision,
                        at: now,
                    });
                }
            }
            Err(error) => {
                if state.failure.is_none() {
                    tracing::warn!(
                        limits = slot.policy.label(),
                        %error,
                        "local-first store: a reservation failed; requests are decided with \
                         the units this instance holds, then by the store-error behaviour"
                    );
                }
                state.failure = Some(error.to_string());
            }
        }
    }
    slot.done.notify_waiters();
}

/// Gives back in Redis the units of `slot`'s key that this instance was
/// granted and will never spend (dropped past their hold, unspent, at
/// `now`), from a spawned task: `share.lua`'s refund, naming the
/// reservation
/// whose count of held units holds them (or, once a later reservation
/// replaced that count, its record of what was spent), as far as Redis
/// still counts them (a bucket that refilled since gives back less). A
/// reservation's units otherwise stay charged until they refill: an
/// instance that reserved ahead and then went idle would keep them from
/// every instance. Lost in a failure: they stay charged (never more
/// admitted).
pub(crate) fn give_back<S: SharedStore>(
    inner: &Arc<Shared<S>>,
    slot: &ExactSlot,
    returned: Returned,
    now: u64,
) {
    let op = returned.op(inner, slot.policy.id(), now);
    let (inner, policy, key) = (inner.clone(), slot.policy.clone(), slot.key.clone());
    inner.stats.call();
    tokio::spawn(async move {
        if let Err(error) = inner.store.share(&policy, &key, op).await {
            tracing::debug!(
                limits = policy.label(),
                %error,
                "local-first store: units past their hold were not given back; they stay charged"
            );
        }
    });
}

/// Watches the hold of what `slot` holds, one task per slot at most:
/// once the hold has passed with units unspent, gives them back (see
/// [`give_back`]), so that an instance that went idle does not keep the
/// units it reserved ahead from the others until they refill. A hold a
/// later reservation renewed is watched on; a reservation in flight ends
/// the watch (its landing starts another if it grants).
fn watch_hold<S: SharedStore>(inner: &Arc<Shared<S>>, slot: &Arc<ExactSlot>, state: &mut Holdings) {
    if state.watching {
        return;
    }
    state.watching = true;
    let (inner, slot) = (inner.clone(), slot.clone());
    tokio::spawn(async move {
        loop {
            let wait = {
                let mut state = slot.lock();
                let now = inner.now();
                let until = state.held_until;
                if until == u64::MAX || state.reserving || state.grants.is_empty() {
                    state.watching = false;
                    return;
                }
                if now >= until {
                    state.drop_lapsed(&inner, now, true);
                    if let Some(returned) = state.returned.take() {
                        give_back(&inner, &slot, returned, now);
                    }
                    state.watching = false;
                    return;
                }
                until - now
            };
            tokio::time::sleep(
                std::time::Duration::from_nanos(wait) + std::time::Duration::from_millis(1),
            )
            .await;
        }
    });
}
