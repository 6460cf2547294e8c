//! Reading a rules file: TOML in, validated rule specifications out, or an
//! error that names the file, the rule and the field.

use super::matcher::{Condition, Matcher};
use crate::NamedLimit;
use crate::key::{GlobalKey, HeaderKey, Key, KeyExtractor, PeerIp, RequestView};
use http::{HeaderName, HeaderValue, Method};
use std::collections::HashSet;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tollgate_core::{Algorithm, Quota};
use tollgate_store::__private::is_token;
use toml::{Table, Value};

/// A mistake in a rules file: which file, which rule, which field, and what
/// is wrong with it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RulesError {
    /// The file (or `<string>` for rules given as text).
    pub file: PathBuf,
    /// The rule, by name when it has one, else by position (`#2`); `None`
    /// for mistakes outside any rule (syntax, the file itself).
    pub rule: Option<String>,
    /// The field, as a path within the rule (`limits[1].quota`).
    pub field: Option<String>,
    /// What is wrong and how to put it right.
    pub message: String,
}

impl fmt::Display for RulesError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
        if let Some(rule) = &self.rule {
            write!(f, ": rule {rule}")?;
        }
        if let Some(field) = &self.field {
            write!(f, ": field `{field}`")?;
        }
        write!(f, ": {}", self.message)
    }
}

impl std::error::Error for RulesError {}

/// What a rule does with a request its limits refuse.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Behaviour {
    /// Answer 429 (the default).
    Reject,
    /// Hold the request until it conforms, up to this long.
    Delay(Duration),
    /// Never refuse; report what would have happened.
    Shadow,
}

/// One validated rule.
pub(crate) struct RuleSpec {
    pub name: String,
    pub matcher: Matcher,
    pub key: Box<dyn KeyExtractor>,
    pub key_text: String,
    pub behaviour: Behaviour,
    pub limits: Vec<NamedLimit>,
}

/// Where mistakes are reported: the file, and the rule being read.
struct Context<'a> {
    file: &'a Path,
    rule: Option<String>,
}

impl Context<'_> {
    fn error(&self, field: impl Into<Option<String>>, message: impl Into<String>) -> RulesError {
        RulesError {
            file: self.file.to_owned(),
            rule: self.rule.clone(),
            field: field.into(),
            message: message.into(),
        }
    }
}

/// Parses and validates the rules in `text`, read from `file`.
pub(crate) fn parse(text: &str, file: &Path) -> Result<Vec<RuleSpec>, RulesError> {
    let top = Context { file, rule: None };
    let table: Table = text.parse().map_err(|e: toml::de::Error| {
        top.error(None, format!("not valid TOML: {}", e.message()))
    })?;
    for name in table.keys() {
        if name != "rule" {
            return Err(top.error(
                Some(name.clone()),
                "unknown top-level field; a rules file holds `[[rule]]` tables only",
            ));
        }
    }
    let rules = match table.get("rule") {
        None => return Err(top.error(Some("rule".into()), "no `[[rule]]` in the file")),
        Some(Value::Array(rules)) => rules,
        Some(_) => {
            return Err(top.error(Some("rule".into()), "write rules as `[[rule]]` tables"));
        }
    };
    let mut names = HashSet::new();
    let mut limit_names = HashSet::new();
    let mut specs = Vec::with_capacity(rules.len());
    for (index, rule) in rules.iter().enumerate() {
        let spec = parse_rule(rule, index, file)?;
        let cx = Context {
            file,
            rule: Some(describe(&spec.name, index)),
        };
        if !names.insert(spec.name.clone()) {
            return Err(cx.error(
                Some("name".into()),
                "two rules have this name; names must be unique",
            ));
        }
        for (i, limit) in spec.limits.iter().enumerate() {
            if !limit_names.insert(limit.name().to_owned()) {
                return Err(cx.error(
                    Some(format!("limits[{i}].name")),
                    format!(
                        "the limit name {:?} is used twice in the file; give every limit its own \
                         (names label headers and, in Redis, counters)",
                        limit.name()
                    ),
                ));
            }
        }
        specs.push(spec);
    }
    Ok(specs)
}

