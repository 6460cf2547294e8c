//! A limited gRPC call answered as a gRPC error.
//!
//! gRPC clients read the outcome of a call from `grpc-status`, not from the
//! HTTP status: a bare HTTP 429 reaches them as an unexplained
//! `UNAVAILABLE`. [`GrpcRejector`] answers instead with HTTP 200 and a
//! trailers-only response (the status in the headers, no body), which every
//! gRPC client reads as the call's status.

use http::{HeaderMap, HeaderValue, Response, StatusCode, header::CONTENT_TYPE};
use std::fmt::Write as _;
use std::time::Duration;
use tollgate::rejection::{InFlight, Limited};
use tollgate::{Key, Policy, PolicyDecision, Rejection, Rejector, key::KeyView};
use tonic::metadata::MetadataMap;
use tonic::{Code, Status};
use tonic_types::{ErrorDetails, QuotaViolation, StatusExt};

/// Answers limited calls with a gRPC status (a
/// [`Rejector`](tollgate::Rejector) for
/// [`RateLimitBuilder::rejector`](tollgate::RateLimitBuilder::rejector)):
///
/// - `grpc-status` 8, `RESOURCE_EXHAUSTED` (or 14, `UNAVAILABLE`: see
///   [`unavailable`](Self::unavailable); a layer built with
///   `.rejection_status(StatusCode::SERVICE_UNAVAILABLE)` also answers
///   `UNAVAILABLE`);
/// - `grpc-message`: which limits refused the call and when to retry;
/// - `grpc-status-details-bin`: a `google.rpc.Status` carrying
///   `google.rpc.RetryInfo` (the exact delay until a retry can pass; absent
///   when the call can never pass, its cost being above the limit) and
///   `google.rpc.QuotaFailure` (one violation per limit that refused: the
///   subject, the limit's name as `quota_id`, its quota as `quota_value`);
/// - the rate-limit fields (`ratelimit-policy`, `ratelimit`, `retry-after`,
///   and the legacy ones if enabled) as metadata;
/// - `violated-policies` metadata: the names of the limits that refused
///   the call, joined by commas (`burst`, `burst,daily`), as the
///   `violated-policies` member of the HTTP problem details and the
///   `limit` label of `tollgate_decisions_total` name them, readable by
///   any client without decoding the details.
///
/// The subject is `ip:ADDRESS` for IP keys, `global` for the global key,
/// and `key` for any other: such a key may be a secret (an API key, a
/// token), so it is never echoed.
///
/// Calls turned away for other reasons get a gRPC status too: a failing
/// store with the layer failing closed → `UNAVAILABLE`; a missing key with
/// `OnMissingKey::Reject(status)` → the code for that HTTP status
/// (401 → `UNAUTHENTICATED`, 403 → `PERMISSION_DENIED`, 400 →
/// `INVALID_ARGUMENT`, 429 → `RESOURCE_EXHAUSTED`, others `UNAVAILABLE`).
#[derive(Clone, Copy, Debug)]
pub struct GrpcRejector {
    code: Code,
}

impl Default for GrpcRejector {
    fn default() -> Self {
        GrpcRejector {
            code: Code::ResourceExhausted,
        }
    }
}

impl GrpcRejector {
    /// Answers `RESOURCE_EXHAUSTED`, the code gRPC defines for exhausted
    /// quotas (the default).
    pub fn new() -> Self {
        Self::default()
    }

    /// Answers `UNAVAILABLE` instead: clients and proxies that retry
    /// `UNAVAILABLE` automatically (with backoff) then retry limited calls.
    pub fn unavailable() -> Self {
        GrpcRejector {
            code: Code::Unavailable,
        }
    }

    /// The code limited calls get.
    pub fn code(&self) -> Code {
        self.code
    }

    fn code_for(&self, status: StatusCode) -> Code {
        if status == StatusCode::SERVICE_UNAVAILABLE {
            Code::Unavailable
        } else {
            self.code
        }
    }
}

impl<B: Default> Rejector<B> for GrpcRejector {
    fn reject(&self, rejection: Rejection<'_>) -> Response<B> {
        let message = rejection.message();
        match rejection {
            Rejection::Limited(limited) => self.limited(limited),
            Rejection::InFlight(in_flight) => self.in_flight(in_flight),
            Rejection::StoreFailed { retry_after, .. } => {
                trailers_only(&store_failed_status(message, retry_after))
            }
            other => {
                let code = match other.status() {
                    StatusCode::UNAUTHORIZED => Code::Unauthenticated,
                    StatusCode::FORBIDDEN => Code::PermissionDenied,
                    StatusCode::BAD_REQUEST => Code::InvalidArgument,
                    StatusCode::TOO_MANY_REQUESTS => Code::ResourceExhausted,
                    _ => Code::Unavailable,
                };
                trailers_only(&Status::new(code, message))
            }
        }
    }
}

