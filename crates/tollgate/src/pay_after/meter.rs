//! [`Meter`]: what a request reports it cost, settled once it is over.

use crate::store::ChangeReply;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

/// What settles a request's charge, given the cost reported (`None`:
/// nothing was, and the admission's charge stands).
pub(crate) type Settle = Box<dyn FnOnce(Option<u64>) -> ChangeReply + Send>;

/// The cost of one request, reported while it runs and settled once it is
/// over. Found in the extensions of every request a layer with
/// [`pay_after`](crate::RateLimitBuilder::pay_after) lets through
/// (`Extension<Meter>` in axum, `request.extensions().get::<Meter>()`
/// in tonic).
///
/// Clones share one count. The request is over when the last clone is
/// dropped; the layer keeps one until the response's head is ready, and a
/// [`MeterLayer`](super::MeterLayer) one until its body has been sent. A
/// handler that streams its body moves a clone into the stream: the cost
/// is then settled when the stream ends or is dropped (a client gone).
///
/// Nothing reported, the admission's charge stands. Reported, the total
/// replaces it: more is charged into debt if need be, less is given back.
/// A request the layer did not charge (an unlimited route, an allow-listed
/// request, a store failure let through) gets a meter that settles
/// nothing, so the extension is always there.
///
/// ```
/// use tollgate::pay_after::Meter;
///
/// let meter = Meter::default(); // settles nothing: for tests of handlers
/// meter.add(120);
/// meter.clone().add(30);
/// assert_eq!(meter.reported(), Some(150));
/// meter.set(10);
/// assert_eq!(meter.reported(), Some(10));
/// ```
#[derive(Clone, Default)]
pub struct Meter(Arc<Account>);

#[derive(Default)]
struct Account {
    /// The units reported so far.
    units: AtomicU64,
    /// Whether anything was reported (a report of 0 units is one).
    reported: AtomicBool,
    /// Whether the response does not count at all (`charge_when`): the
    /// whole charge is given back, whatever was reported.
    void: AtomicBool,
    /// Taken once, by whoever settles.
    settle: Mutex<Option<Settle>>,
}

impl fmt::Debug for Meter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Meter")
            .field("reported", &self.reported())
            .finish_non_exhaustive()
    }
}

impl Meter {
    /// A meter whose total `settle` charges once the request is over.
    pub(crate) fn new(settle: Settle) -> Self {
        Meter(Arc::new(Account {
            units: AtomicU64::new(0),
            reported: AtomicBool::new(false),
            void: AtomicBool::new(false),
            settle: Mutex::new(Some(settle)),
        }))
    }

    /// Adds `units` to the request's cost (saturating).
    pub fn add(&self, units: u64) {
        let account = &self.0;
        // Never fails: the closure always answers.
        let _ = account
            .units
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |u| {
                Some(u.saturating_add(units))
            });
        account.reported.store(true, Ordering::Release);
    }

    /// Sets the request's cost to `units`, replacing what was reported.
    pub fn set(&self, units: u64) {
        self.0.units.store(units, Ordering::Relaxed);
        self.0.reported.store(true, Ordering::Release);
    }

    /// The cost reported so far; `None` when nothing was (the admission's
    /// charge would stand).
    pub fn reported(&self) -> Option<u64> {
        self.0.reported(false)
    }

    /// Marks the response as not counting: the whole charge is given back.
    pub(crate) fn void(&self) {
        self.0.void.store(true, Ordering::Release);
    }

    /// Lets go of this handle; if it was the last, settles now and answers
    /// how (pending while a store that does I/O sends it), so the caller
    /// can wait for it. Otherwise the last handle settles when it goes.
    pub(crate) fn finish(self) -> ChangeReply {
        match Arc::into_inner(self.0) {
            Some(account) => account.settle_now(),
            None => ChangeReply::Done,
        }
    }
}

impl Account {
    fn reported(&self, void: bool) -> Option<u64> {
        if void {
            return Some(0);
        }
        self.reported
            .load(Ordering::Acquire)
            .then(|| self.units.load(Ordering::Relaxed))
    }

    fn settle_now(&self) -> ChangeReply {
        let settle = self
            .settle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        match settle {
            Some(settle) => settle(self.reported(self.void.load(Ordering::Acquire))),
            None => ChangeReply::Done,
        }
    }
}

impl Drop for Account {
    /// The last handle went without [`Meter::finish`] (a body dropped, a
    /// handler's clone outliving the response): settled all the same; a
    /// store that does I/O sends it on its own.
    fn drop(&mut self) {
        let _ = self.settle_now();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    fn recording() -> (Meter, mpsc::Receiver<Option<u64>>) {
        let (sender, receiver) = mpsc::channel();
        let meter = Meter::new(Box::new(move |units| {
            let _ = sender.send(units);
            ChangeReply::Done
        }));
        (meter, receiver)
    }

    #[test]
    fn the_last_handle_settles_once_with_the_total() {
        let (meter, settled) = recording();
        let clone = meter.clone();
        meter.add(3);
        clone.add(4);
        let _ = meter.finish();
        assert!(settled.try_recv().is_err(), "settled while a clone lives");
        drop(clone);
        assert_eq!(settled.try_recv(), Ok(Some(7)));
        assert!(settled.try_recv().is_err(), "settled twice");
    }

    #[test]
    fn nothing_reported_settles_none_and_void_settles_zero() {
        let (meter, settled) = recording();
        let _ = meter.finish();
        assert_eq!(settled.try_recv(), Ok(None));
        let (meter, settled) = recording();
        meter.add(9);
        meter.void();
        drop(meter);
        assert_eq!(settled.try_recv(), Ok(Some(0)));
    }

    #[test]
    fn reports_saturate() {
        let meter = Meter::default();
        meter.add(u64::MAX);
        meter.add(5);
        assert_eq!(meter.reported(), Some(u64::MAX));
    }
}
