//! How several servers over one store serve one limit: each holds a part
//! of the limit's N for each window, claimed in the shared store, and
//! lets its own data planes admit only that part (and one each).
//!
//! A server's ledger bounds what its data planes can admit in each window
//! by what it holds of that window ([`Budget`]). Its grants stay in force
//! after it is gone (a crashed server's data planes enforce their last
//! assignment until its time to live lapses), so a window's part must be
//! held before any grant that may still be in force in it is given: each
//! server holds its parts of the windows up to a *horizon*, its longest
//! assignment's time to live and one window more, claiming each window as
//! it comes within the horizon. Claims of one window, from every server,
//! never add up to more than N: they are the costs of checks against a
//! sliding log of N over a period longer than any window's claims take
//! to be made (from a horizon ahead to the window's end), in a key of
//! their own per window. A server gives back by its receipts what its
//! grants no longer need (a data plane left, demand fell), and others
//! claim it at their next look.
//!
//! Fair parts: each server adds its data planes to a census of each
//! window before it claims it (one window earlier), and claims at once
//! only its planes' part of N (N·k/K); what it wants beyond that it
//! claims a window later, from what the others left. So a server's data
//! planes get their part of every window that comes within the horizon
//! after they are counted, and N goes where the demand is.

use super::ledger::{Ahead, Budget};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tollgate_core::{Algorithm, Quota};
use tollgate_store::{Key, NamedLimit, Policy, PolicyDecision};

/// The longest time to live an assignment is given: the claims' sliding
/// log must outlast a horizon of it, so it is bounded (three reporting
/// intervals of at most 60 s; Envoy reports every 5 s).
pub(crate) const MAX_TTL: Duration = Duration::from_secs(180);

/// How long after a window's census is read a server claims its fair
/// part with room for one more, then its fair part, before it claims
/// more: two looks of every server each (see `keeper::tick`), so that
/// each has claimed its own part first.
pub(crate) const SURPLUS_WAIT: Duration = Duration::from_millis(600);

/// How long a server waits to claim again a window whose claim was
/// refused: what the others give back is found within it (and a look),
/// and a server that wants more than the others leave asks the store
/// once that long (one read, see `keeper::look`), not at every look.
pub(crate) const RETRY: Duration = Duration::from_millis(500);

/// How often a look reads a census again to find a server that came.
const RECHECK: Duration = Duration::from_secs(1);

/// How much a census may count: data planes, never near it.
pub(crate) const CENSUS_LIMIT: u64 = u32::MAX as u64;

/// The policies and keys of one limit's claims and census, made once per
/// limit.
#[derive(Debug, Clone)]
pub(crate) struct ClaimKeys {
    /// A sliding log of N over the claims' period.
    claims: Arc<Policy>,
    /// A sliding log that counts data planes (debited, never refused).
    census: Arc<Policy>,
    /// The limit's key in the store, which each window's keys extend.
    key: Key,
    /// This server's mark beside its claims (counted in the census's
    /// policy): gone, and the store lost the claims.
    mark: Key,
    /// How long a claim, or a mark, stays in the store.
    period: Duration,
    /// N, what a window's claims add up to at most.
    limit: u64,
}

impl ClaimKeys {
    /// The claims of a limit of `limit` a window of `window_us` µs,
    /// counted under `key` by `policy` (the rule's); `None` when no
    /// sliding log can outlast a window's claims (a window of a year:
    /// its claims take longer to make than any quota's period).
    pub(crate) fn new(
        policy: &Policy,
        key: &Key,
        limit: u64,
        window_us: u64,
        server: u64,
    ) -> Option<Self> {
        let period = claims_period(window_us);
        let log = |name: &str, limit: u64| {
            let quota = Quota::new(limit.max(1), period).ok()?;
            let limit = NamedLimit::try_new(name, quota)
                .ok()?
                .with_algorithm(Algorithm::SlidingLog);
            Some(Arc::new(Policy::with_seed(
                policy.id() ^ fingerprint(name),
                vec![limit],
            )))
        };
        let mark = Key::composite(&[key.clone(), Key::from(format!("mark-{server:x}").as_str())]);
        Some(ClaimKeys {
            claims: log("rlqs-claims", limit)?,
            census: log("rlqs-census", CENSUS_LIMIT)?,
            key: key.clone(),
            mark,
            period,
            limit,
        })
    }

