//! The store: a policy's script called once per request.

use crate::RedisStoreError;
use crate::connection::{Connection, Failure, Topology};
use crate::options::ConnectOptions;
use crate::script::{LuaScript, PreparedPolicy};
use crate::server_clock::ServerClock;
#[cfg(feature = "tls")]
use crate::tls::Pem;
use redis::{ErrorKind, ServerErrorKind};
use std::future::Future;
#[cfg(feature = "tls")]
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tollgate_core::{Clock, MonotonicClock};
use tollgate_internal::ChargeChange;
use tollgate_local::{ShareOp, ShareReply};
use tollgate_store::{BlockList, ChangeReply, PolicyDebit, PolicyRefund, Presence};
use tollgate_store::{Key, Policy, PolicyDecision, Store, StoreReply};

/// The future of one check: one `EVALSHA` round trip.
pub type RedisCheckFuture =
    Pin<Box<dyn Future<Output = Result<PolicyDecision, RedisStoreError>> + Send>>;

/// A [`Store`] whose counters live in Redis or Redis Cluster, so every
/// instance of a service that uses the same server and prefix shares one
/// limit. Clones share one multiplexed connection, and one block cache:
/// a key Redis refused is refused here until its retry time, with no call
/// (see [`RedisStoreBuilder::block_cache`]).
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
    shared: Arc<Shared>,
}

struct Shared {
    /// The connection, replaced after a Cluster failover (see [`Topology`]).
    topology: Arc<Topology>,
    prefix: String,
    /// The server's clock, for deadlines in its own time.
    server_clock: ServerClock,
    /// The keys Redis refused, until their retry time; `None` when off.
    blocked: Option<BlockList>,
    /// Script calls made, for [`RedisStore::calls`].
    calls: AtomicU64,
    /// How many instances said lately that they share this store's
    /// limits, this one included, and this one's rank among them (see
    /// [`RedisStore::presence`]).
    presence: Presence,
    #[cfg(feature = "test-clock")]
    clock: Option<tollgate_core::ManualClock>,
}

/// How often an instance says it shares a store's limits, and how long
/// its word holds: an instance that stops is no longer counted after
/// [`PRESENCE_HOLD`].
const PRESENCE_EVERY: Duration = Duration::from_secs(1);
const PRESENCE_HOLD: Duration = Duration::from_secs(5);

/// The longest an operator's reset waits for Redis.
const RESET_BOUND: Duration = Duration::from_secs(5);

/// Says, every [`PRESENCE_EVERY`] while the store lives (the first time
/// at once, or as soon as the store connects), that this instance shares
/// its limits, and records in its [`Presence`] the count Redis answers
/// and this instance's rank: one pipeline on a sorted
/// set of instances scored by when their word ends, in this host's
/// wall-clock ms (clocks a few seconds apart shift when a stopped
/// instance stops counting, no more), that drops the words that ended,
/// adds this one and reads the members; the rank is the number of member
/// ids below this one's. A beat whose `ZADD` added this instance anew
/// (its first, or the set was lost: Redis restarted or was emptied)
/// counts no fewer than before until the next ([`Presence::beat`]). Not
/// a script, so that script counts (`INFO commandstats`) stay the
/// decisions'. A failed call keeps the last count (an outage is when it
/// is read).
async fn announce(shared: std::sync::Weak<Shared>, id: String) {
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

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("prefix", &self.shared.prefix)
            .finish_non_exhaustive()
    }
}

