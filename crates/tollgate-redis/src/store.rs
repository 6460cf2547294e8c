//! The store: a policy's script called once per request. Its builder is in
//! `builder.rs`, the loop that sends a call until Redis answers in
//! `calls.rs`, a refund's and a debit's calls in `changes.rs`, and the
//! presence beat in `presence.rs`.

use crate::RedisStoreError;
use crate::calls::call_until_answered;
use crate::connection::Topology;
use crate::functions::Functions;
use crate::script::PreparedPolicy;
use crate::server_clock::ServerClock;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tollgate_core::{Clock, MonotonicClock};
use tollgate_internal::ChargeChange;
use tollgate_store::shared::{ShareOp, ShareReply};
use tollgate_store::{BlockList, ChangeReply, PolicyDebit, PolicyRefund, Presence};
use tollgate_store::{Key, Policy, PolicyDecision, Store, StoreReply};

/// The future of one check: one `FCALL` (or `EVALSHA`) round trip.
pub type RedisCheckFuture =
    Pin<Box<dyn Future<Output = Result<PolicyDecision, RedisStoreError>> + Send>>;

/// A [`Store`] whose counters live in Redis or Redis Cluster, so every
/// instance of a service that uses the same server and prefix shares one
/// limit. Clones share one multiplexed connection, and one block cache:
/// a key Redis refused is refused here until its retry time, with no call
/// (see
/// [`RedisStoreBuilder::block_cache`](crate::RedisStoreBuilder::block_cache)).
///
/// ```no_run
/// # async fn run() -> Result<(), tollgate_redis::RedisStoreError> {
/// use tollgate::RateLimitLayer;
/// use tollgate_redis::RedisStore;
///
/// let store = RedisStore::builder("redis://127.0.0.1:6379").prefix("myapp").connect().await?;
/// let layer = RateLimitLayer::builder().quota("api", "100/min".parse().unwrap()).store(store).build();
/// # let _ = layer;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RedisStore {
    pub(crate) shared: Arc<Shared>,
}

/// What a store's clones share, behind one `Arc`.
pub(crate) struct Shared {
    /// The connection, replaced after a Cluster failover (see [`Topology`]).
    pub(crate) topology: Arc<Topology>,
    pub(crate) prefix: String,
    /// The server's clock, for deadlines in its own time.
    pub(crate) server_clock: ServerClock,
    /// The keys Redis refused, until their retry time; `None` when off.
    pub(crate) blocked: Option<BlockList>,
    /// Script calls made, for [`RedisStore::calls`].
    pub(crate) calls: AtomicU64,
    /// Whether scripts are called as functions (`FCALL`).
    pub(crate) functions: Functions,
    /// How many instances said lately that they share this store's
    /// limits, this one included, and this one's rank among them (see
    /// [`RedisStore::presence`]).
    pub(crate) presence: Presence,
    #[cfg(feature = "test-clock")]
    pub(crate) clock: Option<tollgate_core::ManualClock>,
}

/// The longest an operator's reset waits for Redis.
const RESET_BOUND: Duration = Duration::from_secs(5);

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("prefix", &self.shared.prefix)
            .finish_non_exhaustive()
    }
}

impl RedisStore {
    /// The store's topology, for [`RedisSlots`](crate::RedisSlots) sharing
    /// its connection.
    pub(crate) fn topology(&self) -> Arc<Topology> {
        self.shared.topology.clone()
    }

    /// How many instances said, within the last 5 s, that they share this
    /// store's limits (this one included; before the first answer, the
    /// operator's count,
    /// [`RedisStoreBuilder::instances`](crate::RedisStoreBuilder::instances),
    /// 1 by default). Each store says so at once and then every second
    /// while it lives and Redis answers; a count read during an outage is
    /// the last one Redis gave. What a [`Split`](tollgate_store::Split) fallback
    /// divides the limits by.
    pub fn instances(&self) -> u32 {
        self.shared.presence.instances()
    }

    /// The count of [`instances`](Self::instances) with this instance's
    /// rank among them, shared with the store: what
    /// [`Split::presence`](tollgate_store::Split::presence) splits the
    /// limits by, giving the remainder to the lowest ranks so that the
    /// instances together admit the limit.
    pub fn presence(&self) -> Presence {
        self.shared.presence.clone()
    }

    /// The prefix of every key this store writes.
    pub fn prefix(&self) -> &str {
        &self.shared.prefix
    }

    /// The Redis keys that hold `key`'s state under each limit of `policy`,
    /// in the policy's order: for inspection (`MEMORY USAGE`, `TTL`) and
    /// tests.
    pub fn redis_keys(&self, policy: &Policy, key: &Key) -> Vec<String> {
        self.prepared(policy)
            .keys(&self.shared.prefix, key)
            .into_vec()
    }

