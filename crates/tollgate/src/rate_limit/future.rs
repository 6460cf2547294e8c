//! [`ResponseFuture`], the future of a rate-limited call.

use crate::headers::FieldValues;
use crate::key::Key;
use crate::rate_limit::engine::{Action, Charge, Engine, PendingCheck, Settlement, Start};
use crate::rate_limit::routes::EntryRef;
use crate::rejection::{Rejector, status_response};
use crate::store::{ChangeReply, Store, Watched};
use http::Response;
use pin_project_lite::pin_project;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;
use tokio::time::Sleep;
use tower_service::Service;

pin_project! {
    /// The response future of [`RateLimit`](crate::RateLimit): the inner
    /// service's future, a rejection, or (for stores that do I/O, and for the
    /// leaky bucket's shaping) a wait before calling the inner service. Not
    /// boxed: an allowed request with an in-memory store allocates nothing
    /// for the future (header values, when the style asks for them, are
    /// allocated by `http`).
    pub struct ResponseFuture<S, Req, K, St, R>
    where
        S: Service<Req>,
        St: Store,
    {
        #[pin]
        phase: Phase<S, Req, Watched<St>, Arc<Engine<K, St, R>>>,
        // Rate-limit fields to add to the response, formatted already: the
        // future holds no reference to the shared state and pays no
        // reference count. Empty when there are none.
        fields: FieldValues,
    }
}