impl GrpcRejector {
    /// A call its rate limits refused.
    fn limited<B: Default>(&self, limited: Limited<'_>) -> Response<B> {
        let status = limited_status(
            self.code_for(limited.status),
            "rate limit exceeded",
            limited.policy,
            limited.key,
            limited.decision,
            MetadataMap::from_headers(limited.headers),
        );
        trailers_only(&status)
    }

    /// A call an in-flight limit turned away (its key has as many calls
    /// running as the limit allows): the same code (`RESOURCE_EXHAUSTED`,
    /// or `UNAVAILABLE` as configured), a message naming the limit, a
    /// `QuotaFailure` with one violation (the limit's name as `quota_id`,
    /// the number of calls at once as `quota_value`), and no `RetryInfo`:
    /// when a running call ends is not known, so there is no honest delay
    /// to give.
    fn in_flight<B: Default>(&self, rejection: InFlight<'_>) -> Response<B> {
        let mut details = ErrorDetails::new();
        let mut violation = QuotaViolation::new(
            subject(rejection.key),
            format!(
                "in-flight limit \"{}\" of {} concurrent calls reached",
                rejection.name, rejection.limit
            ),
        );
        violation.quota_id = rejection.name.to_owned();
        violation.quota_value = i64::from(rejection.limit);
        details.set_quota_failure(vec![violation]);
        let message = format!(
            "in-flight limit exceeded: \"{}\" allows {} concurrent calls per key; retry when one \
             of yours has ended",
            rejection.name, rejection.limit
        );
        let mut metadata = MetadataMap::from_headers(rejection.headers);
        insert_violated(&mut metadata, rejection.name);
        let status = Status::with_error_details_and_metadata(
            self.code_for(rejection.status),
            message,
            details,
            metadata,
        );
        trailers_only(&status)
    }
}

/// A call refused because the store failed and the layer fails closed:
/// `UNAVAILABLE` (which gRPC clients may retry), with `google.rpc.RetryInfo`
/// saying how long to wait (an open breaker's time until it asks the
/// store again, else 1 s: [`Rejection::StoreFailed`]).
pub(crate) fn store_failed_status(message: &str, retry_after: std::time::Duration) -> Status {
    let details = ErrorDetails::with_retry_info(Some(retry_after));
    Status::with_error_details(Code::Unavailable, message, details)
}

/// The status of a call (or a stream's message) that `policy`'s limits
/// refused for `key`: `code`, a message starting with `what` that names
/// the limits that refused and when to retry, `google.rpc.RetryInfo` (the
/// exact delay until a retry can pass; absent when it never can) and
/// `google.rpc.QuotaFailure` details, and `metadata` (the rate-limit
/// fields). What [`GrpcRejector`] answers a limited call with, and what a
/// [`MessageLimitLayer`](crate::MessageLimitLayer) ends a stream with.
pub(crate) fn limited_status(
    code: Code,
    what: &str,
    policy: &Policy,
    key: &Key,
    verdict: &PolicyDecision,
    mut metadata: MetadataMap,
) -> Status {
    let merged = &verdict.merged();
    let retry_after = merged.can_ever_pass().then(|| merged.retry_after());
    let mut details = match retry_after {
        Some(delay) => ErrorDetails::with_retry_info(Some(delay)),
        None => ErrorDetails::new(),
    };
    let subject = subject(key);
    let refused = policy
        .limits()
        .iter()
        .zip(verdict.each())
        .filter(|(_, decision)| !decision.allowed());
    let mut names = String::new();
    let mut violated = String::new();
    let mut violations = Vec::new();
    for (limit, decision) in refused {
        if !names.is_empty() {
            names.push_str(", ");
            violated.push(',');
        }
        violated.push_str(limit.name());
        let _ = write!(names, "\"{}\" ({})", limit.name(), limit.quota());
        let mut violation = QuotaViolation::new(
            subject.clone(),
            format!("limit \"{}\" of {} exceeded", limit.name(), limit.quota()),
        );
        violation.quota_id = limit.name().to_owned();
        violation.quota_value = i64::try_from(decision.limit()).unwrap_or(i64::MAX);
        violations.push(violation);
    }
    details.set_quota_failure(violations);
    insert_violated(&mut metadata, &violated);
    let message = message(what, &names, retry_after);
    Status::with_error_details_and_metadata(code, message, details, metadata)
}

/// The metadata key that names the limits that refused a call.
const VIOLATED_POLICIES: &str = "violated-policies";