    /// The SHA-1 of `policy`'s script, the name `EVALSHA` calls it by;
    /// as a function, `FCALL` calls it `tollgate_` and this, from a
    /// library of the same name (`FUNCTION LIST LIBRARYNAME …`).
    pub fn script_hash(&self, policy: &Policy) -> String {
        self.prepared(policy).script.get_hash().to_owned()
    }

    /// The command this store sends for one request of `cost` for `key`,
    /// as arguments: `FCALL tollgate_sha numkeys keys… cost now
    /// params…` while it calls functions (the library is on the server
    /// once the store's first call for `policy` has returned), else
    /// `EVALSHA sha numkeys keys… cost now params…`: to
    /// replay a decision with `redis-cli`, or load the server with
    /// `redis-benchmark`. `now` is empty: the script reads the server's
    /// clock.
    pub fn script_command(&self, policy: &Policy, key: &Key, cost: u32) -> Vec<String> {
        self.prepared(policy)
            .command(
                &self.shared.prefix,
                key,
                cost,
                None,
                None,
                self.shared.functions.on(),
            )
            .args_iter()
            .map(|arg| match arg {
                redis::Arg::Simple(bytes) => String::from_utf8_lossy(bytes).into_owned(),
                // The command has no cursor argument.
                _ => String::new(),
            })
            .collect()
    }

    /// The policy's prepared form, borrowed: no reference count touched.
    pub(crate) fn prepared_form<'p>(
        &self,
        policy: &'p Policy,
    ) -> tollgate_store::Prepared<'p, PreparedPolicy> {
        policy.prepared(PreparedPolicy::new)
    }

    pub(crate) fn prepared(&self, policy: &Policy) -> Arc<PreparedPolicy> {
        // Prepared on the policy's first request and kept with the policy.
        policy.prepared(PreparedPolicy::new).into_arc()
    }

    /// The block cache's list of refused keys (`None` when it is off): to
    /// see how many are blocked, or to [`clear`](BlockList::clear) it after
    /// the keys were reset in Redis behind the store's back.
    pub fn block_list(&self) -> Option<&BlockList> {
        self.shared.blocked.as_ref()
    }

    /// How many script calls this store and its clones have made to Redis
    /// since it connected: one per decision that reached Redis (not those
    /// the block cache answered), one per reservation or sync of a
    /// [`LocalFirst`](crate::LocalFirst) in front of it. A call sent again
    /// after a Cluster redirection counts once.
    ///
    /// Calls per request is the figure to watch: 1 for a plain store under
    /// load below the limit, far less with the block cache under a flood
    /// or with a local-first store.
    pub fn calls(&self) -> u64 {
        self.shared.calls.load(Ordering::Relaxed)
    }

    /// The test clock's time in ns, if the store has one: what a
    /// [`LocalFirst`](crate::LocalFirst) in front of it reads instead of
    /// its own clock, so that a test moves both.
    #[cfg(feature = "test-clock")]
    pub(crate) fn test_nanos(&self) -> Option<u64> {
        self.shared.clock.as_ref().map(tollgate_core::Clock::now)
    }

    /// `None` (the script reads the server's clock), or the test clock in
    /// µs.
    pub(crate) fn now_micros(&self) -> Option<u64> {
        #[cfg(feature = "test-clock")]
        if let Some(clock) = &self.shared.clock {
            return Some(tollgate_core::Clock::now(clock) / 1_000);
        }
        None
    }
}

impl Store for RedisStore {
    type Error = RedisStoreError;
    type Future = RedisCheckFuture;

    fn check(
        &self,
        policy: &Arc<Policy>,
        key: &Key,
        cost: u32,
    ) -> StoreReply<Self::Future, Self::Error> {
        self.decide(policy, key, cost, None)
    }

    /// As `check`, with a deadline in the server's time: a call that
    /// reaches the script after `within` (as best this process can tell the
    /// server's clock, never later) charges nothing and fails with
    /// [`RedisStoreError::is_late`].
    fn check_within(
        &self,
        policy: &Arc<Policy>,
        key: &Key,
        cost: u32,
        within: Duration,
    ) -> StoreReply<Self::Future, Self::Error> {
        self.decide(policy, key, cost, Some(within))
    }

    // `peek`: the default, the policy's script at cost 0, which charges
    // nothing for any algorithm (it may write the state back as it stands,
    // a no-op for every later decision; tested in
    // `tests/tests/redis_admin.rs`), and teaches the block cache nothing.

