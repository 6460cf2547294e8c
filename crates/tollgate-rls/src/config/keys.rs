//! The keys a file may hold, checked before it is read into rules: what
//! envoyproxy/ratelimit accepts, anywhere in the file (it checks names, not
//! places), and tollgate's own `algorithm`, in the two places it means
//! something. A key outside both is refused, so that a typo never quietly
//! drops a limit.

use serde_yaml_ng::Value;

/// The keys envoyproxy/ratelimit accepts, at any depth.
const THEIRS: [&str; 16] = [
    "domain",
    "key",
    "value",
    "descriptors",
    "rate_limit",
    "unit",
    "requests_per_unit",
    "unlimited",
    "shadow_mode",
    "quota_mode",
    "name",
    "replaces",
    "detailed_metric",
    "value_to_metric",
    "share_threshold",
    "metadata",
];

/// tollgate's key: a rule's algorithm, in a `rate_limit` or at the top of
/// the file (the domain's default). envoyproxy/ratelimit refuses a file
/// that has it, rather than misread it.
pub(crate) const ALGORITHM: &str = "algorithm";

/// Where a mapping sits: the key `algorithm` is ours only at the top and
/// in a `rate_limit`.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Place {
    Top,
    RateLimit,
    Elsewhere,
}

/// Checks every key of `root` (a whole file), or says which is wrong.
pub(crate) fn check(root: &Value) -> Result<(), String> {
    match root {
        Value::Mapping(_) => check_value(root, Place::Top),
        _ => Err("the file is not a mapping of keys (`domain:`, `descriptors:`)".to_owned()),
    }
}

fn check_value(value: &Value, place: Place) -> Result<(), String> {
    match value {
        Value::Mapping(mapping) => {
            for (key, inner) in mapping {
                let Value::String(key) = key else {
                    return Err(format!("a key that is not text: {key:?}"));
                };
                let ours = key == ALGORITHM && place != Place::Elsewhere;
                if !ours && !THEIRS.contains(&key.as_str()) {
                    return Err(unknown(key));
                }
                // Metadata is the operator's own, returned as written.
                if key == "metadata" {
                    continue;
                }
                let next = if key == "rate_limit" {
                    Place::RateLimit
                } else {
                    Place::Elsewhere
                };
                check_value(inner, next)?;
            }
            Ok(())
        }
        Value::Sequence(items) => items.iter().try_for_each(|item| match item {
            Value::Mapping(_) => check_value(item, Place::Elsewhere),
            other => Err(format!(
                "a list holds {}, where only mappings of keys belong",
                kind(other)
            )),
        }),
        Value::String(_) | Value::Bool(_) | Value::Null => Ok(()),
        Value::Number(number) if number.is_i64() || number.is_u64() => Ok(()),
        other => Err(format!("a value that is {}", kind(other))),
    }
}

fn unknown(key: &str) -> String {
    if key == ALGORITHM {
        return "unknown key 'algorithm' here: it belongs in a `rate_limit` or at the top of the \
                file"
            .to_owned();
    }
    format!("unknown key '{key}'")
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "empty",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number that is not a whole one",
        Value::String(_) => "text",
        Value::Sequence(_) => "a list",
        Value::Mapping(_) => "a mapping",
        Value::Tagged(_) => "a tagged value",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn checked(text: &str) -> Result<(), String> {
        check(&serde_yaml_ng::from_str(text).unwrap())
    }

    #[test]
    fn their_keys_pass_anywhere_and_others_nowhere() {
        assert!(checked("domain: d\ndescriptors:\n  - key: k\n    name: x\n").is_ok());
        let error =
            checked("domain: d\ndescriptors:\n  - key: k\n    rate_limt: {}\n").unwrap_err();
        assert!(error.contains("'rate_limt'"), "{error}");
        assert!(checked("domain: d\ndescriptors: [1]\n").is_err());
        assert!(
            checked(
                "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {requests_per_unit: 1.5}\n"
            )
            .is_err()
        );
    }

    #[test]
    fn metadata_is_the_operators_own() {
        assert!(
            checked(
                "domain: d\ndescriptors:\n  - key: k\n    metadata: {anything: {at: [1, 2.5]}}\n"
            )
            .is_ok()
        );
    }

    #[test]
    fn algorithm_is_ours_at_the_top_and_in_a_rate_limit_only() {
        assert!(checked("domain: d\nalgorithm: gcra\n").is_ok());
        assert!(
            checked("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {algorithm: gcra}\n")
                .is_ok()
        );
        let error =
            checked("domain: d\ndescriptors:\n  - key: k\n    algorithm: gcra\n").unwrap_err();
        assert!(error.contains("belongs in a `rate_limit`"), "{error}");
    }
}
