//! [`ResponseFuture`], the future of a call under an in-flight limit.

use super::body::InFlightBody;
use super::fields::FieldValues;
use super::gate::{Gate, Late, Settled};
use super::{Acquired, SlotReply, Slots};
use crate::key::Key;
use crate::rejection::{Rejector, status_response};
use http::Response;
use pin_project_lite::pin_project;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use tokio::time::Sleep;
use tower_service::Service;

pin_project! {
    /// The response future of [`InFlight`](super::InFlight): the inner
    /// service's future holding the request's slot (given to the response
    /// body when the response comes, given back if the call fails or the
    /// future is dropped), a refusal, or a wait for the store's answer or
    /// for a slot to come free. Not boxed while the slot store answers at
    /// once and the request is not queued (the memory store's hot path).
    pub struct ResponseFuture<S, Req, K, Sl, R>
    where
        S: Service<Req>,
        Sl: Slots,
    {
        #[pin]
        phase: Phase<S, Req, K, Sl, R>,
    }
}

pin_project! {
    #[project = PhaseProj]
    enum Phase<S, Req, K, Sl, R>
    where
        S: Service<Req>,
        Sl: Slots,
    {
        Calling {
            #[pin] future: S::Future,
            permit: Option<Sl::Permit>,
            fields: FieldValues,
        },
        // Out of line: only requests that wait (a store over the network,
        // a queued request) come here.
        Waiting { waiting: Pin<Box<Waiting<S, Req, K, Sl, R>>> },
        Rejected { response: Option<Box<S::Response>> },
    }
}

pin_project! {
    #[project = WaitingProj]
    struct Waiting<S, Req, K, Sl, R>
    where
        Sl: Slots,
    {
        gate: Arc<Gate<K, Sl, R>>,
        key: Key,
        pending: Option<(S, Req)>,
        // The store's answer on its way, and when it is late.
        #[pin] acquire: Option<Sl::Future>,
        #[pin] store_deadline: Option<Sleep>,
        // Queued: a wake-up made before the last ask, and the end of the
        // wait.
        #[pin] freed: Option<Sl::Freed>,
        #[pin] queue_deadline: Option<Sleep>,
        // Whether to ask the store before anything else (a queued request
        // that has just registered its wake-up).
        ask_now: bool,
        // The key's running requests at the last refusal, for the fields.
        in_flight: u32,
    }
}

impl<S, Req, K, Sl, R, B> ResponseFuture<S, Req, K, Sl, R>
where
    S: Service<Req, Response = Response<B>>,
    Sl: Slots,
{
    /// The inner service's future, holding `permit`.
    pub(crate) fn calling(
        future: S::Future,
        permit: Option<Sl::Permit>,
        fields: FieldValues,
    ) -> Self {
        ResponseFuture {
            phase: Phase::Calling {
                future,
                permit,
                fields,
            },
        }
    }

    pub(crate) fn rejected(response: Box<Response<B>>) -> Self {
        ResponseFuture {
            phase: Phase::Rejected {
                response: Some(response),
            },
        }
    }

    /// Awaits the store's `acquire`, then carries out its answer.
    pub(crate) fn acquiring(
        gate: Arc<Gate<K, Sl, R>>,
        key: Key,
        acquire: Sl::Future,
        pending: (S, Req),
    ) -> Self {
        let deadline = tokio::time::sleep(gate.settings.common.store_timeout);
        let in_flight = gate.limit.max();
        Self::waiting(Waiting {
            gate,
            key,
            pending: Some(pending),
            acquire: Some(acquire),
            store_deadline: Some(deadline),
            freed: None,
            queue_deadline: None,
            ask_now: false,
            in_flight,
        })
    }

    /// Waits for a slot of `key` (every one was taken: `in_flight`
    /// running), up to the layer's wait.
    pub(crate) fn queued(
        gate: Arc<Gate<K, Sl, R>>,
        key: Key,
        in_flight: u32,
        pending: (S, Req),
    ) -> Self {
        // Registered before asking again, so no slot given back after the
        // refusal goes unheard.
        let freed = gate.slots.freed(&gate.limit, &key);
        let wait = gate.settings.wait.unwrap_or_default();
        Self::waiting(Waiting {
            gate,
            key,
            pending: Some(pending),
            acquire: None,
            store_deadline: None,
            freed: Some(freed),
            queue_deadline: Some(tokio::time::sleep(wait)),
            ask_now: true,
            in_flight,
        })
    }

    fn waiting(waiting: Waiting<S, Req, K, Sl, R>) -> Self {
        ResponseFuture {
            phase: Phase::Waiting {
                waiting: Box::pin(waiting),
            },
        }
    }
}

impl<S, ReqBody, K, Sl, R, B> Future for ResponseFuture<S, http::Request<ReqBody>, K, Sl, R>
where
    S: Service<http::Request<ReqBody>, Response = Response<B>>,
    Sl: Slots,
    B: http_body::Body + Default,
    R: Rejector<B>,
{
    type Output = Result<Response<InFlightBody<B, Sl::Permit>>, S::Error>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        loop {
            let mut this = self.as_mut().project();
            let next = match this.phase.as_mut().project() {
                PhaseProj::Calling {
                    future,
                    permit,
                    fields,
                } => {
                    let mut response = match ready!(future.poll(cx)) {
                        Ok(response) => response,
                        Err(error) => {
                            // No response: the request is over.
                            drop(permit.take());
                            return Poll::Ready(Err(error));
                        }
                    };
                    if !fields.is_empty() {
                        std::mem::take(fields).write_into(response.headers_mut());
                    }
                    let permit = permit.take();
                    return Poll::Ready(Ok(response.map(|body| InFlightBody::new(body, permit))));
                }
                PhaseProj::Rejected { response } => {
                    // Taken once; a second poll (a caller's bug) gets an
                    // empty 500 rather than a panic.
                    let response = response.take().map_or_else(
                        || status_response(http::StatusCode::INTERNAL_SERVER_ERROR),
                        |response| *response,
                    );
                    return Poll::Ready(Ok(response.map(|body| InFlightBody::new(body, None))));
                }
                PhaseProj::Waiting { waiting } => ready!(poll_waiting(waiting.as_mut(), cx)),
            };
            this.phase.set(next);
        }
    }
}

