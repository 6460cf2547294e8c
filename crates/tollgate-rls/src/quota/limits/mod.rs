//! The limits the data planes report, shared by every stream of a
//! service: for each, its [`Ledger`], what each data plane (a stream's
//! bucket, a *slot*) wants, and whether its window is spent.
//!
//! Every change of a limit's grants is made here, under one lock, and the
//! streams whose grants changed are woken to send them. Where servers
//! share the store, each limit's grants stay within what this server
//! holds of its windows ([`Book`]); the [keeper](super::keeper) claims
//! and gives back through the plans made here.

mod looks;

pub(crate) use looks::ClaimAnswer;

use super::action::Assignment;
use super::bucket::Limited;
use super::claims::{Book, ClaimKeys};
use super::ledger::{Ahead, Budget, Grant, Ledger};
use super::metrics::{RuleSeries, Series};
use super::shares::{cost, like, met, shares, squeezed, with_room, worth_changing};
use std::collections::{BTreeMap, HashMap};
use std::ops::RangeInclusive;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};
use tokio::sync::Notify;
use tollgate_store::Key;

/// A limit's name in the map: its rule's full key and its counted key.
pub(crate) type LimitId = (String, Key);

/// How a server's limits are bounded: alone, by N each window, or
/// together with the other servers over the store, by what they claim.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Sharing {
    /// Each limit's grants share N (a store that cannot hold claims).
    #[default]
    Alone,
    /// Each limit's grants share what is claimed; a window whose claim
    /// failed counts N (`fail_open`) or nothing.
    Claims { fail_open: bool },
}

/// How long assignments live until a stream says otherwise: three of
/// Envoy's 5 s reporting intervals.
const DEFAULT_TTL: Duration = Duration::from_secs(15);

/// A claim plan's slack: what is held past the need is given back only
/// once it is more than this part of N (and one), so that a server does
/// not give back and claim again at every look.
const GIVE_BACK_SLACK: u64 = 16;

/// What a data plane reported of a bucket.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Usage {
    /// Requests admitted since its last report.
    pub(crate) allowed: u64,
    /// Requests refused since its last report.
    pub(crate) denied: u64,
    /// Seconds since its last report (0 in a bucket's first).
    pub(crate) elapsed_seconds: u64,
}

/// A report of one bucket, as the service took it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Reported {
    /// What the data plane reported.
    pub(crate) usage: Usage,
    /// What the store said remained of the window before the usage was
    /// charged (`None`: it did not answer).
    pub(crate) remaining: Option<u64>,
    /// How long the stream's assignments live.
    pub(crate) ttl: Duration,
}

/// Every limit reported, by rule and counted key.
#[derive(Debug, Default)]
pub(crate) struct Limits {
    map: Mutex<HashMap<LimitId, Limit>>,
    series: Series,
    sharing: Sharing,
    /// This server's number among those that share the store (random):
    /// its marks beside its claims are its own.
    server: u64,
}

#[derive(Debug)]
struct Limit {
    limit: u64,
    window_us: u64,
    ledger: Ledger<u64>,
    slots: BTreeMap<u64, Slot>,
    /// The window whose N the reports say are admitted: every slot is
    /// denied until it ends.
    spent_in: Option<u64>,
    /// Usage this server's reports charged to the current window (the
    /// store counts at the report) though their interval began before
    /// it: not surely this window's, so it does not spend it. The window,
    /// and the usage.
    carried_in: (u64, u64),
    /// The rule's series: the grants and the data planes are kept here.
    series: RuleSeries,
    /// What this server holds of the windows, where servers share the
    /// store.
    claims: Option<(Book, ClaimKeys)>,
    /// The rule's full key, for logs.
    rule: String,
    /// The longest time to live of the assignments given.
    ttl: Duration,
    /// When the keeper last looked at the claims (`None`: never).
    looked: Option<Instant>,
    /// Held through a look at the claims: one look at a time.
    looking: Arc<tokio::sync::Mutex<()>>,
    /// Whether a look has claimed the windows (before, the limit's first
    /// answer waits for one).
    ready: bool,
    /// Whether what the data planes want changed since the last look (a
    /// data plane came or left, a demand moved, a window was spent): the
    /// keeper looks at once, else only when a window comes in, a retry is
    /// due, or a census is to be read again.
    changed: bool,
    /// The window the last look was made in.
    looked_in: u64,
    /// The budget of the horizon it was worked out for, until the claims
    /// change.
    budget_cache: Option<(RangeInclusive<u64>, Budget)>,
}