    /// One `DEL` of the key's state under every limit of `policy`, and of
    /// the units a [`LocalFirst`](crate::LocalFirst) store in exact mode
    /// counts as held beside it (`…~held`) and the shares periodic mode
    /// gave (`…~share`), then the block cache's entry.
    /// Not deleted: the key's sync sequence numbers (`…:~sync`), which hold
    /// no capacity and are shared by the key's policies; keeping them keeps
    /// a report sent before the reset, and sent again after it, from being
    /// counted a second time. A failure leaves the key as it was, or reset
    /// (a reset is safe to repeat).
    fn reset(&self, policy: &Arc<Policy>, key: &Key) -> tollgate_store::AdminFuture {
        let shared = self.shared.clone();
        let names = self.reset_keys(policy, key);
        let (policy, key) = (policy.clone(), key.clone());
        tollgate_store::AdminFuture::new(async move {
            let deleted = match shared.topology.current() {
                Ok(generation) => {
                    let mut connection = generation.connection.clone();
                    let mut command = redis::cmd("DEL");
                    command.arg(&names);
                    let delete = command.query_async::<i64>(&mut connection);
                    // A connection being made again (Redis restarting)
                    // holds a command until it is back: an operator's
                    // reset gives up after a while instead.
                    match tokio::time::timeout(RESET_BOUND, delete).await {
                        Ok(deleted) => deleted.map_err(RedisStoreError::from),
                        Err(_) => Err(RedisStoreError::unavailable(format!(
                            "Redis did not answer the reset within {RESET_BOUND:?}"
                        ))),
                    }
                }
                Err(error) => Err(error),
            };
            if let Some(blocked) = &shared.blocked {
                blocked.forget(&policy, &key, shared.local_now());
            }
            deleted.map(drop).map_err(tollgate_store::AdminError::store)
        })
    }

    /// Forgets the block cache's remembered refusal for the key, if any.
    /// Redis itself remembers no refusal: its counts decide.
    fn unblock(&self, policy: &Arc<Policy>, key: &Key) -> tollgate_store::AdminFuture {
        if let Some(blocked) = &self.shared.blocked {
            blocked.forget(policy, key, self.shared.local_now());
        }
        tollgate_store::AdminFuture::ready(Ok(()))
    }

    /// Refunds and debits, both.
    fn can(&self, _: tollgate_store::Capability) -> Result<(), tollgate_store::MissingCapability> {
        Ok(())
    }

    /// Sends the refund (`refund.lua`, one script call) from a spawned
    /// task; the reply completes when it has landed (the layer holds the
    /// response until then, at most its store timeout). Checks that reach
    /// Redis before it see the charge still there (stricter, never more
    /// lenient). Without a Tokio runtime, or when Redis cannot be reached,
    /// the charge stays (the request counts) and a warning is logged.
    fn refund(&self, policy: &Arc<Policy>, key: &Key, refund: PolicyRefund) -> ChangeReply {
        let store = self.clone();
        let (policy, key) = (policy.clone(), key.clone());
        spawn_change(ChargeChange::Refund, async move {
            store.refund_now(&policy, &key, &refund).await
        })
    }

    /// Sends the debit (`debit.lua`, one script call) from a spawned task,
    /// as [`refund`](Self::refund) does; a failure is logged and the cost
    /// goes uncharged.
    fn debit(&self, policy: &Arc<Policy>, key: &Key, debit: PolicyDebit) -> ChangeReply {
        let cost = debit.cost;
        let store = self.clone();
        let (policy, key) = (policy.clone(), key.clone());
        spawn_change(ChargeChange::Debit, async move {
            store.charge_debt(&policy, &key, cost).await
        })
    }
}

/// How long a refund or a debit sent from its own task may wait for
/// Redis. While Redis is down the connection waits for it to come back,
/// and without a bound every refunded or debited request would leave a
/// task waiting for as long as the outage lasts.
pub(crate) const CHANGE_TIMEOUT: Duration = Duration::from_secs(5);

/// Runs a refund or a debit on a task of its own, logged as this crate's
/// (see [`tollgate_store::spawn_change`]).
pub(crate) fn spawn_change(
    change: ChargeChange,
    call: impl Future<Output = Result<(), RedisStoreError>> + Send + 'static,
) -> ChangeReply {
    tollgate_store::spawn_change("tollgate-redis", change, CHANGE_TIMEOUT, call)
}

impl RedisStore {
    /// The keys a reset deletes: each limit's state and its held units.
    fn reset_keys(&self, policy: &Policy, key: &Key) -> Vec<String> {
        let prepared = self.prepared(policy);
        let states = prepared.keys(&self.shared.prefix, key);
        let held = states.iter().map(|name| crate::script::held_key(name));
        let shares = states.first().map(|name| crate::script::share_key(name));
        let mut names: Vec<String> = held.chain(shares).collect();
        names.extend(states);
        names
    }
}

