//! An LLM-style endpoint that charges the tokens it generated: each API
//! key may spend 1,000 tokens a minute, but how many a completion takes is
//! known only once it has been streamed. The rate-limit layer pays after
//! (`pay_after`): a request is let in if its key is not in debt, each
//! token adds to the request's `Meter` as it is sent, and when the stream
//! ends (or the client goes) its tokens are charged — into debt if need
//! be, so that the key's next requests are refused, with a `Retry-After`
//! that says when the debt is paid off.
//!
//! `cargo run -p tollgate-examples --example llm_tokens`, then
//! `curl -i -H 'x-api-key: k1' 'localhost:3000/v1/complete?max_tokens=500'`
//! three times: the third is refused (the first two spent the minute's
//! 1,000 tokens). A request is let in while its key is not in debt, so one
//! completion can overshoot; the key then waits for its debt.

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Extension, RawQuery};
use axum::routing::get;
use http_body::Frame;
use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};
use tollgate::pay_after::{Meter, MeterLayer};
use tollgate::{HeaderKey, RateLimitLayer};
use tollgate_examples::serving::{ServeLimits, serve};

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
    println!("listening on http://{}", listener.local_addr()?);
    serve(listener, app(), ServeLimits::default()).await
}

/// The most tokens one completion may ask for.
const MAX_TOKENS: u32 = 4_000;

/// `GET /v1/complete?max_tokens=N` streams N tokens (at most
/// [`MAX_TOKENS`]), limited to 1,000 tokens a minute per `x-api-key`.
pub fn app() -> Router {
    let tokens = RateLimitLayer::builder()
        .quota("tokens", "1000/min".parse().expect("a valid quota"))
        .key(HeaderKey::new("x-api-key"))
        .pay_after()
        .build();
    Router::new()
        .route("/v1/complete", get(complete))
        // Inside the rate limit: holds each request's meter until its
        // body has been sent, so streamed tokens are charged at the end.
        .layer(MeterLayer::new())
        .layer(tokens)
}

/// `max_tokens` from a query string; 16 when absent or not a number.
fn max_tokens(query: Option<&str>) -> u32 {
    query
        .into_iter()
        .flat_map(|q| q.split('&'))
        .find_map(|pair| pair.strip_prefix("max_tokens="))
        .and_then(|n| n.parse().ok())
        .unwrap_or(16)
}

async fn complete(Extension(meter): Extension<Meter>, RawQuery(query): RawQuery) -> Body {
    let tokens = max_tokens(query.as_deref()).min(MAX_TOKENS);
    Body::new(Tokens {
        meter,
        left: tokens,
        next: 0,
    })
}

/// A stand-in for a model: one word per token, each added to the meter
/// as it is sent.
struct Tokens {
    meter: Meter,
    left: u32,
    next: u32,
}

impl http_body::Body for Tokens {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        if self.left == 0 {
            return Poll::Ready(None);
        }
        self.left -= 1;
        self.next += 1;
        self.meter.add(1);
        let word = format!("token{} ", self.next);
        Poll::Ready(Some(Ok(Frame::data(Bytes::from(word)))))
    }
}
