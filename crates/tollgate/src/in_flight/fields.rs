//! The header fields of an in-flight limit: `RateLimit-Policy` and
//! `RateLimit` with the draft's `qu="concurrent-requests"`, or the legacy
//! `X-RateLimit-Limit` / `-Remaining` (see the module docs for what each
//! figure means and why there is no `t` nor `Retry-After`).

use super::InFlightLimit;
use crate::headers::{
    HeaderStyle, PartitionKey, RATELIMIT, RATELIMIT_POLICY, X_RATELIMIT_LIMIT,
    X_RATELIMIT_REMAINING,
};
use crate::key::Key;
use http::{HeaderMap, HeaderName, HeaderValue};
use smallvec::SmallVec;

/// Limits up to this many slots get every `RateLimit` value made once,
/// when the layer is built.
const PREMADE_UP_TO: u32 = 1_024;

/// What the fields of one layer's responses need, made once.
#[derive(Debug)]
pub(crate) struct Fields {
    style: HeaderStyle,
    name: String,
    /// `"inflight";q=5;qu="concurrent-requests"`.
    policy: Option<HeaderValue>,
    /// `RateLimit` for `r` = 0, 1, … the limit, when it is small enough.
    states: Box<[HeaderValue]>,
    limit: u32,
}

/// The fields of one response, made when the request was admitted or
/// refused; empty when there are none.
#[derive(Clone, Debug, Default)]
pub(crate) struct FieldValues(SmallVec<[(&'static HeaderName, HeaderValue); 2]>);

impl FieldValues {
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Writes the fields into `headers`. The draft's fields are lists:
    /// where another layer (a rate limit inside this one) wrote its own,
    /// this limit's item is added at the end of each. The legacy fields
    /// report one limit: another layer's are left as they are.
    pub(crate) fn write_into(self, headers: &mut HeaderMap) {
        let other_legacy = headers.contains_key(&X_RATELIMIT_LIMIT)
            || headers.contains_key(&X_RATELIMIT_REMAINING);
        for (name, value) in self.0 {
            let is_legacy = *name == X_RATELIMIT_LIMIT || *name == X_RATELIMIT_REMAINING;
            if is_legacy && other_legacy {
                continue;
            }
            let is_list = *name == RATELIMIT_POLICY || *name == RATELIMIT;
            match headers.get(name) {
                None => {
                    headers.insert(name.clone(), value);
                }
                Some(existing) if is_list => {
                    let mut joined = Vec::with_capacity(existing.len() + 2 + value.len());
                    joined.extend_from_slice(existing.as_bytes());
                    joined.extend_from_slice(b", ");
                    joined.extend_from_slice(value.as_bytes());
                    if let Ok(joined) = HeaderValue::from_bytes(&joined) {
                        headers.insert(name.clone(), joined);
                    }
                }
                Some(_) => {}
            }
        }
    }
}

impl Fields {
    pub(crate) fn new(style: HeaderStyle, limit: &InFlightLimit) -> Fields {
        let name = limit.name().to_owned();
        let premade = if style.draft && style.partition_key == PartitionKey::Omit {
            (0..=limit.max().min(PREMADE_UP_TO))
                .filter_map(|r| state_value(&name, r, ""))
                .collect()
        } else {
            Box::default()
        };
        Fields {
            style,
            policy: policy_value(&name, limit.max(), ""),
            name,
            states: premade,
            limit: limit.max(),
        }
    }

    /// Whether allowed responses carry any field.
    pub(crate) fn on_allowed(&self) -> bool {
        self.style.on_allowed && (self.style.draft || self.style.legacy)
    }

    /// The fields for a response whose key has `in_flight` running (this
    /// request's own included when it was admitted).
    pub(crate) fn values(&self, in_flight: u32, key: &Key) -> FieldValues {
        let remaining = self.limit.saturating_sub(in_flight);
        let mut values = SmallVec::new();
        if self.style.draft {
            let pk = match self.style.partition_key {
                PartitionKey::Omit => String::new(),
                mode => pk_parameter(mode, key),
            };
            let policy = if pk.is_empty() {
                self.policy.clone()
            } else {
                policy_value(&self.name, self.limit, &pk)
            };
            if let Some(value) = policy {
                values.push((&RATELIMIT_POLICY, value));
            }
            let state = match self.states.get(remaining as usize) {
                Some(value) if pk.is_empty() => Some(value.clone()),
                _ => state_value(&self.name, remaining, &pk),
            };
            if let Some(value) = state {
                values.push((&RATELIMIT, value));
            }
        }
        if self.style.legacy {
            values.push((&X_RATELIMIT_LIMIT, HeaderValue::from(self.limit)));
            values.push((&X_RATELIMIT_REMAINING, HeaderValue::from(remaining)));
        }
        FieldValues(values)
    }
}

/// The `RateLimit-Policy` item: `"name";q=N;qu="concurrent-requests"` and
/// `pk`.
fn policy_value(name: &str, limit: u32, pk: &str) -> Option<HeaderValue> {
    HeaderValue::from_str(&format!(
        "\"{name}\";q={limit};qu=\"concurrent-requests\"{pk}"
    ))
    .ok()
}

/// The `RateLimit` item: `"name";r=R` and `pk`.
fn state_value(name: &str, remaining: u32, pk: &str) -> Option<HeaderValue> {
    HeaderValue::from_str(&format!("\"{name}\";r={remaining}{pk}")).ok()
}

/// `;pk=:…:` for `key` in `mode`, or nothing.
fn pk_parameter(mode: PartitionKey, key: &Key) -> String {
    use base64::Engine as _;
    match mode.bytes(key) {
        Some(bytes) => format!(
            ";pk=:{}:",
            base64::engine::general_purpose::STANDARD.encode(bytes)
        ),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(values: FieldValues) -> Vec<(String, String)> {
        values
            .0
            .into_iter()
            .map(|(name, value)| (name.to_string(), value.to_str().unwrap().to_owned()))
            .collect()
    }

    fn pair(name: &str, value: &str) -> (String, String) {
        (name.to_owned(), value.to_owned())
    }

    #[test]
    fn the_draft_fields_say_concurrent_requests_with_no_window_nor_reset() {
        let limit = InFlightLimit::new("inflight", 5).unwrap();
        let fields = Fields::new(HeaderStyle::DRAFT, &limit);
        let policy = pair(
            "ratelimit-policy",
            "\"inflight\";q=5;qu=\"concurrent-requests\"",
        );
        assert_eq!(
            text(fields.values(3, &Key::GLOBAL)),
            [policy.clone(), pair("ratelimit", "\"inflight\";r=2")]
        );
        // Over the limit (a refusal, or a limit lowered across instances):
        // nothing remains.
        assert_eq!(
            text(fields.values(7, &Key::GLOBAL)),
            [policy, pair("ratelimit", "\"inflight\";r=0")]
        );
    }

    #[test]
    fn large_limits_and_partition_keys_are_formatted_per_response() {
        let limit = InFlightLimit::new("big", 5_000).unwrap();
        let style = HeaderStyle::DRAFT.with_partition_key(PartitionKey::Verbatim);
        let fields = Fields::new(style, &limit);
        let key = Key::from("abc");
        assert_eq!(
            text(fields.values(1, &key)),
            [
                pair(
                    "ratelimit-policy",
                    "\"big\";q=5000;qu=\"concurrent-requests\";pk=:YWJj:"
                ),
                pair("ratelimit", "\"big\";r=4999;pk=:YWJj:"),
            ]
        );
        let plain = Fields::new(HeaderStyle::DRAFT, &limit);
        assert_eq!(
            text(plain.values(1, &key))[1],
            pair("ratelimit", "\"big\";r=4999")
        );
    }

    #[test]
    fn the_draft_items_join_another_layers_lists_and_legacy_fields_are_kept() {
        let limit = InFlightLimit::new("inflight", 2).unwrap();
        let mut headers = HeaderMap::new();
        headers.insert(
            "ratelimit-policy",
            HeaderValue::from_static("\"api\";q=10;w=1"),
        );
        headers.insert("ratelimit", HeaderValue::from_static("\"api\";r=9;t=1"));
        headers.insert("x-ratelimit-remaining", HeaderValue::from_static("9"));
        Fields::new(HeaderStyle::BOTH, &limit)
            .values(1, &Key::GLOBAL)
            .write_into(&mut headers);
        assert_eq!(
            headers["ratelimit-policy"],
            "\"api\";q=10;w=1, \"inflight\";q=2;qu=\"concurrent-requests\""
        );
        assert_eq!(headers["ratelimit"], "\"api\";r=9;t=1, \"inflight\";r=1");
        assert_eq!(headers["x-ratelimit-remaining"], "9");
        assert!(!headers.contains_key("x-ratelimit-limit"));
    }

    #[test]
    fn the_legacy_fields_have_no_reset_and_none_means_none() {
        let limit = InFlightLimit::new("inflight", 2).unwrap();
        let legacy = Fields::new(HeaderStyle::LEGACY, &limit);
        assert_eq!(
            text(legacy.values(1, &Key::GLOBAL)),
            [
                pair("x-ratelimit-limit", "2"),
                pair("x-ratelimit-remaining", "1")
            ]
        );
        let none = Fields::new(HeaderStyle::NONE, &limit);
        assert!(none.values(1, &Key::GLOBAL).is_empty());
        assert!(!none.on_allowed());
    }
}
