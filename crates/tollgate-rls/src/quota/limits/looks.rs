//! The keeper's side of the limits: which limits a look is due at,
//! what a look claims and gives back of each window, and what it found.

use super::{GIVE_BACK_SLACK, Limit, LimitId, Limits};
use crate::quota::bucket::Limited;
use crate::quota::claims::{Book, ClaimKeys, Claimed, Step};
use std::ops::RangeInclusive;
use std::sync::{Arc, PoisonError};
use std::time::{Duration, Instant};
use tollgate_store::PolicyDecision;

/// What a look at a limit's claims does for one window: give back, then
/// claim.
#[derive(Debug)]
pub(crate) struct WindowPlan {
    pub(crate) window: u64,
    /// What to claim (0: nothing).
    pub(crate) claim: u64,
    /// Whether the claim is a retry after a refusal: a look asks the
    /// store whether anything is left before it retries.
    pub(crate) retry: bool,
    /// What this server holds of the window now.
    pub(crate) held: u64,
    /// The claims to give back, each with what to give of it.
    pub(crate) give_back: Vec<(PolicyDecision, u32, Instant)>,
}

/// How a window's claim was answered.
#[derive(Debug, Default)]
pub(crate) struct ClaimAnswer {
    /// The claim admitted, if one was.
    pub(crate) claimed: Option<Claimed>,
    /// Whether the store failed to answer.
    pub(crate) failed: bool,
    /// Whether less was admitted than asked (others hold the rest).
    pub(crate) refused: bool,
}

impl Limit {
    /// What this server keeps of `window` (within `horizon`): what its
    /// grants need there, and what its data planes want (of a window
    /// just come in, at most its fair part).
    fn keep(&self, book: &Book, window: u64, horizon: &RangeInclusive<u64>, now: u64) -> u64 {
        let need = if window == *horizon.start() {
            self.ledger.need_now(now)
        } else {
            self.ledger.need_at(window.saturating_mul(self.window_us))
        };
        need.max(self.goal(book, window, now))
    }

    /// What this server tries to hold of `window` at `now`: what its
    /// data planes want, at most its fair part until the others have
    /// claimed theirs, or while the window is contested ([`Book::cap`]),
    /// on top of what the buckets of those that left still need there.
    fn goal(&self, book: &Book, window: u64, now: u64) -> u64 {
        let wanted = if self.spent_in.is_some_and(|spent| spent >= window) {
            0
        } else {
            self.wanted()
        };
        let wanted = book.cap(window, now).map_or(wanted, |cap| wanted.min(cap));
        let left = if window <= now / self.window_us {
            self.ledger.left_need_now(now)
        } else {
            self.ledger
                .left_need_at(window.saturating_mul(self.window_us))
        };
        wanted.saturating_add(left)
    }
}