/// Adds `violated-policies: NAMES` to `metadata` (a limit's name is a
/// token, always a valid value; one that were not would be left out,
/// never a panic).
fn insert_violated(metadata: &mut MetadataMap, names: &str) {
    if let Ok(value) = names.parse() {
        metadata.insert(VIOLATED_POLICIES, value);
    }
}

/// The `grpc-message` text.
fn message(what: &str, names: &str, retry_after: Option<Duration>) -> String {
    match retry_after {
        Some(delay) => format!("{what}: {names}; retry in {:.3} s", delay.as_secs_f64()),
        None => format!(
            "{what}: {names}; this call costs more than the limit allows, so it can never pass"
        ),
    }
}

/// How a violation names the key it was counted under.
fn subject(key: &Key) -> String {
    match key.view() {
        KeyView::Global => "global".to_owned(),
        KeyView::Ip(ip) => format!("ip:{ip}"),
        KeyView::Bytes(_) => "key".to_owned(),
    }
}

/// An HTTP 200 response whose headers carry the whole gRPC status: what
/// gRPC calls a trailers-only response. (tonic's `Status::into_http` does
/// the same but unwraps the header encoding; this never panics.)
fn trailers_only<B: Default>(status: &Status) -> Response<B> {
    let mut response = Response::new(B::default());
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
    write_status(status, headers);
    response
}

