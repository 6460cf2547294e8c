//! Per-key plans read from a file that is followed: [`PlanFile`], one
//! `KEY=QUOTA` line per key, behind the layer's [`KeyQuotas`] cache.

use super::KeyQuotas;
use crate::key::Key;
use crate::watched::{Watched, follow, quote, short};
use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::fmt;
use std::path::PathBuf;
use std::sync::{Arc, PoisonError, RwLock};
use tollgate_store::quotas::{QuotaAnswer, QuotaLookup, QuotaSource};

/// Plans by key: what a plans file holds.
pub type KeyPlans = HashMap<Key, QuotaAnswer>;

/// The plans in force, a [`QuotaSource`]: a key named gets its plan, any
/// other the layer's default limits. Clones share them; [`replace`]
/// swaps them in one step.
///
/// [`replace`]: PlanBook::replace
#[derive(Clone, Debug, Default)]
pub struct PlanBook {
    plans: Arc<RwLock<Arc<KeyPlans>>>,
}

impl PlanBook {
    /// A book of `plans`.
    pub fn new(plans: KeyPlans) -> Self {
        PlanBook {
            plans: Arc::new(RwLock::new(Arc::new(plans))),
        }
    }

    /// The plans now.
    pub fn plans(&self) -> Arc<KeyPlans> {
        self.plans
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Puts `plans` in force in one step; the keys whose plan changed
    /// (added, removed or different), found after the swap, so that
    /// requests never wait on the comparison of two large books.
    pub fn replace(&self, plans: KeyPlans) -> Vec<Key> {
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
/// `unlimited`, `default`).
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

/// KeyPlans gathered one by one, refusing a key named twice (as a limits
/// file refuses a name given twice).
#[derive(Debug, Default)]
pub struct PlansBuilder {
    plans: KeyPlans,
    /// How each key was first written, for the message of a second.
    first: HashMap<Key, String>,
}

impl PlansBuilder {
    /// Adds `key`'s `plan`, the key `written` so; a key named before is
    /// refused, and the message says when two writings are one key.
    pub fn add(&mut self, key: Key, written: &str, plan: QuotaAnswer) -> Result<(), String> {
        match self.plans.entry(key) {
            Entry::Vacant(slot) => {
                self.first.insert(slot.key().clone(), written.to_owned());
                slot.insert(plan);
                Ok(())
            }
            Entry::Occupied(slot) => {
                let earlier = self.first.get(slot.key()).map_or("", String::as_str);
                let same = match earlier == written {
                    true => String::new(),
                    false => format!(
                        " ({} and {} are the same key)",
                        quote(earlier),
                        quote(written)
                    ),
                };
                Err(format!("a second plan for {}{same}", quote(written)))
            }
        }
    }

    /// The plans.
    pub fn build(self) -> KeyPlans {
        self.plans
    }
}

/// A plans file's text: one `KEY=QUOTA` per line, each key made a
/// [`Key`] by `canonical` (which refuses a key no request can get);
/// blank lines and lines whose first non-blank character is `#` are
/// skipped. The first bad line fails the whole text, with its number: a
/// line that is no plan, a key `canonical` refuses, a key named twice.
pub fn parse_plans(
    text: &str,
    canonical: impl Fn(&str) -> Result<Key, String>,
) -> Result<KeyPlans, String> {
    let mut plans = PlansBuilder::default();
    for (number, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let at = |error: String| format!("line {}: {error}", number + 1);
        let (written, plan) = parse_plan(line).map_err(at)?;
        let key = canonical(&written).map_err(at)?;
        plans.add(key, &written, plan).map_err(at)?;
    }
    Ok(plans.build())
}

/// Per-key plans from a file the program follows while it runs: one
/// `KEY=QUOTA` per line (`acme = 100/min`, `beta = 10/s;5000/h`,
/// `vip = unlimited`, `# comments`), each key as the layer's key
/// extractor gives it (the header's value, the address). The file is read
/// when opened (a bad one is an error naming the file and the line); then
/// [`follow`](Self::follow) reads it again within about a second of each
/// change, once it is whole (see [`crate::watched`]), swaps the plans in
/// one step and drops the cached quota of every key whose plan changed,
/// so that its next request is decided under its new plan. A changed file
/// that does not parse, or that names no plan while plans are in force
/// (a file caught between its truncation and its write), is refused with
/// one WARN, and the plans read last stay.
///
/// ```no_run
/// use tollgate::quotas::{KeyQuotas, PlanFile};
/// use tollgate::{HeaderKey, RateLimitLayer};
///
/// # async fn app() -> Result<(), Box<dyn std::error::Error>> {
/// let plans = PlanFile::open("plans.txt")?;
/// let quotas = KeyQuotas::new(plans.book());
/// let layer = RateLimitLayer::builder()
///     .quota("api", "10/min".parse()?) // keys the file does not name
///     .key(HeaderKey::new("x-api-key"))
///     .quota_source(quotas.clone())
///     .build();
/// tokio::spawn(plans.follow(quotas));
/// # let _ = layer;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct PlanFile {
    book: PlanBook,
    file: Watched<KeyPlans>,
}

impl PlanFile {
    /// Reads the plans file at `path`, each key taken as written. It
    /// blocks (file I/O, and a few short waits while the file is being
    /// written): call it before serving, or from
    /// `tokio::task::spawn_blocking`.
    pub fn open(path: impl Into<PathBuf>) -> Result<PlanFile, PlanFileError> {
        Self::open_with(path, |text| Ok(Key::from(text)))
    }

    /// Reads the plans file at `path`, each key made by `canonical` (the
    /// form the layer's key extractor gives: an address written another
    /// way, a key no request can get, refused with a message).
    pub fn open_with(
        path: impl Into<PathBuf>,
        canonical: impl Fn(&str) -> Result<Key, String> + Send + 'static,
    ) -> Result<PlanFile, PlanFileError> {
        let mut file = Watched::new(
            path.into(),
            "plans file",
            "the plans read last",
            move |text| parse_plans(text, &canonical),
        )
        .never_emptied(KeyPlans::len);
        let plans = file.load().map_err(PlanFileError)?;
        Ok(PlanFile {
            book: PlanBook::new(plans),
            file,
        })
    }

    /// The plans in force, for [`KeyQuotas::new`]: the book
    /// [`follow`](Self::follow) keeps up to date.
    pub fn book(&self) -> PlanBook {
        self.book.clone()
    }

    /// Follows the file (ends with the runtime, or when the task is
    /// aborted): each change read whole puts its plans in force and drops
    /// the cached quota, in `quotas`, of every key whose plan changed.
    pub async fn follow(self, quotas: KeyQuotas) {
        let book = self.book;
        follow(self.file, move |plans: KeyPlans| {
            let changed = book.replace(plans);
            quotas.invalidate_keys(&changed);
            Ok(())
        })
        .await;
    }
}

/// Why a plans file could not be read: the message names the file and,
/// for a bad line, its number and what is wrong with it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlanFileError(String);

impl fmt::Display for PlanFileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for PlanFileError {}

#[cfg(test)]
mod tests {
    use super::*;

    fn verbatim(text: &str) -> Result<Key, String> {
        Ok(Key::from(text))
    }

    #[test]
    fn a_file_parses_with_comments_and_names_its_bad_line() {
        let plans = parse_plans(
            "# plans\n\nfree = 5/min\npro=100/min;5000/h\n  # x\nvip=unlimited\n",
            verbatim,
        )
        .unwrap();
        assert_eq!(plans.len(), 3);
        assert_eq!(plans[&Key::from("free")], "5/min".parse().unwrap());
        assert_eq!(plans[&Key::from("vip")], QuotaAnswer::Unlimited);
        let error = parse_plans("free=5/min\npro=lots\n", verbatim).unwrap_err();
        assert!(error.starts_with("line 2: "), "{error}");
        assert!(parse_plans("=5/min", verbatim).is_err());
        assert!(parse_plans("free", verbatim).is_err());
        let error = parse_plans("a=1/s\nb=2/s\na=3/s\n", verbatim).unwrap_err();
        assert_eq!(error, "line 3: a second plan for \"a\"");
    }

    #[test]
    fn a_replaced_book_names_the_keys_whose_plan_changed() {
        let book = PlanBook::new(parse_plans("a=1/s\nb=2/s\nc=3/s", verbatim).unwrap());
        let mut changed = book.replace(parse_plans("a=1/s\nb=5/s\nd=4/s", verbatim).unwrap());
        changed.sort();
        assert_eq!(changed, [Key::from("b"), Key::from("c"), Key::from("d")]);
    }
}
