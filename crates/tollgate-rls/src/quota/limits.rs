//! The limits the data planes report, shared by every stream of a
//! service: for each, its [`Ledger`], what each data plane (a stream's
//! bucket, a *slot*) wants, and whether its window is spent.
//!
//! Every change of a limit's grants is made here, under one lock, and the
//! streams whose grants changed are woken to send them.

use super::action::Assignment;
use super::bucket::Limited;
use super::ledger::{Grant, Ledger};
use super::metrics::{RuleSeries, Series};
use super::shares::{like, shares, squeezed, worth_changing};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use tokio::sync::Notify;
use tollgate_store::Key;

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

/// Every limit reported, by rule and counted key.
#[derive(Debug, Default)]
pub(crate) struct Limits {
    map: Mutex<HashMap<(String, Key), Limit>>,
    series: Series,
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
    /// The rule's series: the grants and the data planes are kept here.
    series: RuleSeries,
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

impl Limit {
    fn new(limited: &Limited, series: RuleSeries) -> Self {
        Limit {
            limit: limited.limit,
            window_us: limited.window_us,
            ledger: Ledger::new(limited.limit, limited.window_us),
            slots: BTreeMap::new(),
            spent_in: None,
            series,
        }
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

    /// Shares the budget anew at `now`; returns the wake-ups of the slots
    /// whose grants changed.
    fn rebalance(&mut self, now: u64) -> Vec<Arc<Notify>> {
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
        let wanted: Vec<Grant> = if self.spent_in == Some(window) {
            vec![Grant::DENY; active.len()]
        } else {
            let demands: Vec<Option<u64>> = active.iter().map(|id| self.slots[id].demand).collect();
            shares(&demands, self.limit.saturating_add(active.len() as u64))
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
            let given = self.ledger.assign(id, want, now)
                || (want.per_window > held.per_window && self.assign_what_fits(id, want, now));
            if given {
                woken.push(Arc::clone(&self.slots[&id].wake));
            }
        }
        woken
    }

    /// When `want` does not fit: the largest grant between what `id`
    /// holds and `want` that the ledger allows now, if any (a change costs
    /// a full bucket in the window it is made in, so a rise may have to
    /// come in steps).
    fn assign_what_fits(&mut self, id: u64, want: Grant, now: u64) -> bool {
        let held = self.ledger.grant(id).unwrap_or(Grant::DENY);
        let (mut low, mut high) = if want.per_window > held.per_window {
            (held.per_window + 1, want.per_window - 1)
        } else {
            (1, want.per_window.saturating_sub(1))
        };
        let mut best = None;
        while low <= high {
            let mid = low + (high - low) / 2;
            if self.ledger.fits(id, like(want, mid), now) {
                best = Some(mid);
                low = mid + 1;
            } else {
                high = mid - 1;
            }
        }
        best.is_some_and(|per_window| self.ledger.assign(id, like(want, per_window), now))
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
    /// The series of rule `name`.
    pub(crate) fn series(&self, name: &str) -> RuleSeries {
        self.series.of(name)
    }

    fn with<T>(&self, limited: &Limited, f: impl FnOnce(&mut Limit) -> T) -> T {
        let mut map = self.map.lock().unwrap_or_else(PoisonError::into_inner);
        let limit = map
            .entry(limited.counted_as())
            .or_insert_with(|| Limit::new(limited, self.series.of(limited.rule.full_key())));
        if !limit.is(limited) {
            // A reloaded rule: its grants start over.
            limit.series.granted.decrement(limit.granted() as f64);
            let slots = std::mem::take(&mut limit.slots);
            *limit = Limit::new(limited, limit.series.clone());
            limit.slots = slots;
        }
        f(limit)
    }

    /// `slot` (of a stream woken by `wake`) reported `usage` of
    /// `limited` at `now`, the store then saying `remaining` of the
    /// window's limit (`None`: the store did not answer): its demand
    /// noted, the window marked spent when nothing remains, the shares
    /// made anew. Returns the slot's assignment; the other slots whose
    /// grants changed are woken.
    pub(crate) fn report(
        &self,
        limited: &Limited,
        slot: u64,
        wake: &Arc<Notify>,
        usage: Usage,
        remaining: Option<u64>,
        now: u64,
    ) -> Assignment {
        let (assignment, woken) = self.with(limited, |limit| {
            let entry = limit.slots.entry(slot).or_insert_with(|| Slot {
                wake: Arc::clone(wake),
                demand: None,
                left: true,
            });
            if std::mem::replace(&mut entry.left, false) {
                limit.series.planes.increment(1.0);
            }
            if usage.elapsed_seconds > 0 {
                let asked = usage.allowed.saturating_add(usage.denied);
                let per_window = u128::from(asked) * u128::from(limit.window_us)
                    / (u128::from(usage.elapsed_seconds) * 1_000_000);
                entry.demand = Some(u64::try_from(per_window).unwrap_or(u64::MAX));
            }
            if remaining == Some(0) {
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
            !limit.slots.is_empty()
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
            limits.report(bucket, slot as u64, &wake, usage, Some(30), start);
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
