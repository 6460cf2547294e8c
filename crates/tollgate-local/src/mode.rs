//! How a [`LocalFirst`](super::LocalFirst) store shares its limits.

use std::time::Duration;

/// How a [`LocalFirst`](super::LocalFirst) store shares its limits through Redis.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LocalMode {
    /// Admit only capacity reserved from Redis: never over the limit.
    Exact,
    /// Count locally and synchronise every `sync_interval`: within a
    /// documented bound of the limit (see [`LocalFirst`](super::LocalFirst)).
    Periodic {
        /// How often each key's counts are reported and its state read.
        sync_interval: Duration,
    },
}

impl LocalMode {
    /// Periodic mode with the default interval, 100 ms: ten calls a second
    /// per busy key and instance, and a share of a key that an instance
    /// leaves held from the others for at most 450 ms.
    pub const PERIODIC: LocalMode = LocalMode::Periodic {
        sync_interval: Duration::from_millis(100),
    };
}