    /// The policy whose checks claim a window's parts.
    pub(crate) fn claims(&self) -> &Arc<Policy> {
        &self.claims
    }

    /// The policy whose debits count a window's data planes.
    pub(crate) fn census(&self) -> &Arc<Policy> {
        &self.census
    }

    /// The key of this server's mark.
    pub(crate) fn mark(&self) -> &Key {
        &self.mark
    }

    /// N, what a window's claims add up to at most.
    pub(crate) fn limit(&self) -> u64 {
        self.limit
    }

    /// How long a claim, or a mark, stays in the store.
    pub(crate) fn period(&self) -> Duration {
        self.period
    }

    /// The key of `window`'s claims and census.
    pub(crate) fn key(&self, window: u64) -> Key {
        Key::composite(&[self.key.clone(), Key::from(window.to_string().as_str())])
    }

    /// The probe a store answers at build whether it can hold claims.
    pub(crate) fn probe() -> Policy {
        let quota = Quota::per_hour(1);
        Policy::new(vec![
            NamedLimit::new("rlqs-claims", quota).with_algorithm(Algorithm::SlidingLog),
        ])
    }
}

/// A name's fingerprint, to keep the claims' policy apart from the rule's.
fn fingerprint(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// How long a claim stays in the sliding log: longer than a window's
/// claims take to be made (from when it comes within [`MAX_TTL`] and the
/// [`lead`], see [`Book::horizon`], to its end), its census a window
/// before, a window more, and a margin for clocks apart.
fn claims_period(window_us: u64) -> Duration {
    let windows = lead(window_us) + 3;
    MAX_TTL + Duration::from_micros(window_us.saturating_mul(windows)) + Duration::from_secs(5)
}

/// How many windows past the horizon a server claims: at least 2 s of
/// them, and one. A window is so claimed before its budget counts: its
/// fair part at once, the rest once the others have claimed theirs (two
/// [`SURPLUS_WAIT`]s after its census is read), so that the budget of the
/// horizon, the least of its windows, does not fall each time a window
/// comes in; and a keeper that falls behind by less than that (a busy
/// server) leaves no window that counts unclaimed.
fn lead(window_us: u64) -> u64 {
    2_000_000u64.div_ceil(window_us.max(1)).max(1)
}

/// The windows claimed at `horizon` of windows of `window_us` µs: its
/// own, and [`lead`] more.
pub(crate) fn claimed_range(
    horizon: &std::ops::RangeInclusive<u64>,
    window_us: u64,
) -> std::ops::RangeInclusive<u64> {
    *horizon.start()..=*horizon.end() + lead(window_us)
}

/// One window's part, as a server holds it.
#[derive(Debug, Default)]
struct Part {
    /// The data planes this server added to the window's census (0: not
    /// yet).
    published: u64,
    /// The data planes of every server in the window's census, when read.
    census: Option<u64>,
    /// When the census was read (µs), and whether this server added its
    /// own to it in the same look: then another server may be adding its
    /// own just now, unseen, so the fair part leaves room for one more.
    read_at: u64,
    fresh: bool,
    /// What this server holds of the window's N.
    held: u64,
    /// The claims that make it up, to give back by their receipts.
    receipts: Vec<Claimed>,
    /// Whether a claim was tried (a window not yet tried counts nothing:
    /// windows are claimed a window before they count, so only a keeper
    /// that fell behind, or a horizon that grew, finds one).
    tried: bool,
    /// Whether the store failed to answer the last claim.
    failed: bool,
    /// When a claim of the window was last refused in whole or in part
    /// (µs): it is tried again only a [`RETRY`] later.
    refused_at: Option<u64>,
    /// Whether another server came after this one claimed the window:
    /// then this one holds at most its fair part, and gives back the rest.
    contested: bool,
}

/// One claim that was admitted.
#[derive(Debug)]
pub(crate) struct Claimed {
    pub(crate) decision: PolicyDecision,
    pub(crate) amount: u32,
    pub(crate) at: Instant,
}

/// What a server holds of one limit's windows.
#[derive(Debug)]
pub(crate) struct Book {
    limit: u64,
    window_us: u64,
    /// What a window whose claim failed is counted as (N when the store's
    /// errors are answered open: each server then shares N among its own
    /// data planes; 0 when closed).
    on_failure: u64,
    parts: BTreeMap<u64, Part>,
    /// When a census was last read again (µs).
    rechecked_at: u64,
    /// When this server last put its mark in the store (µs).
    marked_at: Option<u64>,
}

/// What to do for one window at a look: add to its census, read it,
/// claim, give back.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Step {
    pub(crate) window: u64,
    /// Data planes to add to the census.
    pub(crate) publish: u64,
    /// Whether to read the census.
    pub(crate) read_census: bool,
}

