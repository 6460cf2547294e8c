//! Where per-key quotas come from: the trait and the built-in sources.

use super::QuotaAnswer;
use super::changes::ChangedQuotas;
use crate::BoxError;
use crate::Key;
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;

/// A lookup in progress. What can go wrong in it: anything, a
/// [`BoxError`] (lookups are off the request path, so the allocation costs
/// nothing there).
pub type QuotaLookup = Pin<Box<dyn Future<Output = Result<QuotaAnswer, BoxError>> + Send>>;

/// Says what a key's quota is. Called only by tollgate's `KeyQuotas`
/// in the background, never on the request path, so it may be slow; it
/// should still answer or fail in bounded time.
pub trait QuotaSource: Send + Sync + 'static {
    /// Looks up `key`.
    fn lookup(&self, key: &Key) -> QuotaLookup;

    /// Called once per `KeyQuotas` (tollgate's cache), inside a tokio
    /// runtime, when a layer first asks it: a source that can tell when a
    /// key's quota changed (the Redis store's `RedisQuotas` follows a feed
    /// of changes) starts following them here, and calls
    /// [`ChangedQuotas::invalidate`] for each, so that every instance's
    /// cache drops the key at once rather than within the TTL. The default
    /// follows nothing.
    fn follow(&self, changed: ChangedQuotas) {
        let _ = changed;
    }
}

/// A fixed table of key → answer; keys it does not hold get the default.
#[derive(Clone, Debug, Default)]
pub struct StaticQuotas {
    answers: HashMap<Key, QuotaAnswer>,
}

impl StaticQuotas {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// The same table with `key`'s answer set.
    pub fn with(mut self, key: impl Into<Key>, answer: QuotaAnswer) -> Self {
        self.answers.insert(key.into(), answer);
        self
    }
}

impl QuotaSource for StaticQuotas {
    fn lookup(&self, key: &Key) -> QuotaLookup {
        let answer = self
            .answers
            .get(key)
            .cloned()
            .unwrap_or(QuotaAnswer::Default);
        Box::pin(std::future::ready(Ok(answer)))
    }
}

/// A source from a synchronous closure; see [`quota_fn`].
#[derive(Clone, Copy, Debug)]
pub struct FnQuotas<F>(F);

/// A source from a closure that answers at once (from a table in memory,
/// from the key's own shape).
///
/// ```
/// use tollgate_store::quotas::{QuotaAnswer, quota_fn};
///
/// // Keys starting with "internal:" are not limited.
/// let source = quota_fn(|key| match key.to_bytes().starts_with(b"internal:") {
///     true => QuotaAnswer::Unlimited,
///     false => QuotaAnswer::Default,
/// });
/// # let _ = source;
/// ```
pub fn quota_fn<F>(f: F) -> FnQuotas<F>
where
    F: Fn(&Key) -> QuotaAnswer + Send + Sync + 'static,
{
    FnQuotas(f)
}

impl<F> QuotaSource for FnQuotas<F>
where
    F: Fn(&Key) -> QuotaAnswer + Send + Sync + 'static,
{
    fn lookup(&self, key: &Key) -> QuotaLookup {
        Box::pin(std::future::ready(Ok((self.0)(key))))
    }
}

/// A source from an asynchronous closure; see [`quota_fn_async`].
#[derive(Clone, Copy, Debug)]
pub struct AsyncFnQuotas<F>(F);

/// A source from an asynchronous closure: a query to a database, a call to
/// a plans service.
///
/// ```
/// use tollgate_store::BoxError;
/// use tollgate_store::quotas::{QuotaAnswer, quota_fn_async};
///
/// let source = quota_fn_async(|key| async move {
///     // e.g. SELECT quota FROM plans WHERE api_key = $1
///     let text = String::from_utf8(key.to_bytes())?;
///     let quota = if text.starts_with("paid") { "100/s" } else { "5/s" };
///     Ok::<_, BoxError>(quota.parse::<QuotaAnswer>()?)
/// });
/// # let _ = source;
/// ```
pub fn quota_fn_async<F, Fut>(f: F) -> AsyncFnQuotas<F>
where
    F: Fn(Key) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<QuotaAnswer, BoxError>> + Send + 'static,
{
    AsyncFnQuotas(f)
}

impl<F, Fut> QuotaSource for AsyncFnQuotas<F>
where
    F: Fn(Key) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<QuotaAnswer, BoxError>> + Send + 'static,
{
    fn lookup(&self, key: &Key) -> QuotaLookup {
        Box::pin((self.0)(key.clone()))
    }
}
