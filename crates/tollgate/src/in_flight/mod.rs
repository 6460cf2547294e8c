//! In-flight limits: at most `N` requests of one key running at once.
//!
//! A rate limit counts requests over time; an in-flight limit counts the
//! requests running now. [`InFlightLayer`] takes a slot for a request when
//! it is admitted and gives it back when the request is over, so a client
//! with slow requests (a report, a long download, a gRPC stream) holds at
//! most `N` of the server's workers, whatever its rate. It is a layer of its
//! own, as tower's `ConcurrencyLimit` is beside `RateLimit`, and stacks with
//! a [`RateLimitLayer`](crate::RateLimitLayer).
//!
//! ```
//! use tollgate::HeaderKey;
//! use tollgate::in_flight::InFlightLayer;
//! use tower::ServiceBuilder;
//! # use tower::service_fn;
//! # async fn handle(_: http::Request<()>) -> Result<http::Response<String>, std::convert::Infallible> {
//! #     Ok(http::Response::new("ok".into()))
//! # }
//!
//! // At most 5 requests per API key at once, in this process's memory.
//! let service = ServiceBuilder::new()
//!     .layer(InFlightLayer::builder().max_in_flight(5).key(HeaderKey::new("x-api-key")).build())
//!     .service_fn(handle);
//! # let _ = service;
//! ```
//!
//! # When a slot is taken and given back
//!
//! - Taken when the request is admitted, before the inner service is
//!   called: the key, from the same [`KeyExtractor`](crate::KeyExtractor)s
//!   the rate-limit layer uses (peer IP by default), then the slot store.
//! - Given back when the response body ends (its last frame, or an empty
//!   body), when the body yields an error, or when the body is dropped
//!   unfinished: a client that disconnects mid-stream makes the server
//!   drop the body, and that gives the slot back. Also when the inner
//!   service fails (no response) and when the request is dropped before it
//!   has one (the client went away while the handler ran). The response
//!   body is wrapped in an [`InFlightBody`] that holds the slot, so a
//!   gRPC streaming call, whose response body is the stream, holds its slot
//!   for the life of the stream.
//!
//! # Refused or queued
//!
//! A request whose key has `N` running is refused at once by default:
//! `429 Too Many Requests` (or the builder's
//! [`rejection_status`](InFlightBuilder::rejection_status)), built by the
//! layer's [`Rejector`](crate::Rejector) through
//! [`Rejection::InFlight`](crate::Rejection::InFlight) (gRPC:
//! `RESOURCE_EXHAUSTED` with tollgate-tonic's rejector).
//! [`InFlightBuilder::max_delay`] queues it instead, for up to a bound: it
//! takes the first slot of its key that comes free within the bound (woken
//! when a slot of its key is given back in this process; with a shared
//! store also by polling, see the store), and is refused as above if none
//! does. Waiters are not served in arrival order: whichever waiter asks
//! first after a slot is given back takes it.
//!
//! # Header fields
//!
//! The draft's fields (draft-ietf-httpapi-ratelimit-headers-10/-11), with
//! its quota unit for this: `RateLimit-Policy: "inflight";q=5;qu="concurrent-requests"`
//! (`q` is the limit; no `w`, there is no window), and `RateLimit:
//! "inflight";r=2`, where `r` is how many more requests of the key could
//! have started when this one was admitted (its own slot taken; 0 on a
//! refusal). No `t`: when a slot comes back depends on how long the
//! running requests take, which the layer cannot know, and the draft makes
//! `t` optional. For the same reason a refusal carries no `Retry-After`:
//! any figure would be a guess, and a client told to come back in 1 s
//! would be refused again while a slow request still runs. The legacy
//! style writes `X-RateLimit-Limit` and `X-RateLimit-Remaining` (no
//! `X-RateLimit-Reset`). [`HeaderStyle`](crate::headers::HeaderStyle) chooses, as
//! for the rate-limit layer, including `pk` and whether allowed responses
//! carry the fields.
//!
//! # Stores, failures, missing keys
//!
//! The counts live in a [`Slots`] store: [`MemorySlots`] (this process,
//! the default) or, shared by instances, tollgate-redis's `RedisSlots`
//! (slots with a lease, so an instance that dies does not hold its slots
//! for ever). When the store fails or does not answer within
//! [`store_timeout`](InFlightBuilder::store_timeout) the layer does what
//! [`OnStoreError`](crate::OnStoreError) says: by default it lets the
//! request through without a slot (fail open), logged with `tracing`;
//! `Closed` answers 503. A request without a key is handled as
//! [`OnMissingKey`](crate::OnMissingKey) says (by default all such requests
//! share one key).

mod body;
mod fields;
pub mod future;
mod gate;
mod layer;
mod service;

pub use body::InFlightBody;
pub use layer::{InFlightBuilder, InFlightLayer};
// The slots contract and the memory slots live with the store contract
// (`tollgate_store::slots`), so that a slot store needs no middleware.
pub use service::InFlight;
pub use tollgate_store::slots::{
    Acquired, DEFAULT_MAX_KEYS, DEFAULT_NAME, InFlightLimit, MemoryPermit, MemorySlots, SlotPermit,
    SlotReply, Slots, SlotsFull,
};
