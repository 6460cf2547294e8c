//! The rate-limit fields of HTTP responses.
//!
//! Follows draft-ietf-httpapi-ratelimit-headers-10 and -11:
//! `RateLimit-Policy` names each limit's quota (`"api";q=100;w=60`) and
//! `RateLimit` its current state (`"api";r=0;t=17`), several limits as one
//! comma-separated list. The legacy `X-RateLimit-Limit/Remaining/Reset` trio
//! reports the most constrained limit, with the same figures.
//!
//! There is no setting for the draft's version: -10 and -11 define the same
//! two fields with the same parameters (`q`, `qu`, `w`, `pk`; `r`, `t`,
//! `pk`) and the same meaning for every parameter tollgate writes, so the
//! values are byte for byte the same under both. A setting will come with
//! the first version whose fields differ.
//!
//! The partition key, `pk`, is an option ([`HeaderStyle::partition_key`],
//! off by default): it tells a client which of the server's counters its
//! request was counted in (its address, its API key), as a byte sequence
//! (`pk=:MjAzLjAuMTEzLjc=:`) on each item of both fields. Either the key
//! itself or a digest of it; see [`PartitionKey`].
//!
//! What the figures mean, for every algorithm:
//!
//! - `q` and `w`: the quota units a client can actually use and the window
//!   they are measured over, so that `r ≤ q` on every response and `q / w`
//!   is the quota's sustained rate. For the window algorithms (fixed window,
//!   sliding log, sliding window and its sub-window counters) that is the
//!   limit per period. For the
//!   buckets (GCRA, token bucket, leaky bucket) it is the burst, over the
//!   time an empty bucket takes to fill again: `Quota::per_second(10)` with
//!   a burst of 20 is `q=20;w=2`, not `q=10;w=1`, which would tell a client
//!   in the same response that 19 of 10 remain. `w` is in whole seconds,
//!   rounded up (at least 1), and `q` is then what the quota's rate gives in
//!   `w`, rounded down: never less than the capacity, and `q / w` within
//!   `1 / w` below the rate (a burst of 10 at 100/s is `q=100;w=1`).
//! - `r`: how many more requests of cost 1 would pass now.
//! - `t`: seconds, rounded up, until the limit next gives quota back
//!   ([`Decision::replenish_after`]): the window's end for a fixed window
//!   and the interval token bucket's next refill; when the next unit is
//!   back for GCRA, the continuous token bucket, the leaky bucket and the
//!   sliding window; when the oldest admitted request leaves the period for
//!   the sliding log, and the oldest non-empty sub-window for the sliding
//!   window's sub-window counters. 0 when the limit is whole. So `t` never exceeds
//!   `Retry-After` on a refusal (a retry needs at least that first unit), as
//!   the draft asks; "until the whole quota is back" would, for any burst
//!   above one (a client that believed it would wait `burst` times too long).
//! - `Retry-After` (refusals only): seconds, rounded up and never 0, until a
//!   retry of the same cost passes every limit. In delay mode
//!   ([`RateLimitBuilder::max_delay`](crate::RateLimitBuilder::max_delay)) a retry
//!   passes by being held, up to the delay bound, before the next unit is
//!   back: there `Retry-After` can be the shorter of the two, and still
//!   honest.

use crate::Policy;
use crate::key::{Key, KeyView};
use crate::store::PolicyDecision;
use http::header::{HeaderMap, HeaderName, HeaderValue, RETRY_AFTER};
use smallvec::SmallVec;
use tollgate_core::Decision;
use tollgate_store::fields::{ceil_seconds, policy_item, quota_item};

/// `RateLimit-Policy`.
pub static RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
/// `RateLimit`.
pub static RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");
/// `X-RateLimit-Limit`.
pub static X_RATELIMIT_LIMIT: HeaderName = HeaderName::from_static("x-ratelimit-limit");
/// `X-RateLimit-Remaining`.
pub static X_RATELIMIT_REMAINING: HeaderName = HeaderName::from_static("x-ratelimit-remaining");
/// `X-RateLimit-Reset`.
pub static X_RATELIMIT_RESET: HeaderName = HeaderName::from_static("x-ratelimit-reset");

