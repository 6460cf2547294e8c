//! A `metrics` recorder for tests: every counter and gauge by name and
//! labels (`name{label=value,...}`), read back as numbers. Installed for
//! one thread with `metrics::with_local_recorder`, so tests do not see
//! each other's counts.

use metrics::{
    Counter, CounterFn, Gauge, GaugeFn, Histogram, Key, KeyName, Metadata, Recorder, SharedString,
    Unit,
};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

/// Counters (their sums) and gauges (their last values, as `f64` bits).
#[derive(Default)]
pub struct Counts {
    cells: Mutex<BTreeMap<String, Arc<AtomicU64>>>,
}

impl Counts {
    /// A counter's sum, 0 if it was never touched. `name` is written as
    /// `tollgate_redis_calls_total{call=check}`, labels in the order the
    /// code gave them.
    pub fn get(&self, name: &str) -> u64 {
        self.cell(name).load(Ordering::Relaxed)
    }

    /// A gauge's last value, `None` if it was never set.
    pub fn gauge(&self, name: &str) -> Option<f64> {
        let cells = self.cells.lock().unwrap_or_else(PoisonError::into_inner);
        cells
            .get(name)
            .map(|cell| f64::from_bits(cell.load(Ordering::Relaxed)))
    }

    fn cell(&self, name: &str) -> Arc<AtomicU64> {
        let mut cells = self.cells.lock().unwrap_or_else(PoisonError::into_inner);
        cells.entry(name.to_owned()).or_default().clone()
    }
}

/// `name{a=1,b=2}`.
fn full_name(key: &Key) -> String {
    let labels: Vec<String> = key
        .labels()
        .map(|l| format!("{}={}", l.key(), l.value()))
        .collect();
    format!("{}{{{}}}", key.name(), labels.join(","))
}

struct CounterCell(Arc<AtomicU64>);

impl CounterFn for CounterCell {
    fn increment(&self, value: u64) {
        self.0.fetch_add(value, Ordering::Relaxed);
    }
    fn absolute(&self, value: u64) {
        self.0.store(value, Ordering::Relaxed);
    }
}

struct GaugeCell(Arc<AtomicU64>);

impl GaugeFn for GaugeCell {
    fn increment(&self, value: f64) {
        self.set(f64::from_bits(self.0.load(Ordering::Relaxed)) + value);
    }
    fn decrement(&self, value: f64) {
        self.increment(-value);
    }
    fn set(&self, value: f64) {
        self.0.store(value.to_bits(), Ordering::Relaxed);
    }
}

impl Recorder for Counts {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        Counter::from_arc(Arc::new(CounterCell(self.cell(&full_name(key)))))
    }
    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::from_arc(Arc::new(GaugeCell(self.cell(&full_name(key)))))
    }
    fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::noop()
    }
}
