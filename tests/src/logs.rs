//! Every `tracing` event a piece of code emits, as text: for tests that
//! check what reaches the logs (and what never must).

use std::fmt::Write as _;
use std::sync::{Arc, Mutex, PoisonError};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Metadata, Subscriber};

/// Collects the events emitted on this thread while the guard of
/// [`Captured::install`] lives: each event's level, target and fields, one
/// line each. Run async code on a current-thread runtime so that the
/// tasks it spawns log on this thread too.
#[derive(Clone, Default)]
pub struct Captured {
    lines: Arc<Mutex<Vec<String>>>,
}

impl Captured {
    /// Captures this thread's events until the guard is dropped.
    pub fn install() -> (Captured, tracing::subscriber::DefaultGuard) {
        let captured = Captured::default();
        let guard = tracing::subscriber::set_default(captured.clone());
        (captured, guard)
    }

    /// The lines so far.
    pub fn lines(&self) -> Vec<String> {
        self.lines
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// Writes `name=value` for each field, `Debug`-formatted as a log would.
struct Line(String);

impl Visit for Line {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        let _ = write!(self.0, " {}={value:?}", field.name());
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        let _ = write!(self.0, " {}={value}", field.name());
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        // What a log shows of an error: its message and its sources'.
        let _ = write!(self.0, " {}={value}", field.name());
        let mut source = value.source();
        while let Some(error) = source {
            let _ = write!(self.0, ": {error}");
            source = error.source();
        }
    }
}

impl Subscriber for Captured {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }

    fn new_span(&self, span: &Attributes<'_>) -> Id {
        let mut line = Line(format!("span {}", span.metadata().name()));
        span.record(&mut line);
        self.push(line.0);
        Id::from_u64(1)
    }

    fn record(&self, _: &Id, values: &Record<'_>) {
        let mut line = Line("span record".to_owned());
        values.record(&mut line);
        self.push(line.0);
    }

    fn record_follows_from(&self, _: &Id, _: &Id) {}

    fn event(&self, event: &Event<'_>) {
        let meta = event.metadata();
        let mut line = Line(format!("{} {}", meta.level(), meta.target()));
        event.record(&mut line);
        self.push(line.0);
    }

    fn enter(&self, _: &Id) {}

    fn exit(&self, _: &Id) {}
}

impl Captured {
    fn push(&self, line: String) {
        self.lines
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(line);
    }
}
