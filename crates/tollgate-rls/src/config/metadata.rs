//! A descriptor's `metadata`, turned at load into the protobuf `Struct`
//! that answers carry (envoyproxy/ratelimit converts it the same way, and
//! refuses a file whose metadata is not a map of plain values).

use envoy_types::pb::google::protobuf::value::Kind;
use envoy_types::pb::google::protobuf::{ListValue, Struct, Value as PbValue};
use serde_yaml_ng::Value;

/// `metadata` as a `Struct`, or what is wrong with it.
pub(super) fn to_struct(metadata: &Value) -> Result<Struct, String> {
    match to_value(metadata)?.kind {
        Some(Kind::StructValue(fields)) => Ok(fields),
        _ => Err("`metadata` is not a map of keys to values".to_owned()),
    }
}

fn to_value(value: &Value) -> Result<PbValue, String> {
    let kind = match value {
        Value::Null => Kind::NullValue(0),
        Value::Bool(b) => Kind::BoolValue(*b),
        Value::Number(n) => Kind::NumberValue(n.as_f64().unwrap_or(f64::NAN)),
        Value::String(s) => Kind::StringValue(s.clone()),
        Value::Sequence(items) => Kind::ListValue(ListValue {
            values: items.iter().map(to_value).collect::<Result<_, _>>()?,
        }),
        Value::Mapping(map) => {
            let mut fields = Struct::default();
            for (key, value) in map {
                let Value::String(key) = key else {
                    return Err(format!("a `metadata` key is not a string: {key:?}"));
                };
                fields.fields.insert(key.clone(), to_value(value)?);
            }
            Kind::StructValue(fields)
        }
        Value::Tagged(tagged) => {
            return Err(format!(
                "a `metadata` value has a YAML tag ({})",
                tagged.tag
            ));
        }
    };
    Ok(PbValue { kind: Some(kind) })
}
