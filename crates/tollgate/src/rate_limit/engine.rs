//! The request engine: everything the layer decides about a request, in
//! one place. [`Engine::start`] takes a request as far as it can without
//! waiting (route, key, per-key quotas, allow-list, cost, the store call);
//! when the store answers later, [`Engine::finish`] turns its answer (or
//! its failure, or its lateness) into the same kind of [`Action`]. The
//! service (`service.rs`) and the future (`future.rs`) only carry actions
//! out; neither decides anything.

use crate::access::{Access, AccessLists};
use crate::headers::{FieldValues, write_retry_after};
use crate::key::{Key, KeyExtractor, OnMissingKey, RequestView};
use crate::observe::Shadow;
use crate::pay_after::Meter;
use crate::rate_limit::info::RateLimitInfo;
use crate::rate_limit::outcome::Ticket;
use crate::rate_limit::routes::{Entry, EntryRef, Routes};
use crate::rejection::{Limited, Rejection, Rejector};
use crate::settings::{CommonSettings, OnStoreError};
use crate::store::{ChangeReply, PolicyDecision, Store, StoreReply, Watched};
use http::{HeaderMap, Request, Response, StatusCode};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How many times a request waits for its key's quota lookup at most: an
/// answer can be dropped (an invalidation) between its arrival and the
/// request reading it; past this the request takes what the cache holds,
/// or the default limits.
#[cfg(feature = "quotas")]
pub(crate) const MAX_QUOTA_WAITS: u8 = 3;

/// A per-request cost: how many units of the quota a request takes.
pub(crate) type CostFn = Arc<dyn Fn(&RequestView<'_>) -> u32 + Send + Sync>;
/// A predicate for requests that are never limited.
pub(crate) type AllowFn = Arc<dyn Fn(&RequestView<'_>) -> bool + Send + Sync>;

/// Everything the layer decides requests with, built once when the layer is
/// built and shared by every clone of its service.
pub(crate) struct Engine<K, St, R> {
    pub rejector: R,
    pub routes: Routes,
    #[cfg(feature = "quotas")]
    pub quotas: Option<Arc<crate::rate_limit::quotas::Resolver>>,
    /// The handle to the limits, when they change while the layer runs.
    #[cfg(feature = "quotas")]
    pub live: Option<crate::rate_limit::quotas::LiveLimits>,
    pub key: K,
    /// Says once that the key's extractor found none where it should.
    pub missing_key: crate::key::MissingKeyWarning,
    pub store: St,
    pub settings: Settings,
    /// Whether allowed responses carry rate-limit fields (the header style
    /// asks for some, and on allowed responses). Decided once, here.
    pub fields_on_allowed: bool,
    /// Whether an allowed request that need not wait is forwarded as it is:
    /// no fields on the response, no [`RateLimitInfo`](crate::RateLimitInfo)
    /// on the request. Decided once, here, so the hot path tests one flag.
    pub forwards_bare: bool,
    /// Whether every request takes the plain path: one policy for all (no
    /// routes, no per-key quotas, no live limits) with limits to enforce
    /// and none in shadow, no allow-list, no access lists, no cost
    /// function. Decided once, here, so the hot path tests one flag where
    /// it would test each.
    pub plain: bool,
}

/// The builder's settings that do not change its type.
#[derive(Clone)]
pub(crate) struct Settings {
    pub cost: Option<CostFn>,
    pub allow: Option<AllowFn>,
    /// Keys that pass uncounted and keys refused, whatever their budget.
    pub access: Option<AccessLists>,
    /// The fields, the missing key, the store's failure and timeout.
    pub common: CommonSettings,
    pub status: StatusCode,
    pub shadow: bool,
    pub request_info: bool,
    /// Which responses count; `None`: every admission counts.
    pub charge_when: Option<crate::rate_limit::outcome::ChargeWhen>,
    /// Whether a request's cost is settled once it is over (a `Meter`).
    pub pay_after: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            cost: None,
            allow: None,
            access: None,
            common: CommonSettings::default(),
            status: StatusCode::TOO_MANY_REQUESTS,
            shadow: false,
            request_info: false,
            charge_when: None,
            pay_after: false,
        }
    }
}

