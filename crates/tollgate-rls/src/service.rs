//! [`RateLimitServer`]: Envoy's `RateLimitService` over a tollgate store.

use crate::answer::{Answering, ResponseHeaders, failed, response};
use crate::config::{Config, Entry, Unit};
use crate::decide::{Descriptor, decide};
use crate::reload::Rules;
use crate::stats::CallStats;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::{
    RateLimitService, RateLimitServiceServer,
};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use tollgate_store::Store;
use tonic::{Request, Response, Status};

/// Answers `ShouldRateLimit` calls from `config`'s rules, counting in
/// `store` (the memory store, Redis, PostgreSQL, local-first in front of
/// either, with the wrappers: any tollgate store).
///
/// A call is checked as a whole: its descriptors' rules all charge, or,
/// when one enforced rule refuses, none keeps its charge (envoyproxy/ratelimit
/// charges the others; tollgate gives them back). A refused descriptor
/// charges nothing: envoyproxy/ratelimit does the same only with
/// `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`, and by default counts it.
/// A call with no domain or no descriptors is `INVALID_ARGUMENT`
/// (envoyproxy/ratelimit answers `UNKNOWN`). A store that fails (or a
/// `Timeout` in front of it that gives up) is reported
/// ([`tollgate_store::report_failure`]: a warning every 10 s at most, and
/// `tollgate_store_errors_total`) and answered as
/// [`on_store_error`](Self::on_store_error) says.
#[derive(Debug)]
pub struct RateLimitServer<St> {
    rules: Rules,
    store: St,
    on_store_error: OnStoreError,
    answering: Answering,
    detailed: CallStats,
}

/// What the service answers when its store fails.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OnStoreError {
    /// Every descriptor `OK`: an outage of the store is not one of the
    /// traffic behind the proxy (the default, as tollgate's layers').
    #[default]
    Open,
    /// The call `OVER_LIMIT`: nothing passes uncounted.
    Closed,
}

impl<St: Store> RateLimitServer<St> {
    /// A server of `config`'s rules over `store`.
    pub fn new(config: Config, store: St) -> Self {
        RateLimitServer {
            rules: Rules::new(config),
            store,
            on_store_error: OnStoreError::default(),
            answering: Answering::default(),
            detailed: CallStats::default(),
        }
    }

    /// What to answer when the store fails (default
    /// [`OnStoreError::Open`]).
    pub fn on_store_error(self, on_store_error: OnStoreError) -> Self {
        RateLimitServer {
            on_store_error,
            ..self
        }
    }

    /// Which fields Envoy is asked to add to the client's response
    /// (default [`ResponseHeaders::Draft11`]).
    pub fn response_headers(mut self, headers: ResponseHeaders) -> Self {
        self.answering.headers = headers;
        self
    }

    /// Whether every answer carries dynamic metadata (the call's domain,
    /// descriptors and hits, and the passed rules' `metadata`), as
    /// envoyproxy/ratelimit's `RESPONSE_DYNAMIC_METADATA` does; off by
    /// default, when only a call with a quota-mode violation carries it.
    /// Its shape: the [crate docs](crate#dynamic-metadata).
    pub fn dynamic_metadata(mut self, always: bool) -> Self {
        self.answering.dynamic_metadata = always;
        self
    }

    /// The share of a limit past which admitted hits count as near it,
    /// in `tollgate_rls_near_limit_total` (default 0.8, as
    /// envoyproxy/ratelimit's `NEAR_LIMIT_RATIO`). A ratio outside 0 to 1
    /// is taken as the nearest of the two.
    pub fn near_limit_ratio(mut self, ratio: f64) -> Self {
        // NaN: the default.
        self.detailed.near_ratio = if ratio.is_nan() {
            self.detailed.near_ratio
        } else {
            ratio.clamp(0.0, 1.0)
        };
        self
    }

    /// The rules in force, to replace ([`Rules::set`]) or to follow on
    /// disk ([`Rules::follow`]) while the server runs.
    pub fn rules(&self) -> Rules {
        self.rules.clone()
    }

    /// The tonic service to add to a `tonic::transport::Server`.
    pub fn into_service(self) -> RateLimitServiceServer<Self> {
        RateLimitServiceServer::new(self)
    }
}

/// The unit of descriptor `index`'s limit override, numbered as Envoy's
/// `type.v3.RateLimitUnit` numbers them; an unknown one is the caller's
/// error.
fn override_unit(index: usize, unit: i32) -> Result<Unit, Status> {
    match unit {
        1 => Ok(Unit::Second),
        2 => Ok(Unit::Minute),
        3 => Ok(Unit::Hour),
        4 => Ok(Unit::Day),
        5 => Ok(Unit::Month),
        6 => Ok(Unit::Year),
        7 => Ok(Unit::Week),
        _ => Err(Status::invalid_argument(format!(
            "descriptor {index}'s limit override has no known unit ({unit})"
        ))),
    }
}

#[tonic::async_trait]
impl<St: Store> RateLimitService for RateLimitServer<St> {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        let request = request.into_inner();
        if request.domain.is_empty() {
            return Err(Status::invalid_argument(
                "the call names no domain: set `domain` in Envoy's rate_limit filter",
            ));
        }
        if request.descriptors.is_empty() {
            return Err(Status::invalid_argument(
                "the call has no descriptors: Envoy's route has no rate_limits actions that \
                 produced one",
            ));
        }
        let descriptors: Vec<Descriptor<'_>> = request
            .descriptors
            .iter()
            .enumerate()
            .map(|(index, descriptor)| {
                Ok(Descriptor {
                    negative: descriptor.is_negative_hits,
                    limit: match &descriptor.limit {
                        Some(limit) => {
                            Some((limit.requests_per_unit, override_unit(index, limit.unit)?))
                        }
                        None => None,
                    },
                    entries: descriptor
                        .entries
                        .iter()
                        .map(|entry| Entry::new(&entry.key, &entry.value))
                        .collect(),
                    hits: descriptor
                        .hits_addend
                        .as_ref()
                        .map_or(request.hits_addend, |hits| {
                            u32::try_from(hits.value).unwrap_or(u32::MAX)
                        }),
                })
            })
            .collect::<Result<_, Status>>()?;
        let config = self.rules.current();
        match decide(&config, &self.store, &request.domain, &descriptors).await {
            Ok(outcomes) => {
                self.detailed
                    .count(&config, &request.domain, &descriptors, &outcomes);
                Ok(Response::new(response(&outcomes, &request, self.answering)))
            }
            Err(store_failed) => {
                tollgate_store::report_failure(&store_failed.policy, &store_failed.error);
                let closed = self.on_store_error == OnStoreError::Closed;
                Ok(Response::new(failed(descriptors.len(), closed)))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tollgate_store::MemoryStore;

    #[test]
    fn a_near_limit_ratio_outside_0_to_1_is_taken_as_the_nearest() {
        let server = || {
            let config = Config::from_yaml("d.yaml", "domain: d\ndescriptors: []\n").unwrap();
            RateLimitServer::new(config, MemoryStore::new())
        };
        assert_eq!(server().detailed.near_ratio, 0.8);
        assert_eq!(server().near_limit_ratio(0.5).detailed.near_ratio, 0.5);
        assert_eq!(server().near_limit_ratio(1.5).detailed.near_ratio, 1.0);
        assert_eq!(server().near_limit_ratio(-2.0).detailed.near_ratio, 0.0);
        assert_eq!(server().near_limit_ratio(f64::NAN).detailed.near_ratio, 0.8);
    }
}
