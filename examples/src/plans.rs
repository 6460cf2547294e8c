//! Per-key plans for the playground `server`: `--quota KEY=QUOTA` on the
//! command line and `--quota-file PATH`, a file the server watches.
//!
//! A [`PlanBook`] holds the quota of each key named; it is a
//! [`QuotaSource`] (behind the layer's [`KeyQuotas`] cache). [`watch`]
//! reads the file again whenever its contents change (looked at every
//! 250 ms), swaps the book, and invalidates the cached quota of every key
//! whose plan changed, so that its next request is decided under the new
//! plan. A file that does not parse is reported (a warning naming the line)
//! and the last good one kept.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;
use tollgate::quotas::{KeyQuotas, QuotaAnswer, QuotaLookup, QuotaSource};
use tollgate::{Key, KeyView};

/// How often the file is looked at.
pub const WATCH_EVERY: Duration = Duration::from_millis(250);

/// Plans by key text.
pub type Plans = HashMap<String, QuotaAnswer>;

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

    /// Puts `plans` in force; the keys whose plan changed (added, removed
    /// or different).
    pub fn replace(&self, plans: Plans) -> Vec<String> {
        let mut slot = self.plans.write().unwrap_or_else(PoisonError::into_inner);
        let old = std::mem::replace(&mut *slot, Arc::new(plans));
        let new = &**slot;
        let mut changed: Vec<String> = old
            .iter()
            .filter(|(key, plan)| new.get(*key) != Some(*plan))
            .map(|(key, _)| key.clone())
            .collect();
        changed.extend(new.keys().filter(|key| !old.contains_key(*key)).cloned());
        changed
    }
}

/// The text a key is named by in a plan: a header's value as it came, an
/// address as usual text, `global` for the global key.
pub fn key_text(key: &Key) -> String {
    match key.view() {
        KeyView::Global => "global".to_owned(),
        KeyView::Ip(ip) => ip.to_string(),
        KeyView::Bytes(bytes) => String::from_utf8_lossy(bytes).into_owned(),
    }
}

impl QuotaSource for PlanBook {
    fn lookup(&self, key: &Key) -> QuotaLookup {
        let answer = self
            .plans()
            .get(&key_text(key))
            .cloned()
            .unwrap_or(QuotaAnswer::Default);
        Box::pin(std::future::ready(Ok(answer)))
    }
}

/// One `KEY=QUOTA`: a key's text and its plan (`5/min`, `5/s;500/h`,
/// `unlimited`, `default`).
pub fn parse_plan(text: &str) -> Result<(String, QuotaAnswer), String> {
    let (key, quota) = text
        .split_once('=')
        .ok_or_else(|| format!("{text:?} is not KEY=QUOTA"))?;
    let key = key.trim();
    if key.is_empty() {
        return Err(format!("{text:?} names no key"));
    }
    let quota = quota
        .trim()
        .parse::<QuotaAnswer>()
        .map_err(|error| format!("{text:?}: {error}"))?;
    Ok((key.to_owned(), quota))
}

/// A plan file: one `KEY=QUOTA` per line; blank lines and lines whose
/// first non-blank character is `#` are skipped. The first bad line fails
/// the whole file, with its number.
pub fn parse_file(text: &str) -> Result<Plans, String> {
    let mut plans = Plans::new();
    for (number, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (key, plan) =
            parse_plan(line).map_err(|error| format!("line {}: {error}", number + 1))?;
        plans.insert(key, plan);
    }
    Ok(plans)
}

/// Reads and parses the plan file at `path`.
pub fn read_file(path: &Path) -> Result<Plans, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|error| format!("cannot read {}: {error}", path.display()))?;
    parse_file(&text).map_err(|error| format!("{}: {error}", path.display()))
}

/// `fixed` with `file` over it.
pub fn merged(fixed: &Plans, file: Plans) -> Plans {
    let mut plans = fixed.clone();
    plans.extend(file);
    plans
}

/// Watches the plan file at `path` (ends with the runtime): whenever its
/// contents change, puts `fixed` with the file's plans over them in
/// `book`, and invalidates in `quotas` every key whose plan changed; a
/// file that does not parse (or cannot be read) is reported once per
/// change, and the last good one kept.
pub async fn watch(path: PathBuf, fixed: Plans, book: PlanBook, quotas: KeyQuotas) {
    on_change(path.clone(), || match read_file(&path) {
        Ok(plans) => {
            let changed = book.replace(merged(&fixed, plans));
            for key in &changed {
                quotas.invalidate(&Key::from(key.as_str()));
            }
            tracing::info!(
                file = %path.display(),
                changed = changed.len(),
                "quota file read again"
            );
        }
        Err(error) => tracing::warn!(
            %error,
            "the quota file does not parse; keeping the plans read last"
        ),
    })
    .await;
}

/// Calls `changed` whenever the contents of the file at `path` change
/// (looked at every [`WATCH_EVERY`]; ends with the runtime). A file that
/// cannot be read counts as a change too, so that it is reported.
pub async fn on_change(path: PathBuf, mut changed: impl FnMut()) {
    let mut last = std::fs::read(&path).ok();
    let mut ticks = tokio::time::interval(WATCH_EVERY);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let now = std::fs::read(&path).ok();
        if now != last {
            last = now;
            changed();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_parses_with_comments_and_names_its_bad_line() {
        let plans =
            parse_file("# plans\n\nfree = 5/min\npro=100/min;5000/h\n  # x\nvip=unlimited\n")
                .unwrap();
        assert_eq!(plans.len(), 3);
        assert_eq!(plans["free"], "5/min".parse().unwrap());
        assert_eq!(plans["vip"], QuotaAnswer::Unlimited);
        let error = parse_file("free=5/min\npro=lots\n").unwrap_err();
        assert!(error.starts_with("line 2: "), "{error}");
        assert!(parse_file("=5/min").is_err());
        assert!(parse_file("free").is_err());
    }

    #[test]
    fn a_replaced_book_names_the_keys_whose_plan_changed() {
        let book = PlanBook::new(parse_file("a=1/s\nb=2/s\nc=3/s").unwrap());
        let mut changed = book.replace(parse_file("a=1/s\nb=5/s\nd=4/s").unwrap());
        changed.sort();
        assert_eq!(changed, ["b", "c", "d"]);
        assert_eq!(key_text(&Key::from("a")), "a");
        assert_eq!(
            key_text(&Key::from("10.0.0.1".parse::<std::net::IpAddr>().unwrap())),
            "10.0.0.1"
        );
    }
}
