//! [`RulesLayer`], and the [`RulesHandle`] that reloads its rules.

use super::file::{Behaviour, RuleSpec, RulesError, parse};
use super::service::Rules;
use super::set::{BuiltRule, RuleSet};
use crate::rate_limit::layer::{RateLimitBuilder, RateLimitLayer, Template};
use crate::rejection::DefaultRejector;
use crate::store::{MemoryStore, Store};
use arc_swap::ArcSwap;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tower_layer::Layer;

/// A layer whose limits come from a rules file (see the
/// [module docs](super) for the format).
///
/// ```no_run
/// use tollgate::rules::RulesLayer;
///
/// let layer = RulesLayer::from_file("rules.toml")?;
/// let handle = layer.handle();
/// // Later, e.g. on SIGHUP: an invalid file is refused and the old rules stay.
/// if let Err(error) = handle.reload() {
///     eprintln!("{error}");
/// }
/// # Ok::<(), tollgate::rules::RulesError>(())
/// ```
pub struct RulesLayer<St = MemoryStore, R = DefaultRejector> {
    handle: RulesHandle<St, R>,
}

impl<St: Clone, R: Clone> Clone for RulesLayer<St, R> {
    fn clone(&self) -> Self {
        RulesLayer {
            handle: self.handle.clone(),
        }
    }
}

impl<St, R> std::fmt::Debug for RulesLayer<St, R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RulesLayer")
            .field("rules", &self.handle.rule_names())
            .finish_non_exhaustive()
    }
}

impl RulesLayer {
    /// The rules of the file at `path`, counted in a fresh [`MemoryStore`].
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self, RulesError> {
        Self::from_file_with_store(path, MemoryStore::new())
    }

    /// The rules in `text` (reported as file `<string>`), in memory.
    pub fn from_toml(text: &str) -> Result<Self, RulesError> {
        Self::from_toml_with_store(text, MemoryStore::new())
    }
}

impl<St: Store> RulesLayer<St> {
    /// The rules of the file at `path`, counted in `store`.
    pub fn from_file_with_store(path: impl AsRef<Path>, store: St) -> Result<Self, RulesError> {
        Self::from_file_with(path, RateLimitLayer::builder().store(store))
    }

    /// The rules in `text`, counted in `store`.
    pub fn from_toml_with_store(text: &str, store: St) -> Result<Self, RulesError> {
        Self::from_toml_with(text, RateLimitLayer::builder().store(store))
    }
}

impl<St: Store, R: Clone + Send + Sync + 'static> RulesLayer<St, R> {
    /// The rules of the file at `path`, each rule's layer built as
    /// `builder` would build it: its store, its rejector (gRPC statuses,
    /// problem+json, your own) and its settings (cost, headers, status,
    /// store timeout and failure behaviour, missing keys, allow-list,
    /// algorithm, delay). Each rule brings its own limits, key and
    /// behaviour; the builder's own key, limits, routes and per-key quotas
    /// are not used.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use tollgate::rules::RulesLayer;
    /// use tollgate::{OnStoreError, RateLimitLayer};
    ///
    /// let layer = RulesLayer::from_file_with(
    ///     "rules.toml",
    ///     RateLimitLayer::builder()
    ///         .store_timeout(Duration::from_millis(50))
    ///         .on_store_error(OnStoreError::Closed),
    /// )?;
    /// # let _ = layer;
    /// # Ok::<(), tollgate::rules::RulesError>(())
    /// ```
    pub fn from_file_with<K>(
        path: impl AsRef<Path>,
        builder: RateLimitBuilder<K, St, R>,
    ) -> Result<Self, RulesError> {
        let path = path.as_ref().to_owned();
        let text = read(&path)?;
        let template = builder.into_template();
        let rules = build(parse(&text, &path)?, &template);
        Ok(Self::with_rules(rules, template, Some(path)))
    }

    /// The rules in `text` (reported as file `<string>`), each rule's layer
    /// built as `builder` would build it (see
    /// [`from_file_with`](Self::from_file_with)).
    pub fn from_toml_with<K>(
        text: &str,
        builder: RateLimitBuilder<K, St, R>,
    ) -> Result<Self, RulesError> {
        let template = builder.into_template();
        let rules = build(parse(text, Path::new(STRING))?, &template);
        Ok(Self::with_rules(rules, template, None))
    }

    fn with_rules(rules: RuleSet<St, R>, template: Template<St, R>, file: Option<PathBuf>) -> Self {
        RulesLayer {
            handle: RulesHandle {
                rules: Arc::new(ArcSwap::from_pointee(rules)),
                template,
                file: file.map(Arc::from),
            },
        }
    }

    /// The handle that reloads this layer's rules (and every service's it
    /// made: they share them).
    pub fn handle(&self) -> RulesHandle<St, R> {
        self.handle.clone()
    }
}

impl<S, St, R> Layer<S> for RulesLayer<St, R> {
    type Service = Rules<S, St, R>;

    fn layer(&self, inner: S) -> Self::Service {
        Rules::new(inner, self.handle.rules.clone())
    }
}

/// The name rules given as text are reported under.
const STRING: &str = "<string>";