/// Which rate-limit fields responses carry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct HeaderStyle {
    /// The IETF draft's `RateLimit-Policy` and `RateLimit` (default on).
    pub draft: bool,
    /// `X-RateLimit-Limit/Remaining/Reset` (default off).
    pub legacy: bool,
    /// Whether allowed responses carry them too, not only rejections
    /// (default on). `Retry-After` is only ever on rejections.
    pub on_allowed: bool,
    /// Whether the draft's fields name the request's partition (`pk`), and
    /// how (default: they do not).
    pub partition_key: PartitionKey,
}

/// How the draft's fields name the partition a request was counted in: the
/// `pk` parameter, a byte sequence, on each item of `RateLimit-Policy` and
/// `RateLimit`. Requests under a [`Global`](crate::Key::GLOBAL) key share
/// one partition and get no `pk` in any mode.
///
/// ```
/// use tollgate::{headers::HeaderStyle, headers::PartitionKey};
///
/// let style = HeaderStyle::DRAFT.with_partition_key(PartitionKey::Digest);
/// assert_eq!(style.partition_key, PartitionKey::Digest);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PartitionKey {
    /// No `pk` (the default).
    #[default]
    Omit,
    /// The key's [`digest`](PartitionKey::digest): eight bytes that tell
    /// partitions apart without showing the key to whatever logs the
    /// response. A digest hides a key from reading, not from guessing: an
    /// address can be found by hashing every address.
    Digest,
    /// The key itself: an IP address as its text (`203.0.113.7`), any other
    /// key as its bytes. Only for keys that are not secrets; an API key
    /// written back into every response ends up in logs and caches.
    Verbatim,
}

impl PartitionKey {
    /// The digest [`PartitionKey::Digest`] writes: the first eight bytes,
    /// big-endian, of a 64-bit hash (foldhash, with a fixed seed) of the
    /// key's [flat bytes](crate::Key::to_bytes). The same key gives the same
    /// digest on every instance built with the same tollgate.
    pub fn digest(key: &Key) -> [u8; 8] {
        use std::hash::BuildHasher;
        foldhash::fast::FixedState::with_seed(PK_DIGEST_SEED)
            .hash_one(key.to_bytes())
            .to_be_bytes()
    }

    /// The bytes `pk` carries for `key` in this mode; `None` when there is
    /// no `pk`.
    pub fn bytes(self, key: &Key) -> Option<Vec<u8>> {
        match (self, key.view()) {
            (PartitionKey::Omit, _) | (_, KeyView::Global) => None,
            (PartitionKey::Digest, _) => Some(Self::digest(key).to_vec()),
            (PartitionKey::Verbatim, KeyView::Ip(ip)) => Some(ip.to_string().into_bytes()),
            (PartitionKey::Verbatim, _) => Some(key.to_bytes()),
        }
    }

    /// The `;pk=:…:` parameter for `key`, ready to append to an item; empty
    /// when there is none.
    fn parameter(self, key: &Key) -> String {
        use base64::Engine as _;
        match self.bytes(key) {
            Some(bytes) => format!(
                ";pk=:{}:",
                base64::engine::general_purpose::STANDARD.encode(bytes)
            ),
            None => String::new(),
        }
    }
}

/// The seed of [`PartitionKey::digest`]: fixed, so that every instance
/// names a partition alike.
const PK_DIGEST_SEED: u64 = 0x7011_6a7e_5eed_0001;

impl Default for HeaderStyle {
    fn default() -> Self {
        HeaderStyle::DRAFT
    }
}

impl HeaderStyle {
    /// No rate-limit fields at all (but `Retry-After` on rejections).
    pub const NONE: HeaderStyle = HeaderStyle {
        draft: false,
        legacy: false,
        on_allowed: false,
        partition_key: PartitionKey::Omit,
    };

    /// The IETF draft's fields on every response: the default.
    pub const DRAFT: HeaderStyle = HeaderStyle {
        draft: true,
        legacy: false,
        on_allowed: true,
        partition_key: PartitionKey::Omit,
    };

    /// Only the legacy `X-RateLimit-Limit/Remaining/Reset`, on every
    /// response, for clients written against them.
    pub const LEGACY: HeaderStyle = HeaderStyle {
        draft: false,
        legacy: true,
        on_allowed: true,
        partition_key: PartitionKey::Omit,
    };

    /// Both the draft's fields and the legacy trio, on every response: for
    /// moving clients from one to the other.
    pub const BOTH: HeaderStyle = HeaderStyle {
        draft: true,
        legacy: true,
        on_allowed: true,
        partition_key: PartitionKey::Omit,
    };

