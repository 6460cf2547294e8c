//! In-flight slots: where the counts of requests running at once live
//! (tollgate's `InFlightLayer` takes its slots from a [`Slots`] store),
//! the contract and the memory slots.

mod memory;

pub use memory::{DEFAULT_MAX_KEYS, MemoryPermit, MemorySlots, SlotsFull};

use crate::Key;
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
        if !crate::policy::is_token(name) {
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
    #[doc(hidden)]
    pub fn shared_name(&self) -> &Arc<str> {
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
/// A response body (tollgate's `InFlightBody`) releases its slot when it sees its
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