#[derive(Debug)]
struct Slot {
    /// Its stream's wake-up, when its grant changes.
    wake: Arc<Notify>,
    /// Requests a window it wants, from its last report that said.
    demand: Option<u64>,
    /// Whether its stream closed.
    left: bool,
}

/// A number for this server that no other server over the store is
/// likely to have: the clock's nanoseconds and the process, hashed.
fn server_number() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u32(std::process::id());
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.subsec_nanos());
    hasher.write_u32(nanos);
    hasher.finish()
}

/// Says once a process that a rule's windows are too long to claim (a
/// year): its data planes are bounded by each server alone.
fn warn_unclaimable(limited: &Limited) {
    static WARNED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if !WARNED.swap(true, std::sync::atomic::Ordering::Relaxed) {
        tracing::warn!(
            rule = limited.rule.full_key(),
            "a quota rule's window is too long for servers to claim their parts of it in the \
             store (a year): each server bounds its own data planes by N + K; use a shorter unit \
             for one bound across servers"
        );
    }
}

impl Limit {
    fn new(limited: &Limited, series: RuleSeries, sharing: Sharing, server: u64) -> Self {
        let claims = match sharing {
            Sharing::Alone => None,
            Sharing::Claims { fail_open } => {
                let on_failure = if fail_open { limited.limit } else { 0 };
                let book = Book::new(limited.limit, limited.window_us, on_failure);
                let keys = ClaimKeys::new(
                    &limited.policy,
                    &limited.key,
                    limited.limit,
                    limited.window_us,
                    server,
                );
                if keys.is_none() {
                    warn_unclaimable(limited);
                }
                keys.map(|keys| (book, keys))
            }
        };
        Limit {
            limit: limited.limit,
            window_us: limited.window_us,
            ledger: Ledger::new(limited.window_us),
            slots: BTreeMap::new(),
            spent_in: None,
            carried_in: (0, 0),
            series,
            claims,
            rule: limited.rule.full_key().to_owned(),
            ttl: DEFAULT_TTL,
            looked: None,
            looking: Arc::default(),
            ready: false,
            changed: true,
            looked_in: 0,
            budget_cache: None,
        }
    }

    /// The windows this server must hold at `now`.
    fn horizon(&self, now: u64) -> RangeInclusive<u64> {
        match &self.claims {
            Some((book, _)) => book.horizon(now, self.ttl),
            None => now / self.window_us..=now / self.window_us,
        }
    }

    /// What the grants may admit at `now`: N, or what is held.
    fn budget(&mut self, now: u64) -> Budget {
        let horizon = self.horizon(now);
        let Some((book, _)) = &self.claims else {
            return Budget::each(self.limit);
        };
        // Kept until the windows or the claims change: reports come far
        // more often than either.
        match &self.budget_cache {
            Some((of, budget)) if *of == horizon => budget.clone(),
            _ => {
                let budget = book.budget(&horizon);
                self.budget_cache = Some((horizon, budget.clone()));
                budget
            }
        }
    }

    /// Whether a report of `usage` at `now`, the store having said
    /// `remaining` of the window just before its usage was charged,
    /// shows the window's N admitted. A report says how many, not when:
    /// usage whose interval began before the window is charged to it but
    /// may be the last window's, so this server's such usage is not
    /// counted as this window's (the usage other servers carried in
    /// still is: a window may then be judged spent early, never late).
    fn spent_by(&mut self, usage: Usage, remaining: Option<u64>, now: u64) -> bool {
        let window = now / self.window_us;
        if self.carried_in.0 != window {
            self.carried_in = (window, 0);
        }
        let into = now % self.window_us;
        let within = usage.elapsed_seconds.saturating_mul(1_000_000) <= into;
        let Some(before) = remaining else {
            return false;
        };
        let left = before.saturating_add(self.carried_in.1);
        if within {
            left.saturating_sub(usage.allowed) == 0
        } else {
            self.carried_in.1 = self.carried_in.1.saturating_add(usage.allowed);
            left == 0
        }
    }

    /// The slots that report.
    fn active(&self) -> impl Iterator<Item = (&u64, &Slot)> {
        self.slots.iter().filter(|(_, slot)| !slot.left)
    }

