//! The dynamic metadata an answer hands Envoy (its shape: the crate
//! docs, "Dynamic metadata").

use crate::decide::Outcome;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::envoy::r#type::v3::RateLimitUnit;
use envoy_types::pb::google::protobuf::value::Kind;
use envoy_types::pb::google::protobuf::{ListValue, Struct, Value};

/// The call's dynamic metadata: sent when `always` (the service's
/// option), or when a quota-mode descriptor is over its limit in a call
/// that passed; else none.
pub(crate) fn of_call(
    outcomes: &[Outcome],
    request: &RateLimitRequest,
    always: bool,
) -> Option<Struct> {
    let violations: Vec<Value> = match crate::decide::refused(outcomes) {
        true => Vec::new(),
        false => outcomes
            .iter()
            .enumerate()
            .filter(|(_, o)| o.over())
            .map(|(index, _)| number(index as f64))
            .collect(),
    };
    if !always && violations.is_empty() {
        return None;
    }
    let mut fields = Struct::default();
    insert(&mut fields, "domain", string(request.domain.clone()));
    let descriptors = request.descriptors.iter().map(descriptor).collect();
    insert(&mut fields, "descriptors", list(descriptors));
    if request.hits_addend != 0 {
        insert(
            &mut fields,
            "hitsAddend",
            number(f64::from(request.hits_addend)),
        );
    }
    let mut passed = Struct::default();
    for outcome in outcomes.iter().filter(|o| !o.over()) {
        if let Outcome::Decided { rule, .. } = outcome
            && let Some(metadata) = rule.metadata()
        {
            merge(&mut passed, metadata);
        }
    }
    if !passed.fields.is_empty() {
        insert(
            &mut fields,
            "metadata",
            Value {
                kind: Some(Kind::StructValue(passed)),
            },
        );
    }
    if !violations.is_empty() {
        insert(&mut fields, "quotaModeViolations", list(violations));
    }
    Some(fields)
}

fn descriptor(descriptor: &RateLimitDescriptor) -> Value {
    let mut fields = Struct::default();
    let entries = descriptor
        .entries
        .iter()
        .map(|e| string(format!("{}={}", e.key, e.value)))
        .collect();
    insert(&mut fields, "entries", list(entries));
    if let Some(limit) = &descriptor.limit {
        let text = format!(
            "requests_per_unit:{} unit:{}",
            limit.requests_per_unit,
            unit_name(limit.unit)
        );
        insert(&mut fields, "limit", string(text));
    }
    if let Some(hits) = &descriptor.hits_addend {
        insert(&mut fields, "hitsAddend", number(hits.value as f64));
    }
    Value {
        kind: Some(Kind::StructValue(fields)),
    }
}

/// A `type.v3.RateLimitUnit` by its proto name.
fn unit_name(unit: i32) -> &'static str {
    RateLimitUnit::try_from(unit).map_or("UNKNOWN", |unit| unit.as_str_name())
}

/// Adds `from`'s fields to `into`: a key already there keeps its value,
/// except that two maps under one key are merged the same way.
fn merge(into: &mut Struct, from: &Struct) {
    for (key, value) in &from.fields {
        match into.fields.get_mut(key) {
            None => {
                into.fields.insert(key.clone(), value.clone());
            }
            Some(Value {
                kind: Some(Kind::StructValue(held)),
            }) => {
                if let Some(Kind::StructValue(more)) = &value.kind {
                    merge(held, more);
                }
            }
            Some(_) => {}
        }
    }
}

fn insert(fields: &mut Struct, key: &str, value: Value) {
    fields.fields.insert(key.to_owned(), value);
}

fn string(text: String) -> Value {
    Value {
        kind: Some(Kind::StringValue(text)),
    }
}

fn number(n: f64) -> Value {
    Value {
        kind: Some(Kind::NumberValue(n)),
    }
}

fn list(values: Vec<Value>) -> Value {
    Value {
        kind: Some(Kind::ListValue(ListValue { values })),
    }
}