impl RedisStore {
    /// A builder for a store at `url`:
    ///
    /// - `redis://host:port` (or with a password and database,
    ///   `redis://:secret@host:port/2`, or a user, `redis://app:secret@…`)
    ///   for one server;
    /// - `redis+cluster://host:port,host:port` for a Cluster (a few nodes
    ///   suffice: the client learns the others); a password on each node
    ///   (`redis+cluster://:secret@h1:7000,:secret@h2:7000`), or on the
    ///   first only (`redis+cluster://:secret@h1:7000,h2:7000`: a node
    ///   without one takes the first's), the same for every node;
    /// - `redis+sentinel://host:port,host:port/service_name[/db]` for the
    ///   master of `service_name` (the name in `sentinel monitor`), found
    ///   through the sentinels listed and found again after a failover. A
    ///   user and password before the first sentinel
    ///   (`redis+sentinel://:secret@s1:26379,s2:26379/mymaster`) are the
    ///   master's; sentinels that ask for their own take
    ///   [`sentinel_password`](RedisStoreBuilder::sentinel_password).
    ///
    /// `rediss://`, `rediss+cluster://` and `rediss+sentinel://` are the
    /// same over TLS, with the `tls` feature: the system's root
    /// certificates are trusted unless
    /// [`tls_ca_file`](RedisStoreBuilder::tls_ca_file) names others.
    pub fn builder(url: impl Into<String>) -> RedisStoreBuilder {
        RedisStoreBuilder {
            url: url.into(),
            prefix: "tollgate".into(),
            options: ConnectOptions::default(),
            block_cache: true,
            instances: 1,
            #[cfg(feature = "test-clock")]
            clock: None,
        }
    }

    /// A store at `url` with the default settings.
    pub async fn connect(url: impl Into<String>) -> Result<Self, RedisStoreError> {
        Self::builder(url).connect().await
    }

    /// The store's topology, for [`RedisSlots`](crate::RedisSlots) sharing
    /// its connection.
    pub(crate) fn topology(&self) -> Arc<Topology> {
        self.shared.topology.clone()
    }

    /// How many instances said, within the last 5 s, that they share this
    /// store's limits (this one included; before the first answer, the
    /// operator's count, [`RedisStoreBuilder::instances`], 1 by default).
    /// Each store says so at once and then every second while it lives
    /// and Redis answers; a count read during an outage is the last one
    /// Redis gave. What a [`Split`](tollgate_store::Split) fallback
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

    /// The SHA-1 of `policy`'s script, the name `EVALSHA` calls it by.
    pub fn script_hash(&self, policy: &Policy) -> String {
        self.prepared(policy).script.get_hash().to_owned()
    }