    /// What this server's data planes want of N a window, beyond one
    /// each: each its demand with room to grow (as [`shares`] meets it),
    /// one whose demand is not known yet all of N (the claim of a fair
    /// part caps it).
    fn wanted(&self) -> u64 {
        let (sum, planes) = self.active().fold((0u64, 0u64), |(sum, n), (_, slot)| {
            let want = slot
                .demand
                .map_or(self.limit, |demand| cost(met(with_room(demand))));
            (sum.saturating_add(want), n + 1)
        });
        sum.saturating_sub(planes)
    }

    /// The refill granted to the slots that report, together.
    fn granted(&self) -> u64 {
        self.slots
            .iter()
            .filter(|(_, slot)| !slot.left)
            .filter_map(|(id, _)| self.ledger.grant(*id))
            .map(|grant| grant.per_window)
            .sum()
    }

    /// Whether `limited` is still this limit (a reloaded rule may change
    /// its limit or window: then a new ledger).
    fn is(&self, limited: &Limited) -> bool {
        self.limit == limited.limit && self.window_us == limited.window_us
    }

    /// Whether a look at `now` may change anything: what the data planes
    /// want changed, a window came in since the last, a retry is due or a
    /// census is to be read again.
    fn worth_a_look(&self, now: u64) -> bool {
        let Some((book, _)) = &self.claims else {
            return false;
        };
        self.changed
            || self.looked_in != now / self.window_us
            || book.retry_pending(now)
            || book.recheck_due(now)
    }

    /// What the data planes that report may share of `budget` a window:
    /// the least any window leaves once the buckets of those that left
    /// are in it.
    fn share_budget(&self, budget: &Budget) -> u64 {
        let left = |start: u64| self.ledger.left_need_at(start);
        let ahead = match &budget.ahead {
            Ahead::Each(each) => *each,
            // No window after the current one counts: the current one's.
            Ahead::Windows(windows) => windows
                .iter()
                .map(|(start, each)| each.saturating_sub(left(*start)))
                .min()
                .unwrap_or(u64::MAX),
        };
        ahead.min(budget.now)
    }

    /// Whether this server's claims do not cover the windows that count
    /// at `now`: never looked at, or the keeper fell behind (the last
    /// window that counts not tried).
    fn unclaimed(&self, now: u64) -> bool {
        self.claims
            .as_ref()
            .is_some_and(|(book, _)| !self.ready || !book.tried(*self.horizon(now).end()))
    }

    /// Shares the budget anew at `now`; returns the wake-ups of the slots
    /// whose grants changed. Not while the claims are behind (the look
    /// that brings them up to date shares anew): a budget that only
    /// seems to have fallen would cost every bucket it cut a full one.
    fn rebalance(&mut self, now: u64) -> Vec<Arc<Notify>> {
        if self.unclaimed(now) {
            return Vec::new();
        }
        let before = self.granted();
        let woken = self.reshare(now);
        let after = self.granted();
        self.series.granted.increment(after as f64 - before as f64);
        woken
    }

    fn reshare(&mut self, now: u64) -> Vec<Arc<Notify>> {
        self.ledger.roll(now);
        let window = now / self.window_us;
        let active: Vec<u64> = self
            .slots
            .iter()
            .filter(|(_, slot)| !slot.left)
            .map(|(id, _)| *id)
            .collect();
        let budget = self.budget(now);
        let wanted: Vec<Grant> = if self.spent_in == Some(window) {
            vec![Grant::DENY; active.len()]
        } else {
            let demands: Vec<Option<u64>> = active.iter().map(|id| self.slots[id].demand).collect();
            let each = self.share_budget(&budget);
            shares(&demands, each.saturating_add(active.len() as u64))
        };
        // Cuts first: they free what the rises need; then the rises, the
        // data plane furthest under its share first (held / wanted, in
        // thousandths), since a rise may take what is left.
        let mut order: Vec<(u64, Grant)> = active.into_iter().zip(wanted).collect();
        order.sort_by_key(|(id, want)| {
            let held = self.ledger.grant(*id).unwrap_or(Grant::DENY);
            let rise = want.per_window >= held.per_window;
            let under = u128::from(held.per_window) * 1_000 / u128::from(want.per_window.max(1));
            (rise, under, *id)
        });
        let pressed = order
            .iter()
            .any(|(id, want)| squeezed(self.ledger.grant(*id).unwrap_or(Grant::DENY), *want));
        let mut woken = Vec::new();
        for (id, want) in order {
            let held = self.ledger.grant(id).unwrap_or(Grant::DENY);
            if !worth_changing(held, want, pressed) {
                continue;
            }
            let given = self.ledger.assign(id, want, now, &budget)
                || (want.per_window > held.per_window
                    && self.assign_what_fits(id, want, now, &budget));
            if given {
                woken.push(Arc::clone(&self.slots[&id].wake));
            }
        }
        // A budget that fell (a window claimed short, a failed claim
        // answered closed): the grants in force must fit it before that
        // window begins, whatever a change costs.
        while !self.ledger.steady_fits(&budget.ahead) {
            let Some(id) = self.ledger.deny_largest(now) else {
                break;
            };
            if let Some(slot) = self.slots.get(&id) {
                woken.push(Arc::clone(&slot.wake));
            }
        }
        woken
    }

