//! The quota service's series, per rule (label `rule`, the rule's full
//! key, as `ShouldRateLimit`'s): what the data planes reported, what they
//! were granted, and how many report it.
//!
//! | series | what |
//! |---|---|
//! | `tollgate_rlqs_reported_allowed_total` | requests the data planes reported admitted |
//! | `tollgate_rlqs_reported_denied_total` | requests the data planes reported refused |
//! | `tollgate_rlqs_granted_per_window` | the refill granted, all data planes together, requests a window |
//! | `tollgate_rlqs_data_planes` | data planes (a stream's bucket) reporting the rule's buckets |

use metrics::{Counter, Gauge, counter, gauge};
use std::collections::HashMap;
use std::fmt;
use std::sync::{Mutex, PoisonError};

/// Describes the series to the recorder installed now.
pub fn describe() {
    use metrics::{Unit, describe_counter, describe_gauge};
    describe_counter!(
        "tollgate_rlqs_reported_allowed_total",
        Unit::Count,
        "Requests the data planes reported admitted, per rule."
    );
    describe_counter!(
        "tollgate_rlqs_reported_denied_total",
        Unit::Count,
        "Requests the data planes reported refused, per rule."
    );
    describe_gauge!(
        "tollgate_rlqs_granted_per_window",
        Unit::Count,
        "Refill granted to the data planes, all together, in requests a window, per rule."
    );
    describe_gauge!(
        "tollgate_rlqs_data_planes",
        Unit::Count,
        "Data planes (a stream's bucket) reporting each rule's buckets."
    );
}

/// One rule's series.
#[derive(Clone)]
pub(crate) struct RuleSeries {
    pub(crate) allowed: Counter,
    pub(crate) denied: Counter,
    pub(crate) granted: Gauge,
    pub(crate) planes: Gauge,
}

impl fmt::Debug for RuleSeries {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RuleSeries").finish_non_exhaustive()
    }
}

/// Every rule's series, made on the rule's first report (rules are few:
/// the label set is bounded by the configuration).
#[derive(Debug, Default)]
pub(crate) struct Series(Mutex<HashMap<String, RuleSeries>>);

impl Series {
    /// The series of rule `name`.
    pub(crate) fn of(&self, name: &str) -> RuleSeries {
        let mut map = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(series) = map.get(name) {
            return series.clone();
        }
        let label = || [("rule", name.to_owned())];
        let series = RuleSeries {
            allowed: counter!("tollgate_rlqs_reported_allowed_total", &label()),
            denied: counter!("tollgate_rlqs_reported_denied_total", &label()),
            granted: gauge!("tollgate_rlqs_granted_per_window", &label()),
            planes: gauge!("tollgate_rlqs_data_planes", &label()),
        };
        map.insert(name.to_owned(), series.clone());
        series
    }
}