impl RedisStore {
    /// One decision: the policy's script, with a deadline if the caller
    /// waits only `within`.
    fn decide(
        &self,
        policy: &Arc<Policy>,
        key: &Key,
        cost: u32,
        within: Option<Duration>,
    ) -> StoreReply<RedisCheckFuture, RedisStoreError> {
        // Nothing to count: allowed, as by the core and the memory store
        // (a layer never asks; a caller of the trait may).
        if policy.limits().is_empty() {
            return StoreReply::Ready(Ok(PolicyDecision::new([])));
        }
        // A key Redis refused, until its retry time: no call.
        let learn = match &self.shared.blocked {
            Some(blocked) => {
                let sent = self.shared.local_now();
                if let Some(verdict) = blocked.lookup(policy, key, cost, sent) {
                    return StoreReply::Ready(Ok(verdict));
                }
                Some((policy.clone(), key.clone(), sent))
            }
            None => None,
        };
        let prepared = self.prepared(policy);
        let now = self.now_micros();
        // With a test clock the script's time is not the server's.
        let deadline = within
            .filter(|_| now.is_none())
            .and_then(|within| self.shared.server_clock.deadline(within));
        let functions = self.shared.functions.on();
        let command = prepared.command(&self.shared.prefix, key, cost, now, deadline, functions);
        let shared = self.shared.clone();
        shared.calls.fetch_add(1, Ordering::Relaxed);
        crate::observe::redis_call("check");
        StoreReply::Pending(Box::pin(async move {
            let reply = call_until_answered(
                &shared.topology,
                &shared.functions,
                &prepared.script,
                &command,
            )
            .await?;
            let (server_now, verdict) = prepared.verdict(&reply);
            if let Some(server_now) = server_now {
                shared.server_clock.observe(server_now);
            }
            if let (Some(blocked), Some((policy, key, sent)), Ok(verdict)) =
                (&shared.blocked, learn, &verdict)
            {
                let answered = shared.local_now();
                blocked.learn(&policy, &key, cost, sent, answered, verdict);
            }
            verdict
        }))
    }
}

impl RedisStore {
    /// One call of the local-first store's script (`share.lua`): a
    /// reservation or a sync for `key` under `policy`.
    pub(crate) async fn share_call(
        &self,
        policy: &Policy,
        key: &Key,
        op: ShareOp,
    ) -> Result<ShareReply, RedisStoreError> {
        let prepared = self.prepared(policy);
        let name = match op {
            ShareOp::Reserve { .. } => "reserve",
            ShareOp::Sync { .. } => "sync",
            ShareOp::Refund { .. } => "refund",
        };
        let read = op.reader();
        let command = prepared.share_command(
            &self.shared.prefix,
            key,
            op,
            self.now_micros(),
            self.shared.functions.on(),
        );
        self.shared.calls.fetch_add(1, Ordering::Relaxed);
        crate::observe::redis_call(name);
        let reply = call_until_answered(
            &self.shared.topology,
            &self.shared.functions,
            &prepared.share_script,
            &command,
        )
        .await?;
        let (server_now, answer) = prepared.share_reply(read, &reply);
        if let Some(server_now) = server_now {
            self.shared.server_clock.observe(server_now);
        }
        answer
    }
}

impl Shared {
    /// This process's time for the block cache, in ns: the monotonic clock,
    /// or the test clock.
    pub(crate) fn local_now(&self) -> u64 {
        #[cfg(feature = "test-clock")]
        if let Some(clock) = &self.clock {
            return clock.now();
        }
        MonotonicClock.now()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tollgate_core::Quota;
    use tollgate_store::NamedLimit;

    #[test]
    fn a_policy_is_prepared_once_and_kept_with_it() {
        let policy = |n: u64| Policy::new(vec![NamedLimit::new("api", Quota::per_second(n))]);
        let first = policy(1);
        let a = first.prepared(PreparedPolicy::new).into_arc();
        assert!(Arc::ptr_eq(
            &a,
            &first.prepared(PreparedPolicy::new).into_arc()
        ));
        // Other policies of the same algorithms share the script, not the
        // prepared form; nothing is kept anywhere but in each policy.
        let second = policy(2);
        let b = second.prepared(PreparedPolicy::new).into_arc();
        assert!(!Arc::ptr_eq(&a, &b));
        assert!(Arc::ptr_eq(&a.script, &b.script));
        drop(first);
        assert_eq!(Arc::strong_count(&a), 1);
    }
}
