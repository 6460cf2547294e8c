//! Counters through the `metrics` facade (with the `metrics` feature):
//!
//! - `tollgate_redis_calls_total{call}`: script calls, `call` = `check`
//!   (one decision of the plain store), `reserve` or `sync` (the
//!   local-first store's);
//!
//! The local-first store's own (`tollgate_local_*`) are tollgate-local's,
//! enabled with this feature and described by [`describe_metrics`] too.
//!
//! Without the feature every function here is empty.
//!
//! [`describe_metrics`] gives each its help text.

#[cfg(feature = "metrics")]
mod on {
    pub(crate) fn redis_call(call: &'static str) {
        metrics::counter!("tollgate_redis_calls_total", "call" => call).increment(1);
    }
}

#[cfg(not(feature = "metrics"))]
mod on {
    pub(crate) fn redis_call(_: &'static str) {}
}

pub(crate) use on::*;

/// Gives every metric this crate writes its help text (Prometheus's
/// `# HELP` lines), on the recorder installed now, and tollgate's own
/// ([`tollgate_store::describe_metrics`]): call it once after installing a
/// recorder. The metrics: the guide's page on Redis
/// (`docs/guide/redis.md`) and on metrics (`docs/guide/metrics.md`).
#[cfg(feature = "metrics")]
pub fn describe_metrics() {
    use metrics::describe_counter;
    tollgate_store::describe_metrics();
    describe_counter!(
        "tollgate_redis_calls_total",
        "Redis script calls, by call: check (the plain store's decisions), reserve or sync \
         (the local-first store's)"
    );
    tollgate_local::describe_metrics();
}