impl Book {
    /// An empty book of a limit of `limit` a window of `window_us` µs; a
    /// window whose claim failed counts `on_failure`.
    pub(crate) fn new(limit: u64, window_us: u64, on_failure: u64) -> Self {
        Book {
            limit,
            window_us: window_us.max(1),
            on_failure,
            parts: BTreeMap::new(),
            rechecked_at: 0,
            marked_at: None,
        }
    }

    /// The windows a server must hold at `now` when its assignments live
    /// `ttl`: the current one, and each that an assignment sent now may
    /// still be in force in (the window that `ttl` from now falls in, at
    /// the latest). The windows after them are claimed too, ahead
    /// ([`claimed_range`]), so that an assignment sent after the current
    /// window ends finds its last window held.
    pub(crate) fn horizon(&self, now: u64, ttl: Duration) -> std::ops::RangeInclusive<u64> {
        let current = now / self.window_us;
        let ttl_us = u64::try_from(ttl.min(MAX_TTL).as_micros()).unwrap_or(u64::MAX);
        current..=(now.saturating_add(ttl_us)) / self.window_us
    }

    /// The census steps of the windows to claim at `horizon` (its
    /// windows and the next, see [`claimed_range`]) and the one after:
    /// `planes` added to each not yet counted, each to claim not yet read
    /// read.
    pub(crate) fn census_steps(
        &self,
        horizon: &std::ops::RangeInclusive<u64>,
        planes: u64,
    ) -> Vec<Step> {
        let claimed = claimed_range(horizon, self.window_us);
        let (first, last) = (*claimed.start(), *claimed.end() + 1);
        (first..=last)
            .filter_map(|window| {
                let part = self.parts.get(&window);
                let publish = if part.is_none_or(|p| p.published == 0) {
                    planes
                } else {
                    0
                };
                let read_census =
                    window <= *claimed.end() && part.is_none_or(|p| p.census.is_none());
                (publish > 0 || read_census).then_some(Step {
                    window,
                    publish,
                    read_census,
                })
            })
            .collect()
    }

    /// Notes that `planes` were added to `window`'s census.
    pub(crate) fn published(&mut self, window: u64, planes: u64) {
        self.parts.entry(window).or_default().published = planes;
    }

    /// Notes `window`'s census, read at `now` (`fresh`: in the look that
    /// added this server's data planes to it).
    pub(crate) fn census(&mut self, window: u64, planes: u64, now: u64, fresh: bool) {
        let part = self.parts.entry(window).or_default();
        part.census = Some(planes);
        part.read_at = now;
        part.fresh = fresh;
    }

    /// This server's fair part of `window`: N times its data planes over
    /// every server's, as the census says (all of N before a census, or
    /// when it counts only this server's).
    pub(crate) fn fair(&self, window: u64) -> u64 {
        self.part_of(window, false)
    }

    /// N times this server's data planes over every server's (and one
    /// more, `room`), as the census of `window` says.
    fn part_of(&self, window: u64, room: bool) -> u64 {
        let Some(part) = self.parts.get(&window) else {
            return self.limit;
        };
        let Some(all) = part.census else {
            return self.limit;
        };
        let all = all.max(part.published) + u64::from(room);
        if all <= part.published {
            return self.limit;
        }
        let fair = u128::from(self.limit) * u128::from(part.published) / u128::from(all);
        u64::try_from(fair).unwrap_or(self.limit)
    }

    /// The most this server claims of `window` at `now` (`None`: what
    /// its data planes want). Its fair part at first: where the census
    /// was read in the look that added this server's own data planes,
    /// another server may be adding its own unseen, so room is left for
    /// one more until [`SURPLUS_WAIT`] has passed; then the fair part;
    /// then, another `SURPLUS_WAIT` on (every server has claimed its
    /// fair part), no cap, unless the window is contested.
    pub(crate) fn cap(&self, window: u64, now: u64) -> Option<u64> {
        let wait = u64::try_from(SURPLUS_WAIT.as_micros()).unwrap_or(u64::MAX);
        let Some(part) = self.parts.get(&window).filter(|part| part.census.is_some()) else {
            return Some(self.fair(window));
        };
        if part.contested {
            return Some(self.fair(window));
        }
        let since = now.saturating_sub(part.read_at);
        if since < wait {
            return Some(self.part_of(window, part.fresh));
        }
        (since < wait.saturating_mul(2)).then(|| self.fair(window))
    }

