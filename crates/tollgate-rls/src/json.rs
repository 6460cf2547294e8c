//! `ShouldRateLimit` in JSON, as envoyproxy/ratelimit's `/json` endpoint
//! reads and writes it: the request and the response in protobuf's JSON
//! mapping (field names in lowerCamelCase, the request's in snake_case
//! too; enums by name; a duration as `"1.5s"`; fields at their default
//! left out).
//!
//! ```
//! let request = tollgate_rls::json::request_from_json(
//!     br#"{"domain": "edge", "descriptors": [{"entries": [{"key": "k", "value": "v"}]}]}"#,
//! )
//! .unwrap();
//! assert_eq!(request.domain, "edge");
//! assert_eq!(request.descriptors[0].entries[0].value, "v");
//! ```

use envoy_types::pb::envoy::config::core::v3::HeaderValue;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::{
    Entry, RateLimitOverride,
};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit as PbUnit;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{Code, DescriptorStatus};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::envoy::r#type::v3::RateLimitUnit;
use envoy_types::pb::google::protobuf::value::Kind;
use envoy_types::pb::google::protobuf::{Struct, UInt64Value};
use serde::Deserialize;
use serde_json::{Map, Value, json};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonRequest {
    #[serde(default)]
    domain: String,
    #[serde(default)]
    descriptors: Vec<JsonDescriptor>,
    #[serde(default, alias = "hits_addend", rename = "hitsAddend")]
    hits_addend: Option<Number>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonDescriptor {
    #[serde(default)]
    entries: Vec<JsonEntry>,
    #[serde(default)]
    limit: Option<JsonLimit>,
    #[serde(default, alias = "hits_addend", rename = "hitsAddend")]
    hits_addend: Option<Number>,
    #[serde(default, alias = "is_negative_hits", rename = "isNegativeHits")]
    is_negative_hits: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonEntry {
    #[serde(default)]
    key: String,
    #[serde(default)]
    value: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonLimit {
    #[serde(default, alias = "requests_per_unit", rename = "requestsPerUnit")]
    requests_per_unit: Option<Number>,
    #[serde(default)]
    unit: Option<UnitName>,
}

/// A protobuf integer in JSON: a number, or a string of digits (how the
/// mapping writes 64-bit ones).
#[derive(Deserialize)]
#[serde(untagged)]
enum Number {
    Plain(u64),
    Text(String),
}

impl Number {
    fn value(&self, field: &str) -> Result<u64, String> {
        match self {
            Number::Plain(n) => Ok(*n),
            Number::Text(text) => text
                .parse()
                .map_err(|_| format!("`{field}` is not a whole number: {text:?}")),
        }
    }

    fn value_u32(&self, field: &str) -> Result<u32, String> {
        u32::try_from(self.value(field)?).map_err(|_| format!("`{field}` is above 4294967295"))
    }
}

/// A `RateLimitUnit`, by name or number.
#[derive(Deserialize)]
#[serde(untagged)]
enum UnitName {
    Number(i32),
    Name(String),
}

impl UnitName {
    fn value(&self) -> Result<i32, String> {
        match self {
            UnitName::Number(n) => Ok(*n),
            UnitName::Name(name) => RateLimitUnit::from_str_name(name)
                .map(|unit| unit as i32)
                .ok_or_else(|| {
                    format!(
                        "unknown `unit` {name:?} (SECOND, MINUTE, HOUR, DAY, WEEK, MONTH or YEAR)"
                    )
                }),
        }
    }
}

/// A `RateLimitRequest` from its JSON, or what is wrong with it.
///
/// # Errors
///
/// Not JSON, a field that the request does not have, or a value of the
/// wrong kind, said in a sentence.
pub fn request_from_json(body: &[u8]) -> Result<RateLimitRequest, String> {
    let request: JsonRequest = serde_json::from_slice(body).map_err(|e| e.to_string())?;
    let descriptors = request
        .descriptors
        .into_iter()
        .map(|d| {
            Ok(RateLimitDescriptor {
                entries: d
                    .entries
                    .into_iter()
                    .map(|e| Entry {
                        key: e.key,
                        value: e.value,
                    })
                    .collect(),
                limit: match d.limit {
                    Some(limit) => Some(RateLimitOverride {
                        requests_per_unit: match &limit.requests_per_unit {
                            Some(n) => n.value_u32("requestsPerUnit")?,
                            None => 0,
                        },
                        unit: limit.unit.as_ref().map_or(Ok(0), UnitName::value)?,
                    }),
                    None => None,
                },
                hits_addend: match &d.hits_addend {
                    Some(n) => Some(UInt64Value {
                        value: n.value("hitsAddend")?,
                    }),
                    None => None,
                },
                is_negative_hits: d.is_negative_hits,
            })
        })
        .collect::<Result<_, String>>()?;
    Ok(RateLimitRequest {
        domain: request.domain,
        descriptors,
        hits_addend: match &request.hits_addend {
            Some(n) => n.value_u32("hitsAddend")?,
            None => 0,
        },
    })
}

/// A `RateLimitResponse` as JSON.
pub fn response_to_json(response: &RateLimitResponse) -> Value {
    let mut out = Map::new();
    out.insert(
        "overallCode".into(),
        json!(code_name(response.overall_code)),
    );
    let statuses: Vec<Value> = response.statuses.iter().map(status).collect();
    if !statuses.is_empty() {
        out.insert("statuses".into(), Value::Array(statuses));
    }
    let headers: Vec<Value> = response
        .response_headers_to_add
        .iter()
        .map(header)
        .collect();
    if !headers.is_empty() {
        out.insert("responseHeadersToAdd".into(), Value::Array(headers));
    }
    if let Some(metadata) = &response.dynamic_metadata {
        out.insert("dynamicMetadata".into(), structure(metadata));
    }
    Value::Object(out)
}

fn status(status: &DescriptorStatus) -> Value {
    let mut out = Map::new();
    out.insert("code".into(), json!(code_name(status.code)));
    if let Some(limit) = &status.current_limit {
        let mut current = Map::new();
        if !limit.name.is_empty() {
            current.insert("name".into(), json!(limit.name));
        }
        if limit.requests_per_unit != 0 {
            current.insert("requestsPerUnit".into(), json!(limit.requests_per_unit));
        }
        current.insert("unit".into(), json!(unit_name(limit.unit)));
        out.insert("currentLimit".into(), Value::Object(current));
    }
    if status.limit_remaining != 0 {
        out.insert("limitRemaining".into(), json!(status.limit_remaining));
    }
    if let Some(reset) = &status.duration_until_reset {
        out.insert(
            "durationUntilReset".into(),
            json!(duration(reset.seconds, reset.nanos)),
        );
    }
    Value::Object(out)
}

fn header(header: &HeaderValue) -> Value {
    json!({ "key": header.key, "value": header.value })
}

fn structure(fields: &Struct) -> Value {
    Value::Object(
        fields
            .fields
            .iter()
            .map(|(key, value)| (key.clone(), kind(value.kind.as_ref())))
            .collect(),
    )
}

fn kind(value: Option<&Kind>) -> Value {
    match value {
        None | Some(Kind::NullValue(_)) => Value::Null,
        Some(Kind::NumberValue(n)) => json!(n),
        Some(Kind::StringValue(s)) => json!(s),
        Some(Kind::BoolValue(b)) => json!(b),
        Some(Kind::StructValue(fields)) => structure(fields),
        Some(Kind::ListValue(list)) => list.values.iter().map(|v| kind(v.kind.as_ref())).collect(),
    }
}

fn code_name(code: i32) -> &'static str {
    match Code::try_from(code) {
        Ok(Code::Ok) => "OK",
        Ok(Code::OverLimit) => "OVER_LIMIT",
        _ => "UNKNOWN",
    }
}

/// A status's unit by its proto name.
fn unit_name(unit: i32) -> &'static str {
    PbUnit::try_from(unit).map_or("UNKNOWN", |unit| unit.as_str_name())
}

/// A duration as the mapping writes it: seconds, with 3, 6 or 9
/// fractional digits when there is a fraction.
fn duration(seconds: i64, nanos: i32) -> String {
    match nanos {
        0 => format!("{seconds}s"),
        n if n % 1_000_000 == 0 => format!("{seconds}.{:03}s", n / 1_000_000),
        n if n % 1_000 == 0 => format!("{seconds}.{:06}s", n / 1_000),
        n => format!("{seconds}.{n:09}s"),
    }
}
