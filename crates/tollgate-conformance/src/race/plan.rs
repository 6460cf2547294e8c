//! What a race's run draws from its seed, before any call is made: how big
//! it is ([`Shape`]), its policy's limits, and each client's calls, with
//! their description for a failure's message. The draws depend on the
//! seed alone, so a smaller run plays a part of a bigger one.

use crate::trace::Rng;
use std::fmt;
use std::time::Duration;
use tollgate_core::{Algorithm, Quota};
use tollgate_store::NamedLimit;
#[cfg(doc)]
use tollgate_store::Watched;

/// How big a run is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Shape {
    pub(super) instances: usize,
    pub(super) clients: usize,
    pub(super) calls: usize,
    pub(super) keys: usize,
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} instance(s), {} client(s) of {} call(s), {} key(s)",
            self.instances, self.clients, self.calls, self.keys
        )
    }
}

/// How a call's caller waits.
#[derive(Clone, Copy, Debug)]
pub(super) enum Kind {
    /// As long as it takes.
    Waits,
    /// This long, then drops it to be heard out ([`Watched`]).
    HeardOut(Duration),
    /// This long, then drops it unheard.
    Dropped(Duration),
}

/// One call: its key (an index) and how its caller waits.
#[derive(Clone, Copy, Debug)]
pub(super) struct Call {
    pub(super) key: usize,
    pub(super) kind: Kind,
}

/// One client's calls.
#[derive(Clone, Debug)]
pub(super) struct Plan {
    pub(super) calls: Vec<Call>,
}

impl Plan {
    /// Client `client`'s calls, drawn from the run's seed: the same for
    /// every shape, so a smaller run plays a part of a bigger one.
    pub(super) fn draw(
        seed: u64,
        client: usize,
        shape: Shape,
        give_up_after: Duration,
        heard_out: bool,
        dropped: bool,
    ) -> Plan {
        let mut rng = Rng::new(seed ^ (client as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let most = u64::try_from(give_up_after.as_nanos()).unwrap_or(u64::MAX);
        let calls = (0..shape.calls)
            .map(|_| {
                let key = rng.below(shape.keys as u64) as usize;
                let roll = rng.below(100);
                let wait = Duration::from_nanos(most / 4 + rng.below(most - most / 4 + 1));
                let kind = match roll {
                    0..=24 if heard_out => Kind::HeardOut(wait),
                    25..=49 if dropped => Kind::Dropped(wait),
                    _ => Kind::Waits,
                };
                Call { key, kind }
            })
            .collect();
        Plan { calls }
    }
}

/// The clients' calls, for a failure's message.
pub(super) fn describe(plans: &[Plan], instances: usize) -> String {
    let clients: Vec<String> = plans
        .iter()
        .enumerate()
        .map(|(n, plan)| {
            let calls: Vec<String> = plan
                .calls
                .iter()
                .map(|call| match call.kind {
                    Kind::Waits => format!("k{}", call.key),
                    Kind::HeardOut(wait) => format!("k{} heard out after {wait:?}", call.key),
                    Kind::Dropped(wait) => format!("k{} dropped after {wait:?}", call.key),
                })
                .collect();
            format!(
                "client {n} on instance {}: [{}]",
                n % instances.max(1),
                calls.join(", ")
            )
        })
        .collect();
    clients.join("; ")
}

/// The limits of a run: one or two of `algorithm`, a day's quotas of 4 to
/// 12, sometimes with a burst of twice that.
pub(super) fn limits(rng: &mut Rng, algorithm: Algorithm) -> Vec<NamedLimit> {
    let count = if rng.chance(30) { 2 } else { 1 };
    (0..count)
        .map(|i| {
            let limit = 4 + rng.below(9);
            let day = Duration::from_secs(86_400);
            let quota = Quota::new(limit, day).unwrap_or_else(|_| Quota::per_second(limit));
            let quota = match rng.chance(25) {
                true => quota.with_burst(limit * 2).unwrap_or(quota),
                false => quota,
            };
            NamedLimit::new(["race-a", "race-b"][i], quota).with_algorithm(algorithm)
        })
        .collect()
}