fn read(path: &Path) -> Result<String, RulesError> {
    std::fs::read_to_string(path).map_err(|error| RulesError {
        file: path.to_owned(),
        rule: None,
        field: None,
        message: format!("cannot read the file: {error}"),
    })
}

/// Swaps a [`RulesLayer`]'s rules. Clones share the layer.
pub struct RulesHandle<St, R = DefaultRejector> {
    rules: Arc<ArcSwap<RuleSet<St, R>>>,
    /// What every rule's layer is built from (its store among it).
    template: Template<St, R>,
    file: Option<Arc<Path>>,
}

impl<St, R> std::fmt::Debug for RulesHandle<St, R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RulesHandle").finish_non_exhaustive()
    }
}

impl<St: Clone, R: Clone> Clone for RulesHandle<St, R> {
    fn clone(&self) -> Self {
        RulesHandle {
            rules: self.rules.clone(),
            template: self.template.clone(),
            file: self.file.clone(),
        }
    }
}

impl<St, R> RulesHandle<St, R> {
    /// The names of the rules in force, in order.
    pub fn rule_names(&self) -> Vec<String> {
        self.rules
            .load()
            .iter()
            .map(|rule| rule.name.clone())
            .collect()
    }
}

impl<St: Store, R: Clone + Send + Sync + 'static> RulesHandle<St, R> {
    /// Reads the layer's file again and swaps its rules in. On any mistake
    /// the error says where, and the rules in force stay.
    pub fn reload(&self) -> Result<(), RulesError> {
        let Some(path) = &self.file else {
            return Err(RulesError {
                file: PathBuf::from(STRING),
                rule: None,
                field: None,
                message: "this layer was built from text, not a file: use replace_with".into(),
            });
        };
        let text = read(path)?;
        self.swap(&text, path)
    }

    /// Swaps in the rules in `text`. On any mistake the rules in force
    /// stay.
    pub fn replace_with(&self, text: &str) -> Result<(), RulesError> {
        self.swap(text, Path::new(STRING))
    }

    fn swap(&self, text: &str, path: &Path) -> Result<(), RulesError> {
        let rules = build(parse(text, path)?, &self.template);
        self.rules.store(Arc::new(rules));
        tracing::info!(file = %path.display(), "rate-limit rules reloaded");
        Ok(())
    }

    /// Checks the file every `interval` and reloads it when it changed.
    /// A file with mistakes is logged (`tracing` error) and skipped; the
    /// rules in force stay until a good one arrives. Needs a tokio runtime;
    /// stops when the returned task is aborted.
    ///
    /// Polling keeps this free of platform file-event APIs; a change shows
    /// within one interval.
    pub fn watch(&self, interval: Duration) -> tokio::task::JoinHandle<()> {
        let handle = self.clone();
        // Stamped now, not when the task first runs: a change made between
        // this call and the task's first poll must count as a change.
        let path = handle.file.clone();
        let mut seen = path.as_deref().and_then(stamp);
        tokio::spawn(async move {
            let Some(path) = path else {
                tracing::error!("rules from text have no file to watch");
                return;
            };
            loop {
                tokio::time::sleep(interval).await;
                let now = stamp(&path);
                if now == seen {
                    continue;
                }
                seen = now;
                if let Err(error) = handle.reload() {
                    tracing::error!(%error, "rate-limit rules not reloaded; the old rules stay");
                }
            }
        })
    }
}

/// What tells a changed file: modification time and length.
fn stamp(path: &Path) -> Option<(SystemTime, u64)> {
    let metadata = std::fs::metadata(path).ok()?;
    Some((metadata.modified().ok()?, metadata.len()))
}

/// Builds every rule's layer from `template`.
fn build<St: Store, R: Clone>(specs: Vec<RuleSpec>, template: &Template<St, R>) -> RuleSet<St, R> {
    specs
        .into_iter()
        .map(|spec| build_rule(spec, template))
        .collect()
}

fn build_rule<St: Store, R: Clone>(spec: RuleSpec, template: &Template<St, R>) -> BuiltRule<St, R> {
    let id = stable_id(&spec);
    let mut builder = template.builder().key(spec.key).stable_policy_id(id);
    for limit in spec.limits {
        builder = builder.limit(limit);
    }
    builder = match spec.behaviour {
        Behaviour::Reject => builder,
        Behaviour::Shadow => builder.shadow(true),
        Behaviour::Delay(max_delay) => builder.max_delay(max_delay),
    };
    BuiltRule {
        name: spec.name,
        matcher: spec.matcher,
        shared: builder.build().into_shared(),
    }
}

/// An identity that is the same for the same rule across reloads, so an
/// unchanged rule keeps its counters in a memory store.
fn stable_id(spec: &RuleSpec) -> u64 {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    spec.name.hash(&mut hasher);
    spec.key_text.hash(&mut hasher);
    format!("{:?}", spec.behaviour).hash(&mut hasher);
    for limit in &spec.limits {
        limit.name().hash(&mut hasher);
        limit.quota().hash(&mut hasher);
        limit.limiter().algorithm().hash(&mut hasher);
    }
    hasher.finish()
}
