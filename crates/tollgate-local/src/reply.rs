//! What a [`LocalFirst`](crate::LocalFirst) store answers: a check's reply
//! (decided here, or a future) and a refund's, sent from a task of its
//! own.

use crate::future::LocalFuture;
use std::time::Duration;
use tollgate_store::ChangeReply;
use tollgate_store::shared::SharedStore;
use tollgate_store::{Store, StoreReply};

/// A check's reply, in the store's own future.
pub(crate) type Reply<S> =
    StoreReply<LocalFuture<<S as Store>::Future, <S as Store>::Error>, <S as Store>::Error>;

/// The shared store's own reply, as this store's.
pub(crate) fn forward<S: SharedStore>(reply: StoreReply<S::Future, S::Error>) -> Reply<S> {
    match reply {
        StoreReply::Ready(answer) => StoreReply::Ready(answer),
        StoreReply::Pending(future) => StoreReply::Pending(LocalFuture::store(future)),
    }
}

/// How long a refund sent from its own task may wait for the shared
/// store: while it is away, every refunded request would otherwise leave a
/// task waiting for as long as the outage lasts.
const CHANGE_TIMEOUT: Duration = Duration::from_secs(5);

/// Runs a refund on a task of its own, logged as this crate's (see
/// [`tollgate_store::spawn_change`]).
pub(crate) fn spawn_change<E: std::fmt::Display>(
    change: tollgate_internal::ChargeChange,
    call: impl Future<Output = Result<(), E>> + Send + 'static,
) -> ChangeReply {
    tollgate_store::spawn_change("tollgate-local", change, CHANGE_TIMEOUT, call)
}
