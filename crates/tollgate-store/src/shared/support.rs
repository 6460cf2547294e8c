//! Which policies a local-first (`tollgate_local::LocalFirst`) store can decide.

use crate::{ConfigError, Policy};
use std::time::Duration;
use tollgate_core::Algorithm;

/// Whether a local-first (`tollgate_local::LocalFirst`) store can decide `policy`
/// locally: every limit of an algorithm the modes support, none in delay
/// mode. The error names the limit and the fix. A shared store may keep
/// the answer in its prepared form of the policy (see
/// [`SharedStore::shares`](super::SharedStore::shares)).
pub fn supports(policy: &Policy) -> Result<(), ConfigError> {
    for limit in policy.limits() {
        let limiter = limit.limiter();
        if !limiter.algorithm().local_first() {
            return Err(ConfigError::new(format!(
                "the local-first store cannot decide limit {:?} ({}): it supports {}; \
                 use the Redis store directly for this limit",
                limit.name(),
                limiter.algorithm(),
                supported_names(),
            )));
        }
        if limiter.with_max_delay(Duration::ZERO) != *limiter {
            return Err(ConfigError::new(format!(
                "the local-first store cannot delay requests (limit {:?} has a max \
                 delay): remove max_delay, or use the Redis store directly",
                limit.name()
            )));
        }
    }
    Ok(())
}

/// The algorithms the registry marks `local_first`, by name: "gcra,
/// token-bucket, … and sliding-window-buckets".
fn supported_names() -> String {
    let names: Vec<&str> = Algorithm::ALL
        .into_iter()
        .filter(|a| a.local_first())
        .map(Algorithm::name)
        .collect();
    match names.split_last() {
        Some((last, [])) => (*last).to_owned(),
        Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
        None => "none".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::NamedLimit;
    use tollgate_core::{Limiter, Quota};

    /// What the store accepts is what the registry says, and its refusal
    /// names every algorithm it would take.
    #[test]
    fn the_store_supports_what_the_registry_marks() {
        for algorithm in Algorithm::ALL {
            let limit = NamedLimit::new("api", Quota::per_second(10))
                .with_limiter(Limiter::new(algorithm, Quota::per_second(10)));
            let answer = supports(&Policy::new(vec![limit]));
            assert_eq!(answer.is_ok(), algorithm.local_first(), "{algorithm}");
            if let Err(error) = answer {
                for supported in Algorithm::ALL.into_iter().filter(|a| a.local_first()) {
                    assert!(error.to_string().contains(supported.name()), "{error}");
                }
            }
        }
    }
}