pin_project! {
    #[project = PhaseProj]
    enum Phase<S, Req, Check, Sh>
    where
        S: Service<Req>,
    {
        // The hot path (an in-memory store admitting at once) lives inline;
        // the phases that wait anyway (store I/O, shaping) are boxed so that
        // the future stays small and cheap to move.
        Calling { #[pin] future: S::Future },
        Checking { checking: Pin<Box<Checking<S, Req, Check, Sh>>> },
        Waiting { waiting: Pin<Box<Waiting<S, Req, Sh>>> },
        // The inner service's future, whose response settles the request's
        // charge (`charge_when`, `pay_after`).
        Judging { judging: Pin<Box<Judging<S, Req, Sh>>> },
        Rejected { response: Option<Box<S::Response>> },
        // The key's first quota lookup, which the request waits for before
        // it starts again.
        Resolving { resolving: Pin<Box<Resolving<S, Req, Sh>>> },
    }
}

pin_project! {
    #[project = ResolvingProj]
    struct Resolving<S, Req, Sh> {
        lookup: Lookup,
        pending: Option<(S, Req, Sh)>,
        // How many times the request waited before this one.
        waits: u8,
    }
}

/// What a request waits on for its key's quota (`quotas::QuotaWait`; never
/// made without the `quotas` feature).
type Lookup = Pin<Box<dyn Future<Output = ()> + Send>>;

pin_project! {
    #[project = CheckingProj]
    struct Checking<S, Req, Check, Sh> {
        #[pin] check: Check,
        shared: Sh,
        #[pin] deadline: Sleep,
        pending: Option<(S, Req)>,
        entry: EntryRef,
        key: Key,
        charge: Charge,
    }
}

pin_project! {
    #[project = WaitingProj]
    struct Waiting<S, Req, Sh> {
        #[pin] until: Sleep,
        pending: Option<(S, Req)>,
        judge: Option<(Sh, Settlement)>,
    }
}

pin_project! {
    #[project = JudgingProj]
    struct Judging<S, Req, Sh>
    where
        S: Service<Req>,
    {
        #[pin] future: S::Future,
        judge: Option<(Sh, Settlement)>,
        // The response, held until its settlement lands (or the store
        // timeout passes), so that the client's next request finds it.
        held: Option<(S::Response, Landing)>,
    }
}

/// A settlement on its way, bounded by the store timeout.
type Landing = Pin<Box<dyn Future<Output = bool> + Send>>;

fn waiting<S, Req, Check, Sh>(
    wait: Duration,
    pending: (S, Req),
    judge: Option<(Sh, Settlement)>,
) -> Phase<S, Req, Check, Sh>
where
    S: Service<Req>,
{
    Phase::Waiting {
        waiting: Box::pin(Waiting {
            until: tokio::time::sleep(wait),
            pending: Some(pending),
            judge,
        }),
    }
}

/// Calls the inner service: judged by its response when there is a
/// charge to settle, plainly otherwise.
fn calling<S, Req, Check, Sh>(
    future: S::Future,
    judge: Option<(Sh, Settlement)>,
) -> Phase<S, Req, Check, Sh>
where
    S: Service<Req>,
{
    match judge {
        None => Phase::Calling { future },
        Some(judge) => Phase::Judging {
            judging: Box::pin(Judging {
                future,
                judge: Some(judge),
                held: None,
            }),
        },
    }
}

impl<S, Req, K, St, R, B> ResponseFuture<S, Req, K, St, R>
where
    S: Service<Req, Response = Response<B>>,
    St: Store,
{
    #[inline]
    pub(crate) fn calling(future: S::Future, fields: FieldValues) -> Self {
        ResponseFuture {
            phase: Phase::Calling { future },
            fields,
        }
    }

    /// The inner service's future, with nothing to add to its response.
    #[inline]
    pub(crate) fn passed(future: S::Future) -> Self {
        Self::calling(future, FieldValues::default())
    }

    /// Holds `pending` for `wait` (the leaky bucket's slot), then calls.
    pub(crate) fn waiting(
        wait: Duration,
        pending: (S, Req),
        fields: FieldValues,
        judge: Option<Judge<K, St, R>>,
    ) -> Self {
        ResponseFuture {
            phase: waiting(wait, pending, judge),
            fields,
        }
    }

    /// The inner service's future, whose response settles the request's
    /// charge (see [`Settlement`]).
    pub(crate) fn judging(
        future: S::Future,
        fields: FieldValues,
        engine: &Arc<Engine<K, St, R>>,
        settlement: Settlement,
    ) -> Self {
        ResponseFuture {
            phase: calling(future, Some((engine.clone(), settlement))),
            fields,
        }
    }

    /// Waits for the key's first quota `lookup`, then takes the request
    /// through the layer again.
    #[cfg(feature = "quotas")]
    pub(crate) fn resolving(
        lookup: Lookup,
        inner: &mut S,
        request: Req,
        engine: &Arc<Engine<K, St, R>>,
        waits: u8,
    ) -> Self
    where
        S: Clone,
    {
        ResponseFuture {
            phase: Phase::Resolving {
                resolving: Box::pin(Resolving {
                    lookup,
                    pending: Some((take_ready(inner), request, engine.clone())),
                    waits,
                }),
            },
            fields: FieldValues::default(),
        }
    }

    pub(crate) fn rejected(response: Box<Response<B>>) -> Self {
        ResponseFuture {
            phase: Phase::Rejected {
                response: Some(response),
            },
            fields: FieldValues::default(),
        }
    }

    /// Awaits the store's `pending` check (under the store timeout), then
    /// carries out what the engine makes of its answer.
    pub(crate) fn checking(
        pending: PendingCheck<Watched<St>>,
        inner: &mut S,
        request: Req,
        engine: &Arc<Engine<K, St, R>>,
    ) -> Self
    where
        S: Clone,
    {
        let PendingCheck {
            check,
            entry,
            key,
            charge,
        } = pending;
        ResponseFuture {
            phase: Phase::Checking {
                checking: Box::pin(Checking {
                    check,
                    shared: engine.clone(),
                    deadline: tokio::time::sleep(engine.settings.common.store_timeout),
                    pending: Some((take_ready(inner), request)),
                    entry,
                    key,
                    charge,
                }),
            },
            fields: FieldValues::default(),
        }
    }
}

impl<S, ReqBody, K, St, R, B> ResponseFuture<S, http::Request<ReqBody>, K, St, R>
where
    S: Service<http::Request<ReqBody>, Response = Response<B>> + Clone,
    B: Default,
    K: crate::key::KeyExtractor,
    St: Store,
    R: Rejector<B>,
{
    /// Takes `request` through `engine` (see `service::limit`), which has
    /// waited `waits` times for its key's quota lookup: carries out at
    /// once what the engine decided (here, so that the request moves
    /// once), or builds the future that awaits the store or the lookup.
    #[inline]
    pub(crate) fn start(
        inner: &mut S,
        engine: &Arc<Engine<K, St, R>>,
        mut request: http::Request<ReqBody>,
        waits: u8,
    ) -> Self {
        match engine.start(&request, waits) {
            Start::Pass => {
                engine.add_idle_meter(request.extensions_mut());
                Self::passed(inner.call(request))
            }
            Start::Act(Action::Forward {
                fields,
                wait,
                info,
                ticket,
            }) => {
                let extensions = request.extensions_mut();
                if let Some(info) = info {
                    extensions.insert(*info);
                }
                let settlement = ticket.map(|ticket| engine.settlement(ticket, extensions));
                engine.add_idle_meter(extensions);
                match (wait.is_zero(), settlement) {
                    (true, None) => Self::calling(inner.call(request), fields),
                    (true, Some(settlement)) => {
                        Self::judging(inner.call(request), fields, engine, settlement)
                    }
                    (false, settlement) => Self::waiting(
                        wait,
                        (take_ready(inner), request),
                        fields,
                        settlement.map(|settlement| (engine.clone(), settlement)),
                    ),
                }
            }
            Start::Act(Action::Reject(response)) => Self::rejected(response),
            Start::Check(pending) => Self::checking(*pending, inner, request, engine),
            #[cfg(feature = "quotas")]
            Start::Lookup(wait) => Self::resolving(wait, inner, request, engine, waits),
        }
    }
}

/// The inner service that `poll_ready` made ready, for a future that calls
/// it later; a fresh clone takes its place.
pub(crate) fn take_ready<S: Clone>(inner: &mut S) -> S {
    let clone = inner.clone();
    std::mem::replace(inner, clone)
}

impl<S, ReqBody, K, St, R, B> Future for ResponseFuture<S, http::Request<ReqBody>, K, St, R>
where
    S: Service<http::Request<ReqBody>, Response = Response<B>> + Clone,
    K: crate::key::KeyExtractor,
    St: Store,
    B: Default,
    R: Rejector<B>,
{
    type Output = Result<Response<B>, S::Error>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        loop {
            let mut this = self.as_mut().project();
            // Only the phases every request meets are handled inline; the
            // waiting ones live out of line so this frame stays small.
            let next = match this.phase.as_mut().project() {
                PhaseProj::Calling { future } => {
                    // Nothing to add (the common case): the inner poll's
                    // own result, not unpacked and packed again.
                    if this.fields.is_empty() {
                        return future.poll(cx);
                    }
                    let mut response = ready!(future.poll(cx))?;
                    std::mem::take(this.fields).write_into(response.headers_mut());
                    return Poll::Ready(Ok(response));
                }
                PhaseProj::Rejected { response } => {
                    // Taken once; a second poll (a caller's bug) gets an empty 500
                    // rather than a panic.
                    let response = response.take().map_or_else(
                        || status_response(http::StatusCode::INTERNAL_SERVER_ERROR),
                        |response| *response,
                    );
                    return Poll::Ready(Ok(response));
                }
                PhaseProj::Checking { checking } => {
                    ready!(poll_checking(checking.as_mut(), this.fields, cx))
                }
                PhaseProj::Waiting { waiting } => ready!(poll_waiting(waiting.as_mut(), cx)),
                PhaseProj::Judging { judging } => {
                    let mut response = ready!(poll_judging(judging.as_mut(), cx))?;
                    std::mem::take(this.fields).write_into(response.headers_mut());
                    return Poll::Ready(Ok(response));
                }
                PhaseProj::Resolving { resolving } => {
                    let ResolvingProj {
                        lookup,
                        pending,
                        waits,
                    } = resolving.as_mut().project();
                    let waits = waits.saturating_add(1);
                    ready!(lookup.as_mut().poll(cx));
                    let Some((mut service, request, engine)) = pending.take() else {
                        // Already handed on (cannot happen through `poll`).
                        return Poll::Ready(Ok(status_response(
                            http::StatusCode::INTERNAL_SERVER_ERROR,
                        )));
                    };
                    let next = Self::start(&mut service, &engine, request, waits);
                    self.set(next);
                    continue;
                }
            };
            this.phase.set(next);
        }
    }
}

