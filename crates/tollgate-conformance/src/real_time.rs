//! What playing on a real clock needs, shared by the one-step kit and the
//! race: where the reference's clock starts, and the wait that keeps a
//! trace clear of a UTC day's turn.

use std::time::Duration;

/// Where the reference's clock starts on a real clock (ns): past 0, so
/// that a charge at the start has a time of its own.
pub(crate) const REAL_TIME_BASE: u64 = 1_000_000_000;

/// On a real clock, waits out the last half minute of a UTC day: the
/// window algorithms' day-long windows are aligned to the epoch, and a
/// trace across their boundary would see a fresh window the reference
/// (on its own clock) does not.
pub(crate) async fn clear_of_a_day_boundary() {
    const DAY: u64 = 86_400;
    let since_epoch = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let left = DAY - since_epoch % DAY;
    if left <= 30 {
        tokio::time::sleep(Duration::from_secs(left + 1)).await;
    }
}
