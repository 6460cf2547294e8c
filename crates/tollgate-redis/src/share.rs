//! The Redis store as the shared store of a local-first store: its three
//! operations are `share.lua`'s calls.

use crate::{RedisStore, RedisStoreError};
use std::sync::Arc;
use tollgate_store::shared::{ShareOp, ShareReply, SharedStore};
use tollgate_store::{Key, Policy};

impl SharedStore for RedisStore {
    async fn share(
        &self,
        policy: &Arc<Policy>,
        key: &Key,
        op: ShareOp,
    ) -> Result<ShareReply, RedisStoreError> {
        self.share_call(policy, key, op).await
    }

    /// Read from the policy's prepared form: one flag per request.
    fn shares(&self, policy: &Policy) -> bool {
        self.prepared_form(policy).local_first
    }

    fn spent_error(message: String) -> RedisStoreError {
        RedisStoreError::local_spent(message)
    }

    #[cfg(feature = "test-clock")]
    fn test_nanos(&self) -> Option<u64> {
        RedisStore::test_nanos(self)
    }
}

/// `share.lua`'s sync, read through the trait.
#[cfg(test)]
mod tests {
    use crate::RedisStore;
    use tollgate_core::{Algorithm, Quota};
    use tollgate_store::shared::{ShareOp, ShareOutcome, SharedStore};
    use tollgate_store::{Key, NamedLimit, Policy};
    use tollgate_tests::redis::RedisServer;

    /// A holder's name, as the local-first store makes one: an instance's
    /// slot of the policy.
    fn holder(instance: u64, policy: u64) -> u64 {
        instance ^ policy.wrapping_mul(0x9E37_79B9_7F4A_7C15)
    }

    /// A report sent again after a lost reply (same instance, same
    /// sequence) is not counted twice; the next report is.
    #[tokio::test]
    async fn a_report_sent_again_is_counted_once() {
        let server = RedisServer::start();
        let redis = RedisStore::connect(server.url()).await.unwrap();
        for algorithm in [
            Algorithm::Gcra,
            Algorithm::FixedWindow,
            Algorithm::SlidingWindow,
            Algorithm::SlidingWindowBuckets,
        ] {
            let quota: Quota = "100/day".parse().unwrap();
            let policy = std::sync::Arc::new(Policy::new(vec![
                NamedLimit::new(algorithm.name(), quota).with_algorithm(algorithm),
            ]));
            let instance = holder(7, policy.id());
            let report = |spent, sequence| ShareOp::Sync {
                spent,
                instance,
                sequence,
                life_micros: 1_000_000,
                instances: 0,
                need: 0,
                left: 0,
                want: 0,
            };
            let key = Key::from("k");
            let applied = |reply: &tollgate_store::shared::ShareReply| match reply.outcome {
                ShareOutcome::Synced { applied, .. } => applied,
                other => panic!("a sync answered {other:?}"),
            };
            let first = redis.share(&policy, &key, report(10, 1)).await.unwrap();
            assert_eq!(
                (applied(&first), first.decision.merged().remaining()),
                (true, 90)
            );
            let again = redis.share(&policy, &key, report(10, 1)).await.unwrap();
            assert_eq!(
                (applied(&again), again.decision.merged().remaining()),
                (false, 90)
            );
            let next = redis.share(&policy, &key, report(5, 2)).await.unwrap();
            assert_eq!(
                (applied(&next), next.decision.merged().remaining()),
                (true, 85),
                "{algorithm}"
            );
            // Another instance's (or policy's) report of the same sequence
            // counts.
            let other = ShareOp::Sync {
                spent: 5,
                instance: holder(8, policy.id()),
                sequence: 1,
                life_micros: 1_000_000,
                instances: 0,
                need: 0,
                left: 0,
                want: 0,
            };
            let other = redis.share(&policy, &key, other).await.unwrap();
            assert_eq!(other.decision.merged().remaining(), 80, "{algorithm}");
        }
    }

