//! The RESP3 close signal: what a connection's driver pushes when its server
//! closes the connection, counted so that the topology makes a fresh one
//! before the next call is sent on the dead one.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// What a connection's server says when it closes the connection: a RESP3
/// connection's driver reads the end of the stream and pushes a
/// "disconnection" message, which this counts.
#[derive(Debug, Default)]
pub(crate) struct Closed {
    count: AtomicU64,
    notify: tokio::sync::Notify,
}

impl Closed {
    /// The push sender a connection is made with.
    pub(crate) fn sender(self: &Arc<Self>) -> impl redis::aio::AsyncPushSender {
        let closed = self.clone();
        move |info: redis::PushInfo| {
            if info.kind == redis::PushKind::Disconnection {
                closed.count.fetch_add(1, Ordering::AcqRel);
                closed.notify.notify_one();
            }
            Ok::<(), std::convert::Infallible>(())
        }
    }

    /// How many closes were signalled so far.
    pub(crate) fn count(&self) -> u64 {
        self.count.load(Ordering::Acquire)
    }

    /// Waits for the next close.
    pub(crate) async fn next(&self) {
        self.notify.notified().await;
    }
}
