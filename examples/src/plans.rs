//! Per-key plans for the playground `server`: `--quota KEY=QUOTA` on the
//! command line and `--quota-file PATH`, a file the server follows.
//!
//! A [`PlanBook`] holds the quota of each key named, each key in the form
//! the `--key` extractor gives requests ([`KeyKind::canonical`]: a key no
//! request can get is refused, as is a key named twice); it is a
//! [`QuotaSource`] (behind the layer's [`KeyQuotas`] cache). [`watch`]
//! follows the file through [`crate::watched`] (a change read once it is
//! whole, parsed off the request path), swaps the book in one step, and
//! invalidates the cached quota of every key whose plan changed, so that
//! its next request is decided under the new plan. A file that does not
//! parse is reported (one WARN naming the line, quoted short) and the last
//! good one kept; so is a file emptied of every plan while it had some,
//! which would otherwise put every key on the default limits.

use crate::keys::{KeyKind, key_text};
use crate::watched::{Watched, follow, quote, short};
use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::path::PathBuf;
use std::sync::{Arc, PoisonError, RwLock};
use tollgate::Key;
use tollgate::quotas::{KeyQuotas, QuotaAnswer, QuotaLookup, QuotaSource};

/// Past this many changed plans, a change drops every cached quota at
/// once rather than one key at a time.
const INVALIDATE_ONE_BY_ONE: usize = 1_024;

/// Plans by key.
pub type Plans = HashMap<Key, QuotaAnswer>;

/// The plans in force: the command line's, with the file's over them.
/// Clones share them.
#[derive(Clone, Debug, Default)]
pub struct PlanBook {
    plans: Arc<RwLock<Arc<Plans>>>,
}

impl PlanBook {
    /// A book of `plans`.
    pub fn new(plans: Plans) -> Self {
        PlanBook {
            plans: Arc::new(RwLock::new(Arc::new(plans))),
        }
    }

