//! The keeper: where servers share the store, it looks at each limit's
//! claims a few times a window, adding this server's data planes to the
//! census, claiming the windows that come within the horizon, giving back
//! what the grants no longer need (see [`super::claims`]).

use super::claims::{CENSUS_LIMIT, ClaimKeys, Claimed};
use super::limits::{ClaimAnswer, LimitId, Limits};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::task::JoinSet;
use tollgate_store::{Key, PolicyDebit, PolicyRefund, Store};

/// How often the keeper wakes to find the limits due a look.
pub(crate) const ROUND: Duration = Duration::from_millis(50);

/// How often a limit of windows of `window_us` µs is looked at: four
/// times a window, at most every 250 ms (a window that comes within the
/// horizon is claimed within that), at least every 50 ms.
pub(crate) fn tick(window_us: u64) -> Duration {
    Duration::from_micros(window_us / 4).clamp(ROUND, Duration::from_millis(250))
}

/// µs since 1970, as the windows count.
pub(crate) fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

/// One look at `id`'s claims, each call to the store waited for within
/// `timeout`: the census first, then the claims given back and made, then
/// the budget shared anew.
pub(crate) async fn look<St: Store>(store: &St, limits: &Limits, id: &LimitId, timeout: Duration) {
    let Some((keys, recheck, mut steps)) = limits.census_plan(id, now_us()) else {
        return;
    };
    if let Some(window) = recheck
        && let Some(planes) = read_census(store, &keys, &keys.key(window), timeout).await
    {
        // This server's mark, which it keeps in the store beside its
        // claims: gone, and the window's claims fewer than this server's,
        // and the store lost them (restarted without its data); its claims
        // of every window to come are made again, before any grant rests
        // on them. (A fallback store, which never had the mark, holds the
        // claims the store behind it last said: not fewer.)
        let marks = read_census(store, &keys, keys.mark(), timeout).await;
        let stored = left_of(store, &keys, &keys.key(window), timeout)
            .await
            .map(|left| keys.limit().saturating_sub(left));
        for (lost, claimed) in limits.note_mark(id, window, marks, stored, now_us()) {
            let refund = PolicyRefund::of(&claimed.decision, claimed.amount, claimed.at.elapsed());
            drop(store.refund(keys.claims(), &keys.key(lost), refund));
        }
        limits.note_recheck(id, window, planes);
        // A census that grew is read again for every window at once.
        if let Some((_, _, again)) = limits.census_plan(id, now_us()) {
            steps = again;
        }
    }
    // Each window's census on a task of its own: a look takes a few
    // round trips to the store, not a few per window.
    let mut census = JoinSet::new();
    for step in steps {
        let (store, keys) = (store.clone(), keys.clone());
        census.spawn(async move {
            let key = keys.key(step.window);
            let published = match step.publish {
                0 => None,
                planes => publish(&store, &keys, &key, planes, timeout).await,
            };
            let read = match step.read_census {
                true => read_census(&store, &keys, &key, timeout).await,
                false => None,
            };
            (step.window, published, read)
        });
    }
    while let Some(done) = census.join_next().await {
        if let Ok((window, published, read)) = done {
            limits.note_census(id, window, published, read, now_us());
        }
    }
    if limits.mark_due(id, now_us())
        && publish(store, &keys, keys.mark(), 1, timeout)
            .await
            .is_some()
    {
        limits.marked(id, now_us());
    }
    let mut plans = limits.claim_plan(id, now_us());
    let mut answers = Vec::new();
    // Retries after refusals: one read of the claims of the window this
    // server holds least of says whether the others left anything (they
    // give back across the windows alike, and this server may hold all of
    // another); nothing left, none is tried.
    if let Some(least) = plans
        .iter()
        .filter(|p| p.retry && p.claim > 0)
        .min_by_key(|p| (p.held, std::cmp::Reverse(p.window)))
        .map(|p| p.window)
        && left_of(store, &keys, &keys.key(least), timeout).await == Some(0)
    {
        for plan in plans.iter_mut().filter(|p| p.retry && p.claim > 0) {
            plan.claim = 0;
            answers.push((
                plan.window,
                ClaimAnswer {
                    refused: true,
                    ..ClaimAnswer::default()
                },
            ));
        }
    }
    let mut claims = JoinSet::new();
    for plan in plans {
        let key = keys.key(plan.window);
        for (decision, amount, at) in plan.give_back {
            let refund = PolicyRefund::of(&decision, amount, at.elapsed());
            // Lands on its own; a refund lost leaves the claim held until
            // it leaves the log, which only ever admits less.
            drop(store.refund(keys.claims(), &key, refund));
        }
        if plan.claim == 0 {
            if !answers.iter().any(|(window, _)| *window == plan.window) {
                answers.push((plan.window, ClaimAnswer::default()));
            }
            continue;
        }
        let (store, keys) = (store.clone(), keys.clone());
        claims.spawn(async move {
            let answer = claim(&store, &keys, &key, plan.claim, timeout).await;
            (plan.window, answer)
        });
    }
    while let Some(done) = claims.join_next().await {
        if let Ok(answer) = done {
            answers.push(answer);
        }
    }
    limits.note_claims(id, answers, now_us());
}

