//! Counters through the `metrics` facade (with the `metrics` feature):
//!
//! - `tollgate_local_decisions_total{mode}`: requests the local-first store
//!   decided in memory without waiting (`mode` = `exact` or `periodic`);
//! - `tollgate_local_waits_total{mode}`: requests that waited for a
//!   reservation or a first reading;
//! - `tollgate_local_blocked_total{mode}`: requests refused from a refusal
//!   the shared store gave earlier, until its retry time (no call);
//! - `tollgate_local_reserved_units_total`, `tollgate_local_lapsed_units_total`:
//!   units granted to this instance, and units that lapsed unspent;
//! - `tollgate_local_overflow_total`: requests decided by the shared store
//!   directly because the table of keys was full;
//! - `tollgate_local_sync_lag_seconds` (gauge): in periodic mode, the age of
//!   the oldest reading among the keys synchronised at the last tick.
//!
//! Without the feature every function here is empty.

#[cfg(feature = "metrics")]
mod on {
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
    pub(crate) fn local_decision(_: &'static str) {}
    pub(crate) fn local_wait(_: &'static str) {}
    pub(crate) fn local_blocked(_: &'static str) {}
    pub(crate) fn reserved(_: u64) {}
    pub(crate) fn lapsed(_: u64) {}
    pub(crate) fn overflow() {}
    pub(crate) fn sync_lag(_: f64) {}
}

pub(crate) use on::*;

/// Gives every metric this crate writes its help text (Prometheus's
/// `# HELP` lines), on the recorder installed now: call it once after
/// installing a recorder. The store crates' own `describe_metrics` call it
/// (`tollgate_redis::describe_metrics`).
#[cfg(feature = "metrics")]
pub fn describe_metrics() {
    use metrics::{describe_counter, describe_gauge};
    describe_counter!(
        "tollgate_local_decisions_total",
        "Requests the local-first store decided in memory without waiting, by mode"
    );
    describe_counter!(
        "tollgate_local_waits_total",
        "Requests that waited for a reservation or a first reading, by mode"
    );
    describe_counter!(
        "tollgate_local_blocked_total",
        "Requests refused from a refusal the shared store gave earlier, until its retry time, by mode"
    );
    describe_counter!(
        "tollgate_local_reserved_units_total",
        "Units the shared store granted to this instance"
    );
    describe_counter!(
        "tollgate_local_lapsed_units_total",
        "Units granted to this instance that lapsed unspent"
    );
    describe_counter!(
        "tollgate_local_overflow_total",
        "Requests decided by the shared store directly because the local table of keys was full"
    );
    describe_gauge!(
        "tollgate_local_sync_lag_seconds",
        "Periodic mode: the age of the oldest reading among the keys synchronised at the last tick"
    );
}
