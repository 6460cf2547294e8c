//! Per-key quotas, looked up at request time: "user:241531 may make 5
//! requests per second", a paid plan gets more than a free one.
//!
//! A [`QuotaSource`] says what a key's quota is: the layer's default
//! limits, no limit at all, or its own quotas. Sources are slow (a file, a
//! Redis hash, a database), so [`KeyQuotas`] puts a bounded in-memory cache
//! in front: a key's first request waits for its lookup, every later one
//! reads only the cache.
//!
//! ```
//! use tollgate::quotas::{KeyQuotas, QuotaAnswer, StaticQuotas};
//! use tollgate::{HeaderKey, RateLimitLayer};
//! use tollgate::core::Quota;
//! use std::time::Duration;
//!
//! let plans = StaticQuotas::new()
//!     .with("free-key", "10/min".parse::<QuotaAnswer>().unwrap())
//!     .with("paid-key", "5/s;1000/h".parse().unwrap())
//!     .with("internal", QuotaAnswer::Unlimited);
//! let layer = RateLimitLayer::builder()
//!     .quota("api", Quota::per_minute(5)) // keys the source does not name
//!     .key(HeaderKey::new("x-api-key"))
//!     .quota_source(KeyQuotas::new(plans).ttl(Duration::from_secs(30)))
//!     .build();
//! # let _ = layer;
//! ```
//!
//! How a request gets its limits:
//!
//! - A key with a fresh cache entry gets that entry's answer.
//! - A key whose entry is older than half the TTL gets the entry's answer
//!   too, and one background lookup refreshes it: for a key in use, a change
//!   at the source takes effect within the TTL (as long as a lookup takes
//!   less than half of it). A key idle for longer sees the change from its
//!   second request after the idle spell.
//! - A key with no entry starts one lookup, and its requests wait for it
//!   (all of them share the one lookup): a key's first request is decided
//!   under its own quota, in the decision and in the headers. The wait is
//!   at most the [lookup timeout](KeyQuotas::lookup_timeout); past it, or
//!   when the lookup fails, the request gets the default limits. Past the
//!   bound on [lookups at once](KeyQuotas::max_lookups) (a flood of new
//!   keys), a new key's request gets the default limits without waiting,
//!   and its next request starts the lookup.
//! - A lookup that fails is counted ([`KeyQuotas::errors`], a `tracing`
//!   warning, and `tollgate_quota_errors_total` with the `metrics`
//!   feature). A stale entry then stays in use; a key with no entry gets
//!   the default limits, remembered for the error TTL so a failing source
//!   is not asked again on every request.
//! - "Default" and "unlimited" answers are cached like any other (negative
//!   caching), so keys the source does not know cost one lookup per TTL.
//!
//! Lookups run as tasks on the tokio runtime of the request that needs them,
//! timed with tokio's timer: the runtime must have time enabled, as axum and
//! tonic servers' runtimes do (`#[tokio::main]`, `Builder::enable_all`). In
//! a runtime without it each lookup task panics; the key then stays on the
//! default limits and is looked up again later. Outside any tokio runtime,
//! keys get the default limits, with one warning.
//!
//! Per-key quotas replace the layer's own limits; requests that match a
//! [route](crate::RateLimitBuilder::route) keep the route's limits. The
//! builder's algorithm and delay apply to per-key limits too. The limits
//! are named after the layer's first limit (`api`, then `api-2`, ...), so
//! headers and metrics read the same for every key.
//!
//! A key's usage goes with it from plan to plan. Each plan's counters are
//! kept apart (by policy in the memory store, by [`Policy::plan`](crate::Policy::plan)
//! in the Redis key names), so that one plan's state is never read under
//! another's rate; when a lookup (a refresh, or the first one after
//! [`KeyQuotas::invalidate`]) finds a key's plan changed, the layer moves
//! the key's usage with [`Store::carry`](crate::Store::carry) before the
//! key is charged under the new plan: the units used under the old quota
//! are still used under the new one (5 used of 5 a minute, moved to 100 a
//! minute, leaves 95; 50 used of 100 an hour, moved to 5 an hour, is
//! refused until they have come back at the new pace, with an honest
//! `Retry-After`). The same for every algorithm and store (tested for GCRA,
//! the fixed window and the sliding window on the memory store, the Redis
//! store and the local-first store in both modes; a plan of several quotas
//! limit by limit, each carrying the usage of the limit of its name, the
//! rest in order). A limit the new plan lacks keeps the key's usage for
//! its period, found again when a plan with it returns (3 used of 5, left
//! out for a request and put back: 2 left). A debt beyond an old limit is
//! carried by every algorithm (8 used of 10, lowered to 5, raised to 20:
//! 11 left after the next request). Not carried: a key
//! dropped from the cache (past
//! `max_keys`) before its plan changed; requests charged under the old
//! plan while the move runs (a round trip). Two instances that both see the change carry it once:
//! the second finds the old plan's state gone.

mod cache;
mod live;
mod plans;

pub use cache::KeyQuotas;
pub(crate) use cache::{Plans, QuotaWait, Resolution, Resolver};
pub use live::LiveLimits;
pub use plans::{
    KeyPlans, PlanBook, PlanFile, PlanFileError, PlansBuilder, parse_plan, parse_plans,
};
// The source contract lives with the store contract
// (`tollgate_store::quotas`), so that a source needs no middleware.
pub use tollgate_store::quotas::{
    AsyncFnQuotas, ChangedQuotas, FnQuotas, QuotaAnswer, QuotaLookup, QuotaSource, StaticQuotas,
    quota_fn, quota_fn_async,
};
