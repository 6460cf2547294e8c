//! Rejections as axum responses.

use axum::body::Body;
use axum::response::{IntoResponse, Response};
use http::StatusCode;
use http::header::{CONTENT_TYPE, HeaderValue};
use std::fmt::Write;
use tollgate::rejection::{InFlight, Limited};
use tollgate::{Rejection, Rejector};

/// The problem type of the rate-limit headers draft for an exceeded quota.
pub const QUOTA_EXCEEDED: &str = "https://iana.org/assignments/http-problem-types#quota-exceeded";

/// The problem type of a request whose key is on the layer's deny list
/// ([`tollgate::access::AccessLists`]): a name for clients to match on (a URN, not
/// a page to fetch), distinct from an exceeded quota, which retrying
/// later fixes; this does not.
pub const KEY_DENIED: &str = "urn:tollgate:problem:key-denied";

/// Answers limited requests with an `application/problem+json` body (RFC
/// 9457) of the draft's `quota-exceeded` type, besides the usual status and
/// fields:
///
/// ```json
/// {"type":"https://iana.org/assignments/http-problem-types#quota-exceeded",
///  "title":"Request cannot be satisfied as assigned quota has been exceeded",
///  "status":429,"detail":"Too many requests: retry in 17 s.",
///  "violated-policies":["api"]}
/// ```
///
/// Use it with `RateLimitLayer::builder().rejector(ProblemJson)`.
#[derive(Clone, Copy, Debug, Default)]
pub struct ProblemJson;

impl Rejector<Body> for ProblemJson {
    /// A limited request: the problem above. A request an in-flight limit
    /// turned away: the same problem type with its own detail (`Too many
    /// requests running at once: at most 5 per client; retry when one of
    /// yours has ended.`) and the limit's name in `violated-policies`, no
    /// retry time, as there is no honest one. A denied key: a problem of
    /// its own type, [`KEY_DENIED`] (403, no retry time). The others (a
    /// store failing closed, a missing key): the status alone.
    fn reject(&self, rejection: Rejection<'_>) -> Response<Body> {
        let message = rejection.message();
        match rejection {
            Rejection::Limited(limited) => {
                let body = problem_body(&limited);
                problem(limited.status, limited.headers, body)
            }
            Rejection::InFlight(in_flight) => in_flight_problem(in_flight),
            Rejection::Denied { status } => {
                let mut body = String::with_capacity(160);
                let _ = write!(
                    body,
                    "{{\"type\":\"{KEY_DENIED}\",\"title\":\"Forbidden\",\"status\":{},\"detail\":",
                    status.as_u16()
                );
                push_json_string(&mut body, message);
                body.push('}');
                problem(status, http::HeaderMap::new(), body)
            }
            other => other.into_response(),
        }
    }
}

/// A response of `status`, `headers` and the problem `body`.
fn problem(status: StatusCode, headers: http::HeaderMap, body: String) -> Response<Body> {
    let mut response = Response::new(Body::from(body));
    *response.status_mut() = status;
    *response.headers_mut() = headers;
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("application/problem+json"),
    );
    response
}

/// The problem of a request an in-flight limit turned away.
fn in_flight_problem(rejection: InFlight<'_>) -> Response<Body> {
    let mut body = String::with_capacity(256);
    let _ = write!(
        body,
        "{{\"type\":\"{QUOTA_EXCEEDED}\",\"title\":\"Request cannot be satisfied as assigned quota \
         has been exceeded\",\"status\":{},\"detail\":\"Too many requests running at once: at \
         most {} per client; retry when one of yours has ended.\",\"violated-policies\":[",
        rejection.status.as_u16(),
        rejection.limit
    );
    push_json_string(&mut body, rejection.name);
    body.push_str("]}");
    problem(rejection.status, rejection.headers, body)
}