    /// Each sync's share is its part of what remains less the others'
    /// live shares, at least the waiting cost if that much is free; a
    /// lapsed share counts no more; a set count of instances overrides.
    #[tokio::test]
    async fn shares_never_exceed_what_remains() {
        let server = RedisServer::start();
        let redis = RedisStore::connect(server.url()).await.unwrap();
        let quota: Quota = "100/day".parse().unwrap();
        let policy = std::sync::Arc::new(Policy::new(vec![NamedLimit::new("day", quota)]));
        let key = Key::from("k");
        let sync = |instance, spent, sequence, need, life_micros, instances| ShareOp::Sync {
            spent,
            instance: holder(instance, policy.id()),
            sequence,
            life_micros,
            instances,
            need,
            left: 0,
            want: u64::MAX,
        };
        let share = |reply: tollgate_store::shared::ShareReply| match reply.outcome {
            ShareOutcome::Synced { share, sharing, .. } => (share, sharing),
            other => panic!("a sync answered {other:?}"),
        };
        let minute = 60_000_000;
        let a = redis
            .share(&policy, &key, sync(7, 0, 0, 0, minute, 0))
            .await
            .unwrap();
        assert_eq!(share(a), (100, 1), "alone: all of it");
        let b = redis
            .share(&policy, &key, sync(8, 0, 0, 1, minute, 0))
            .await
            .unwrap();
        assert_eq!(share(b), (0, 2), "the first holds it all");
        let a = redis
            .share(&policy, &key, sync(7, 10, 1, 0, minute, 0))
            .await
            .unwrap();
        assert_eq!(a.decision.merged().remaining(), 90);
        assert_eq!(share(a), (45, 2), "90 free, split in two");
        let b = redis
            .share(&policy, &key, sync(8, 0, 0, 50, minute, 0))
            .await
            .unwrap();
        assert_eq!(
            share(b),
            (23, 2),
            "45 free: half, rounded up (50 is not free)"
        );
        let b = redis
            .share(&policy, &key, sync(8, 0, 0, 40, minute, 0))
            .await
            .unwrap();
        assert_eq!(share(b), (40, 2), "the waiting cost, free");
        // Instance 9's share lapses at once: the next sync counts it no
        // more.
        let c = redis
            .share(&policy, &key, sync(9, 0, 0, 0, 1_000, 0))
            .await
            .unwrap();
        assert_eq!(share(c), (2, 3), "90 − 45 − 40 = 5, in three");
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        let a = redis
            .share(&policy, &key, sync(7, 0, 1, 0, minute, 4))
            .await
            .unwrap();
        assert_eq!(share(a), (13, 2), "90 − 40 = 50, in four as set");
        // An instance that may still spend 30 of its last share while its
        // call is on its way is counted for those 30, though its new share
        // is smaller.
        let with_left = ShareOp::Sync {
            spent: 0,
            instance: holder(8, policy.id()),
            sequence: 0,
            life_micros: minute,
            instances: 4,
            need: 0,
            left: 30,
            want: u64::MAX,
        };
        let b = redis.share(&policy, &key, with_left).await.unwrap();
        assert_eq!(share(b), (20, 2), "90 − 13 = 77 free, in four");
        let a = redis
            .share(&policy, &key, sync(7, 0, 1, 0, minute, 4))
            .await
            .unwrap();
        assert_eq!(share(a), (15, 2), "90 − 30 (not 20) = 60, in four");
    }