/// What to do with a request once its verdict is known.
pub(crate) enum Action<B> {
    /// Forward it, after `wait` (the leaky bucket's slot), adding `fields`
    /// to the response and `info` to the request.
    Forward {
        fields: FieldValues,
        wait: Duration,
        // Boxed: it is rare (opt-in) and would triple the size of the action.
        info: Option<Box<RateLimitInfo>>,
        /// With `charge_when`: what to give back if the response does not
        /// count. Boxed, as `info`.
        ticket: Option<Box<Ticket>>,
    },
    /// Answer with this response instead. Boxed: a response is large, and
    /// every allowed request would otherwise move an action that size.
    Reject(Box<Response<B>>),
}

impl<K, St, R> Engine<K, St, R> {
    /// Whether the allow-list predicate exempts this request.
    fn is_allowed_always(&self, request: &RequestView<'_>) -> bool {
        self.settings
            .allow
            .as_ref()
            .is_some_and(|allow| allow(request))
    }

    /// Whether `verdict` lets the request through at once with nothing to
    /// add to it or to its response.
    #[inline]
    fn passes_bare(&self, verdict: &PolicyDecision) -> bool {
        self.forwards_bare && verdict.merged().allowed() && verdict.merged().wait_nanos() == 0
    }

    /// Whether requests on `entry` may have per-key quotas of their own
    /// (the layer's default entry, with quotas configured).
    #[inline]
    fn has_key_quotas(&self, entry: &EntryRef) -> bool {
        #[cfg(feature = "quotas")]
        if self.quotas.is_some() && matches!(entry, EntryRef::Table(0)) {
            return true;
        }
        let _ = entry;
        false
    }

    /// The limits a request with `key` is charged, given the entry its
    /// route chose. `waits`: how many times the request waited for its
    /// key's quota lookup already; past [`MAX_QUOTA_WAITS`] it waits no more
    /// (the key's answer was dropped each time before it could read it).
    #[inline]
    fn limits_for_key(&self, entry: EntryRef, key: &Key, waits: u8) -> KeyLimits {
        #[cfg(feature = "quotas")]
        if let (Some(quotas), EntryRef::Table(0)) = (&self.quotas, &entry) {
            use crate::rate_limit::quotas::Resolution;
            let resolution = match waits {
                0 => quotas.resolve(key),
                waits if waits < MAX_QUOTA_WAITS => quotas.resolve_again(key),
                _ => quotas.resolve_now(key),
            };
            return match resolution {
                Resolution::Default => KeyLimits::Entry(entry),
                Resolution::Unlimited => KeyLimits::Unlimited,
                Resolution::Limits(limits) => KeyLimits::Entry(EntryRef::Key(limits)),
                Resolution::Pending(arrival) => KeyLimits::Wait(arrival.wait()),
            };
        }
        let _ = (key, waits);
        KeyLimits::Entry(entry)
    }

