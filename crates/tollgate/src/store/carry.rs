//! What a key's usage moved from one plan to another carries
//! ([`Store::carry`](super::Store::carry)), read once here for every store.

use super::decision::PolicyDecision;
use crate::policy::Policy;
use smallvec::SmallVec;

/// The units each limit of `to` is charged when a key moves to it from
/// `from`, whose peek answered `peek`: what the limit in its place in
/// `from` used ([`tollgate_core::used_of`]: a debt included, for the
/// algorithms that keep a schedule), plus `unseen` (units its caller
/// counted that the store has not: a local-first store's unreported
/// ones), never below 0, at most `u32::MAX`. A limit of `to` with none in
/// its place in `from` is charged nothing. `None` when nothing is to be
/// charged.
pub fn carried_units(
    from: &Policy,
    peek: &PolicyDecision,
    to: &Policy,
    unseen: i64,
) -> Option<SmallVec<[u32; 2]>> {
    let used = |index: usize| -> u32 {
        let (Some(limit), Some(limiter)) = (peek.each().get(index), from.limiters().get(index))
        else {
            return 0;
        };
        let used = i64::try_from(tollgate_core::used_of(limiter, limit)).unwrap_or(i64::MAX);
        let units = u64::try_from(used.saturating_add(unseen)).unwrap_or(0);
        u32::try_from(units).unwrap_or(u32::MAX)
    };
    let units: SmallVec<[u32; 2]> = (0..to.limits().len()).map(used).collect();
    units.iter().any(|units| *units > 0).then_some(units)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::NamedLimit;
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
    fn each_limit_carries_what_the_limit_in_its_place_used() {
        let from = policy(&[("hourly", 100), ("burst", 10)]);
        let to = policy(&[("hourly", 200), ("burst", 20), ("extra", 5)]);
        let read = peek(&from, &[94, 7]);
        assert_eq!(
            carried_units(&from, &read, &to, 0).as_deref(),
            Some(&[6, 3, 0][..])
        );
        // Units the caller counted that the store has not: added to each,
        // never below 0.
        assert_eq!(
            carried_units(&from, &read, &to, 2).as_deref(),
            Some(&[8, 5, 0][..])
        );
        assert_eq!(
            carried_units(&from, &read, &to, -4).as_deref(),
            Some(&[2, 0, 0][..])
        );
        // Nothing used: nothing to charge.
        assert_eq!(carried_units(&from, &peek(&from, &[100, 10]), &to, 0), None);
        assert_eq!(carried_units(&from, &read, &to, -6), None);
    }

    #[test]
    fn carried_units_stop_at_u32_max() {
        let from = policy(&[("hourly", 100)]);
        let read = peek(&from, &[100]);
        assert_eq!(
            carried_units(&from, &read, &from, i64::MAX).as_deref(),
            Some(&[u32::MAX][..])
        );
    }
}