fn describe(name: &str, index: usize) -> String {
    format!("{name:?} (#{})", index + 1)
}

fn parse_rule(value: &Value, index: usize, file: &Path) -> Result<RuleSpec, RulesError> {
    let mut cx = Context {
        file,
        rule: Some(format!("#{}", index + 1)),
    };
    let Value::Table(rule) = value else {
        return Err(cx.error(None, "a rule is a table"));
    };
    let name = match rule.get("name") {
        Some(Value::String(name)) if is_token(name) => name.clone(),
        Some(_) => {
            return Err(cx.error(
                Some("name".into()),
                "a rule's name is a short token: 1 to 64 letters, digits, `-`, `_`, `.`",
            ));
        }
        None => return Err(cx.error(Some("name".into()), "every rule needs a name")),
    };
    cx.rule = Some(describe(&name, index));
    for field in rule.keys() {
        if !["name", "match", "key", "behaviour", "max_delay", "limits"].contains(&field.as_str()) {
            return Err(cx.error(
                Some(field.clone()),
                "unknown field; a rule has name, match, key, behaviour, max_delay, limits",
            ));
        }
    }
    let matcher = parse_match(rule.get("match"), &cx)?;
    let (key, key_text) = parse_key(rule.get("key"), &cx)?;
    let behaviour = parse_behaviour(rule, &cx)?;
    let limits = parse_limits(rule.get("limits"), &cx)?;
    Ok(RuleSpec {
        name,
        matcher,
        key,
        key_text,
        behaviour,
        limits,
    })
}

fn string<'v>(value: &'v Value, field: &str, cx: &Context<'_>) -> Result<&'v str, RulesError> {
    value
        .as_str()
        .ok_or_else(|| cx.error(Some(field.to_owned()), "expected a string"))
}

fn parse_match(value: Option<&Value>, cx: &Context<'_>) -> Result<Matcher, RulesError> {
    let Some(value) = value else {
        // No `match`: the rule applies to every request.
        return Ok(Matcher::default());
    };
    let Value::Table(table) = value else {
        return Err(cx.error(
            Some("match".into()),
            "expected a table, e.g. { path = \"/login\" }",
        ));
    };
    let mut conditions = Vec::new();
    for (field, value) in table {
        let path = format!("match.{field}");
        let condition = match field.as_str() {
            "method" => parse_methods(value, &path, cx)?,
            "path" => Condition::path(string(value, &path, cx)?)
                .map_err(|message| cx.error(Some(path.clone()), message))?,
            "route" => Condition::route(string(value, &path, cx)?)
                .map_err(|message| cx.error(Some(path.clone()), message))?,
            "grpc_method" => Condition::grpc_method(string(value, &path, cx)?)
                .map_err(|message| cx.error(Some(path.clone()), message))?,
            "header" => parse_header_condition(string(value, &path, cx)?)
                .map_err(|message| cx.error(Some(path.clone()), message))?,
            _ => {
                return Err(cx.error(
                    Some(path),
                    "unknown condition; use method, path, route, header or grpc_method",
                ));
            }
        };
        conditions.push(condition);
    }
    Ok(Matcher::all(conditions))
}