    /// The same fields, but only on rejections.
    ///
    /// ```
    /// use tollgate::headers::HeaderStyle;
    /// assert!(!HeaderStyle::DRAFT.only_on_rejections().on_allowed);
    /// ```
    pub const fn only_on_rejections(self) -> HeaderStyle {
        HeaderStyle {
            on_allowed: false,
            ..self
        }
    }

    /// The same fields, naming the request's partition as `partition_key`
    /// says (the draft's `pk`; the legacy fields have none).
    pub const fn with_partition_key(self, partition_key: PartitionKey) -> HeaderStyle {
        HeaderStyle {
            partition_key,
            ..self
        }
    }
}

/// What the rate-limit fields of a policy's responses need of the policy,
/// computed once, when the layer (or a per-key quota) is built.
#[derive(Debug)]
pub(crate) struct PolicyFields {
    /// The `RateLimit-Policy` value, which never changes.
    policy_value: Option<HeaderValue>,
    /// Each limit's item of that value, for a value with `pk` on each.
    policy_items: Box<[String]>,
    /// Each limit's `q`, which `X-RateLimit-Limit` reports.
    quota_units: Box<[u64]>,
    /// Each limit's item of the `RateLimit` value up to its remaining count:
    /// `"api";r=` for the first limit, `, "burst";r=` for the next.
    state_prefixes: Box<[Box<[u8]>]>,
    /// The longest `RateLimit` value the policy can produce.
    state_max_len: usize,
}

/// The most a `RateLimit` item adds after its prefix: `;t=` and two `u64`s.
const STATE_NUMBERS_MAX_LEN: usize = 3 + 2 * 20;

/// `RateLimit` values up to this long are assembled on the stack.
const STATE_STACK_LEN: usize = 128;

impl PolicyFields {
    /// The fields' constant parts for `policy`.
    pub(crate) fn new(policy: &Policy) -> Self {
        let state_prefixes: Box<[Box<[u8]>]> = policy
            .limits()
            .iter()
            .enumerate()
            .map(|(i, limit)| {
                let separator = if i == 0 { "" } else { ", " };
                format!("{separator}\"{}\";r=", limit.name())
                    .into_bytes()
                    .into_boxed_slice()
            })
            .collect();
        let state_max_len = state_prefixes
            .iter()
            .map(|prefix| prefix.len() + STATE_NUMBERS_MAX_LEN)
            .sum();
        let policy_items: Box<[String]> = policy.limits().iter().map(policy_item).collect();
        PolicyFields {
            policy_value: HeaderValue::from_str(&policy_items.join(", ")).ok(),
            policy_items,
            quota_units: policy
                .limits()
                .iter()
                .map(|limit| quota_item(limit.limiter()).0)
                .collect(),
            state_prefixes,
            state_max_len,
        }
    }

    /// The `RateLimit` value reporting `verdict`, each item ending in
    /// `pk` (the `;pk=…` parameter, or nothing): assembled in one buffer (on
    /// the stack unless the policy has many limits) and copied once into the
    /// value; `core::fmt`, or a growable buffer, costs several times as much
    /// per request.
    fn state_value(&self, verdict: &PolicyDecision, pk: &str) -> Option<HeaderValue> {
        let max_len = self.state_max_len + self.state_prefixes.len() * pk.len();
        if max_len <= STATE_STACK_LEN {
            let mut buffer = [0u8; STATE_STACK_LEN];
            let len = self.write_state(&mut buffer, verdict, pk);
            HeaderValue::from_bytes(&buffer[..len]).ok()
        } else {
            let mut buffer = vec![0u8; max_len];
            let len = self.write_state(&mut buffer, verdict, pk);
            HeaderValue::from_bytes(&buffer[..len]).ok()
        }
    }

    /// Writes the `RateLimit` value into `buffer`, long enough for the
    /// policy's longest value with `pk` on each item, and returns its length.
    fn write_state(&self, buffer: &mut [u8], verdict: &PolicyDecision, pk: &str) -> usize {
        let mut out = Output { buffer, len: 0 };
        let mut digits = itoa::Buffer::new();
        for (prefix, decision) in self.state_prefixes.iter().zip(verdict.each()) {
            out.push(prefix);
            out.push(digits.format(decision.remaining()).as_bytes());
            out.push(b";t=");
            out.push(
                digits
                    .format(ceil_seconds(decision.replenish_after()))
                    .as_bytes(),
            );
            out.push(pk.as_bytes());
        }
        out.len
    }

