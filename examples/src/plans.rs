//! Per-key plans for the playground `server`: `--quota KEY=QUOTA` on the
//! command line and `--quota-file PATH`, a file the server follows.
//!
//! The library's [`PlanBook`] holds the quota of each key named, each key
//! in the form the `--key` extractor gives requests
//! ([`KeyKind::canonical`]: a key no request can get is refused, as is a
//! key named twice); it is a `QuotaSource` (behind the layer's
//! [`KeyQuotas`] cache). [`watch`]
//! follows the file through [`crate::watched`] (a change read once it is
//! whole, parsed off the request path), swaps the book in one step, and
//! invalidates the cached quota of every key whose plan changed, so that
//! its next request is decided under the new plan. A file that does not
//! parse is reported (one WARN naming the line, quoted short) and the last
//! good one kept; so is a file emptied of every plan while it had some,
//! which would otherwise put every key on the default limits.

use crate::keys::KeyKind;
use crate::watched::{Watched, follow};
use std::path::PathBuf;
use tollgate::quotas::{KeyQuotas, PlansBuilder, QuotaAnswer};

pub use tollgate::quotas::{PlanBook, parse_plan};

/// Plans by key.
pub type Plans = tollgate::quotas::KeyPlans;

/// The plans of the `--quota` flags, each key in `kind`'s form; a key no
/// request can get, or named twice, fails them.
pub fn from_flags(flags: &[(String, QuotaAnswer)], kind: &KeyKind) -> Result<Plans, String> {
    let mut plans = PlansBuilder::default();
    for (text, plan) in flags {
        let at = |error: String| format!("--quota {}: {error}", crate::watched::quote(text));
        let key = kind.canonical(text).map_err(at)?;
        plans.add(key, text, plan.clone()).map_err(at)?;
    }
    Ok(plans.build())
}

/// A plan file: one `KEY=QUOTA` per line, each key in `kind`'s form
/// (the library's [`parse_plans`](tollgate::quotas::parse_plans)).
pub fn parse_file(text: &str, kind: &KeyKind) -> Result<Plans, String> {
    tollgate::quotas::parse_plans(text, |written| kind.canonical(written))
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
        quotas.invalidate_keys(&changed);
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
}
