//! The presence beat of a [`CasStore`](super::CasStore): how many
//! instances share its backend, counted through the backend itself.
//!
//! One value, `{prefix}:instances`, holds every instance's word: its id
//! and when its word ends (16 bytes each, little-endian, on the backend's
//! clock). Every [`PRESENCE_EVERY`] each instance reads it, drops the
//! words that ended, puts its own (ending [`PRESENCE_HOLD`] later) and
//! writes it back under the version it read, as a check writes a key's
//! states; a lost race reads again. The live words are the instances, and
//! an instance's rank is the number of live ids below its own.

use super::backend::{CasBackend, Swap};
use super::shared::Shared;
use bytes::{BufMut, Bytes, BytesMut};
use std::sync::Weak;
use std::time::Duration;
use tollgate_store::Presence;

/// How often an instance says it shares the store, and how long its word
/// holds.
pub(super) const PRESENCE_EVERY: Duration = Duration::from_secs(1);
pub(super) const PRESENCE_HOLD: Duration = Duration::from_secs(5);

/// Lost races a beat tries again at once before waiting for the next.
const ATTEMPTS: u32 = 4;

/// Says every [`PRESENCE_EVERY`], while the store lives, that the
/// instance `id` shares it, and records in `presence` what it counted
/// (see [`Presence::beat`]). The first beat at once. A failed beat keeps
/// the last count.
pub(super) async fn beat<B: CasBackend>(shared: Weak<Shared<B>>, presence: Presence, id: u64) {
    loop {
        let Some(store) = shared.upgrade() else {
            return;
        };
        let name = format!("{}:instances", store.prefix);
        let once = async {
            for _ in 0..ATTEMPTS {
                let Ok(snapshot) = store.backend.read(&name).await else {
                    return None;
                };
                let now = snapshot.now;
                let mut words: Vec<(u64, u64)> = snapshot
                    .value
                    .as_ref()
                    .map(|stored| words(&stored.bytes))
                    .unwrap_or_default();
                words.retain(|&(_, until)| until > now);
                let fresh = !words.iter().any(|&(of, _)| of == id);
                words.retain(|&(of, _)| of != id);
                let until = now.saturating_add(PRESENCE_HOLD.as_nanos() as u64);
                words.push((id, until));
                let mut bytes = BytesMut::with_capacity(words.len() * 16);
                for (of, until) in &words {
                    bytes.put_u64_le(*of);
                    bytes.put_u64_le(*until);
                }
                let expected = snapshot.value.as_ref().map(|stored| stored.version);
                let swap = Swap {
                    bytes: bytes.freeze(),
                    version: store.version(expected),
                    expected,
                    expires_at: words.iter().map(|&(_, until)| until).max().unwrap_or(until),
                    deadline: Some(now.saturating_add(PRESENCE_EVERY.as_nanos() as u64)),
                };
                match store.backend.write(&name, swap).await {
                    Ok(true) => {
                        let rank = words.iter().filter(|&&(of, _)| of < id).count();
                        return Some((words.len(), rank, fresh));
                    }
                    Ok(false) => continue,
                    Err(_) => return None,
                }
            }
            None
        };
        let counted = tokio::time::timeout(PRESENCE_EVERY, once).await;
        if let Ok(Some((instances, rank, fresh))) = counted {
            let instances = u32::try_from(instances).unwrap_or(u32::MAX);
            let rank = u32::try_from(rank).unwrap_or(u32::MAX);
            presence.beat(instances, rank, fresh);
        }
        drop(store);
        tokio::time::sleep(PRESENCE_EVERY).await;
    }
}

/// The (id, until) words of a presence value; a trailing partial word is
/// ignored.
fn words(bytes: &Bytes) -> Vec<(u64, u64)> {
    bytes
        .chunks_exact(16)
        .map(|word| {
            let mut id = [0; 8];
            let mut until = [0; 8];
            id.copy_from_slice(&word[..8]);
            until.copy_from_slice(&word[8..]);
            (u64::from_le_bytes(id), u64::from_le_bytes(until))
        })
        .collect()
}