    /// The census of `window` read again (see [`recheck`](Self::recheck)):
    /// where it grew, another server came after the windows were claimed,
    /// so every window from `window` on is contested and its census read
    /// again.
    pub(crate) fn recheck(&mut self, window: u64, planes: u64) {
        let grew = self
            .parts
            .get(&window)
            .and_then(|part| part.census)
            .is_some_and(|read| planes > read);
        if grew {
            for part in self.parts.range_mut(window..).map(|(_, part)| part) {
                part.census = None;
                part.contested = true;
            }
        }
    }

    /// Whether `window` is contested.
    #[cfg(test)]
    pub(crate) fn contested(&self, window: u64) -> bool {
        self.parts.get(&window).is_some_and(|part| part.contested)
    }

    /// The window whose census a look at `now` reads again: the next,
    /// once read, at most every [`RECHECK`].
    pub(crate) fn recheck_window(&mut self, current: u64, now: u64) -> Option<u64> {
        let wait = u64::try_from(RECHECK.as_micros()).unwrap_or(u64::MAX);
        if now < self.rechecked_at.saturating_add(wait) {
            return None;
        }
        let next = current + 1;
        let read = self
            .parts
            .get(&next)
            .is_some_and(|part| part.census.is_some());
        if read {
            self.rechecked_at = now;
        }
        read.then_some(next)
    }

    /// What to claim of `window` to hold `goal`: 0 when it is held.
    pub(crate) fn short_of(&self, window: u64, goal: u64) -> u64 {
        let held = self.parts.get(&window).map_or(0, |part| part.held);
        goal.saturating_sub(held)
    }

    /// Whether a claim of `window` was tried.
    pub(crate) fn tried(&self, window: u64) -> bool {
        self.parts.get(&window).is_some_and(|part| part.tried)
    }

    /// What this server holds of `window`.
    pub(crate) fn held(&self, window: u64) -> u64 {
        self.parts.get(&window).map_or(0, |part| part.held)
    }

    /// A claim of `window` was answered: `claimed` admitted (`None`:
    /// refused), or the store failed (`failed`).
    pub(crate) fn claimed(&mut self, window: u64, claimed: Option<Claimed>, failed: bool) {
        let part = self.parts.entry(window).or_default();
        part.tried = true;
        part.failed = failed;
        if claimed.is_some() {
            part.refused_at = None;
        }
        if let Some(claimed) = claimed {
            part.held += u64::from(claimed.amount);
            part.receipts.push(claimed);
        }
    }

    /// Takes `amount` of `window`'s claims to give back, newest first
    /// (a claim may be given back in part): the claims and what to give
    /// of each.
    pub(crate) fn give_back(
        &mut self,
        window: u64,
        amount: u64,
    ) -> Vec<(PolicyDecision, u32, Instant)> {
        let Some(part) = self.parts.get_mut(&window) else {
            return Vec::new();
        };
        let mut left = amount.min(part.held);
        let mut out = Vec::new();
        while left > 0 {
            let Some(newest) = part.receipts.last_mut() else {
                break;
            };
            let give = u32::try_from(left.min(u64::from(newest.amount))).unwrap_or(u32::MAX);
            out.push((newest.decision.clone(), give, newest.at));
            newest.amount -= give;
            part.held -= u64::from(give);
            left -= u64::from(give);
            if newest.amount == 0 {
                part.receipts.pop();
            }
        }
        out
    }

    /// The budget of the windows of `horizon` (its first the current
    /// one): what is held of each window (a failed one counts as the
    /// store's errors say, a contested one at most its fair part, one not
    /// yet tried nothing: no grant may be in force in a window no claim
    /// covers), the current one's and each after it.
    pub(crate) fn budget(&self, horizon: &std::ops::RangeInclusive<u64>) -> Budget {
        let worth = |window: u64| {
            self.parts
                .get(&window)
                .filter(|part| part.tried)
                .map(|part| {
                    if part.failed {
                        part.held.max(self.on_failure)
                    } else if part.contested {
                        part.held.min(self.fair(window))
                    } else {
                        part.held
                    }
                })
        };
        let current = *horizon.start();
        let now = worth(current).unwrap_or(0);
        let ahead: Arc<[(u64, u64)]> = (current + 1..=*horizon.end())
            .map(|window| {
                let start = window.saturating_mul(self.window_us);
                (start, worth(window).unwrap_or(0))
            })
            .collect();
        Budget {
            now,
            ahead: Ahead::Windows(ahead),
        }
    }