/// What judges a response: the engine (its `charge_when`, its store) and
/// what to settle.
pub(crate) type Judge<K, St, R> = (Arc<Engine<K, St, R>>, Settlement);

/// The judged call of an HTTP request.
type HttpJudging<S, ReqBody, K, St, R> = Judging<S, http::Request<ReqBody>, Arc<Engine<K, St, R>>>;

/// The phase of a future over an HTTP request.
type HttpPhase<S, ReqBody, K, St, R> =
    Phase<S, http::Request<ReqBody>, Watched<St>, Arc<Engine<K, St, R>>>;

/// A pending store check over an HTTP request.
type HttpChecking<S, ReqBody, K, St, R> =
    Checking<S, http::Request<ReqBody>, Watched<St>, Arc<Engine<K, St, R>>>;

/// Polls the store's pending check (and its deadline); once it answers, the
/// phase that follows.
#[inline(never)]
fn poll_checking<S, ReqBody, K, St, R, B>(
    checking: Pin<&mut HttpChecking<S, ReqBody, K, St, R>>,
    fields: &mut FieldValues,
    cx: &mut Context<'_>,
) -> Poll<HttpPhase<S, ReqBody, K, St, R>>
where
    S: Service<http::Request<ReqBody>, Response = Response<B>>,
    St: Store,
    B: Default,
    R: Rejector<B>,
{
    let CheckingProj {
        check,
        shared,
        deadline,
        pending,
        entry,
        key,
        charge,
    } = checking.project();
    let answer = match check.poll(cx) {
        Poll::Ready(answer) => Some(answer),
        Poll::Pending => {
            ready!(deadline.poll(cx));
            None
        }
    };
    let action = shared.finish(entry, key, *charge, answer);
    let next = match (action, pending.take()) {
        (Action::Reject(response), _) => Phase::Rejected {
            response: Some(response),
        },
        (
            Action::Forward {
                fields: add,
                wait,
                info,
                ticket,
            },
            Some(mut pending),
        ) => {
            *fields = add;
            let extensions = pending.1.extensions_mut();
            if let Some(info) = info {
                extensions.insert(*info);
            }
            let judge =
                ticket.map(|ticket| (shared.clone(), shared.settlement(ticket, extensions)));
            shared.add_idle_meter(extensions);
            if wait.is_zero() {
                let (mut service, request) = pending;
                calling(service.call(request), judge)
            } else {
                waiting(wait, pending, judge)
            }
        }
        // The request was already handed on: cannot happen through `poll`.
        // Were it to, an empty 500 (as for a second poll after a rejection)
        // beats a request that hangs without a waker.
        (Action::Forward { .. }, None) => Phase::Rejected { response: None },
    };
    Poll::Ready(next)
}

