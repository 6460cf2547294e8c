//! Limits that count only some outcomes: [`ChargeWhen`], and what the
//! layer keeps of an admission until its response says whether it counts.

use crate::ConfigError;
use crate::Policy;
use crate::key::Key;
use crate::store::{PolicyDebit, PolicyDecision, PolicyRefund};
use http::StatusCode;
use http::response::Parts;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Which responses count against the limit. A request is charged when it
/// is admitted (so that requests still running cannot overrun the limit
/// together), and its charge is given back when its response does not
/// count: "5 failed logins per 15 minutes" is a limit of 5 on `/login`
/// that counts only 401 and 403.
///
/// The predicate sees the response's head (status, headers, extensions),
/// before its body. A request whose inner service fails (an error, not a
/// response) keeps its charge, and so does one whose client goes away
/// before its response (the future dropped): there is no outcome to
/// judge, and a client could otherwise spend the limit for free by
/// hanging up. A response whose charge is given back carries the figures
/// of its admission: its `RateLimit` field's `r` counts its own charge,
/// which the refund gives back as the response leaves (the next response
/// shows it). The store must give charges back
/// ([`Store::can`](crate::Store::can)
/// [`Capability::Refund`](crate::store::Capability::Refund)); the layer
/// fails to build otherwise, naming the store that cannot.
///
/// ```
/// use tollgate::{RateLimitLayer, settings::ChargeWhen};
///
/// // Only failures count.
/// let failures = ChargeWhen::statuses("4xx,5xx").unwrap();
/// let layer = RateLimitLayer::builder()
///     .quota("logins", "5/15min".parse().unwrap())
///     .charge_when(failures)
///     .build();
/// # let _ = layer;
/// // Or any test of the response's head.
/// let rejected_logins = ChargeWhen::new(|response| response.status.as_u16() == 401);
/// # let _ = rejected_logins;
/// ```
#[derive(Clone)]
pub struct ChargeWhen(Arc<dyn Fn(&Parts) -> bool + Send + Sync>);

impl fmt::Debug for ChargeWhen {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ChargeWhen(..)")
    }
}

impl ChargeWhen {
    /// Counts the responses for which `counts` is true.
    pub fn new(counts: impl Fn(&Parts) -> bool + Send + Sync + 'static) -> Self {
        ChargeWhen(Arc::new(counts))
    }

    /// Counts the responses whose status is in `spec`: a comma-separated
    /// list of statuses (`401,403`) and classes (`4xx`, `5xx`).
    ///
    /// ```
    /// use http::StatusCode;
    /// use tollgate::settings::ChargeWhen;
    ///
    /// let when = ChargeWhen::statuses("401, 403, 5xx").unwrap();
    /// assert!(when.counts_status(StatusCode::FORBIDDEN));
    /// assert!(when.counts_status(StatusCode::BAD_GATEWAY));
    /// assert!(!when.counts_status(StatusCode::OK));
    /// assert!(ChargeWhen::statuses("4xx,banana").is_err());
    /// ```
    pub fn statuses(spec: &str) -> Result<Self, ConfigError> {
        let statuses = parse_statuses(spec)?;
        Ok(ChargeWhen::new(move |response| {
            statuses.iter().any(|s| s.matches(response.status))
        }))
    }

    /// Whether a response of `status`, with no headers, counts: for tests
    /// and diagnostics.
    pub fn counts_status(&self, status: StatusCode) -> bool {
        let (mut parts, ()) = http::Response::new(()).into_parts();
        parts.status = status;
        self.counts(&parts)
    }

    pub(crate) fn counts(&self, response: &Parts) -> bool {
        (self.0)(response)
    }
}

/// One entry of a status list.
#[derive(Clone, Copy, Debug)]
enum StatusMatch {
    /// `401`
    Exact(u16),
    /// `4xx`: the hundreds digit.
    Class(u16),
}

impl StatusMatch {
    fn matches(self, status: StatusCode) -> bool {
        match self {
            StatusMatch::Exact(code) => status.as_u16() == code,
            StatusMatch::Class(class) => status.as_u16() / 100 == class,
        }
    }
}

fn parse_statuses(spec: &str) -> Result<Vec<StatusMatch>, ConfigError> {
    let entries: Vec<&str> = spec
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect();
    if entries.is_empty() {
        return Err(ConfigError::new(format!(
            "no status in {spec:?}: list statuses (401,403) or classes (4xx,5xx)"
        )));
    }
    entries
        .into_iter()
        .map(|entry| {
            let class = entry
                .strip_suffix("xx")
                .or_else(|| entry.strip_suffix("XX"));
            let parsed = match class {
                Some(digit) => digit
                    .parse::<u16>()
                    .ok()
                    .filter(|d| (1..=5).contains(d))
                    .map(StatusMatch::Class),
                None => entry
                    .parse::<u16>()
                    .ok()
                    .filter(|code| StatusCode::from_u16(*code).is_ok())
                    .map(StatusMatch::Exact),
            };
            parsed.ok_or_else(|| {
                ConfigError::new(format!(
                    "{entry:?} in {spec:?} is not a status (100 to 999) or a class (1xx to 5xx)"
                ))
            })
        })
        .collect()
}

/// What the layer keeps of an admission until its response says whether
/// it counts: enough to give the charge back, or to charge more.
pub(crate) struct Ticket {
    pub(crate) policy: Arc<Policy>,
    pub(crate) key: Key,
    pub(crate) cost: u32,
    /// Read before the store was asked.
    pub(crate) asked: Instant,
    /// The refund of the whole charge, but for its age.
    charge: PolicyRefund,
}

impl Ticket {
    pub(crate) fn new(
        policy: &Arc<Policy>,
        key: &Key,
        cost: u32,
        asked: Instant,
        verdict: &PolicyDecision,
    ) -> Self {
        Ticket {
            policy: policy.clone(),
            key: key.clone(),
            cost,
            asked,
            charge: PolicyRefund::of(verdict, cost, Duration::ZERO),
        }
    }

    /// The refund of this admission, now.
    pub(crate) fn refund(&self) -> PolicyRefund {
        self.refund_part(self.cost)
    }

    /// The refund of `cost` of this admission's charge, now.
    pub(crate) fn refund_part(&self, cost: u32) -> PolicyRefund {
        let mut refund = self.charge.clone().part(cost);
        refund.ago = self.asked.elapsed();
        refund
    }

    /// `cost` more for this admission, to the store that charged it.
    pub(crate) fn debit(&self, cost: u32) -> PolicyDebit {
        self.charge.debit(cost)
    }
}