    /// Whether a claim of `window` is a retry after a refusal, and due at
    /// `now` (`None`: not a retry).
    pub(crate) fn retry_due(&self, window: u64, now: u64) -> Option<bool> {
        let wait = u64::try_from(RETRY.as_micros()).unwrap_or(u64::MAX);
        let refused = self.parts.get(&window)?.refused_at?;
        Some(now >= refused.saturating_add(wait))
    }

    /// Whether a refused window is due to be tried again at `now`.
    pub(crate) fn retry_pending(&self, now: u64) -> bool {
        self.parts
            .keys()
            .any(|window| self.retry_due(*window, now) == Some(true))
    }

    /// Whether a census is due to be read again at `now`.
    pub(crate) fn recheck_due(&self, now: u64) -> bool {
        let wait = u64::try_from(RECHECK.as_micros()).unwrap_or(u64::MAX);
        now >= self.rechecked_at.saturating_add(wait)
    }

    /// Notes that `window`'s claim was refused at `now` (the store has
    /// nothing left of it).
    pub(crate) fn refused(&mut self, window: u64, now: u64) {
        self.parts.entry(window).or_default().refused_at = Some(now);
    }

    /// The store lost the claims of the windows from `window` on: they
    /// are held no more, not tried, their census to be added and read
    /// again. Returns every claim this server made of them, to give back:
    /// those the store lost are given back as nothing, and those made
    /// since it came back (which it holds) must not stay in it unheld.
    pub(crate) fn lost_from(&mut self, window: u64) -> Vec<(u64, Claimed)> {
        let mut made = Vec::new();
        for (at, part) in self.parts.range_mut(window..) {
            let lost = std::mem::take(part);
            made.extend(lost.receipts.into_iter().map(|claimed| (*at, claimed)));
        }
        made
    }

    /// Whether this server's mark is to be put in the store again at
    /// `now`: never put, or half a `period` ago.
    pub(crate) fn mark_due(&self, now: u64, period: Duration) -> bool {
        let half = u64::try_from(period.as_micros() / 2).unwrap_or(u64::MAX);
        self.marked_at
            .is_none_or(|at| now >= at.saturating_add(half))
    }

    /// Notes the mark put in the store at `now`.
    pub(crate) fn marked(&mut self, now: u64) {
        self.marked_at = Some(now);
    }

    /// Notes the marks the store holds (`None`: it did not say), and the
    /// claims of `window` it holds, all servers' (`stored`), read at
    /// `now`: no mark, though this server put one before the read, and
    /// fewer claims than this server holds, and the store lost them,
    /// which are made again from `window` on (and the mark put again).
    /// Returns the claims to give back when they were lost (see
    /// [`lost_from`](Self::lost_from)).
    pub(crate) fn check_mark(
        &mut self,
        window: u64,
        marks: Option<u64>,
        stored: Option<u64>,
        now: u64,
    ) -> Option<Vec<(u64, Claimed)>> {
        let put_before = self.marked_at.is_some_and(|at| at < now);
        let fewer = stored.is_some_and(|stored| stored < self.held(window));
        if marks == Some(0) && put_before && fewer {
            self.marked_at = None;
            return Some(self.lost_from(window));
        }
        None
    }

    /// Forgets the windows that ended before `window`.
    pub(crate) fn forget_before(&mut self, window: u64) {
        self.parts = self.parts.split_off(&window);
    }