    /// The command this store sends for one request of `cost` for `key`,
    /// as arguments (`EVALSHA sha numkeys keys… cost now params…`): to
    /// replay a decision with `redis-cli`, or load the server with
    /// `redis-benchmark`. `now` is empty: the script reads the server's
    /// clock.
    pub fn script_command(&self, policy: &Policy, key: &Key, cost: u32) -> Vec<String> {
        self.prepared(policy)
            .command(&self.shared.prefix, key, cost, None, None)
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

    fn prepared(&self, policy: &Policy) -> Arc<PreparedPolicy> {
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
    fn now_micros(&self) -> Option<u64> {
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
    /// Gives `refund` back in Redis (one call of `refund.lua`) and, once
    /// it is, forgets the key's remembered refusal: what [`Store::refund`]
    /// spawns (a caller that wants to wait for it awaits its
    /// `ChangeReply::landed`). The refund's receipt, when it is a time
    /// ([`PolicyRefund::charged_at`](tollgate_store::PolicyRefund::charged_at)), is
    /// the server's time of the charge in ns (this store's decisions carry
    /// one): then the refund is exact.
    ///
    /// # Errors
    ///
    /// When Redis cannot be reached or answers an error: the charge stands.
    pub(crate) async fn refund_now(
        &self,
        policy: &Policy,
        key: &Key,
        refund: &PolicyRefund,
    ) -> Result<(), RedisStoreError> {
        if policy.limits().is_empty() || refund.cost == 0 {
            return Ok(());
        }
        let prepared = self.prepared(policy);
        let command = prepared.refund_command(&self.shared.prefix, key, refund, self.now_micros());
        self.shared.calls.fetch_add(1, Ordering::Relaxed);
        crate::observe::redis_call("refund");
        let reply = call_until_answered(&self.shared, &prepared.refund_script, &command).await?;
        if let Some(server_now) = reply.first().and_then(|&t| u64::try_from(t).ok()) {
            self.shared.server_clock.observe(server_now);
        }
        // Forgotten once given back: a refusal of a request sent before
        // now was made without the refund.
        if let Some(blocked) = &self.shared.blocked {
            blocked.forget(policy, key, self.shared.local_now());
        }
        Ok(())
    }

    /// Charges `cost` to `key` under every limit of `policy` whatever they
    /// say (one call of `debit.lua`): what [`Store::debit`] spawns, for a
    /// caller that wants to wait for it. The key may go into debt; its
    /// next checks are refused until it is paid off. A refusal remembered
    /// for the key (the block cache) stays true.
    ///
    /// # Errors
    ///
    /// When Redis cannot be reached or answers an error: nothing is
    /// charged.
    pub async fn charge_debt(
        &self,
        policy: &Policy,
        key: &Key,
        cost: u32,
    ) -> Result<(), RedisStoreError> {
        if policy.limits().is_empty() || cost == 0 {
            return Ok(());
        }
        let prepared = self.prepared(policy);
        let command = prepared.debit_command(&self.shared.prefix, key, cost, self.now_micros());
        self.shared.calls.fetch_add(1, Ordering::Relaxed);
        crate::observe::redis_call("debit");
        let reply = call_until_answered(&self.shared, &prepared.debit_script, &command).await?;
        if let Some(server_now) = reply.first().and_then(|&t| u64::try_from(t).ok()) {
            self.shared.server_clock.observe(server_now);
        }
        // Forgotten once charged: a remembered refusal stays true, but its
        // retry time is too early for the debt.
        if let Some(blocked) = &self.shared.blocked {
            blocked.forget(policy, key, self.shared.local_now());
        }
        Ok(())
    }

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
        let command = prepared.command(&self.shared.prefix, key, cost, now, deadline);
        let shared = self.shared.clone();
        shared.calls.fetch_add(1, Ordering::Relaxed);
        crate::observe::redis_call("check");
        StoreReply::Pending(Box::pin(async move {
            let reply = call_until_answered(&shared, &prepared.script, &command).await?;
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
        let command = prepared.share_command(&self.shared.prefix, key, op, self.now_micros());
        self.shared.calls.fetch_add(1, Ordering::Relaxed);
        crate::observe::redis_call(name);
        let reply = call_until_answered(&self.shared, &prepared.share_script, &command).await?;
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
    fn local_now(&self) -> u64 {
        #[cfg(feature = "test-clock")]
        if let Some(clock) = &self.clock {
            return clock.now();
        }
        MonotonicClock.now()
    }
}

/// How many times a call whose script cannot have run is sent again (a
/// Cluster failing over or moving slots), at most; the layer's
/// `store_timeout` usually ends the wait first, and then the call's
/// deadline keeps a late run from charging.
const MAX_ATTEMPTS: u32 = 12;

/// Sends the decision's command until an answer, sending it again only
/// where its script cannot have run (see [`Failure`]): after `MOVED`,
/// `TRYAGAIN`, `CLUSTERDOWN`, `LOADING`, a refused connection (after a
/// pause, doubling from 1 ms to 64 ms), to the node an `ASK` names, or on
/// a fresh connection after `READONLY`. Never after a connection that
/// dropped once the call was sent: that script may have run.
async fn call_until_answered(
    shared: &Shared,
    script: &LuaScript,
    command: &redis::Cmd,
) -> Result<Vec<i64>, RedisStoreError> {
    let mut generation = shared.topology.live().await?;
    let mut attempt = 0;
    loop {
        let error = match call(script, command, &generation.connection).await {
            Ok(reply) => return Ok(reply),
            Err(error) => error,
        };
        attempt += 1;
        if attempt >= MAX_ATTEMPTS {
            return Err(error.into());
        }
        let failure = Failure::of(&error);
        if generation.connection.is_sentinel() {
            if !master_lost(&error, &failure) {
                return Err(error.into());
            }
            // The master died or was demoted: ask the sentinels for the
            // one now, and send the call again only if it cannot have run.
            let why = "the master stopped answering as one";
            match shared
                .topology
                .refreshed_after(generation.number, why)
                .await
            {
                Some(Ok(fresh)) if failure != Failure::Final => generation = fresh,
                Some(Err(refresh)) => {
                    tracing::debug!("{refresh}");
                    return Err(error.into());
                }
                _ => return Err(error.into()),
            }
            continue;
        }
        if !generation.connection.is_cluster() {
            return Err(error.into());
        }
        match failure {
            Failure::Final => return Err(error.into()),
            Failure::Again => {
                tokio::time::sleep(Duration::from_millis(1 << attempt.min(6))).await;
            }
            Failure::Refresh => {
                let why = "a node answered READONLY (a failover moved its slots)";
                match shared
                    .topology
                    .refreshed_after(generation.number, why)
                    .await
                {
                    Some(fresh) => generation = fresh?,
                    None => return Err(error.into()),
                }
            }
            Failure::Ask { host, port } => {
                // The keys are moving: the call, with the script's source
                // (the node may not have the script yet), to their new node.
                let reply = generation
                    .connection
                    .ask(&script.with_source(command), &host, port)
                    .await;
                match reply.and_then(|value| Ok(redis::from_redis_value::<Vec<i64>>(value)?)) {
                    Ok(reply) => return Ok(reply),
                    Err(error) if Failure::of(&error) == Failure::Final => {
                        return Err(error.into());
                    }
                    Err(_) => {}
                }
            }
        }
    }
}

/// Whether `error`, on a connection to a Sentinel-watched master, says that
/// the server is no longer a master to talk to: the connection is gone
/// (refused, dropped, timed out) or the server answers as a replica
/// (`READONLY`, after a failover demoted it) or as a master without its
/// replicas (`MASTERDOWN`). A script error or a bad reply says nothing of
/// the kind.
fn master_lost(error: &redis::RedisError, failure: &Failure) -> bool {
    matches!(failure, Failure::Refresh | Failure::Again)
        || error.is_io_error()
        || error.is_connection_dropped()
        || error.is_timeout()
        || error.is_unrecoverable_error()
}

/// Sends the decision's command on `connection`: `EVALSHA`, and if the
/// server lacks the script (restarted, flushed, a replica just promoted),
/// the same call as an `EVAL` with the script's source, which loads it.
async fn call(
    script: &LuaScript,
    command: &redis::Cmd,
    connection: &Connection,
) -> Result<Vec<i64>, redis::RedisError> {
    let mut connection = connection.clone();
    match command.query_async(&mut connection).await {
        Err(error) if error.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
            script
                .with_source(command)
                .query_async(&mut connection)
                .await
        }
        reply => reply,
    }
}

/// Settings of a [`RedisStore`]. Its `Debug` output shows the URL
/// [`redacted`](crate::redacted).
#[must_use = "call `connect` to get the store"]
pub struct RedisStoreBuilder {
    url: String,
    prefix: String,
    options: ConnectOptions,
    block_cache: bool,
    instances: u32,
    #[cfg(feature = "test-clock")]
    clock: Option<tollgate_core::ManualClock>,
}

impl std::fmt::Debug for RedisStoreBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStoreBuilder")
            .field("url", &crate::redacted(&self.url))
            .field("prefix", &self.prefix)
            .field("options", &self.options)
            .field("block_cache", &self.block_cache)
            .finish_non_exhaustive()
    }
}

impl RedisStoreBuilder {
    /// The first part of every key name (default `tollgate`): give each
    /// service its own when several share a Redis. It may not contain `{`
    /// or `}`, which would move the Cluster hash tag.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// How long connecting may take (default 1 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.options.connect_timeout = timeout;
        self
    }

    /// How long the client waits for any reply before failing the call
    /// (default: no limit of its own; the layer's store timeout bounds
    /// every check).
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.options.response_timeout = Some(timeout);
        self
    }

    /// The longest pause between reconnection attempts (default 500 ms):
    /// how soon limiting resumes after Redis comes back.
    pub fn reconnect_max_delay(mut self, delay: Duration) -> Self {
        self.options.reconnect_max_delay = delay;
        self
    }

    /// Whether a key Redis refused is refused here until its retry time,
    /// without a call (default on): a flood of requests on a refused key
    /// then costs Redis one call per retry period from each instance, not
    /// one per request. What a cached refusal says, and why it is right,
    /// is in [`tollgate_store::BlockCache`]'s module; this is the same
    /// [`BlockList`], of its default bound, consulted before each
    /// `EVALSHA` (see [`RedisStore::block_list`]). Turn it off to have
    /// every request reach Redis (to measure the server, or where keys are
    /// reset in Redis by hand and must be admitted at once), or to put a
    /// [`BlockCache`](tollgate_store::BlockCache) of your own bound in
    /// front of the store.
    ///
    /// This one is inside the store, so inside any wrapper around it: a
    /// [`Breaker`](tollgate_store::Breaker) that is open answers without
    /// asking it, and a refused key then gets the store-error behaviour
    /// (fail-open lets it through) for the whole outage. Behind a breaker,
    /// turn this one off and put a `BlockCache` in front of the breaker
    /// (`BlockCache<Breaker<Timeout<RedisStore>>>`), which also bounds
    /// what fail-open lets through for a key it knew at its limit (see
    /// "While the store fails" in its docs).
    pub fn block_cache(mut self, on: bool) -> Self {
        self.block_cache = on;
        self
    }

    /// How many instances share the store, as an operator knows it: the
    /// count of [`RedisStore::instances`] (and of its
    /// [`presence`](RedisStore::presence)) until Redis has answered a
    /// presence beat (default 1; at least 1). It matters to a
    /// [`Split`](tollgate_store::Split) fallback when Redis is away from
    /// the start (a lazy connection): each instance then decides at
    /// `1/instances` of each limit.
    pub fn instances(mut self, instances: u32) -> Self {
        self.instances = instances.max(1);
        self
    }

    /// Trusts the CA certificates of this PEM file for `rediss…` URLs,
    /// instead of the system's root certificates: for a server whose
    /// certificate a private CA signed (self-managed Redis, most test
    /// setups). Read when the store connects; a file that cannot be read
    /// or parsed is a configuration error then.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), tollgate_redis::RedisStoreError> {
    /// let store = tollgate_redis::RedisStore::builder("rediss://redis.internal:6380")
    ///     .tls_ca_file("/etc/redis/ca.pem")
    ///     .connect()
    ///     .await?;
    /// # let _ = store; Ok(()) }
    /// ```
    #[cfg(feature = "tls")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tls")))]
    pub fn tls_ca_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.options.tls.roots = Some(Pem::File(path.into()));
        self
    }