    /// The `RateLimit-Policy` value with `pk` (the `;pk=…` parameter) on
    /// each item; the one made when the layer was built when there is none.
    fn policy_value(&self, pk: &str) -> Option<HeaderValue> {
        if pk.is_empty() {
            return self.policy_value.clone();
        }
        let items: Vec<String> = self
            .policy_items
            .iter()
            .map(|item| format!("{item}{pk}"))
            .collect();
        HeaderValue::from_str(&items.join(", ")).ok()
    }
}

/// A cursor over a buffer known to be long enough.
struct Output<'a> {
    buffer: &'a mut [u8],
    len: usize,
}

impl Output<'_> {
    #[inline]
    fn push(&mut self, bytes: &[u8]) {
        let end = self.len + bytes.len();
        // In bounds by `state_max_len`; slicing would panic, never overrun.
        self.buffer[self.len..end].copy_from_slice(bytes);
        self.len = end;
    }
}

/// The rate-limit fields of one response, formatted when the verdict is
/// known (where the policy is at hand), carried by the response future and
/// written once the inner service answers. Empty when there are none. Two
/// fields (the draft's) fit inline.
#[derive(Clone, Debug, Default)]
pub(crate) struct FieldValues(SmallVec<[(&'static HeaderName, HeaderValue); 2]>);

impl FieldValues {
    /// The fields `style` asks for, reporting `verdict` for `key` on the
    /// policy whose constant parts are `policy`.
    pub(crate) fn of(
        style: HeaderStyle,
        policy: &PolicyFields,
        verdict: &PolicyDecision,
        key: &Key,
    ) -> FieldValues {
        let mut values = SmallVec::new();
        if style.draft {
            let pk = match style.partition_key {
                PartitionKey::Omit => String::new(),
                mode => mode.parameter(key),
            };
            if let Some(value) = policy.policy_value(&pk) {
                values.push((&RATELIMIT_POLICY, value));
            }
            if let Some(value) = policy.state_value(verdict, &pk) {
                values.push((&RATELIMIT, value));
            }
        }
        if style.legacy {
            // The limit with the least left is the one the client meets first.
            let (index, first) = verdict
                .each()
                .iter()
                .copied()
                .enumerate()
                .min_by_key(|(_, d)| d.remaining())
                .unwrap_or((0, verdict.merged()));
            let units = policy
                .quota_units
                .get(index)
                .copied()
                .unwrap_or(first.limit());
            let reset = ceil_seconds(first.replenish_after());
            values.push((&X_RATELIMIT_LIMIT, HeaderValue::from(units)));
            values.push((&X_RATELIMIT_REMAINING, HeaderValue::from(first.remaining())));
            values.push((&X_RATELIMIT_RESET, HeaderValue::from(reset)));
        }
        FieldValues(values)
    }

    /// Whether there is nothing to write.
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Writes the fields into `headers`, replacing any of the same names.
    pub(crate) fn write_into(self, headers: &mut HeaderMap) {
        for (name, value) in self.0 {
            headers.insert(name.clone(), value);
        }
    }
}

/// The `Retry-After` value: delta-seconds, rounded up, never 0; `None` when
/// the request can never pass at its cost.
pub fn retry_after_value(decision: &Decision) -> Option<HeaderValue> {
    retry_after_seconds(decision).map(HeaderValue::from)
}

/// The seconds `Retry-After` says for `decision` (whole seconds, rounded
/// up, never 0: a client that waits this long is never early); `None`
/// when the request can never pass at its cost. For a rejection of your
/// own that says the wait in its body.
///
/// ```
/// use std::time::Duration;
/// use tollgate::core::{Algorithm, Limiter, Quota};
///
/// let limiter = Limiter::new(Algorithm::Gcra, Quota::per_second(2));
/// let mut state = limiter.new_state();
/// assert!(limiter.check(&mut state, 0, 2).allowed());
/// let refused = limiter.check(&mut state, 0, 1);
/// assert_eq!(refused.retry_after(), Duration::from_millis(500));
/// assert_eq!(tollgate::headers::retry_after_seconds(&refused), Some(1));
/// ```
pub fn retry_after_seconds(decision: &Decision) -> Option<u64> {
    tollgate_store::fields::retry_after_seconds(decision)
}

/// The fields `style` asks for, reporting `verdict` for `key` on
/// `policy`'s limits, and `Retry-After` when `verdict` is a refusal: what
/// the layer writes on a response, for answers made outside it (the
/// trailers that end a gRPC stream out of budget). Formats the policy's
/// constant parts afresh on each call: meant for refusals, not for every
/// request.
///
/// ```
/// use tollgate::headers::{RATELIMIT, fields_for};
/// use tollgate::{Key, MemoryStore, NamedLimit, Policy, headers::HeaderStyle};
/// use tollgate_core::Quota;
///
/// let policy = Policy::new(vec![NamedLimit::new("api", Quota::per_minute(1))]);
/// let store = MemoryStore::new();
/// store.check_now(&policy, &Key::GLOBAL, 1);
/// let refused = store.check_now(&policy, &Key::GLOBAL, 1);
/// let headers = fields_for(HeaderStyle::DRAFT, &policy, &refused, &Key::GLOBAL);
/// assert_eq!(headers[&RATELIMIT], "\"api\";r=0;t=60");
/// assert_eq!(headers[http::header::RETRY_AFTER], "60");
/// ```
#[doc(hidden)]
pub fn fields_for(
    style: HeaderStyle,
    policy: &Policy,
    verdict: &PolicyDecision,
    key: &Key,
) -> HeaderMap {
    let mut headers = HeaderMap::new();
    FieldValues::of(style, &PolicyFields::new(policy), verdict, key).write_into(&mut headers);
    if !verdict.merged().allowed() {
        write_retry_after(&mut headers, &verdict.merged());
    }
    headers
}

/// Writes `Retry-After` for a rejection.
pub(crate) fn write_retry_after(headers: &mut HeaderMap, decision: &Decision) {
    if let Some(value) = retry_after_value(decision) {
        headers.insert(RETRY_AFTER, value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::NamedLimit;
    use std::time::Duration;
    use tollgate_core::{DecisionFields, Quota};

    /// The `RateLimit` value for a policy of `names`, each limit with
    /// `remaining` left and `replenish_nanos` until it next grows.
    fn state_text(names: &[&str], remaining: u64, replenish_nanos: u64) -> String {
        let limits = names
            .iter()
            .map(|name| NamedLimit::new(*name, Quota::per_second(10)))
            .collect();
        let decision = DecisionFields {
            allowed: true,
            remaining,
            replenish_after_nanos: replenish_nanos,
            ..DecisionFields::default()
        }
        .into();
        let verdict = PolicyDecision::new(names.iter().map(|_| decision));
        let fields = PolicyFields::new(&Policy::new(limits));
        let value = fields.state_value(&verdict, "").expect("a valid value");
        value.to_str().expect("visible ASCII").to_owned()
    }

    #[test]
    fn the_state_value_lists_every_limit_in_order() {
        assert_eq!(state_text(&["api"], 7, 1), "\"api\";r=7;t=1");
        assert_eq!(
            state_text(&["api", "burst"], 0, 16_500_000_000),
            "\"api\";r=0;t=17, \"burst\";r=0;t=17"
        );
    }

    #[test]
    fn a_long_state_value_is_whole() {
        // Longer than the stack buffer even with the smallest numbers.
        let names: Vec<String> = (0..6)
            .map(|i| format!("limit-{i}-{}", "x".repeat(30)))
            .collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        let expected: Vec<String> = names
            .iter()
            .map(|name| {
                format!(
                    "\"{name}\";r={};t={}",
                    u64::MAX,
                    u64::MAX / 1_000_000_000 + 1
                )
            })
            .collect();
        assert_eq!(state_text(&names, u64::MAX, u64::MAX), expected.join(", "));
    }

    #[test]
    fn retry_after_rounds_up_and_is_never_zero() {
        let with = |d: Duration| {
            let decision = DecisionFields {
                retry_after_nanos: u64::try_from(d.as_nanos()).unwrap_or(u64::MAX),
                ..DecisionFields::default()
            }
            .into();
            retry_after_value(&decision).map(|v| v.to_str().unwrap().to_owned())
        };
        assert_eq!(with(Duration::from_millis(200)).as_deref(), Some("1"));
        assert_eq!(with(Duration::ZERO).as_deref(), Some("1"));
        assert_eq!(with(Duration::from_secs(2)).as_deref(), Some("2"));
        assert_eq!(with(Duration::from_millis(2001)).as_deref(), Some("3"));
        assert_eq!(with(Decision::NEVER), None);
    }
}