/// Adds `planes` to the census under `key`: `Some(planes)` once it
/// landed.
async fn publish<St: Store>(
    store: &St,
    keys: &ClaimKeys,
    key: &Key,
    planes: u64,
    timeout: Duration,
) -> Option<u64> {
    let cost = u32::try_from(planes).unwrap_or(u32::MAX);
    let debit = store
        .debit(keys.census(), key, PolicyDebit::new(cost))
        .landed();
    match tokio::time::timeout(timeout, debit).await {
        Ok(true) => Some(planes),
        _ => None,
    }
}

/// What is left of the window's N under `key`, if the store says.
async fn left_of<St: Store>(
    store: &St,
    keys: &ClaimKeys,
    key: &Key,
    timeout: Duration,
) -> Option<u64> {
    let peek = store.peek(keys.claims(), key).resolve();
    match tokio::time::timeout(timeout, peek).await {
        Ok(Ok(decision)) => Some(decision.merged().remaining()),
        _ => None,
    }
}

/// The data planes the census under `key` counts, if the store says.
async fn read_census<St: Store>(
    store: &St,
    keys: &ClaimKeys,
    key: &Key,
    timeout: Duration,
) -> Option<u64> {
    let peek = store.peek(keys.census(), key).resolve();
    match tokio::time::timeout(timeout, peek).await {
        Ok(Ok(decision)) => Some(CENSUS_LIMIT.saturating_sub(decision.merged().remaining())),
        _ => None,
    }
}

/// Claims `amount` of a window under `key`, or, refused, what the others
/// left of it (the answer then says it was refused).
async fn claim<St: Store>(
    store: &St,
    keys: &ClaimKeys,
    key: &Key,
    amount: u64,
    timeout: Duration,
) -> ClaimAnswer {
    let mut amount = u32::try_from(amount).unwrap_or(u32::MAX);
    let mut refused = false;
    // Twice at most: what was asked, then what is left.
    for _ in 0..2 {
        let asked = Instant::now();
        let check = store
            .check_within(keys.claims(), key, amount, timeout)
            .resolve();
        match tokio::time::timeout(timeout, check).await {
            Ok(Ok(decision)) if decision.merged().allowed() => {
                return ClaimAnswer {
                    claimed: Some(Claimed {
                        decision,
                        amount,
                        at: asked,
                    }),
                    failed: false,
                    refused,
                };
            }
            Ok(Ok(decision)) => {
                refused = true;
                let left = decision.merged().remaining();
                match u32::try_from(left).unwrap_or(u32::MAX).min(amount) {
                    0 => break,
                    less => amount = less,
                }
            }
            Ok(Err(error)) => {
                tracing::debug!(%error, "a quota claim could not be made");
                return ClaimAnswer {
                    failed: true,
                    ..ClaimAnswer::default()
                };
            }
            Err(_) => {
                return ClaimAnswer {
                    failed: true,
                    ..ClaimAnswer::default()
                };
            }
        }
    }
    ClaimAnswer {
        refused,
        ..ClaimAnswer::default()
    }
}