    /// When `want` does not fit: the largest grant between what `id`
    /// holds and `want` that the ledger allows now, if any (a change costs
    /// a full bucket in the window it is made in, so a rise may have to
    /// come in steps).
    fn assign_what_fits(&mut self, id: u64, want: Grant, now: u64, budget: &Budget) -> bool {
        let held = self.ledger.grant(id).unwrap_or(Grant::DENY);
        let (mut low, mut high) = if want.per_window > held.per_window {
            (held.per_window + 1, want.per_window - 1)
        } else {
            (1, want.per_window.saturating_sub(1))
        };
        let mut best = None;
        while low <= high {
            let mid = low + (high - low) / 2;
            if self.ledger.fits(id, like(want, mid), now, budget) {
                best = Some(mid);
                low = mid + 1;
            } else {
                high = mid - 1;
            }
        }
        best.is_some_and(|per_window| self.ledger.assign(id, like(want, per_window), now, budget))
    }

    /// The assignment `slot` holds now.
    fn assignment_of(&self, slot: u64) -> Assignment {
        Assignment::of(
            self.ledger.grant(slot).unwrap_or(Grant::DENY),
            self.window_us,
        )
    }
}

impl Limits {
    /// Limits bounded as `sharing` says.
    pub(crate) fn new(sharing: Sharing) -> Self {
        Limits {
            sharing,
            server: server_number(),
            ..Limits::default()
        }
    }

    /// The series of rule `name`.
    pub(crate) fn series(&self, name: &str) -> RuleSeries {
        self.series.of(name)
    }

    fn with<T>(&self, limited: &Limited, f: impl FnOnce(&mut Limit) -> T) -> T {
        let mut map = self.map.lock().unwrap_or_else(PoisonError::into_inner);
        let limit = map.entry(limited.counted_as()).or_insert_with(|| {
            let series = self.series.of(limited.rule.full_key());
            Limit::new(limited, series, self.sharing, self.server)
        });
        if !limit.is(limited) {
            // A reloaded rule: its grants start over.
            limit.series.granted.decrement(limit.granted() as f64);
            let slots = std::mem::take(&mut limit.slots);
            *limit = Limit::new(limited, limit.series.clone(), self.sharing, self.server);
            limit.slots = slots;
        }
        f(limit)
    }

    /// `slot` (of a stream woken by `wake`) made `report` of `limited` at
    /// `now`: its demand noted, the window marked spent when nothing
    /// remains, the shares made anew. Returns the slot's assignment; the
    /// other slots whose grants changed are woken.
    pub(crate) fn report(
        &self,
        limited: &Limited,
        slot: u64,
        wake: &Arc<Notify>,
        report: Reported,
        now: u64,
    ) -> Assignment {
        let Reported {
            usage,
            remaining,
            ttl,
        } = report;
        let (assignment, woken) = self.with(limited, |limit| {
            limit.ttl = limit.ttl.max(ttl);
            let entry = limit.slots.entry(slot).or_insert_with(|| Slot {
                wake: Arc::clone(wake),
                demand: None,
                left: true,
            });
            if std::mem::replace(&mut entry.left, false) {
                limit.series.planes.increment(1.0);
                limit.changed = true;
            }
            if usage.elapsed_seconds > 0 {
                let asked = usage.allowed.saturating_add(usage.denied);
                let per_window = u128::from(asked) * u128::from(limit.window_us)
                    / (u128::from(usage.elapsed_seconds) * 1_000_000);
                let demand = Some(u64::try_from(per_window).unwrap_or(u64::MAX));
                limit.changed |= std::mem::replace(&mut entry.demand, demand) != demand;
            }
            if limit.spent_by(usage, remaining, now) {
                limit.changed |= limit.spent_in != Some(now / limit.window_us);
                limit.spent_in = Some(now / limit.window_us);
            }
            let woken = limit.rebalance(now);
            (limit.assignment_of(slot), woken)
        });
        for other in woken {
            if !Arc::ptr_eq(&other, wake) {
                other.notify_one();
            }
        }
        assignment
    }

