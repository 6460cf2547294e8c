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
mod memory;
mod service;

pub use body::InFlightBody;
pub use layer::{InFlightBuilder, InFlightLayer};
pub use memory::{DEFAULT_MAX_KEYS, MemoryPermit, MemorySlots, SlotsFull};
pub use service::InFlight;

use crate::key::Key;
use std::future::Future;
use std::hash::BuildHasher;
use std::sync::Arc;

/// The name of the layer's limit when none is given: what the fields call
/// it and what a shared store's key names.
pub const DEFAULT_NAME: &str = "inflight";

/// One in-flight limit: its name and how many requests of one key may run
/// at once. Made by the layer's builder; stores read it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InFlightLimit {
    name: Arc<str>,
    max: u32,
    id: u64,
}

impl InFlightLimit {
    /// A limit called `name` of `max` requests at once, or why not: the
    /// name must be a short token (1 to 64 letters, digits, `-`, `_`, `.`),
    /// as it is written into header fields, and `max` at least 1.
    pub fn new(name: &str, max: u32) -> Result<Self, crate::ConfigError> {
        if !tollgate_store::__private::is_token(name) {
            return Err(crate::ConfigError::new(format!(
                "the in-flight limit's name {name:?} is not a short token (1 to 64 letters, \
                 digits, `-`, `_`, `.`): it is written into response headers"
            )));
        }
        if max == 0 {
            return Err(crate::ConfigError::new(
                "an in-flight limit of 0 would refuse every request; give it at least 1",
            ));
        }
        Ok(InFlightLimit {
            name: name.into(),
            max,
            id: foldhash::fast::FixedState::with_seed(NAME_SEED).hash_one(name),
        })
    }

    /// The limit's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The name, shared: a metrics label without a copy.
    pub(crate) fn shared_name(&self) -> &Arc<str> {
        &self.name
    }

    /// How many requests of one key may run at once.
    pub fn max(&self) -> u32 {
        self.max
    }

    /// A 64-bit fingerprint of the name, the same in every process: what a
    /// store in memory tells limits apart by (two limits with the same
    /// name in one store share their counts, as they do in a shared store).
    pub fn id(&self) -> u64 {
        self.id
    }
}

/// The seed of [`InFlightLimit::id`]: fixed, so that a name has one
/// fingerprint everywhere.
const NAME_SEED: u64 = 0x1f11_6a7e_0000_0001;

/// A slot store's answer to [`Slots::acquire`]: at once, or later.
#[derive(Debug)]
pub enum SlotReply<F, P, E> {
    /// Decided without waiting (the memory store).
    Ready(Result<Acquired<P>, E>),
    /// Will be decided when the future completes (a store over the network).
    Pending(F),
}

/// What a store decided about one request.
#[derive(Debug)]
pub enum Acquired<P> {
    /// A slot is taken: it is held as long as `permit` lives. `in_flight`
    /// is how many of the key's slots are taken now, this one included.
    Taken {
        /// The slot; dropping it gives the slot back.
        permit: P,
        /// The key's running requests, this one included.
        in_flight: u32,
    },
    /// Every slot of the key is taken: `in_flight` are running (at least
    /// the limit).
    Full {
        /// The key's running requests.
        in_flight: u32,
    },
}

/// A taken slot ([`Slots::Permit`]): dropping it gives the slot back;
/// [`release`](Self::release) gives it back and says when it is.
///
/// A response body ([`InFlightBody`]) releases its slot when it sees its
/// end coming, and holds its last frame back until the slot is back: so a
/// client that sends its next request once it has read the whole response
/// never finds its own previous request's slot still taken, even with a
/// store over the network that gives slots back from a task (one round
/// trip added to the end of each response there).
pub trait SlotPermit: Send + Sync + 'static {
    /// Gives the slot back; the future completes once it is back (or the
    /// store gave up on it, within a bound of its own: a body awaits it).
    /// It must give the slot back even if the future is dropped unpolled.
    ///
    /// The default drops the permit and is done at once: right for a
    /// store whose drop gives the slot back before it returns (the memory
    /// store's).
    fn release(self) -> std::pin::Pin<Box<dyn Future<Output = ()> + Send>>
    where
        Self: Sized,
    {
        drop(self);
        Box::pin(std::future::ready(()))
    }
}

/// Where in-flight counts live: takes a slot for a key if the key has
/// fewer than the limit taken, and gives it back when the permit is
/// dropped.
///
/// A store must never let more than `limit.max()` permits of one (limit
/// name, key) exist at once, however many tasks ask together; and a
/// dropped permit must give its slot back (a store over the network may
/// do so later, or let a lease run out if it cannot reach its server).
pub trait Slots: Clone + Send + Sync + 'static {
    /// A taken slot; dropping it gives the slot back, and so does
    /// [`SlotPermit::release`], which also says when the slot is back.
    type Permit: SlotPermit;
    /// What can go wrong.
    type Error: std::error::Error + Send + Sync + 'static;
    /// The future of an answer that has to wait.
    type Future: Future<Output = Result<Acquired<Self::Permit>, Self::Error>> + Send + 'static;
    /// A wake-up for a queued request, see [`freed`](Self::freed).
    type Freed: Future<Output = ()> + Send + 'static;

    /// Takes a slot of `key` under `limit`, if the key has fewer than
    /// `limit.max()` taken.
    fn acquire(
        &self,
        limit: &InFlightLimit,
        key: &Key,
    ) -> SlotReply<Self::Future, Self::Permit, Self::Error>;

    /// A future that completes when a slot of `key` under `limit` may have
    /// come free: for a request queued for a slot, which then asks again.
    /// It must hear of every slot given back after it was made (so that a
    /// caller that makes it, then asks, then awaits it, misses none), or
    /// complete after a while anyway (a store that polls). It may complete
    /// for nothing.
    fn freed(&self, limit: &InFlightLimit, key: &Key) -> Self::Freed;
}
