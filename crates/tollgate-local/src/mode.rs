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
    /// [`Periodic`](Self::Periodic) mode with the default interval,
    /// 100 ms: ten calls a second per busy key and instance, and a share of
    /// a key that an instance leaves held from the others for at most
    /// 450 ms.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate_local::LocalMode;
    ///
    /// let sync_interval = Duration::from_millis(100);
    /// assert_eq!(LocalMode::periodic(), LocalMode::Periodic { sync_interval });
    /// ```
    pub const fn periodic() -> LocalMode {
        LocalMode::Periodic {
            sync_interval: Duration::from_millis(100),
        }
    }
}

/// Reads `exact` or `periodic=MS` (the sync interval in milliseconds, at
/// least 1), as command lines and configuration write a mode.
///
/// ```
/// use std::time::Duration;
/// use tollgate_local::LocalMode;
///
/// assert_eq!("exact".parse(), Ok(LocalMode::Exact));
/// let sync_interval = Duration::from_millis(250);
/// assert_eq!("periodic=250".parse(), Ok(LocalMode::Periodic { sync_interval }));
/// assert!("periodic=0".parse::<LocalMode>().is_err());
/// ```
impl std::str::FromStr for LocalMode {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        if text == "exact" {
            return Ok(LocalMode::Exact);
        }
        text.strip_prefix("periodic=")
            .and_then(|ms| ms.parse::<u64>().ok())
            .filter(|ms| *ms >= 1)
            .map(|ms| LocalMode::Periodic {
                sync_interval: Duration::from_millis(ms),
            })
            .ok_or_else(|| format!("expected exact or periodic=MS (MS at least 1), not {text:?}"))
    }
}

impl LocalMode {
    /// The sync interval in ns, saturating; 0 in exact mode, which has
    /// none.
    pub(crate) fn sync_nanos(self) -> u64 {
        match self {
            LocalMode::Periodic { sync_interval } => nanos(sync_interval),
            LocalMode::Exact => 0,
        }
    }

    /// How long a periodic share may be spent after its sync was sent: two
    /// intervals and 250 ms, so that an instance busy on the key reads it
    /// again (every interval) well before its share lapses; an instance that
    /// leaves keeps its last share from the others for this long. At most a
    /// day.
    pub(crate) fn share_life(self) -> u64 {
        const DAY: u64 = 86_400_000_000_000;
        match self {
            LocalMode::Periodic { .. } => self
                .sync_nanos()
                .saturating_mul(2)
                .saturating_add(250_000_000)
                .min(DAY),
            LocalMode::Exact => 0,
        }
    }
}

/// `duration` in ns, saturating.
fn nanos(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}