    /// The assignment `slot` holds for `limited` at `now`, the shares made
    /// anew first (a window that ended ends its refusal).
    pub(crate) fn assignment(&self, limited: &Limited, slot: u64, now: u64) -> Assignment {
        let (assignment, woken) = self.with(limited, |limit| {
            let woken = limit.rebalance(now);
            (limit.assignment_of(slot), woken)
        });
        for other in woken {
            other.notify_one();
        }
        assignment
    }

    /// `slot`'s stream closed at `now`: its data plane enforces its last
    /// assignment until `lapses`, and its share goes to the others.
    pub(crate) fn leave(&self, limited: &Limited, slot: u64, now: u64, lapses: u64) {
        let woken = self.with(limited, |limit| {
            let held = limit.ledger.grant(slot).unwrap_or(Grant::DENY);
            limit.ledger.leave(slot, now, lapses);
            limit.changed = true;
            if let Some(entry) = limit.slots.get_mut(&slot)
                && !std::mem::replace(&mut entry.left, true)
            {
                limit.series.planes.decrement(1.0);
                limit.series.granted.decrement(held.per_window as f64);
            }
            limit.rebalance(now)
        });
        for other in woken {
            other.notify_one();
        }
    }

    /// Forgets the limits no stream reports any more and whose ledgers
    /// count no data plane: what keeps the map bounded by the buckets
    /// the streams report.
    pub(crate) fn forget_idle(&self, now: u64) {
        let mut map = self.map.lock().unwrap_or_else(PoisonError::into_inner);
        map.retain(|_, limit| {
            limit.ledger.roll(now);
            limit
                .slots
                .retain(|id, slot| !slot.left || limit.ledger.grant(*id).is_some());
            // Claims held are given back by the keeper first.
            let holds = limit
                .claims
                .as_ref()
                .is_some_and(|(book, _)| !book.holds_nothing());
            !limit.slots.is_empty() || holds
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::quota::bucket::{BucketKey, Kind, kind};
    use envoy_types::pb::envoy::service::rate_limit_quota::v3::BucketId;

    const SECOND: u64 = 1_000_000;

    fn limited(config: &Config, value: &str) -> Limited {
        let id = BucketId {
            bucket: [("client".to_owned(), value.to_owned())].into(),
        };
        match kind(config, "q", &BucketKey::of(&id).unwrap()) {
            Kind::Limited(limited) => limited,
            _ => panic!("a limited bucket"),
        }
    }

    fn len(limits: &Limits) -> usize {
        limits.map.lock().unwrap().len()
    }

    /// The map holds a limit while a stream reports it, and while a data
    /// plane that left may still enforce its last assignment; once every
    /// such assignment has lapsed, it is forgotten: what keeps the map
    /// bounded by the buckets the open streams report.
    #[test]
    fn limits_are_forgotten_once_no_stream_reports_them_and_their_grants_lapsed() {
        let config = Config::from_yaml(
            "q.yaml",
            "domain: q\ndescriptors:\n  - key: client\n    rate_limit: {unit: second, requests_per_unit: 30}\n",
        )
        .unwrap();
        let limits = Limits::default();
        let wake = Arc::new(Notify::new());
        let start = 1_000 * SECOND;
        let buckets: Vec<Limited> = (0..100)
            .map(|i| limited(&config, &format!("c{i}")))
            .collect();
        let usage = Usage::default();
        for (slot, bucket) in buckets.iter().enumerate() {
            let report = Reported {
                usage,
                remaining: Some(30),
                ttl: DEFAULT_TTL,
            };
            limits.report(bucket, slot as u64, &wake, report, start);
        }
        assert_eq!(len(&limits), 100);
        // Still reported: kept.
        limits.forget_idle(start + 10 * SECOND);
        assert_eq!(len(&limits), 100);
        // Every stream closes; each grant lapses 15 s on.
        let left = start + 10 * SECOND;
        for (slot, bucket) in buckets.iter().enumerate() {
            limits.leave(bucket, slot as u64, left, left + 15 * SECOND);
        }
        // Before the grants lapse: still counted, kept.
        limits.forget_idle(left + 5 * SECOND);
        assert_eq!(len(&limits), 100);
        // A window after they lapsed: gone.
        limits.forget_idle(left + 17 * SECOND);
        assert_eq!(len(&limits), 0);
    }
}
