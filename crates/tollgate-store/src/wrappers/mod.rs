//! The stores in front of other stores: those that answer for the store
//! behind or learn from it ([`BlockCache`](block_cache::BlockCache) and
//! its [`BlockList`](block_list::BlockList), [`PenaltyBox`](penalty::PenaltyBox),
//! [`Breaker`](breaker::Breaker), through one future, [`observed`]), bound
//! it ([`Timeout`](timeout::Timeout)), split its limits
//! ([`Split`](split::Split), by a [`Presence`](presence::Presence)), route
//! between two ([`Fallback`](fallback::Fallback)) or hide its type
//! ([`BoxStore`](boxed::BoxStore)); [`Resilient`](resilient::Resilient)
//! assembles them in the order that works. The contract they keep is the parent
//! module's; the stores that keep counts are `memory/` and `cas/`.

pub(crate) mod block_cache;
pub(crate) mod block_list;
pub(crate) mod boxed;
pub(crate) mod breaker;
pub(crate) mod fallback;
pub(crate) mod observed;
pub(crate) mod penalty;
pub(crate) mod presence;
pub(crate) mod resilient;
pub(crate) mod split;
pub(crate) mod timeout;
