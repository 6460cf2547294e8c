//! The presence beat: how many instances share a store's limits, counted
//! in Redis, so that a [`Split`](tollgate_store::Split) fallback divides
//! the limits by the instances there are.

use crate::store::Shared;
use std::time::Duration;

/// How often an instance says it shares a store's limits, and how long
/// its word holds: an instance that stops is no longer counted after
/// [`PRESENCE_HOLD`].
const PRESENCE_EVERY: Duration = Duration::from_secs(1);
const PRESENCE_HOLD: Duration = Duration::from_secs(5);

/// Says, every [`PRESENCE_EVERY`] while the store lives (the first time
/// at once, or as soon as the store connects), that this instance shares
/// its limits, and records in its
/// [`Presence`](tollgate_store::Presence) the count Redis answers and
/// this instance's rank: one pipeline on a sorted
/// set of instances scored by when their word ends, in this host's
/// wall-clock ms (clocks a few seconds apart shift when a stopped
/// instance stops counting, no more), that drops the words that ended,
/// adds this one and reads the members; the rank is the number of member
/// ids below this one's. A beat whose `ZADD` added this instance anew
/// (its first, or the set was lost: Redis restarted or was emptied)
/// counts no fewer than before until the next
/// ([`Presence::beat`](tollgate_store::Presence::beat)). Not
/// a script, so that script counts (`INFO commandstats`) stay the
/// decisions'. A failed call keeps the last count (an outage is when it
/// is read).
pub(crate) async fn announce(shared: std::sync::Weak<Shared>, id: String) {
    loop {
        let Some(store) = shared.upgrade() else {
            return;
        };
        // Not connected yet (a lazy start): ask again soon, so that the
        // first beat follows the connection closely.
        let Ok(generation) = store.topology.current() else {
            drop(store);
            tokio::time::sleep(PRESENCE_EVERY / 10).await;
            continue;
        };
        let mut connection = generation.connection.clone();
        let key = format!("{}:instances", store.prefix);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        let hold = PRESENCE_HOLD.as_millis() as u64;
        let mut pipeline = redis::pipe();
        pipeline
            .cmd("ZREMRANGEBYSCORE")
            .arg(&key)
            .arg("-inf")
            .arg(now)
            .ignore()
            .cmd("ZADD")
            .arg(&key)
            .arg(now + hold)
            .arg(&id)
            .cmd("PEXPIRE")
            .arg(&key)
            .arg(hold * 2)
            .ignore()
            .cmd("ZRANGE")
            .arg(&key)
            .arg(0)
            .arg(-1);
        let beat = pipeline.query_async::<(u32, Vec<String>)>(&mut connection);
        let counted = tokio::time::timeout(PRESENCE_EVERY, beat).await;
        if let Ok(Ok((added, members))) = counted {
            let instances = u32::try_from(members.len()).unwrap_or(u32::MAX);
            let rank = members.iter().filter(|member| **member < id).count();
            let rank = u32::try_from(rank).unwrap_or(u32::MAX);
            store.presence.beat(instances.max(1), rank, added > 0);
        }
        drop((store, generation));
        tokio::time::sleep(PRESENCE_EVERY).await;
    }
}