/// What a waiting request does after an answer of the store.
enum Step<P> {
    /// Leave the wait for this phase.
    Done(P),
    /// Ask the store again now.
    Ask,
    /// Wait for a wake-up (or the end of the wait).
    Sleep,
}

/// Drives a waiting request: the store's answer (under the store timeout),
/// and when queued, wake-ups and asking again until a slot is taken or the
/// wait ends. Once decided, the phase that follows.
#[inline(never)]
fn poll_waiting<S, ReqBody, K, Sl, R, B>(
    waiting: Pin<&mut Waiting<S, http::Request<ReqBody>, K, Sl, R>>,
    cx: &mut Context<'_>,
) -> Poll<Phase<S, http::Request<ReqBody>, K, Sl, R>>
where
    S: Service<http::Request<ReqBody>, Response = Response<B>>,
    Sl: Slots,
    B: http_body::Body + Default,
    R: Rejector<B>,
{
    let mut this = waiting.project();
    loop {
        let step = if std::mem::take(this.ask_now) {
            match this.gate.slots.acquire(&this.gate.limit, this.key) {
                SlotReply::Ready(answer) => on_answer(&mut this, Ok(answer)),
                SlotReply::Pending(acquire) => {
                    this.acquire.set(Some(acquire));
                    let timeout = this.gate.settings.common.store_timeout;
                    this.store_deadline.set(Some(tokio::time::sleep(timeout)));
                    continue;
                }
            }
        } else if let Some(acquire) = this.acquire.as_mut().as_pin_mut() {
            let answer = match acquire.poll(cx) {
                Poll::Ready(answer) => Ok(answer),
                Poll::Pending => match this.store_deadline.as_mut().as_pin_mut() {
                    Some(deadline) => {
                        ready!(deadline.poll(cx));
                        Err(Late(this.gate.settings.common.store_timeout))
                    }
                    None => return Poll::Pending,
                },
            };
            this.acquire.set(None);
            this.store_deadline.set(None);
            on_answer(&mut this, answer)
        } else {
            Step::Sleep
        };
        match step {
            Step::Done(phase) => return Poll::Ready(phase),
            Step::Ask => *this.ask_now = true,
            Step::Sleep => {
                if let Some(deadline) = this.queue_deadline.as_mut().as_pin_mut()
                    && deadline.poll(cx).is_ready()
                {
                    let response = this.gate.reject(this.key, *this.in_flight);
                    return Poll::Ready(Phase::Rejected {
                        response: Some(response),
                    });
                }
                // Always there: a request sleeps only once registered.
                if let Some(freed) = this.freed.as_mut().as_pin_mut() {
                    ready!(freed.poll(cx));
                }
                // A slot may have come free: register for the next one,
                // then ask.
                let freed = this.gate.slots.freed(&this.gate.limit, this.key);
                this.freed.set(Some(freed));
                *this.ask_now = true;
            }
        }
    }
}

/// What a waiting request does with the store's `answer` (or its
/// lateness).
fn on_answer<S, ReqBody, K, Sl, R, B>(
    this: &mut WaitingProj<'_, S, http::Request<ReqBody>, K, Sl, R>,
    answer: Result<Result<Acquired<Sl::Permit>, Sl::Error>, Late>,
) -> Step<Phase<S, http::Request<ReqBody>, K, Sl, R>>
where
    S: Service<http::Request<ReqBody>, Response = Response<B>>,
    Sl: Slots,
    B: http_body::Body + Default,
    R: Rejector<B>,
{
    let settled = match answer {
        Ok(answer) => this.gate.settle(answer, this.key, true),
        Err(late) => this.gate.store_failed(&late),
    };
    match settled {
        Settled::Run { permit, fields } => match this.pending.take() {
            Some((mut service, request)) => Step::Done(Phase::Calling {
                future: service.call(request),
                permit,
                fields,
            }),
            // Already handed on (cannot happen through `poll`): an empty
            // 500 rather than a hang.
            None => Step::Done(Phase::Rejected { response: None }),
        },
        Settled::Reject(response) => Step::Done(Phase::Rejected {
            response: Some(response),
        }),
        Settled::Queue { in_flight } => {
            *this.in_flight = in_flight;
            if this.queue_deadline.is_none() {
                // First refused after a store's late answer: the wait
                // starts now.
                let wait = this.gate.settings.wait.unwrap_or_default();
                this.queue_deadline.set(Some(tokio::time::sleep(wait)));
            }
            if this.freed.is_none() {
                // Register, then ask again: a slot given back between the
                // refusal and the registration is not missed.
                let freed = this.gate.slots.freed(&this.gate.limit, this.key);
                this.freed.set(Some(freed));
                Step::Ask
            } else {
                Step::Sleep
            }
        }
    }
}