    /// [`tls_ca_file`](Self::tls_ca_file) with the PEM text given here.
    #[cfg(feature = "tls")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tls")))]
    pub fn tls_ca_pem(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.options.tls.roots = Some(Pem::Bytes(pem.into()));
        self
    }

    /// Shows this client certificate (a PEM file, the chain from the
    /// client's certificate up) and proves it with this private key (a PEM
    /// file, PKCS#8, PKCS#1 or SEC1), for servers that ask clients for one
    /// (`tls-auth-clients yes`). Read when the store connects.
    #[cfg(feature = "tls")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tls")))]
    pub fn tls_client_cert_files(
        mut self,
        certificate: impl Into<PathBuf>,
        key: impl Into<PathBuf>,
    ) -> Self {
        self.options.tls.identity = Some((Pem::File(certificate.into()), Pem::File(key.into())));
        self
    }

    /// [`tls_client_cert_files`](Self::tls_client_cert_files) with the PEM
    /// text given here.
    #[cfg(feature = "tls")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tls")))]
    pub fn tls_client_cert_pem(
        mut self,
        certificate: impl Into<Vec<u8>>,
        key: impl Into<Vec<u8>>,
    ) -> Self {
        self.options.tls.identity = Some((Pem::Bytes(certificate.into()), Pem::Bytes(key.into())));
        self
    }

