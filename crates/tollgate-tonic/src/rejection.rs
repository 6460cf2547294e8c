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
use tollgate::{Key, Refusal, Rejection, Rejector};
use tonic::metadata::MetadataMap;
use tonic::{Code, Status};
use tonic_types::{ErrorDetails, QuotaViolation, StatusExt};

/// Answers limited calls with a gRPC status (a
/// [`Rejector`](tollgate::Rejector) for
/// [`RateLimitBuilder::rejector`](tollgate::RateLimitBuilder::rejector)):
///
/// - `grpc-status` 8, `RESOURCE_EXHAUSTED` (or 14, `UNAVAILABLE`: see
///   [`unavailable`](Self::unavailable); a layer built with
///   `reject_with_503()` also answers `UNAVAILABLE`);
/// - `grpc-message`: which limits refused the call and when to retry;
/// - `grpc-status-details-bin`: a `google.rpc.Status` carrying
///   `google.rpc.RetryInfo` (the exact delay until a retry can pass; absent
///   when the call can never pass, its cost being above the limit) and
///   `google.rpc.QuotaFailure` (one violation per limit that refused: the
///   subject, the limit's name as `quota_id`, its quota as `quota_value`);
/// - the rate-limit fields (`ratelimit-policy`, `ratelimit`, `retry-after`,
///   and the legacy ones if enabled) as metadata.
///
/// The subject is `ip:ADDRESS` for IP keys, `global` for the global key,
/// and `key` for any other: such a key may be a secret (an API key, a
/// token), so it is never echoed.
///
/// Calls turned away for other reasons get a gRPC status too: a failing
/// store with the layer failing closed → `UNAVAILABLE`; a missing key with
/// `MissingKey::Reject(status)` → the code for that HTTP status
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
        let merged = &rejection.verdict.merged;
        let retry_after = merged.can_ever_pass().then(|| merged.retry_after());
        let mut details = match retry_after {
            Some(delay) => ErrorDetails::with_retry_info(Some(delay)),
            None => ErrorDetails::new(),
        };
        let subject = subject(rejection.key);
        let refused = rejection
            .policy
            .limits()
            .iter()
            .zip(&rejection.verdict.each)
            .filter(|(_, decision)| !decision.allowed);
        let mut names = String::new();
        let mut violations = Vec::new();
        for (limit, decision) in refused {
            if !names.is_empty() {
                names.push_str(", ");
            }
            let _ = write!(names, "\"{}\" ({})", limit.name(), limit.quota());
            let mut violation = QuotaViolation::new(
                subject.clone(),
                format!("limit \"{}\" of {} exceeded", limit.name(), limit.quota()),
            );
            violation.quota_id = limit.name().to_owned();
            violation.quota_value = i64::try_from(decision.limit).unwrap_or(i64::MAX);
            violations.push(violation);
        }
        details.set_quota_failure(violations);
        let message = message(&names, retry_after);
        let metadata = MetadataMap::from_headers(rejection.headers);
        let status = Status::with_error_details_and_metadata(
            self.code_for(rejection.status),
            message,
            details,
            metadata,
        );
        trailers_only(&status)
    }

    fn refuse(&self, status: StatusCode, why: Refusal) -> Response<B> {
        let code = match (why, status) {
            (Refusal::StoreFailed, _) => Code::Unavailable,
            (_, StatusCode::UNAUTHORIZED) => Code::Unauthenticated,
            (_, StatusCode::FORBIDDEN) => Code::PermissionDenied,
            (_, StatusCode::BAD_REQUEST) => Code::InvalidArgument,
            (_, StatusCode::TOO_MANY_REQUESTS) => Code::ResourceExhausted,
            _ => Code::Unavailable,
        };
        trailers_only(&Status::new(code, why.message()))
    }
}

/// The `grpc-message` text.
fn message(names: &str, retry_after: Option<Duration>) -> String {
    match retry_after {
        Some(delay) => format!(
            "rate limit exceeded: {names}; retry in {:.3} s",
            delay.as_secs_f64()
        ),
        None => format!(
            "rate limit exceeded: {names}; this call costs more than the limit allows, so it can never pass"
        ),
    }
}

/// How a violation names the key it was counted under.
fn subject(key: &Key) -> String {
    match key {
        Key::Global => "global".to_owned(),
        Key::Ip(ip) => format!("ip:{ip}"),
        _ => "key".to_owned(),
    }
}

/// An HTTP 200 response whose headers carry the whole gRPC status: what
/// gRPC calls a trailers-only response.
fn trailers_only<B: Default>(status: &Status) -> Response<B> {
    let mut response = Response::new(B::default());
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
    if status.add_header(headers).is_err() {
        // Only a message or details that cannot be a header value fail
        // here; neither can (both are encoded), but the code alone is
        // still a correct answer.
        *headers = HeaderMap::new();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
        let _ = Status::new(status.code(), "").add_header(headers);
    }
    response
}
