//! The [`Gate`] every service of an in-flight layer shares: what a
//! request gets once its slot store has answered.

use super::fields::{FieldValues, Fields};
use super::{Acquired, InFlightLimit, Slots};
use crate::key::Key;
use crate::rejection::{InFlight, Rejection, Rejector};
use crate::settings::{CommonSettings, OnStoreError};
use http::{HeaderMap, Response, StatusCode};
use std::fmt;
use std::time::Duration;

/// The settings a gate decides with.
#[derive(Clone, Debug)]
pub(crate) struct Settings {
    /// The missing key, the store's failure and timeout (the fields are
    /// made from its header style once, into the gate's `fields`).
    pub(crate) common: CommonSettings,
    pub(crate) status: StatusCode,
    /// How long a refused request may wait for a slot; `None`: refused at
    /// once.
    pub(crate) wait: Option<Duration>,
    /// Whether the limit only counts: a request of a full key runs without
    /// a slot (logged), and responses carry no fields.
    pub(crate) shadow: bool,
}

/// What every service of one layer shares: the limit, the key, the store,
/// the rejector, the fields made once.
pub(crate) struct Gate<K, Sl, R> {
    pub(crate) limit: InFlightLimit,
    pub(crate) key: K,
    /// Says once that the key's extractor found none where it should.
    pub(crate) missing_key: crate::key::MissingKeyWarning,
    pub(crate) slots: Sl,
    pub(crate) rejector: R,
    pub(crate) fields: Fields,
    pub(crate) settings: Settings,
    /// In shadow: how often a request it would have refused is logged.
    pub(crate) shadow_log: crate::observe::Quiet,
    /// The slot store's failures since it last answered: its first answer
    /// after them ends an outage, logged as its start was.
    pub(crate) outage: tollgate_store::__private::Outage,
    /// Its decisions' counter keys, made once.
    pub(crate) metrics: crate::observe::LimitMetrics,
}

/// What becomes of a request once its store has answered.
pub(crate) enum Settled<P, B> {
    /// Run it, holding `permit` (none when the store failed and the layer
    /// fails open), adding `fields` to its response.
    Run {
        permit: Option<P>,
        fields: FieldValues,
    },
    /// Its key is full and the layer queues: wait for a slot.
    Queue { in_flight: u32 },
    /// Answer this instead.
    Reject(Box<Response<B>>),
}

impl<K, Sl: Slots, R> Gate<K, Sl, R> {
    /// What a request of `key` gets for the store's `answer`; a full key
    /// is queued if the layer queues and `may_queue`.
    pub(crate) fn settle<B: Default>(
        &self,
        answer: Result<Acquired<Sl::Permit>, Sl::Error>,
        key: &Key,
        may_queue: bool,
    ) -> Settled<Sl::Permit, B>
    where
        R: Rejector<B>,
    {
        if answer.is_ok()
            && let Some(end) = self.outage.answered()
        {
            self.store_answers_again(end);
        }
        match answer {
            Ok(Acquired::Taken { permit, in_flight }) => {
                let max = self.limit.max();
                crate::observe::in_flight_decided(
                    &self.metrics,
                    true,
                    u64::from(max.saturating_sub(in_flight)),
                    u64::from(max),
                );
                Settled::Run {
                    permit: Some(permit),
                    fields: if self.fields.on_allowed() {
                        self.fields.values(in_flight, key)
                    } else {
                        FieldValues::default()
                    },
                }
            }
            Ok(Acquired::Full { in_flight }) if self.settings.shadow => self.let_through(in_flight),
            Ok(Acquired::Full { in_flight }) if may_queue && self.settings.wait.is_some() => {
                Settled::Queue { in_flight }
            }
            Ok(Acquired::Full { in_flight }) => Settled::Reject(self.reject(key, in_flight)),
            Err(error) => self.store_failed(&error),
        }
    }

    /// A request the limit would have refused, in shadow: it runs without
    /// a slot (so it is not counted, as a refused one is not), logged at
    /// most once per [`SHADOW_LOG_INTERVAL`](crate::SHADOW_LOG_INTERVAL).
    fn let_through<B>(&self, in_flight: u32) -> Settled<Sl::Permit, B> {
        crate::observe::in_flight_shadow_limited(&self.metrics);
        if let Some(held_back) = self.shadow_log.pass() {
            tracing::info!(
                limit = self.limit.name(),
                in_flight,
                refused = held_back + 1,
                "shadow: requests this in-flight limit would have refused were let through \
                 (refused counts them since the last such line)"
            );
        }
        Settled::Run {
            permit: None,
            fields: FieldValues::default(),
        }
    }

    /// The refusal of a request of `key`, whose key has `in_flight` running.
    pub(crate) fn reject<B: Default>(&self, key: &Key, in_flight: u32) -> Box<Response<B>>
    where
        R: Rejector<B>,
    {
        crate::observe::in_flight_decided(&self.metrics, false, 0, u64::from(self.limit.max()));
        let mut headers = HeaderMap::new();
        self.fields
            .values(in_flight.max(self.limit.max()), key)
            .write_into(&mut headers);
        Box::new(self.rejector.reject(Rejection::InFlight(InFlight::new(
            self.settings.status,
            headers,
            self.limit.name(),
            self.limit.max(),
            key,
        ))))
    }

    /// The end of an outage of the slot store: a WARN as its start's, at
    /// most one every 10 s.
    fn store_answers_again(&self, end: tollgate_store::__private::OutageEnd) {
        static QUIET: crate::observe::Quiet = crate::observe::Quiet::new();
        if let Some(held_back) = QUIET.pass() {
            tracing::warn!(
                limit = self.limit.name(),
                failures = end.failures,
                last_failure_ms_ago = end.since_last_failure.as_millis() as u64,
                held_back,
                "in-flight limit: the slot store answers again after {} requests it could \
                 not decide (at most one such line every 10 s: held_back counts the \
                 recoveries since the last)",
                end.failures
            );
        }
    }

    /// What a request gets when the store failed (`error`) or was late.
    pub(crate) fn store_failed<B: Default>(
        &self,
        error: &(dyn std::error::Error + 'static),
    ) -> Settled<Sl::Permit, B>
    where
        R: Rejector<B>,
    {
        self.outage.failed();
        static QUIET: crate::observe::Quiet = crate::observe::Quiet::new();
        if let Some(held_back) = QUIET.pass() {
            tracing::warn!(
                limit = self.limit.name(),
                %error,
                on_store_error = ?self.settings.common.on_store_error,
                held_back,
                "in-flight limit: the slot store failed (at most one such warning every 10 s: \
                 held_back counts the failures since the last)"
            );
        }
        match self.settings.common.on_store_error {
            OnStoreError::Open => Settled::Run {
                permit: None,
                fields: FieldValues::default(),
            },
            OnStoreError::Closed => {
                Settled::Reject(Box::new(self.rejector.reject(Rejection::StoreFailed {
                    status: StatusCode::SERVICE_UNAVAILABLE,
                    retry_after: crate::rejection::retry_after_failure(Some(error)),
                })))
            }
        }
    }
}

/// A store that did not answer within the layer's store timeout.
#[derive(Debug)]
pub(crate) struct Late(pub(crate) Duration);

impl fmt::Display for Late {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "no answer within the store timeout of {:?}", self.0)
    }
}

impl std::error::Error for Late {}