    /// The action for a verdict on the limits of entry `entry`, for a
    /// request of `charge` (its cost, and when the store was asked, when
    /// the layer counts only some outcomes).
    fn judge<B: Default>(
        &self,
        entry: &EntryRef,
        key: &Key,
        verdict: &PolicyDecision,
        charge: Charge,
    ) -> Action<B>
    where
        R: Rejector<B>,
        St: Store,
    {
        let decision = &verdict.merged();
        let routed = self.routes.get(entry);
        let policy = &routed.policy;
        tollgate_store::report_answer(policy);
        if decision.allowed() {
            crate::observe::decided(policy.metrics(), true, verdict.each(), Shadow::None);
            self.check_shadow(routed, key, charge.cost);
        } else if self.settings.shadow {
            routed.shadow_log.refused(policy, verdict);
        } else {
            crate::observe::decided(policy.metrics(), false, verdict.each(), Shadow::None);
        }
        if decision.allowed() || self.settings.shadow {
            let fields = if self.fields_on_allowed {
                self.field_values(entry, verdict, key)
            } else {
                FieldValues::default()
            };
            let info = self
                .settings
                .request_info
                .then(|| Box::new(RateLimitInfo::new(policy, verdict)));
            // Only a request that was charged has anything to give back
            // (in shadow mode a refused one passes uncharged); one that
            // pays after may owe more than it was charged.
            let settles = charge.cost > 0 || self.settings.pay_after;
            let ticket = match charge.asked {
                Some(asked) if decision.allowed() && settles => Some(Box::new(Ticket::new(
                    policy,
                    key,
                    charge.cost,
                    asked,
                    verdict,
                ))),
                _ => None,
            };
            return Action::Forward {
                fields,
                wait: decision.wait(),
                info,
                ticket,
            };
        }
        tracing::debug!(
            limits = policy.label(),
            retry_after_ms = decision.retry_after_nanos() / 1_000_000,
            "request limited"
        );
        let mut headers = HeaderMap::new();
        self.field_values(entry, verdict, key)
            .write_into(&mut headers);
        write_retry_after(&mut headers, decision);
        Action::Reject(Box::new(self.rejector.reject(Rejection::Limited(
            Limited::new(self.settings.status, headers, policy, key, verdict),
        ))))
    }

    /// Checks the shadow limits of `entry`, if it has any, for a request
    /// of `cost` that its enforced limits admitted.
    #[inline]
    fn check_shadow(&self, entry: &Entry, key: &Key, cost: u32)
    where
        St: Store,
    {
        if let Some(shadow) = &entry.shadow {
            shadow.check(&self.store, key, cost, self.settings.common.store_timeout);
        }
    }

    /// The rate-limit fields reporting `verdict` on the limits of entry
    /// `entry`, in the layer's header style.
    fn field_values(&self, entry: &EntryRef, verdict: &PolicyDecision, key: &Key) -> FieldValues {
        let entry = self.routes.get(entry);
        FieldValues::of(self.settings.common.headers, &entry.fields, verdict, key)
    }

    /// The action when the store failed (`error`) or did not answer in
    /// time (`None`).
    fn on_failure<B: Default>(
        &self,
        entry: &EntryRef,
        error: Option<&(dyn std::error::Error + 'static)>,
    ) -> Action<B>
    where
        R: Rejector<B>,
    {
        let policy = &self.routes.get(entry).policy;
        match error {
            Some(error) => tollgate_store::report_failure(policy, &error),
            None => tollgate_store::report_failure(policy, &"the store did not answer in time"),
        }
        match &self.settings.common.on_store_error {
            OnStoreError::Open => Action::Forward {
                fields: FieldValues::default(),
                wait: Duration::ZERO,
                info: None,
                ticket: None,
            },
            OnStoreError::Closed => {
                Action::Reject(Box::new(self.rejector.reject(Rejection::StoreFailed {
                    status: StatusCode::SERVICE_UNAVAILABLE,
                    retry_after: crate::rejection::retry_after_failure(error),
                })))
            }
        }
    }
}

/// What [`Engine::start`] says of a request.
pub(crate) enum Start<F, B> {
    /// Hand it on as it is: unlimited, allow-listed, without a key and
    /// skipped, or admitted at once with nothing to add.
    Pass,
    /// Carry out this action now.
    Act(Action<B>),
    /// The store answers later: await `check`, then [`Engine::finish`].
    /// Boxed: a store that answers at once still has a future type (the
    /// memory store's holds a whole verdict), and the hot path should not
    /// move it; a store that answers later does I/O, beside which one
    /// allocation is nothing.
    Check(Box<PendingCheck<F>>),
    /// The key's quota is looked up for the first time: wait for it, then
    /// start again ([`Engine::start`] with one wait more).
    #[cfg(feature = "quotas")]
    Lookup(crate::rate_limit::quotas::QuotaWait),
}

/// The limits a request's key is charged.
enum KeyLimits {
    Entry(EntryRef),
    /// Its quota says "unlimited".
    #[cfg(feature = "quotas")]
    Unlimited,
    /// Its quota is being looked up for the first time.
    #[cfg(feature = "quotas")]
    Wait(crate::rate_limit::quotas::QuotaWait),
}

/// A store check under way, and what [`Engine::finish`] needs to judge its
/// answer.
pub(crate) struct PendingCheck<F> {
    pub(crate) check: F,
    pub(crate) entry: EntryRef,
    pub(crate) key: Key,
    pub(crate) charge: Charge,
}

/// What a request is charged, as a refund needs it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Charge {
    pub(crate) cost: u32,
    /// When the store was asked; `None` unless the layer counts only some
    /// outcomes.
    pub(crate) asked: Option<Instant>,
}

