//! What a key's usage moved from one plan to another carries
//! ([`Store::carry`](super::Store::carry)), read once here for every store.

use super::decision::PolicyDecision;
use crate::policy::{NamedLimit, Policy};
use smallvec::SmallVec;

/// What a key's move from `from` to `to` does to each limit's state: read
/// once here for every store.
///
/// Limits are paired by name: a limit of `to` takes the usage of the
/// limit of `from` with its name. The limits left without a partner by
/// name are paired in order (a plan whose one limit was renamed, a
/// per-key plan of other quotas, keeps its usage). A limit of `from` with
/// no partner in `to` keeps its state where it is, for its period: a limit
/// missing from a plan for a moment (a line deleted from a limits file and
/// put back) finds its keys' usage when the plan that has it returns. A
/// limit of `to` with no partner starts from its own state: whole, or
/// what it kept when it was left.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Carried {
    /// For each limit of `to`, the units it is charged: what its partner
    /// used ([`tollgate_core::used_of`]: a debt included, for the
    /// algorithms that keep a schedule), plus the caller's unseen units,
    /// never below 0, at most `u32::MAX`; 0 for a limit with no partner.
    pub to: SmallVec<[u32; 2]>,
    /// For each limit of `from`: `None` when it moved to `to` (its state is
    /// reset), `Some(units)` when it stays where it is, charged `units`
    /// more (the caller's unseen units, never below 0).
    pub from: SmallVec<[Option<u32>; 2]>,
}

impl Carried {
    /// Reads a move from `from`, whose peek answered `peek`, to `to`,
    /// counting `unseen` units its caller admitted that the store has not
    /// (a local-first store's unreported ones).
    pub fn read(from: &Policy, peek: &PolicyDecision, to: &Policy, unseen: i64) -> Self {
        let partners = partners(from, to);
        let clamp = |units: i64| u32::try_from(units.max(0)).unwrap_or(u32::MAX);
        let used = |index: usize| -> i64 {
            let (Some(limit), Some(limiter)) = (peek.each().get(index), from.limiters().get(index))
            else {
                return 0;
            };
            i64::try_from(tollgate_core::used_of(limiter, limit)).unwrap_or(i64::MAX)
        };
        let to_units = partners
            .iter()
            .map(|partner| partner.map_or(0, |index| clamp(used(index).saturating_add(unseen))))
            .collect();
        let from_units = (0..from.limits().len())
            .map(|index| (!partners.contains(&Some(index))).then(|| clamp(unseen)))
            .collect();
        Carried {
            to: to_units,
            from: from_units,
        }
    }

    /// The move in a store that names a limit's state by its name, its
    /// algorithm's state and the plan ([`Policy::plan`]), as the Redis
    /// store does, when only quotas changed: `from` and `to` have the same
    /// limits (names and algorithms, in order) under the same plan, as
    /// when live limits change a quota. Each limit is then one state
    /// there, which says its quota and reads as the same usage under the
    /// new one, as a restart reads it: it stays in place, charged only the
    /// unseen units. Moving it (read, reset, charged) would say the same,
    /// but two instances moving it at once could lose it between one's
    /// reset and the other's charge. Any other move is left as it is.
    pub fn in_place(mut self, from: &Policy, to: &Policy, unseen: i64) -> Self {
        let alike = |a: &NamedLimit, b: &NamedLimit| {
            a.name() == b.name() && a.limiter().algorithm() == b.limiter().algorithm()
        };
        let same_limits = from.limits().len() == to.limits().len()
            && from
                .limits()
                .iter()
                .zip(to.limits())
                .all(|(a, b)| alike(a, b));
        if from.plan() != to.plan() || !same_limits {
            return self;
        }
        let unseen = u32::try_from(unseen.max(0)).unwrap_or(u32::MAX);
        self.to.iter_mut().for_each(|units| *units = unseen);
        self.from.iter_mut().for_each(|kept| *kept = Some(0));
        self
    }

    /// Whether every limit of `from` moved: `from` is reset whole.
    pub fn moves_all(&self) -> bool {
        self.from.iter().all(Option::is_none)
    }

    /// Whether any limit of `to` is charged.
    pub fn charges(&self) -> bool {
        self.to.iter().any(|units| *units > 0)
    }
}

