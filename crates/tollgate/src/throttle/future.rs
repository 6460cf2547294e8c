//! [`ResponseFuture`].

use crate::BoxError;
use crate::direct::UntilReady;
use crate::store::Store;
use pin_project_lite::pin_project;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use tower_service::Service;

pin_project! {
    /// The future of a throttled call: waits for the limiter, then for the
    /// inner service to be ready, then for its answer.
    pub struct ResponseFuture<S, Req, St>
    where
        S: Service<Req>,
        St: Store,
    {
        #[pin]
        state: State<S, Req, St, S::Future>,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<S, Req, St, F>
    where
        St: Store,
    {
        Waiting { #[pin] wait: UntilReady<St>, call: Option<(S, Req)> },
        Readying { call: Option<(S, Req)> },
        Calling { #[pin] future: F },
    }
}

impl<S, Req, St> ResponseFuture<S, Req, St>
where
    S: Service<Req>,
    St: Store,
{
    pub(crate) fn new(wait: UntilReady<St>, inner: S, request: Req) -> Self {
        ResponseFuture {
            state: State::Waiting {
                wait,
                call: Some((inner, request)),
            },
        }
    }
}

impl<S, Req, St> Future for ResponseFuture<S, Req, St>
where
    S: Service<Req>,
    S::Error: Into<BoxError>,
    St: Store,
{
    type Output = Result<S::Response, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut state = self.project().state;
        loop {
            let next = match state.as_mut().project() {
                StateProj::Waiting { wait, call } => {
                    ready!(wait.poll(cx))?;
                    State::Readying { call: call.take() }
                }
                StateProj::Readying { call } => {
                    let Some((inner, _)) = call.as_mut() else {
                        return Poll::Ready(Err(polled_after_completion()));
                    };
                    ready!(inner.poll_ready(cx)).map_err(Into::into)?;
                    let Some((mut inner, request)) = call.take() else {
                        return Poll::Ready(Err(polled_after_completion()));
                    };
                    State::Calling {
                        future: inner.call(request),
                    }
                }
                StateProj::Calling { future } => {
                    return future.poll(cx).map_err(Into::into);
                }
            };
            state.set(next);
        }
    }
}

/// The error of a future polled again after it resolved: a caller's
/// mistake, reported rather than a panic.
fn polled_after_completion() -> BoxError {
    "a throttled call's future was polled after it completed".into()
}