fn parse_methods(value: &Value, path: &str, cx: &Context<'_>) -> Result<Condition, RulesError> {
    let texts: Vec<&str> = match value {
        Value::String(one) => vec![one.as_str()],
        Value::Array(many) => many
            .iter()
            .map(|v| string(v, path, cx))
            .collect::<Result<_, _>>()?,
        _ => {
            return Err(cx.error(
                Some(path.to_owned()),
                "expected a method or a list of methods",
            ));
        }
    };
    let methods = texts
        .iter()
        .map(|text| {
            Method::from_bytes(text.to_ascii_uppercase().as_bytes()).map_err(|_| {
                cx.error(
                    Some(path.to_owned()),
                    format!("{text:?} is not an HTTP method"),
                )
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Condition::Methods(methods))
}

/// `"x-api-key"` (present) or `"x-plan=free"` (present with that value).
fn parse_header_condition(text: &str) -> Result<Condition, String> {
    let (name, value) = match text.split_once('=') {
        Some((name, value)) => (name.trim(), Some(value.trim())),
        None => (text.trim(), None),
    };
    let name = HeaderName::from_bytes(name.as_bytes())
        .map_err(|_| format!("{name:?} is not a header name"))?;
    let value = value
        .map(|value| {
            HeaderValue::from_str(value).map_err(|_| format!("{value:?} is not a header value"))
        })
        .transpose()?;
    Ok(Condition::Header(name, value))
}

fn parse_key(
    value: Option<&Value>,
    cx: &Context<'_>,
) -> Result<(Box<dyn KeyExtractor>, String), RulesError> {
    let parts: Vec<&str> = match value {
        None => vec!["ip"],
        Some(Value::String(one)) => vec![one.as_str()],
        Some(Value::Array(many)) if !many.is_empty() => many
            .iter()
            .map(|v| string(v, "key", cx))
            .collect::<Result<_, _>>()?,
        Some(_) => {
            return Err(cx.error(
                Some("key".into()),
                "expected a key kind or a list of them: ip, global, header:NAME, route, method",
            ));
        }
    };
    let mut extractors = parts
        .iter()
        .map(|part| key_part(part).map_err(|message| cx.error(Some("key".into()), message)))
        .collect::<Result<Vec<_>, _>>()?;
    let text = parts.join("+");
    let key: Box<dyn KeyExtractor> = if extractors.len() == 1 {
        extractors.remove(0)
    } else {
        Box::new(KeyList(extractors))
    };
    Ok((key, text))
}

fn key_part(text: &str) -> Result<Box<dyn KeyExtractor>, String> {
    match text.trim() {
        "ip" => Ok(Box::new(PeerIp)),
        "global" => Ok(Box::new(GlobalKey)),
        "method" => Ok(Box::new(PathKey)),
        "route" => route_key(),
        other => match other.strip_prefix("header:") {
            Some(name) => HeaderName::from_bytes(name.trim().as_bytes())
                .map(|name| Box::new(HeaderKey::from_name(name)) as Box<dyn KeyExtractor>)
                .map_err(|_| format!("{name:?} is not a header name")),
            None => Err(format!(
                "{other:?} is not a key kind; use ip, global, header:NAME, route, method"
            )),
        },
    }
}

#[cfg(feature = "axum")]
fn route_key() -> Result<Box<dyn KeyExtractor>, String> {
    Ok(Box::new(crate::key::key_fn(|request: &RequestView<'_>| {
        let path = request.extensions.get::<axum::extract::MatchedPath>()?;
        Some(Key::from(path.as_str()))
    })))
}

#[cfg(not(feature = "axum"))]
fn route_key() -> Result<Box<dyn KeyExtractor>, String> {
    Err("the route key reads axum's MatchedPath: enable tollgate's `axum` feature".into())
}

/// The URI path: for gRPC, the method (`/package.Service/Method`).
struct PathKey;

impl KeyExtractor for PathKey {
    fn extract(&self, request: &RequestView<'_>) -> Option<Key> {
        Some(Key::from(request.uri.path()))
    }
}

/// Several key kinds combined: a request has a key only if it has every
/// part.
struct KeyList(Vec<Box<dyn KeyExtractor>>);

impl KeyExtractor for KeyList {
    fn extract(&self, request: &RequestView<'_>) -> Option<Key> {
        Key::try_composite(self.0.iter().map(|part| part.extract(request)))
    }
}

fn parse_behaviour(rule: &Table, cx: &Context<'_>) -> Result<Behaviour, RulesError> {
    let max_delay = rule
        .get("max_delay")
        .map(|value| {
            let text = string(value, "max_delay", cx)?;
            parse_duration(text).map_err(|message| cx.error(Some("max_delay".into()), message))
        })
        .transpose()?;
    let behaviour = match rule.get("behaviour") {
        None => "reject",
        Some(value) => string(value, "behaviour", cx)?,
    };
    match (behaviour, max_delay) {
        ("reject", None) => Ok(Behaviour::Reject),
        ("shadow", None) => Ok(Behaviour::Shadow),
        ("delay", Some(max_delay)) => Ok(Behaviour::Delay(max_delay)),
        ("delay", None) => Err(cx.error(
            Some("max_delay".into()),
            "behaviour \"delay\" needs max_delay, e.g. max_delay = \"2s\"",
        )),
        ("reject" | "shadow", Some(_)) => Err(cx.error(
            Some("max_delay".into()),
            "max_delay applies only to behaviour \"delay\"",
        )),
        (other, _) => Err(cx.error(
            Some("behaviour".into()),
            format!("{other:?} is not a behaviour; use reject, delay or shadow"),
        )),
    }
}

/// `"500ms"`, `"2s"`, `"1min"`: a whole number and a unit.
fn parse_duration(text: &str) -> Result<Duration, String> {
    // A quota of that many per that period has the same syntax after `/`.
    format!("1/{text}")
        .parse::<Quota>()
        .map(|quota| quota.period())
        .map_err(|_| format!("{text:?} is not a duration; write e.g. \"500ms\", \"2s\", \"1min\""))
}

fn parse_limits(value: Option<&Value>, cx: &Context<'_>) -> Result<Vec<NamedLimit>, RulesError> {
    let limits = match value {
        Some(Value::Array(limits)) if !limits.is_empty() => limits,
        _ => {
            return Err(cx.error(
                Some("limits".into()),
                "every rule needs limits, e.g. limits = [{ name = \"api\", quota = \"100/min\" }]",
            ));
        }
    };
    limits
        .iter()
        .enumerate()
        .map(|(i, limit)| parse_limit(limit, &format!("limits[{i}]"), cx))
        .collect()
}

fn parse_limit(value: &Value, path: &str, cx: &Context<'_>) -> Result<NamedLimit, RulesError> {
    let field = |name: &str| Some(format!("{path}.{name}"));
    let Value::Table(limit) = value else {
        return Err(cx.error(Some(path.to_owned()), "a limit is a table: { name, quota }"));
    };
    for name in limit.keys() {
        if !["name", "quota", "algorithm", "burst"].contains(&name.as_str()) {
            return Err(cx.error(
                field(name),
                "unknown field; a limit has name, quota, algorithm, burst",
            ));
        }
    }
    let name = match limit.get("name") {
        Some(Value::String(name)) if is_token(name) => name.clone(),
        _ => {
            return Err(cx.error(
                field("name"),
                "every limit needs a name: a short token of 1 to 64 letters, digits, `-`, `_`, `.`",
            ));
        }
    };
    let quota_text = match limit.get("quota") {
        Some(Value::String(text)) => text,
        _ => {
            return Err(cx.error(
                field("quota"),
                "every limit needs a quota, e.g. \"100/min\"",
            ));
        }
    };
    let mut quota: Quota = quota_text
        .parse()
        .map_err(|e| cx.error(field("quota"), format!("{quota_text:?}: {e}")))?;
    if let Some(burst) = limit.get("burst") {
        let burst = burst
            .as_integer()
            .and_then(|n| u64::try_from(n).ok())
            .ok_or_else(|| cx.error(field("burst"), "expected a whole number of at least 1"))?;
        quota = quota
            .with_burst(burst)
            .map_err(|e| cx.error(field("burst"), e.to_string()))?;
    }
    let algorithm = match limit.get("algorithm") {
        None => Algorithm::default(),
        Some(value) => {
            let text = value
                .as_str()
                .ok_or_else(|| cx.error(field("algorithm"), "expected a string"))?;
            text.parse().map_err(|e: tollgate_core::UnknownAlgorithm| {
                cx.error(field("algorithm"), e.to_string())
            })?
        }
    };
    Ok(NamedLimit::new(name, quota).with_algorithm(algorithm))
}
