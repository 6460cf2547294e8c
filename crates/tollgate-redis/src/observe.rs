//! Counters through the `metrics` facade (with the `metrics` feature):
//!
//! - `tollgate_redis_calls_total{call}`: script calls, `call` = `check`
//!   (one decision of the plain store), `reserve` or `sync` (the
//!   local-first store's);
//! - `tollgate_local_decisions_total{mode}`: requests the local-first store
//!   decided in memory without waiting (`mode` = `exact` or `periodic`);
//! - `tollgate_local_waits_total{mode}`: requests that waited for a
//!   reservation or a first reading;
//! - `tollgate_local_blocked_total{mode}`: requests refused from a refusal
//!   Redis gave earlier, until its retry time (no call);
//! - `tollgate_local_reserved_units_total`, `tollgate_local_lapsed_units_total`:
//!   units granted to this instance, and units that lapsed unspent;
//! - `tollgate_local_overflow_total`: requests decided by Redis directly
//!   because the table of keys was full;
//! - `tollgate_local_sync_lag_seconds` (gauge): in periodic mode, the age of
//!   the oldest reading among the keys synchronised at the last tick.
//!
//! Without the feature every function here is empty.

#[cfg(feature = "metrics")]
mod on {
    pub(crate) fn redis_call(call: &'static str) {
        metrics::counter!("tollgate_redis_calls_total", "call" => call).increment(1);
    }
    pub(crate) fn local_decision(mode: &'static str) {
        metrics::counter!("tollgate_local_decisions_total", "mode" => mode).increment(1);
    }
    pub(crate) fn local_wait(mode: &'static str) {
        metrics::counter!("tollgate_local_waits_total", "mode" => mode).increment(1);
    }
    pub(crate) fn local_blocked(mode: &'static str) {
        metrics::counter!("tollgate_local_blocked_total", "mode" => mode).increment(1);
    }
    pub(crate) fn reserved(units: u64) {
        metrics::counter!("tollgate_local_reserved_units_total").increment(units);
    }
    pub(crate) fn lapsed(units: u64) {
        metrics::counter!("tollgate_local_lapsed_units_total").increment(units);
    }
    pub(crate) fn overflow() {
        metrics::counter!("tollgate_local_overflow_total").increment(1);
    }
    pub(crate) fn sync_lag(seconds: f64) {
        metrics::gauge!("tollgate_local_sync_lag_seconds").set(seconds);
    }
}

#[cfg(not(feature = "metrics"))]
mod on {
    pub(crate) fn redis_call(_: &'static str) {}
    pub(crate) fn local_decision(_: &'static str) {}
    pub(crate) fn local_wait(_: &'static str) {}
    pub(crate) fn local_blocked(_: &'static str) {}
    pub(crate) fn reserved(_: u64) {}
    pub(crate) fn lapsed(_: u64) {}
    pub(crate) fn overflow() {}
    pub(crate) fn sync_lag(_: f64) {}
}

pub(crate) use on::*;