/// For each limit of `to`, the index of its partner in `from` (see
/// [`Carried`]): by name, then the rest in order.
fn partners(from: &Policy, to: &Policy) -> SmallVec<[Option<usize>; 2]> {
    let index_in_from = |name: &str| from.limits().iter().position(|l| l.name() == name);
    let mut partners: SmallVec<[Option<usize>; 2]> = to
        .limits()
        .iter()
        .map(|limit| index_in_from(limit.name()))
        .collect();
    let named_in_to = |name: &str| to.limits().iter().any(|l| l.name() == name);
    let mut unnamed = (0..from.limits().len()).filter(|i| !named_in_to(from.limits()[*i].name()));
    for partner in partners.iter_mut().filter(|p| p.is_none()) {
        *partner = unnamed.next();
    }
    partners
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use tollgate_core::{Decision, DecisionFields, Quota};

    fn policy(limits: &[(&str, u64)]) -> Policy {
        Policy::new(
            limits
                .iter()
                .map(|(name, per_hour)| NamedLimit::new(*name, Quota::per_hour(*per_hour)))
                .collect(),
        )
    }

    /// A peek of limits whose remaining counts are `remaining`.
    fn peek(from: &Policy, remaining: &[u64]) -> PolicyDecision {
        PolicyDecision::new(from.limiters().iter().zip(remaining).map(|(limiter, r)| {
            Decision::from(DecisionFields {
                allowed: true,
                limit: limiter.quota().limit(),
                remaining: *r,
                ..DecisionFields::default()
            })
        }))
    }

    #[test]
    fn each_limit_carries_what_the_limit_of_its_name_used() {
        let from = policy(&[("hourly", 100), ("burst", 10)]);
        let to = policy(&[("extra", 5), ("burst", 20), ("hourly", 200)]);
        let read = peek(&from, &[94, 7]);
        let carried = Carried::read(&from, &read, &to, 0);
        assert_eq!(carried.to.as_slice(), &[0, 3, 6]);
        assert!(carried.moves_all() && carried.charges());
        // Units the caller counted that the store has not: added to each,
        // never below 0.
        assert_eq!(
            Carried::read(&from, &read, &to, 2).to.as_slice(),
            &[0, 5, 8]
        );
        assert_eq!(
            Carried::read(&from, &read, &to, -4).to.as_slice(),
            &[0, 0, 2]
        );
        // Nothing used: nothing to charge.
        assert!(!Carried::read(&from, &peek(&from, &[100, 10]), &to, 0).charges());
        assert!(!Carried::read(&from, &read, &to, -6).charges());
    }

    #[test]
    fn limits_without_a_partner_by_name_pair_in_order() {
        let from = policy(&[("hourly", 100), ("burst", 10)]);
        let to = policy(&[("per-hour", 200), ("per-minute", 20)]);
        let carried = Carried::read(&from, &peek(&from, &[94, 7]), &to, 0);
        assert_eq!(carried.to.as_slice(), &[6, 3]);
        let to = policy(&[("burst", 20), ("daily", 1000)]);
        let carried = Carried::read(&from, &peek(&from, &[94, 7]), &to, 0);
        assert_eq!(carried.to.as_slice(), &[3, 6]);
    }

    #[test]
    fn a_limit_left_out_keeps_its_state_and_the_unseen_units() {
        let from = policy(&[("hourly", 100), ("burst", 10)]);
        let to = policy(&[("hourly", 100)]);
        let carried = Carried::read(&from, &peek(&from, &[94, 7]), &to, 2);
        assert_eq!(carried.to.as_slice(), &[8]);
        assert_eq!(carried.from.as_slice(), &[None, Some(2)]);
        assert!(!carried.moves_all());
        // Back: `burst` has no partner and starts from its own state.
        let back = Carried::read(&to, &peek(&to, &[90]), &from, 0);
        assert_eq!(back.to.as_slice(), &[10, 0]);
        assert!(back.moves_all());
    }

    #[test]
    fn states_whose_quotas_alone_changed_stay_in_place() {
        let from = policy(&[("hourly", 100), ("burst", 10)]);
        let to = policy(&[("hourly", 200), ("burst", 20)]);
        let carried = Carried::read(&from, &peek(&from, &[94, 7]), &to, 2);
        let in_place = carried.clone().in_place(&from, &to, 2);
        assert_eq!(in_place.to.as_slice(), &[2, 2]);
        assert_eq!(in_place.from.as_slice(), &[Some(0), Some(0)]);
        // A limit left out: moved as any other change.
        let fewer = policy(&[("hourly", 200)]);
        let carried = Carried::read(&from, &peek(&from, &[94, 7]), &fewer, 2);
        assert_eq!(carried.clone().in_place(&from, &fewer, 2), carried);
        // Other plans: other states, moved.
        let planned = Arc::new(Policy::for_plan(7, to.limits().to_vec()));
        let moved = Carried::read(&from, &peek(&from, &[94, 7]), &planned, 2);
        assert_eq!(moved.clone().in_place(&from, &planned, 2), moved);
        assert_eq!(moved.to.as_slice(), &[8, 5]);
    }

    #[test]
    fn carried_units_stop_at_u32_max() {
        let from = policy(&[("hourly", 100)]);
        let read = peek(&from, &[100]);
        assert_eq!(
            Carried::read(&from, &read, &from, i64::MAX).to.as_slice(),
            &[u32::MAX]
        );
    }
}