/// Holds the request until its slot, then calls the inner service.
#[inline(never)]
fn poll_waiting<S, Req, Check, Sh>(
    waiting: Pin<&mut Waiting<S, Req, Sh>>,
    cx: &mut Context<'_>,
) -> Poll<Phase<S, Req, Check, Sh>>
where
    S: Service<Req>,
{
    let WaitingProj {
        until,
        pending,
        judge,
    } = waiting.project();
    ready!(until.poll(cx));
    let Some((mut service, request)) = pending.take() else {
        // Already handed on (cannot happen through `poll`): an empty 500
        // rather than a hang.
        return Poll::Ready(Phase::Rejected { response: None });
    };
    Poll::Ready(calling(service.call(request), judge.take()))
}

/// Awaits the inner service's response, then settles the request's
/// charge ([`Engine::settle`]: given back when `charge_when` says the
/// response does not count; the layer's handle on a pay-after meter let
/// go), and holds the response until the settlement lands (a store that
/// does I/O), at most the store timeout. An error from the inner service
/// is no response: the charge stands (a meter settles what was reported
/// when its last handle goes).
#[inline(never)]
fn poll_judging<S, ReqBody, K, St, R, B>(
    judging: Pin<&mut HttpJudging<S, ReqBody, K, St, R>>,
    cx: &mut Context<'_>,
) -> Poll<Result<Response<B>, S::Error>>
where
    S: Service<http::Request<ReqBody>, Response = Response<B>>,
    St: Store,
    B: Default,
{
    let JudgingProj {
        future,
        judge,
        held,
    } = judging.project();
    if let Some((_, landing)) = held {
        ready!(landing.as_mut().poll(cx));
        return match held.take() {
            Some((response, _)) => Poll::Ready(Ok(response)),
            None => Poll::Ready(Ok(status_response(http::StatusCode::INTERNAL_SERVER_ERROR))),
        };
    }
    let response = ready!(future.poll(cx))?;
    let Some((engine, settlement)) = judge.take() else {
        return Poll::Ready(Ok(response));
    };
    let (parts, body) = response.into_parts();
    let reply = engine.settle(settlement, &parts);
    let response = Response::from_parts(parts, body);
    match reply {
        ChangeReply::Done => Poll::Ready(Ok(response)),
        // Bounded by the store timeout already (`Engine::settle`).
        ChangeReply::Pending(mut landing) => {
            if landing.as_mut().poll(cx).is_ready() {
                return Poll::Ready(Ok(response));
            }
            *held = Some((response, landing));
            Poll::Pending
        }
    }
}