    /// The password the sentinels of a `redis+sentinel://` URL ask for
    /// (`requirepass` in their configuration), when they ask for one. The
    /// password in the URL is the master's.
    pub fn sentinel_password(mut self, password: impl Into<String>) -> Self {
        self.options.sentinel_auth.password = Some(password.into());
        self
    }

    /// The user the sentinels of a `redis+sentinel://` URL are to know this
    /// client as (their ACL), with
    /// [`sentinel_password`](Self::sentinel_password).
    pub fn sentinel_username(mut self, username: impl Into<String>) -> Self {
        self.options.sentinel_auth.username = Some(username.into());
        self
    }

    /// Scripts take `now` from `clock` instead of the server's `TIME`.
    /// Only for tests that compare decisions with tollgate-core at chosen
    /// times; behind the `test-clock` feature. The block cache measures
    /// retry times on it too.
    #[cfg(feature = "test-clock")]
    pub fn test_clock(mut self, clock: tollgate_core::ManualClock) -> Self {
        self.clock = Some(clock);
        self
    }

    /// Connects (failing if no server answers within the connect timeout)
    /// and returns the store.
    pub async fn connect(self) -> Result<RedisStore, RedisStoreError> {
        self.check_prefix()?;
        let mut connection = Connection::open(&self.url, &self.options).await?;
        // A first reading of the server's clock, so that the first calls
        // carry deadlines too.
        let server_clock = ServerClock::new();
        let (seconds, micros): (u64, u64) = redis::cmd("TIME").query_async(&mut connection).await?;
        server_clock.observe(seconds.saturating_mul(1_000_000).saturating_add(micros));
        Ok(self.store(Topology::new(connection), server_clock))
    }