/// Writes `status` into `headers` (`grpc-status`, `grpc-message`,
/// `grpc-status-details-bin` and its metadata): the headers of a
/// trailers-only response, or the trailers that end a stream.
pub(crate) fn write_status(status: &Status, headers: &mut HeaderMap) {
    let mut written = headers.clone();
    if status.add_header(&mut written).is_ok() {
        *headers = written;
    } else {
        // Only a message or details that cannot be a header value fail
        // here; neither can (both are encoded), but the code alone is
        // still a correct answer.
        let _ = Status::new(status.code(), "").add_header(headers);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tollgate::core::Quota;
    use tollgate::{MemoryStore, NamedLimit, Policy};

    /// The gRPC status a trailers-only response carries.
    fn status_of(response: &Response<()>) -> Status {
        Status::from_header_map(response.headers()).expect("a grpc-status header")
    }

    #[test]
    fn rejections_without_a_decision_map_http_statuses_to_grpc_codes() {
        let rejector = GrpcRejector::new();
        let missing = |status| Rejection::MissingKey { status };
        for (rejection, code) in [
            (missing(StatusCode::UNAUTHORIZED), Code::Unauthenticated),
            (missing(StatusCode::FORBIDDEN), Code::PermissionDenied),
            (missing(StatusCode::BAD_REQUEST), Code::InvalidArgument),
            (
                missing(StatusCode::TOO_MANY_REQUESTS),
                Code::ResourceExhausted,
            ),
            (missing(StatusCode::IM_A_TEAPOT), Code::Unavailable),
            (
                Rejection::StoreFailed {
                    status: StatusCode::FORBIDDEN,
                    retry_after: std::time::Duration::from_secs(1),
                },
                Code::Unavailable,
            ),
            // A key on the layer's deny list.
            (
                Rejection::Denied {
                    status: StatusCode::FORBIDDEN,
                },
                Code::PermissionDenied,
            ),
        ] {
            let said = format!("{rejection:?}");
            let message = rejection.message();
            let response: Response<()> = rejector.reject(rejection);
            assert_eq!(response.status(), StatusCode::OK);
            let grpc = status_of(&response);
            assert_eq!(grpc.code(), code, "{said}");
            assert_eq!(grpc.message(), message);
        }
    }

    /// The rejection of a call of `cost` for `key` on a limit of 5 per
    /// minute that has just been used up.
    fn rejected(key: &Key, cost: u32) -> Status {
        let policy = Policy::new(vec![NamedLimit::new("api", Quota::per_minute(5))]);
        let store = MemoryStore::new();
        store.check_now(&policy, key, 5);
        let verdict = store.check_now(&policy, key, cost);
        assert!(!verdict.merged().allowed());
        let response: Response<()> = GrpcRejector::new().reject(Rejection::Limited(Limited::new(
            StatusCode::TOO_MANY_REQUESTS,
            HeaderMap::new(),
            &policy,
            key,
            &verdict,
        )));
        status_of(&response)
    }

    #[test]
    fn a_call_that_can_never_pass_says_so_and_carries_no_retry_info() {
        let status = rejected(&Key::GLOBAL, 6);
        assert_eq!(status.code(), Code::ResourceExhausted);
        assert!(
            status.message().contains("can never pass"),
            "{}",
            status.message()
        );
        let details = status.get_error_details();
        assert!(details.retry_info().is_none());
        assert_eq!(details.quota_failure().map(|q| q.violations.len()), Some(1));

        let status = rejected(&Key::GLOBAL, 1);
        assert!(status.get_error_details().retry_info().is_some());
    }

    #[test]
    fn only_the_limits_that_refused_are_violations() {
        let policy = Policy::new(vec![
            NamedLimit::new("burst", Quota::per_minute(2)),
            NamedLimit::new("daily", Quota::per_day(100)),
        ]);
        let store = MemoryStore::new();
        store.check_now(&policy, &Key::GLOBAL, 2);
        let verdict = store.check_now(&policy, &Key::GLOBAL, 1);
        let response: Response<()> = GrpcRejector::new().reject(Rejection::Limited(Limited::new(
            StatusCode::TOO_MANY_REQUESTS,
            HeaderMap::new(),
            &policy,
            &Key::GLOBAL,
            &verdict,
        )));
        let status = status_of(&response);
        let details = status.get_error_details();
        let violations = &details.quota_failure().expect("a quota failure").violations;
        assert_eq!(violations.len(), 1);
        assert_eq!(violations[0].quota_id, "burst");
        assert_eq!(violations[0].quota_value, 2);
        assert_eq!(violations[0].subject, "global");
        assert!(!status.message().contains("daily"), "{}", status.message());
        assert_eq!(status.metadata().get("violated-policies").unwrap(), "burst");
    }

    #[test]
    fn every_limit_that_refused_is_named_in_the_metadata() {
        let policy = Policy::new(vec![
            NamedLimit::new("burst", Quota::per_minute(2)),
            NamedLimit::new("hourly", Quota::per_hour(50)),
            NamedLimit::new("daily", Quota::per_day(3)),
        ]);
        let store = MemoryStore::new();
        store.check_now(&policy, &Key::GLOBAL, 2);
        let verdict = store.check_now(&policy, &Key::GLOBAL, 2);
        let response: Response<()> = GrpcRejector::new().reject(Rejection::Limited(Limited::new(
            StatusCode::TOO_MANY_REQUESTS,
            HeaderMap::new(),
            &policy,
            &Key::GLOBAL,
            &verdict,
        )));
        let status = status_of(&response);
        assert_eq!(
            status.metadata().get("violated-policies").unwrap(),
            "burst,daily"
        );
    }

    #[test]
    fn an_in_flight_refusal_names_the_limit_and_gives_no_retry_info() {
        let key = Key::from("sk-secret");
        let mut headers = HeaderMap::new();
        headers.insert("ratelimit", HeaderValue::from_static("\"inflight\";r=0"));
        let response: Response<()> = GrpcRejector::new().reject(Rejection::InFlight(
            InFlight::new(StatusCode::TOO_MANY_REQUESTS, headers, "inflight", 5, &key),
        ));
        assert_eq!(response.status(), StatusCode::OK);
        let status = status_of(&response);
        assert_eq!(status.code(), Code::ResourceExhausted);
        assert!(
            status.message().contains("\"inflight\""),
            "{}",
            status.message()
        );
        assert!(!status.message().contains("sk-secret"));
        assert_eq!(
            status.metadata().get("ratelimit").unwrap(),
            "\"inflight\";r=0"
        );
        assert_eq!(
            status.metadata().get("violated-policies").unwrap(),
            "inflight"
        );
        let details = status.get_error_details();
        assert!(details.retry_info().is_none());
        let violations = &details.quota_failure().expect("a quota failure").violations;
        assert_eq!(violations.len(), 1);
        assert_eq!(violations[0].quota_id, "inflight");
        assert_eq!(violations[0].quota_value, 5);
        assert_eq!(violations[0].subject, "key");
        // A layer answering 503 gets UNAVAILABLE.
        let key = Key::GLOBAL;
        let response: Response<()> =
            GrpcRejector::new().reject(Rejection::InFlight(InFlight::new(
                StatusCode::SERVICE_UNAVAILABLE,
                HeaderMap::new(),
                "x",
                1,
                &key,
            )));
        assert_eq!(status_of(&response).code(), Code::Unavailable);
    }

    #[test]
    fn an_api_key_is_never_echoed() {
        let secret = "sk-live-0123456789";
        let status = rejected(&Key::from(secret), 1);
        let details = status.get_error_details();
        let violations = &details.quota_failure().expect("a quota failure").violations;
        assert_eq!(violations[0].subject, "key");
        assert!(!status.message().contains(secret));
        assert!(!String::from_utf8_lossy(status.details()).contains(secret));
        let ip = rejected(
            &Key::from("203.0.113.7".parse::<std::net::IpAddr>().unwrap()),
            1,
        );
        let details = ip.get_error_details();
        assert_eq!(
            details.quota_failure().unwrap().violations[0].subject,
            "ip:203.0.113.7"
        );
    }
}