    /// Whether nothing is held of any window.
    pub(crate) fn holds_nothing(&self) -> bool {
        self.parts.values().all(|part| part.held == 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: u64 = 1_000_000;

    #[test]
    fn the_horizon_covers_the_longest_assignment_and_a_window() {
        let book = Book::new(30, SECOND, 30);
        let now = 1_000 * SECOND + SECOND / 2;
        assert_eq!(book.horizon(now, Duration::from_secs(15)), 1_000..=1_015);
        let hourly = Book::new(30, 3_600 * SECOND, 30);
        assert_eq!(hourly.horizon(now, Duration::from_secs(15)), 0..=0);
        let late = 3_600 * SECOND - 5 * SECOND;
        assert_eq!(hourly.horizon(late, Duration::from_secs(15)), 0..=1);
    }

    #[test]
    fn windows_of_a_year_cannot_be_claimed() {
        let policy = Policy::new(Vec::new());
        let key = Key::from("k");
        assert!(ClaimKeys::new(&policy, &key, 10, 3_600 * SECOND, 1).is_some());
        assert!(ClaimKeys::new(&policy, &key, 10, 31 * 86_400 * SECOND, 1).is_some());
        assert!(ClaimKeys::new(&policy, &key, 10, 365 * 86_400 * SECOND, 1).is_none());
    }

    #[test]
    fn a_fair_part_follows_the_census() {
        let mut book = Book::new(100, SECOND, 100);
        assert_eq!(book.fair(7), 100);
        book.published(7, 1);
        book.census(7, 4, 0, false);
        assert_eq!(book.fair(7), 25);
        book.published(8, 3);
        book.census(8, 3, 0, false);
        assert_eq!(book.fair(8), 100);
        // Read in the look that added this server's own: room for one
        // more that may be adding its own unseen, for a while; then the
        // fair part; then what the data planes want.
        book.census(8, 3, 0, true);
        assert_eq!(book.cap(8, 0), Some(75));
        assert_eq!(book.cap(8, 700_000), Some(100));
        assert_eq!(book.cap(8, 1_300_000), None);
        book.census(7, 4, 0, false);
        assert_eq!(book.cap(7, 0), Some(25));
        assert_eq!(book.cap(7, 700_000), Some(25));
        assert_eq!(book.cap(7, 1_300_000), None);
    }

    #[test]
    fn a_census_that_grew_contests_the_windows_claimed() {
        let mut book = Book::new(100, SECOND, 100);
        let claim = |amount| Claimed {
            decision: PolicyDecision::new([]),
            amount,
            at: Instant::now(),
        };
        for window in 10..=12 {
            book.published(window, 1);
            book.census(window, 1, 0, false);
            book.claimed(window, Some(claim(100)), false);
        }
        assert_eq!(book.recheck_window(10, 5 * SECOND), Some(11));
        assert_eq!(book.recheck_window(10, 5 * SECOND + SECOND / 2), None);
        book.recheck(11, 1);
        assert!(!book.contested(11));
        assert_eq!(book.budget(&(10..=12)).least_ahead(), 100);
        // A second server of three data planes came: windows 11 on are
        // contested, read again, and held at most at the fair part.
        book.recheck(11, 4);
        assert!(!book.contested(10) && book.contested(11) && book.contested(12));
        assert_eq!(book.fair(11), 100);
        book.census(11, 4, 0, false);
        book.census(12, 4, 0, false);
        let budget = book.budget(&(10..=12));
        assert_eq!((budget.now, budget.least_ahead()), (100, 25));
    }

    #[test]
    fn claims_are_given_back_newest_first_and_in_part() {
        let mut book = Book::new(100, SECOND, 100);
        let claim = |amount| Claimed {
            decision: PolicyDecision::new([]),
            amount,
            at: Instant::now(),
        };
        book.claimed(3, Some(claim(10)), false);
        book.claimed(3, Some(claim(5)), false);
        assert_eq!(book.held(3), 15);
        let given: Vec<u32> = book.give_back(3, 8).iter().map(|g| g.1).collect();
        assert_eq!(given, [5, 3]);
        assert_eq!(book.held(3), 7);
    }

    #[test]
    fn untried_windows_count_nothing_and_failed_ones_count_as_told() {
        let mut book = Book::new(100, SECOND, 100);
        book.claimed(10, None, true);
        book.claimed(11, None, true);
        let budget = book.budget(&(10..=11));
        assert_eq!(
            budget.ahead,
            Ahead::Windows(Arc::from([(11 * SECOND, 100)]))
        );
        assert_eq!(budget.now, 100);
        // Window 12 not tried: nothing there.
        let budget = book.budget(&(10..=12));
        assert_eq!((budget.now, budget.least_ahead()), (100, 0));
        let mut closed = Book::new(100, SECOND, 0);
        closed.claimed(10, None, true);
        assert_eq!(closed.budget(&(10..=10)).now, 0);
    }
}