    /// Shares follow demand: far from the limit each instance gets what it
    /// wants, or its part of what is free with room for one more instance
    /// (a newcomer finds some); an idle instance's sync keeps at most half
    /// of what the others leave free and gives the rest back at once (all
    /// of it when it holds nothing, none another wants beyond its share);
    /// near the limit, wants that do not fit are split evenly; never more
    /// than is free.
    #[tokio::test]
    async fn shares_follow_demand_and_an_idle_sync_gives_its_share_back() {
        let server = RedisServer::start();
        let redis = RedisStore::connect(server.url()).await.unwrap();
        let quota: Quota = "100/day".parse().unwrap();
        let policy = std::sync::Arc::new(Policy::new(vec![NamedLimit::new("day", quota)]));
        let key = Key::from("k");
        let minute = 60_000_000;
        // `left`: what an idle sync (want 0) offers back.
        let sync = |instance, want, left| ShareOp::Sync {
            spent: 0,
            instance: holder(instance, policy.id()),
            sequence: 0,
            life_micros: minute,
            instances: 0,
            need: 0,
            left,
            want,
        };
        let share = |reply: tollgate_store::shared::ShareReply| match reply.outcome {
            ShareOutcome::Synced { share, sharing, .. } => (share, sharing),
            other => panic!("a sync answered {other:?}"),
        };
        let mut steps = Vec::new();
        for (instance, want, left, expected, why) in [
            (7, 10, 0, (50, 1), "alone: half, room for one more"),
            (8, 30, 0, (30, 2), "50 free: what it wants"),
            (7, 0, 0, (0, 1), "idle, holding nothing: taken out"),
            (8, 100, 0, (100, 1), "all 100 free: all it wants"),
            (9, 40, 0, (0, 2), "nothing free: its want recorded"),
            (8, 100, 0, (50, 2), "wanted 140 of 100: even"),
            (9, 40, 0, (25, 2), "wanted 90 of 50: even"),
            (8, 100, 0, (38, 2), "wanted 115 of 75: even"),
            (9, 10, 0, (10, 2), "wanted 72 of 62: 10 of 31"),
            (9, 0, 10, (0, 1), "idle, B wants 62 more: gives it all back"),
            (
                8,
                0,
                38,
                (38, 1),
                "idle, 100 free: keeps its 38 (at most 50)",
            ),
            (7, 100, 0, (31, 2), "wanted 100 of 62: even"),
            (8, 0, 38, (0, 1), "idle, A wants 69 more: gives it all back"),
            (7, 0, 31, (31, 1), "idle, 100 free: keeps its 31"),
        ] {
            let op = sync(instance, want, left);
            let reply = redis.share(&policy, &key, op).await.unwrap();
            steps.push((instance, want, share(reply), expected, why));
        }
        for (instance, want, got, expected, why) in steps {
            assert_eq!(got, expected, "{instance} wanting {want}: {why}");
        }
    }

    /// A sync's reading of a whole limit carries, as its replenish time,
    /// when a unit spent now would be back: a local admission from it
    /// never answers `t` = 0 for a limit it spent.
    #[tokio::test]
    async fn a_whole_reading_says_when_a_unit_spent_would_be_back() {
        let server = RedisServer::start();
        let redis = RedisStore::connect(server.url()).await.unwrap();
        for algorithm in [
            Algorithm::Gcra,
            Algorithm::TokenBucket,
            Algorithm::FixedWindow,
            Algorithm::SlidingWindow,
            Algorithm::SlidingWindowBuckets,
        ] {
            let quota: Quota = "100/min".parse().unwrap();
            let policy = std::sync::Arc::new(Policy::new(vec![
                NamedLimit::new(algorithm.name(), quota).with_algorithm(algorithm),
            ]));
            let op = ShareOp::Sync {
                spent: 0,
                instance: holder(7, policy.id()),
                sequence: 0,
                life_micros: 1_000_000,
                instances: 0,
                need: 0,
                left: 0,
                want: 10,
            };
            let reply = redis.share(&policy, &Key::from("k"), op).await.unwrap();
            let limit = reply.decision.merged();
            assert_eq!(limit.remaining(), 100, "{algorithm}");
            let replenish = limit.replenish_after_nanos();
            assert!(replenish > 0, "{algorithm}: {limit:?}");
            // At most two periods (a bucketed window's unit leaves with its
            // bucket, a little past one period).
            assert!(replenish <= 120_000_000_000, "{algorithm}: {limit:?}");
        }
    }
}