    /// The plans now.
    pub fn plans(&self) -> Arc<Plans> {
        self.plans
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Puts `plans` in force in one step; the keys whose plan changed
    /// (added, removed or different), found after the swap, so that
    /// requests never wait on the comparison of two large books.
    pub fn replace(&self, plans: Plans) -> Vec<Key> {
        let new = Arc::new(plans);
        let old = std::mem::replace(
            &mut *self.plans.write().unwrap_or_else(PoisonError::into_inner),
            new.clone(),
        );
        let mut changed: Vec<Key> = old
            .iter()
            .filter(|(key, plan)| new.get(*key) != Some(*plan))
            .map(|(key, _)| key.clone())
            .collect();
        changed.extend(new.keys().filter(|key| !old.contains_key(*key)).cloned());
        changed
    }
}

impl QuotaSource for PlanBook {
    fn lookup(&self, key: &Key) -> QuotaLookup {
        let answer = self
            .plans
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(key)
            .cloned()
            .unwrap_or(QuotaAnswer::Default);
        Box::pin(std::future::ready(Ok(answer)))
    }
}

/// One `KEY=QUOTA`: a key's text and its plan (`5/min`, `5/s;500/h`,
/// `unlimited`, `default`). The key is put in the extractor's form later
/// ([`from_flags`], [`parse_file`]), once `--key` is known.
pub fn parse_plan(text: &str) -> Result<(String, QuotaAnswer), String> {
    let (key, quota) = text
        .split_once('=')
        .ok_or_else(|| format!("{} is not KEY=QUOTA", quote(text)))?;
    let key = key.trim();
    if key.is_empty() {
        return Err(format!("{} names no key", quote(text)));
    }
    let quota = quota.trim();
    let plan = quota
        .parse::<QuotaAnswer>()
        .map_err(|error| format!("{}: {}", quote(quota), short(&error.to_string())))?;
    Ok((key.to_owned(), plan))
}

/// Adds `key`'s `plan`, `written` so, to `plans`; a key named before
/// (written so in `first`) is refused.
fn add(
    plans: &mut Plans,
    first: &mut HashMap<Key, String>,
    key: Key,
    written: &str,
    plan: QuotaAnswer,
) -> Result<(), String> {
    match plans.entry(key) {
        Entry::Vacant(slot) => {
            first.insert(slot.key().clone(), written.to_owned());
            slot.insert(plan);
            Ok(())
        }
        Entry::Occupied(slot) => {
            let earlier = first.get(slot.key()).map(String::as_str).unwrap_or("");
            let same = if earlier == written {
                String::new()
            } else {
                format!(
                    " ({} and {} are the same key)",
                    quote(earlier),
                    quote(written)
                )
            };
            Err(format!(
                "a second plan for {}{same}",
                quote(&key_text(slot.key()))
            ))
        }
    }
}

/// The plans of the `--quota` flags, each key in `kind`'s form; a key no
/// request can get, or named twice, fails them.
pub fn from_flags(flags: &[(String, QuotaAnswer)], kind: &KeyKind) -> Result<Plans, String> {
    let (mut plans, mut first) = (Plans::new(), HashMap::new());
    for (text, plan) in flags {
        let at = |error: String| format!("--quota {}: {error}", quote(text));
        let key = kind.canonical(text).map_err(at)?;
        add(&mut plans, &mut first, key, text, plan.clone()).map_err(at)?;
    }
    Ok(plans)
}

/// A plan file: one `KEY=QUOTA` per line, each key in `kind`'s form;
/// blank lines and lines whose first non-blank character is `#` are
/// skipped. The first bad line fails the whole file, with its number: a
/// line that is no plan, a key no request can get, a key named twice (as
/// the limits file refuses a name given twice).
pub fn parse_file(text: &str, kind: &KeyKind) -> Result<Plans, String> {
    let (mut plans, mut first) = (Plans::new(), HashMap::new());
    for (number, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let at = |error: String| format!("line {}: {error}", number + 1);
        let (written, plan) = parse_plan(line).map_err(at)?;
        let key = kind.canonical(&written).map_err(at)?;
        add(&mut plans, &mut first, key, &written, plan).map_err(at)?;
    }
    Ok(plans)
}

/// `fixed` with `file` over it.
pub fn merged(fixed: &Plans, file: Plans) -> Plans {
    let mut plans = fixed.clone();
    plans.extend(file);
    plans
}

/// The quota file at `path`, to [`load`](Watched::load) at start and
/// then [`watch`]: its keys in `kind`'s form, a change that empties it
/// refused.
pub fn watched(path: PathBuf, kind: KeyKind) -> Watched<Plans> {
    Watched::new(path, "quota file", "the plans read last", move |text| {
        parse_file(text, &kind)
    })
    .never_emptied(Plans::len)
}

/// Follows the quota file (ends with the runtime): each change read whole
/// puts `fixed` with the file's plans over them in `book`, in one step,
/// and invalidates in `quotas` every key whose plan changed.
pub async fn watch(file: Watched<Plans>, fixed: Plans, book: PlanBook, quotas: KeyQuotas) {
    follow(file, move |from_file: Plans| {
        let changed = book.replace(merged(&fixed, from_file));
        if changed.len() > INVALIDATE_ONE_BY_ONE {
            quotas.invalidate_all();
        } else {
            for key in &changed {
                quotas.invalidate(key);
            }
        }
        Ok(())
    })
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header() -> KeyKind {
        KeyKind::parse("header:x-api-key").unwrap()
    }

    #[test]
    fn a_file_parses_with_comments_and_names_its_bad_line() {
        let plans = parse_file(
            "# plans\n\nfree = 5/min\npro=100/min;5000/h\n  # x\nvip=unlimited\n",
            &header(),
        )
        .unwrap();
        assert_eq!(plans.len(), 3);
        assert_eq!(plans[&Key::from("free")], "5/min".parse().unwrap());
        assert_eq!(plans[&Key::from("vip")], QuotaAnswer::Unlimited);
        let error = parse_file("free=5/min\npro=lots\n", &header()).unwrap_err();
        assert!(error.starts_with("line 2: "), "{error}");
        assert!(parse_file("=5/min", &header()).is_err());
        assert!(parse_file("free", &header()).is_err());
    }

    #[test]
    fn a_key_named_twice_is_refused_as_the_limits_file_refuses_a_name() {
        let error = parse_file("a=1/s\nb=2/s\na=3/s\n", &header()).unwrap_err();
        assert_eq!(error, "line 3: a second plan for \"a\"");
        // Two forms of one address are one key.
        let error = parse_file("::ffff:127.0.0.1=1/s\n127.0.0.1=2/s\n", &KeyKind::Ip).unwrap_err();
        assert!(
            error.starts_with("line 2: a second plan for \"127.0.0.1\""),
            "{error}"
        );
        assert!(error.contains("same key"), "{error}");
        let flags = [
            ("x".to_owned(), QuotaAnswer::Unlimited),
            ("x".to_owned(), QuotaAnswer::Default),
        ];
        let error = from_flags(&flags, &header()).unwrap_err();
        assert!(error.contains("a second plan for \"x\""), "{error}");
    }

    #[test]
    fn keys_are_canonical_and_keys_never_matched_are_refused() {
        let plans = parse_file("::ffff:127.0.0.1=5/min\n", &KeyKind::Ip).unwrap();
        let key = KeyKind::Ip.canonical("127.0.0.1").unwrap();
        assert_eq!(plans[&key], "5/min".parse().unwrap());
        for never in [
            "<no key>=unlimited".to_owned(),
            format!("{}=1/s", "k".repeat(300)),
        ] {
            let error = parse_file(&never, &header()).unwrap_err();
            assert!(error.starts_with("line 1: "), "{error}");
        }
        let flags = [("<no key>".to_owned(), QuotaAnswer::Unlimited)];
        assert!(from_flags(&flags, &header()).is_err());
        let error = parse_file(&format!("k={}", "9".repeat(50_000)), &header()).unwrap_err();
        assert!(error.len() < 400, "quoted short: {error}");
    }

    #[test]
    fn a_replaced_book_names_the_keys_whose_plan_changed() {
        let book = PlanBook::new(parse_file("a=1/s\nb=2/s\nc=3/s", &header()).unwrap());
        let mut changed = book.replace(parse_file("a=1/s\nb=5/s\nd=4/s", &header()).unwrap());
        changed.sort();
        assert_eq!(changed, [Key::from("b"), Key::from("c"), Key::from("d")]);
    }
}
