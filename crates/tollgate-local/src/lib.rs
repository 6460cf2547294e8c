//! [`LocalFirst`]: a store in front of a shared store (Redis, or any
//! compare-and-swap backend through `tollgate-cas`) that decides every
//! request in process memory and reaches the shared store only in the
//! background or once per many requests.
//!
//! The shared store implements [`SharedStore`]: the three operations of
//! [`ShareOp`] (reserve, sync, give back), each atomic on a key.
//! `tollgate_redis::LocalFirst` is this store over `RedisStore`;
//! `tollgate_cas::CasStore` implements the trait too.
//!
//! The modes, their bounds and their faults are documented on
//! [`LocalFirst`], where users read them.

#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

mod answers;
mod budget;
mod builder;
mod calls;
mod drive;
mod exact;
mod future;
mod local_first;
mod mode;
mod observe;
mod periodic;
mod reply;
mod seam;
mod shared;
mod stats;
mod store;
mod striped;
mod table;

pub use builder::LocalFirstBuilder;
pub use future::LocalFuture;
pub use local_first::LocalFirst;
pub use mode::LocalMode;
#[cfg(feature = "metrics")]
pub use observe::describe_metrics;
// The shared store's contract lives with the store contract
// (`tollgate_store::shared`), so that a shared store needs no local-first.
pub use stats::LocalStats;
pub use tollgate_store::shared::{ShareOp, ShareOutcome, ShareReply, SharedStore, supports};