fn problem_body(rejection: &Limited<'_>) -> String {
    let decision = &rejection.decision.merged();
    // As `Retry-After` says: whole seconds, rounded up, never 0.
    let detail = match tollgate::headers::retry_after_seconds(decision) {
        Some(seconds) => format!("Too many requests: retry in {seconds} s."),
        None => "This request costs more than the whole quota: it can never pass.".to_owned(),
    };
    let mut body = String::with_capacity(256);
    let _ = write!(
        body,
        "{{\"type\":\"{QUOTA_EXCEEDED}\",\"title\":\"Request cannot be satisfied as assigned quota \
         has been exceeded\",\"status\":{},\"detail\":\"{detail}\",\"violated-policies\":[",
        rejection.status.as_u16()
    );
    let violated = rejection
        .policy
        .limits()
        .iter()
        .zip(rejection.decision.each().iter())
        .filter(|(_, decision)| !decision.allowed());
    for (i, (limit, _)) in violated.enumerate() {
        if i > 0 {
            body.push(',');
        }
        push_json_string(&mut body, limit.name());
    }
    body.push_str("]}");
    body
}

/// Appends `text` as a JSON string literal.
fn push_json_string(out: &mut String, text: &str) {
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Answers limited requests with whatever `respond` returns, as any axum
/// handler would (`IntoResponse`). The rate-limit fields and `Retry-After`
/// are added unless the response sets them itself, and a response left at
/// `200 OK` gets the layer's rejection status (429 unless set otherwise).
/// Other refusals (in flight, denied, no key, the store failing closed)
/// get the default answer ([`Rejection::into_response`]).
///
/// ```
/// use axum::response::Html;
/// use tollgate::{GlobalKey, RateLimitLayer};
/// use tollgate_axum::respond_with;
///
/// let layer = RateLimitLayer::builder()
///     .quota("api", "100/min".parse().unwrap())
///     .key(GlobalKey)
///     .rejector(respond_with(|rejection| {
///         Html(format!("<p>Slow down: retry in {:?}.</p>", rejection.decision.merged().retry_after()))
///     }))
///     .build();
/// # let _ = layer;
/// ```
pub fn respond_with<F, T>(respond: F) -> RespondWith<F>
where
    F: Fn(&Limited<'_>) -> T + Send + Sync + 'static,
    T: IntoResponse,
{
    RespondWith(respond)
}

/// See [`respond_with`].
#[derive(Clone, Copy, Debug)]
pub struct RespondWith<F>(F);

impl<F, T> Rejector<Body> for RespondWith<F>
where
    F: Fn(&Limited<'_>) -> T + Send + Sync + 'static,
    T: IntoResponse,
{
    fn reject(&self, rejection: Rejection<'_>) -> Response<Body> {
        let Rejection::Limited(rejection) = rejection else {
            return rejection.into_response();
        };
        let mut response = (self.0)(&rejection).into_response();
        if response.status() == http::StatusCode::OK {
            *response.status_mut() = rejection.status;
        }
        let headers = response.headers_mut();
        for (name, value) in &rejection.headers {
            if !headers.contains_key(name) {
                headers.insert(name.clone(), value.clone());
            }
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::{HeaderMap, StatusCode};
    use tollgate::Key;

    #[tokio::test]
    async fn an_in_flight_refusal_is_a_problem_naming_the_limit() {
        let mut headers = HeaderMap::new();
        headers.insert("ratelimit", HeaderValue::from_static("\"inflight\";r=0"));
        let key = Key::GLOBAL;
        let response = ProblemJson.reject(Rejection::InFlight(InFlight::new(
            StatusCode::TOO_MANY_REQUESTS,
            headers,
            "inflight",
            5,
            &key,
        )));
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(
            response.headers()["content-type"],
            "application/problem+json"
        );
        assert_eq!(response.headers()["ratelimit"], "\"inflight\";r=0");
        let body = axum::body::to_bytes(response.into_body(), 4096)
            .await
            .unwrap();
        let body = String::from_utf8(body.to_vec()).unwrap();
        assert_eq!(
            body,
            format!(
                "{{\"type\":\"{QUOTA_EXCEEDED}\",\"title\":\"Request cannot be satisfied as \
                 assigned quota has been exceeded\",\"status\":429,\"detail\":\"Too many \
                 requests running at once: at most 5 per client; retry when one of yours has \
                 ended.\",\"violated-policies\":[\"inflight\"]}}"
            )
        );
    }
}