impl<K, St, R> Engine<K, St, R>
where
    K: KeyExtractor,
    St: Store,
{
    /// Takes `request` as far as it can go without waiting: which limits
    /// apply (route, key, per-key quotas, allow-list), its cost, and the
    /// store's answer if the store gives one at once. `waits`: how many
    /// times the request has waited for its key's quota lookup (see
    /// [`Start::Lookup`]).
    #[inline(always)]
    pub(crate) fn start<ReqBody, B: Default>(
        &self,
        request: &Request<ReqBody>,
        waits: u8,
    ) -> Start<Watched<St>, B>
    where
        R: Rejector<B>,
    {
        let info = RequestView::new(request);
        // Each way ends in its own `ask`, so that the start it returns is
        // built where the caller wants it, not copied there.
        if self.plain {
            return match self.key_of(&info) {
                Ok(key) => self.ask(EntryRef::Table(0), key, 1),
                Err(start) => start,
            };
        }
        match self.locate(&info, waits) {
            Ok((entry, key, cost)) => self.ask(entry, key, cost),
            Err(start) => start,
        }
    }

    /// Off the plain path: the entry whose limits a request is charged, its
    /// key and its cost; or, when there is nothing to ask the store, the
    /// request's start (passed: unlimited, allowed, only shadow limits;
    /// refused; waiting for its key's quota).
    // The error is a whole `Start` for one path's sake: it never carries
    // the large forwarding action, and `start` matches it at once.
    #[expect(clippy::result_large_err, reason = "a start, matched at once")]
    #[inline(never)]
    fn locate<B: Default>(
        &self,
        info: &RequestView<'_>,
        waits: u8,
    ) -> Result<(EntryRef, Key, u32), Start<Watched<St>, B>>
    where
        R: Rejector<B>,
    {
        let entry = self.routes.select(info);
        let unlimited = self.routes.get(&entry).is_unlimited() && !self.has_key_quotas(&entry);
        if unlimited || self.is_allowed_always(info) {
            return Err(Start::Pass);
        }
        let key = self.key_of(info)?;
        if let Some(lists) = &self.settings.access {
            match lists.access(&key) {
                Access::Limited => {}
                Access::Allowed => return Err(Start::Pass),
                Access::Denied => {
                    let response = self.rejector.reject(Rejection::Denied {
                        status: StatusCode::FORBIDDEN,
                    });
                    return Err(Start::Act(Action::Reject(Box::new(response))));
                }
            }
        }
        let entry = match self.limits_for_key(entry, &key, waits) {
            KeyLimits::Entry(entry) if !self.routes.get(&entry).is_unlimited() => entry,
            KeyLimits::Entry(_) => return Err(Start::Pass),
            #[cfg(feature = "quotas")]
            KeyLimits::Unlimited => return Err(Start::Pass),
            #[cfg(feature = "quotas")]
            KeyLimits::Wait(wait) => return Err(Start::Lookup(wait)),
        };
        let cost = self.settings.cost.as_ref().map_or(1, |cost| cost(info));
        let routed = self.routes.get(&entry);
        if routed.policy.limits().is_empty() {
            // Only limits in shadow: nothing enforced to ask first.
            self.check_shadow(routed, &key, cost);
            return Err(Start::Pass);
        }
        Ok((entry, key, cost))
    }

    /// The request's key; when its extractor finds none, what
    /// `on_missing_key` says: a shared key, or the request's start (passed
    /// unlimited, or refused).
    #[expect(clippy::result_large_err, reason = "a start, matched at once")]
    #[inline(always)]
    fn key_of<B: Default>(&self, info: &RequestView<'_>) -> Result<Key, Start<Watched<St>, B>>
    where
        R: Rejector<B>,
    {
        if let Some(key) = self.key.extract(info) {
            return Ok(key);
        }
        self.missing_key.missed(&self.key);
        match &self.settings.common.on_missing_key {
            OnMissingKey::Shared(key) => Ok(key.clone()),
            OnMissingKey::Skip => Err(Start::Pass),
            OnMissingKey::Reject(status) => {
                let response = self
                    .rejector
                    .reject(Rejection::MissingKey { status: *status });
                Err(Start::Act(Action::Reject(Box::new(response))))
            }
        }
    }

    /// Asks the store to charge `cost` to `key` on the limits of `entry`
    /// (which has limits to enforce), and starts carrying out its answer.
    #[inline(always)]
    fn ask<B: Default>(&self, entry: EntryRef, key: Key, cost: u32) -> Start<Watched<St>, B>
    where
        R: Rejector<B>,
    {
        let charge = Charge {
            cost,
            asked: (self.settings.charge_when.is_some() || self.settings.pay_after)
                .then(Instant::now),
        };
        let routed = self.routes.get(&entry);
        let policy = &routed.policy;
        match self
            .store
            .check_within(policy, &key, cost, self.settings.common.store_timeout)
        {
            // The hot path: admitted at once, nothing to add.
            StoreReply::Ready(Ok(verdict)) if self.passes_bare(&verdict) => {
                crate::observe::decided(policy.metrics(), true, verdict.each(), Shadow::None);
                self.check_shadow(routed, &key, cost);
                Start::Pass
            }
            StoreReply::Ready(Ok(verdict)) => {
                Start::Act(self.judge(&entry, &key, &verdict, charge))
            }
            StoreReply::Ready(Err(error)) => Start::Act(self.on_failure(&entry, Some(&error))),
            // Watched: if the layer stops waiting (its store timeout, a
            // client gone), the check is heard out and an admission it
            // brings is given back. (Wrapped here, not with
            // `StoreReply::watched`, so the memory store's answer is not
            // moved once more on the hot path.)
            StoreReply::Pending(check) => Start::Check(Box::new(PendingCheck {
                check: Watched::new(check, self.store.clone(), policy, &key, cost),
                entry,
                key,
                charge,
            })),
        }
    }
}

impl<K, St: Store, R> Engine<K, St, R> {
    /// What settles an admitted request once its outcome is known: its
    /// meter (pay after), put in the request's extensions for the handler,
    /// or its ticket (charge by outcome).
    pub(crate) fn settlement(
        &self,
        ticket: Box<Ticket>,
        extensions: &mut http::Extensions,
    ) -> Settlement {
        if !self.settings.pay_after {
            return Settlement::Refund(ticket);
        }
        let store = self.store.clone();
        let timeout = self.settings.common.store_timeout;
        let meter = Meter::new(Box::new(move |reported| {
            bounded(settle_cost(&store, &ticket, reported), timeout)
        }));
        extensions.insert(meter.clone());
        Settlement::Meter(meter)
    }

    /// Settles a request whose response's head is `response`: gives its
    /// charge back if the response does not count, and lets go of the
    /// layer's handle on its meter. The answer is pending while a store
    /// that does I/O sends the change, for at most the store timeout.
    pub(crate) fn settle(
        &self,
        settlement: Settlement,
        response: &http::response::Parts,
    ) -> ChangeReply {
        let counts = self
            .settings
            .charge_when
            .as_ref()
            .is_none_or(|when| when.counts(response));
        match settlement {
            Settlement::Refund(_) if counts => ChangeReply::Done,
            Settlement::Refund(ticket) => bounded(
                self.store
                    .refund(&ticket.policy, &ticket.key, ticket.refund()),
                self.settings.common.store_timeout,
            ),
            Settlement::Meter(meter) => {
                if !counts {
                    meter.void();
                }
                meter.finish()
            }
        }
    }

    /// Gives requests that the layer lets through uncharged (or on a route
    /// without limits) a meter that settles nothing, so that a handler
    /// asking for one always finds it.
    #[inline(always)]
    pub(crate) fn add_idle_meter(&self, extensions: &mut http::Extensions) {
        // Tested here, inline, so that a layer without pay-after (most)
        // pays one branch per request, not a call.
        if self.settings.pay_after {
            add_meter(extensions);
        }
    }
}

/// An idle meter, unless the request has one.
#[inline(never)]
fn add_meter(extensions: &mut http::Extensions) {
    if extensions.get::<Meter>().is_none() {
        extensions.insert(Meter::default());
    }
}

/// What settles an admitted request once its outcome is known.
pub(crate) enum Settlement {
    /// `charge_when`: the ticket to give back if the response does not
    /// count.
    Refund(Box<Ticket>),
    /// Pay after: the layer's handle on the request's meter.
    Meter(Meter),
}

/// Replaces `ticket`'s charge by the `reported` cost: the difference
/// charged (into debt if need be) or given back. Nothing reported, the
/// charge stands.
fn settle_cost<St: Store>(store: &St, ticket: &Ticket, reported: Option<u64>) -> ChangeReply {
    let Some(cost) = reported else {
        return ChangeReply::Done;
    };
    let charged = u64::from(ticket.cost);
    let (policy, key) = (&ticket.policy, &ticket.key);
    match cost.cmp(&charged) {
        std::cmp::Ordering::Equal => ChangeReply::Done,
        std::cmp::Ordering::Greater => {
            let more = u32::try_from(cost - charged).unwrap_or(u32::MAX);
            store.debit(policy, key, ticket.debit(more))
        }
        std::cmp::Ordering::Less => {
            // Less than u32::MAX: below `charged`.
            let less = (charged - cost) as u32;
            store.refund(policy, key, ticket.refund_part(less))
        }
    }
}

/// `reply`, waited for at most `timeout` (past it the change still lands;
/// nobody waits for it).
fn bounded(reply: ChangeReply, timeout: Duration) -> ChangeReply {
    match reply {
        ChangeReply::Done => ChangeReply::Done,
        ChangeReply::Pending(landed) => ChangeReply::Pending(Box::pin(async move {
            tokio::time::timeout(timeout, landed).await.unwrap_or(false)
        })),
    }
}

impl<K, St, R> Engine<K, St, R> {
    /// The action once a pending check has ended: its verdict, its error,
    /// or `None` when it did not answer within the store timeout.
    pub(crate) fn finish<B: Default, E: std::error::Error + 'static>(
        &self,
        entry: &EntryRef,
        key: &Key,
        charge: Charge,
        answer: Option<Result<PolicyDecision, E>>,
    ) -> Action<B>
    where
        R: Rejector<B>,
        St: Store,
    {
        match answer {
            Some(Ok(verdict)) => self.judge(entry, key, &verdict, charge),
            Some(Err(error)) => self.on_failure(entry, Some(&error)),
            None => self.on_failure(entry, None),
        }
    }
}