    /// The store at once, connecting in the background: an application
    /// starts whether Redis is up or not. Until a server answers, every
    /// call fails at once with an unavailable error, so requests get the
    /// layer's store-error behaviour (`OnStoreError`, or a
    /// [`Fallback`](tollgate_store::Fallback) around the store); the store
    /// tries again after a pause that doubles from 100 ms to 2 s, logs the
    /// first failure as a warning and the connection as info, and shares
    /// its limits from the first call after it connected.
    ///
    /// Fails only for what needs no server: a malformed URL, TLS settings
    /// without a TLS URL, a key prefix with a brace, or no tokio runtime
    /// to connect on (call it inside one). A URL that reaches the wrong
    /// kind of server (a Cluster node for a one-server URL) is found when
    /// it connects, and logged.
    ///
    /// ```no_run
    /// # #[tokio::main] async fn main() -> Result<(), tollgate_redis::RedisStoreError> {
    /// // Starts even if Redis is not up yet.
    /// let store = tollgate_redis::RedisStore::builder("redis://127.0.0.1:6379").connect_lazy()?;
    /// # let _ = store;
    /// # Ok(()) }
    /// ```
    pub fn connect_lazy(self) -> Result<RedisStore, RedisStoreError> {
        self.check_prefix()?;
        Connection::check(&self.url, &self.options)?;
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(RedisStoreError::config(
                "connect_lazy connects on a tokio runtime: call it inside one",
            ));
        }
        let topology = Topology::connecting(self.url.clone(), self.options.clone());
        Ok(self.store(topology, ServerClock::new()))
    }

    fn check_prefix(&self) -> Result<(), RedisStoreError> {
        if self.prefix.contains(['{', '}']) {
            return Err(RedisStoreError::config(format!(
                "the key prefix {:?} contains a brace; choose one without `{{` or `}}`",
                self.prefix
            )));
        }
        Ok(())
    }

    fn store(self, topology: Arc<Topology>, server_clock: ServerClock) -> RedisStore {
        let shared = Arc::new(Shared {
            topology,
            prefix: self.prefix,
            server_clock,
            blocked: self.block_cache.then(BlockList::new),
            calls: AtomicU64::new(0),
            presence: Presence::expecting(self.instances),
            #[cfg(feature = "test-clock")]
            clock: self.clock,
        });
        let id = format!(
            "{:016x}",
            std::hash::BuildHasher::hash_one(
                &std::hash::RandomState::new(),
                (std::process::id(), Arc::as_ptr(&shared) as usize)
            )
        );
        tokio::spawn(announce(Arc::downgrade(&shared), id));
        RedisStore { shared }
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