impl Limits {
    /// The limits held, whose claims the keeper looks at when `tick` has
    /// passed since it last did (`None`: never looked).
    pub(crate) fn due(&self, tick: impl Fn(u64) -> Duration, now: u64) -> Vec<LimitId> {
        let map = self.map.lock().unwrap_or_else(PoisonError::into_inner);
        map.iter()
            .filter(|(_, limit)| limit.claims.is_some())
            .filter(|(_, limit)| {
                limit
                    .looked
                    .is_none_or(|at| at.elapsed() >= tick(limit.window_us))
            })
            .filter(|(_, limit)| limit.worth_a_look(now))
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// Whether `limited`'s windows at `now` are not all claimed: never
    /// yet (a limit new to this server), or the keeper fell behind (the
    /// last window that counts not tried). The answer then waits for a
    /// look, so that it has a budget.
    pub(crate) fn unclaimed(&self, limited: &Limited, now: u64) -> bool {
        let map = self.map.lock().unwrap_or_else(PoisonError::into_inner);
        map.get(&limited.counted_as()).is_some_and(|limit| {
            limit
                .claims
                .as_ref()
                .is_some_and(|(book, _)| !limit.ready || !book.tried(*limit.horizon(now).end()))
        })
    }

    /// Whether `limited`'s grants rest on claims (servers share its
    /// store).
    pub(crate) fn claiming(&self, limited: &Limited) -> bool {
        let map = self.map.lock().unwrap_or_else(PoisonError::into_inner);
        map.get(&limited.counted_as())
            .is_some_and(|limit| limit.claims.is_some())
    }

    /// The lock a look at `id`'s claims holds (one look at a time).
    pub(crate) fn looking(&self, id: &LimitId) -> Option<Arc<tokio::sync::Mutex<()>>> {
        let map = self.map.lock().unwrap_or_else(PoisonError::into_inner);
        map.get(id).map(|limit| Arc::clone(&limit.looking))
    }

    /// Starts a look at `id`'s claims at `now`: its keys, the window
    /// whose census to read again (another server may have come), and
    /// the census steps to take (`None`: no claims to look at).
    pub(crate) fn census_plan(
        &self,
        id: &LimitId,
        now: u64,
    ) -> Option<(ClaimKeys, Option<u64>, Vec<Step>)> {
        let mut map = self.map.lock().unwrap_or_else(PoisonError::into_inner);
        let limit = map.get_mut(id)?;
        limit.looked = Some(Instant::now());
        limit.looked_in = now / limit.window_us;
        limit.changed = false;
        limit.budget_cache = None;
        let horizon = limit.horizon(now);
        let planes = limit.active().count() as u64;
        let (book, keys) = limit.claims.as_mut()?;
        book.forget_before(*horizon.start());
        let recheck = book.recheck_window(*horizon.start(), now);
        Some((keys.clone(), recheck, book.census_steps(&horizon, planes)))
    }

    /// Runs `f` on `id`'s claims (none: not run), which it changes: the
    /// budget is worked out again after it.
    fn with_book<T>(&self, id: &LimitId, f: impl FnOnce(&mut Book) -> T) -> Option<T> {
        let mut map = self.map.lock().unwrap_or_else(PoisonError::into_inner);
        let limit = map.get_mut(id)?;
        limit.budget_cache = None;
        limit.claims.as_mut().map(|(book, _)| f(book))
    }

    /// Whether this server's mark beside `id`'s claims is to be put in
    /// the store at `now`.
    pub(crate) fn mark_due(&self, id: &LimitId, now: u64) -> bool {
        let map = self.map.lock().unwrap_or_else(PoisonError::into_inner);
        map.get(id)
            .and_then(|limit| limit.claims.as_ref())
            .is_some_and(|(book, keys)| book.mark_due(now, keys.period()))
    }

    /// Notes the mark put at `now`.
    pub(crate) fn marked(&self, id: &LimitId, now: u64) {
        self.with_book(id, |book| book.marked(now));
    }

    /// Notes the marks the store holds beside `id`'s claims, and the
    /// claims of `window` it holds (`stored`), read at `now`: no mark and
    /// fewer claims than this server's, and the store lost them
    /// (restarted without its data); those of every window from `window`
    /// on are made again.
    /// Returns the claims to give back then.
    pub(crate) fn note_mark(
        &self,
        id: &LimitId,
        window: u64,
        marks: Option<u64>,
        stored: Option<u64>,
        now: u64,
    ) -> Vec<(u64, Claimed)> {
        let mut map = self.map.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(limit) = map.get_mut(id) else {
            return Vec::new();
        };
        let rule = limit.rule.as_str();
        let Some((book, _)) = limit.claims.as_mut() else {
            return Vec::new();
        };
        let Some(made) = book.check_mark(window, marks, stored, now) else {
            return Vec::new();
        };
        tracing::warn!(
            rule,
            "the store lost this server's quota claims (restarted without its data?): \
             they are made again"
        );
        limit.budget_cache = None;
        made
    }

    /// Notes `window`'s census read again.
    pub(crate) fn note_recheck(&self, id: &LimitId, window: u64, planes: u64) {
        self.with_book(id, |book| book.recheck(window, planes));
    }

    /// Notes what a census step did at `now`: `published` added to
    /// `window`'s census, `census` read of it.
    pub(crate) fn note_census(
        &self,
        id: &LimitId,
        window: u64,
        published: Option<u64>,
        census: Option<u64>,
        now: u64,
    ) {
        self.with_book(id, |book| {
            if let Some(planes) = published {
                book.published(window, planes);
            }
            if let Some(planes) = census {
                book.census(window, planes, now, published.is_some());
            }
        });
    }

    /// What to claim and give back of each window `id` claims at `now`
    /// (what is given back is no longer counted as held from here).
    pub(crate) fn claim_plan(&self, id: &LimitId, now: u64) -> Vec<WindowPlan> {
        let mut map = self.map.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(limit) = map.get_mut(id) else {
            return Vec::new();
        };
        limit.budget_cache = None;
        limit.ledger.roll(now);
        let horizon = limit.horizon(now);
        let Some((mut book, keys)) = limit.claims.take() else {
            return Vec::new();
        };
        let slack = limit.limit / GIVE_BACK_SLACK + 1;
        let plans = crate::quota::claims::claimed_range(&horizon, limit.window_us)
            .map(|window| {
                let keep = limit.keep(&book, window, &horizon, now);
                let held = book.held(window);
                // All of it once nothing is kept: a limit is forgotten
                // only once it holds nothing.
                let slack = if keep == 0 { 0 } else { slack };
                let give_back = if held > keep.saturating_add(slack) {
                    book.give_back(window, held - keep)
                } else {
                    Vec::new()
                };
                let goal = limit.goal(&book, window, now);
                let retry = book.retry_due(window, now);
                let claim = match retry {
                    Some(false) => 0,
                    _ => book.short_of(window, goal),
                };
                WindowPlan {
                    window,
                    claim,
                    retry: retry.is_some(),
                    held: book.held(window),
                    give_back,
                }
            })
            .collect();
        limit.claims = Some((book, keys));
        plans
    }

    /// Notes how each window's claim was answered, and shares the budget
    /// anew.
    pub(crate) fn note_claims(&self, id: &LimitId, answers: Vec<(u64, ClaimAnswer)>, now: u64) {
        let woken = {
            let mut map = self.map.lock().unwrap_or_else(PoisonError::into_inner);
            let Some(limit) = map.get_mut(id) else {
                return;
            };
            limit.budget_cache = None;
            let Some((book, _)) = limit.claims.as_mut() else {
                return;
            };
            for (window, answer) in answers {
                book.claimed(window, answer.claimed, answer.failed);
                // A window refused, or not answered, is tried again only
                // a retry later (`claimed` clears it on a whole claim).
                if answer.refused || answer.failed {
                    book.refused(window, now);
                }
            }
            limit.ready = true;
            limit.rebalance(now)
        };
        for other in woken {
            other.notify_one();
        }
    }
}
