//! A Redis and Redis Cluster [`Store`](tollgate_store::Store) for tollgate: one
//! rate limit shared by every instance of a service.
//!
//! ```no_run
//! # async fn run() -> Result<(), tollgate_redis::RedisStoreError> {
//! use tollgate::RateLimitLayer;
//! use tollgate_redis::RedisStore;
//!
//! let store = RedisStore::connect("redis+cluster://10.0.0.1:6379,10.0.0.2:6379").await?;
//! let layer = RateLimitLayer::builder().quota("api", "100/min".parse().unwrap()).store(store).build();
//! # let _ = layer;
//! # Ok(()) }
//! ```
//!
//! # Connecting
//!
//! | URL | server |
//! |---|---|
//! | `redis://[user:password@]host:port[/db]` | one server |
//! | `redis+cluster://host:port,host:port` | a Redis Cluster (some nodes; the client learns the rest) |
//! | `redis+sentinel://[user:password@]host:port,host:port/service[/db]` | the master of `service`, through its sentinels |
//! | `rediss://…`, `rediss+cluster://…`, `rediss+sentinel://…` | the same over TLS (feature `tls`) |
//!
//! **TLS** (feature `tls`: rustls with its ring provider, installed as
//! rustls's process default unless the program chose one): the server's
//! certificate is checked against the system's root certificates, or
//! against the CA certificates of
//! [`tls_ca_file`](RedisStoreBuilder::tls_ca_file) /
//! [`tls_ca_pem`](RedisStoreBuilder::tls_ca_pem) (a private CA, as
//! self-managed Redis and most test setups have). Servers that ask clients for a certificate
//! (`tls-auth-clients yes`) get the one of
//! [`tls_client_cert_files`](RedisStoreBuilder::tls_client_cert_files).
//! The same settings apply to every node of a Cluster, and to a Sentinel
//! master and its sentinels (`rediss+sentinel://`: TLS to both; tested
//! for one server and a Cluster, not yet with Sentinel). Certificates set
//! for a URL without TLS are a configuration error, not silently ignored.
//!
//! **Sentinel**: the store asks the sentinels listed, in turn, for the
//! master of `service` (one neither down nor demoted, whose `ROLE` says
//! master) and connects to it. The user and password in the URL are the
//! master's; sentinels that have their own take
//! [`sentinel_password`](RedisStoreBuilder::sentinel_password). When the
//! master dies, calls fail (the layer's store-error behaviour answers
//! them) and each failure asks the sentinels again, so limiting resumes as soon as they have promoted a replica: the
//! sentinels' `down-after-milliseconds` plus the promotion, about 2.5 s
//! with 1 s here; the bound tested is `down-after-milliseconds` + 10 s.
//! A failover with the master alive (`SENTINEL FAILOVER`, a maintenance)
//! leaves the old master accepting writes until the sentinels reconfigure
//! it seconds later; the store asks the sentinels every second which
//! server is the master, and moves within about a second of their switch
//! (0.6 s here). Counts written to the old master after the switch, and
//! any the replica had not yet received, are lost with the failover, as
//! with any Redis client: a key may admit up to that much more once.
//! [`RedisSlots`] follow the same master when they share the store's
//! connection ([`RedisSlotsBuilder::share_connection`]).
//!
//! # How a decision is made
//!
//! One round trip: an `FCALL` of the policy's script, loaded once per
//! server as a function library, with the keys of every limit of the
//! request (an `EVALSHA` where the server has no functions or refuses
//! them, see [`RedisStoreBuilder::functions`]). The script reads the time from the server (`TIME`),
//! so instances with skewed clocks agree; evaluates every limit; charges all
//! of them only if all allow; writes each state with a TTL that ends when the
//! key is back at rest; and returns every field of each limit's
//! [`Decision`](tollgate_core::Decision). The scripts live under `scripts/`,
//! one file per algorithm; a policy's script joins the ones it uses. When a
//! server lacks the function or script (restarted, flushed, a new cluster
//! node), the same call goes as an `EVAL` of the script's source, which
//! cannot charge twice (the first call did not run), and the library is
//! loaded for the calls after it.
//!
//! Before that call, the store's block cache (on by default,
//! [`RedisStoreBuilder::block_cache`]) looks for the key: a key Redis
//! refused is refused in this process until its retry time, with the
//! decision Redis gave, its times counted down, and no call. A flood on a
//! refused key then costs Redis one call per retry period from each
//! instance (a few, while the first refusal is on its way back), not one
//! per request; this never changes a decision, because a refused key's
//! state can only take more charges before its retry time, from this
//! instance or others (the reasoning, and what the cached figures say, is
//! at [`tollgate_store::BlockCache`]). A cheaper request, which might
//! pass, still goes to Redis. The cache is bounded (100,000 keys) and
//! its hits count as `tollgate_block_cache_hits_total{limits}` with
//! tollgate's `metrics` feature.
//!
//! # Servers
//!
//! Redis 6.0 or later, one server or Redis Cluster, or a server compatible
//! with it: the scripts read `TIME` and then write, which needs script
//! effects replication (the default since 5.0), and a refund writes with
//! `SET … KEEPTTL` (6.0). Tested with Redis 7.0.15 and Valkey 8.1.8, each
//! standalone and as a Cluster. The scripts use Lua 5.1's base functions
//! (`unpack` among them), `math`, `string.format`, `string.match` and
//! `table.sort`, no `cjson`, `bit` or `struct`; the workspace guide
//! (`docs/guide/redis.md`) lists every command the store sends.
//!
//! # Keys
//!
//! `prefix:{user key}:limit name:algorithm`, e.g.
//! `tollgate:{~203.0.113.7}:api:gcra`. The user key sits in a Cluster hash
//! tag, so one request's keys share a slot while users spread over the
//! cluster. Bytes outside printable ASCII and `%{}~#` are written `%XX`, so
//! no key can close the tag early or pose as another; escaped keys longer
//! than [`MAX_KEY_LEN`] bytes are replaced by `#` and their SHA-1 (a hostile
//! 10 KB header costs Redis 41 bytes). The algorithm is part of the name, so
//! changing a limit's algorithm starts it afresh instead of misreading the
//! old state.
//!
//! # Time resolution
//!
//! Redis runs Lua 5.1, whose numbers are doubles, exact for integers up to
//! 2^53: enough for microseconds since 1970, not nanoseconds. The scripts
//! therefore work in whole microseconds, and emission intervals and periods
//! are rounded *up* to a whole microsecond: `3/s` becomes one request per
//! 333,334 µs instead of 333,333.3 µs, never faster than the quota. With a
//! continuous token bucket whose period the limit does not divide, this is
//! also the only difference from tollgate-core (which keeps exact fractions).
//! The sliding window weighs the previous window exactly while limit ×
//! period in µs stays below 2^53 (e.g. 100,000 per day); beyond that a
//! rounding can move an estimate that lands exactly on an integer by one.
//!
//! # Why the `redis` crate
//!
//! redis-rs is the most used and most actively maintained Rust client, and
//! it has what this store needs in one package: a multiplexed tokio
//! connection that reconnects by itself (`ConnectionManager`), an async
//! Cluster client that follows `MOVED`/`ASK` and refreshes its slot map,
//! and script invocation with `NOSCRIPT` handling. Other clients were not
//! evaluated in depth; nothing here needed more than redis-rs gives.
//!
//! # Figures
//!
//! `MEMORY USAGE` per key (limit 100/min, key `user-000001`), each state
//! with the parameters it was written under: GCRA 120 B (72 B without
//! them), token and leaky bucket 136 B, fixed window 120–135 B, sliding
//! window 136 B, sliding log 184 B with one entry and 3,160 B with 100 (a sorted set:
//! about 30 B an entry while a key holds up to 128, more beyond; at most
//! `SlidingLog::max_entries` entries, 4,096 by default); sliding window
//! buckets, a hash of one small field per non-empty sub-window (at most
//! `n + 1`, and the field `q` of its parameters): 744 B at 500/h with 60
//! sub-windows and all 61 counters in use,
//! whatever the limit. A sliding-log call
//! costs the server the same at limit 100 as at 5,000 (about 20 µs, 1.3–1.6×
//! GCRA's script; the list it replaced read the whole log: 79 µs at 100,
//! 681 µs at 1,000, 3,501 µs at 5,000). 64 tasks on
//! one connection make 0.94× the decisions per second of `redis-benchmark
//! -P 16 -c 50` running the same script on the same server (109,600/s on
//! two cores). `cargo bench -p tollgate-redis --bench redis` measures both.
//!
//! # Without a round trip per request
//!
//! [`LocalFirst`] stands in front of a [`RedisStore`] and decides in
//! process memory: exactly (capacity reserved from Redis, never over the
//! limit) or periodically synchronised (a documented bound over it). See
//! its module docs for the modes, the algorithms they support, and what
//! happens when Redis is away.
//!
//! # In-flight slots
//!
//! [`RedisSlots`] keeps the slots of tollgate's in-flight limits
//! (tollgate's `InFlightLayer`: at most `N` requests of one
//! key running at once) in Redis, so every instance counts against one
//! limit: a sorted set per key of slot ids scored by the end of their
//! lease (30 s by default), taken by one script call, renewed while the
//! request runs, given back with one `ZREM`. The slots of an instance that
//! died come back when their lease ends. See its docs.
//!
//! # Failures
//!
//! A failed or slow call is an error of the store: the layer's
//! `on_store_error` (fail open by default, fail closed, or a local fallback)
//! and `store_timeout` decide what the request gets. The block cache keeps
//! answering the keys it holds meanwhile (until their retry times), and
//! remembers nothing from a failure. It knows only what this store was
//! told: keys reset in Redis behind its back (`FLUSHALL`, a deleted key)
//! stay refused here until their retry time, unless
//! [`RedisStore::block_list`] is cleared. The connection
//! reconnects in the background with a pause of at most
//! [`reconnect_max_delay`](RedisStoreBuilder::reconnect_max_delay), so
//! limiting resumes soon after Redis is back, without a restart.
//!
//! A server that restarts (or dies) closes its connections. The store
//! speaks RESP3 where the server does (Redis 6 and later, Valkey), whose
//! connections say when the server closed them, and then makes a fresh
//! connection at once (one server, a Cluster, a Sentinel-watched master):
//! the first call after a restart is sent on a live connection and
//! decided, not failed on the dead one (where it could not be sent again,
//! as a call that reached the server may have run). Tested for each, with
//! the server killed and started again on its port between two requests.
//! A server older than Redis 6 is spoken to in RESP2, which gives no such
//! signal: there the first call after a restart may fail, once.
//!
//! A Cluster's topology may change under load. The store sends a call again
//! only where its script cannot have run: after `MOVED` (slots moved; the
//! client reads the slot map again), `TRYAGAIN`, `CLUSTERDOWN`, `LOADING`
//! and `MASTERDOWN` (a failover or a node starting), and a refused
//! connection, each after a short pause; after `ASK` (keys migrating), to
//! the node it names, after `ASKING`; after `READONLY` (a manual failover
//! demoted the master the call reached; the client does not mend that by
//! itself), on a fresh connection that reads the slot map anew. A missing
//! function or `NOSCRIPT` (a replica just promoted) is answered with the
//! same call as `EVAL`, and the library loaded on every master. A
//! connection that dropped or timed out after the call was sent is never
//! retried: the script may have run, and a second run would charge twice;
//! the request gets the layer's store-error behaviour instead. (The
//! cluster client's own retries are off for that reason.) Tested with six
//! nodes, three masters with a replica each: after `CLUSTER FAILOVER`,
//! every key is decided again within 10 s of the replica taking over (in
//! about a second here); after a master is killed, within the cluster's
//! `cluster-node-timeout` plus 10 s (about 9 s here, with 5 s); a restarted
//! master within 10 s; resharding under load fails no request and loses no
//! count; a reply lost after the script ran is charged once. Meanwhile the
//! layer applies its store-error behaviour.
//!
//! A late answer never stays charged, by two means. A call that waits in
//! a stalled server's queue still runs when the server wakes, after the
//! layer has answered its request (fail open, fail closed); so each call
//! carries a deadline, the layer's `store_timeout` in the server's own
//! time, and the script charges nothing past it (the reply then is
//! [`RedisStoreError::is_late`]). The server's clock is estimated from the
//! time each reply carries, never later than it is, so a deadline can come
//! early (by about the fastest round trip) but never late. On a Cluster,
//! nodes whose clocks disagree by `δ` can charge an answer up to `δ` late:
//! keep them on NTP. And a script that ran in time but whose reply came
//! after the layer stopped waiting (held back on the way, with jitter) is
//! heard out: the layer keeps the call in view and gives its admission
//! back with the refund script (`tollgate_store::late`; tested behind a
//! proxy that holds replies 0 or 30–40 ms at random).

// tower's lint set: every public item documented and printable, and no
// `pub` where nothing outside the crate can reach it.
#![warn(unreachable_pub, missing_debug_implementations, missing_docs)]
// docs.rs builds with `--cfg docsrs` on nightly (see Cargo.toml): items behind
// a feature then carry a badge naming it.
#![cfg_attr(docsrs, feature(doc_cfg))]

// The README's examples are compiled as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

mod builder;
mod calls;
mod changes;
mod closed;
mod connection;
mod error;
mod functions;
mod keys;
mod observe;
mod options;
mod presence;
#[cfg(feature = "quotas")]
mod quotas;
mod script;
mod sentinel;
mod server_clock;
mod share;
mod slots;
mod store;
mod tls;
mod url;

pub use builder::RedisStoreBuilder;
pub use error::RedisStoreError;
pub use keys::MAX_KEY_LEN;
#[cfg(feature = "metrics")]
pub use observe::describe_metrics;
#[cfg(feature = "quotas")]
pub use quotas::RedisQuotas;
pub use slots::{RedisFreed, RedisPermit, RedisSlots, RedisSlotsBuilder, RedisSlotsFuture};
pub use store::{RedisCheckFuture, RedisStore};
/// The local-first store, re-exported so that an app over Redis need not
/// depend on `tollgate-local`: `LocalFirst::builder(redis_store, mode)`
/// is a `LocalFirst<RedisStore>`, the same type the compare-and-swap
/// store's users write `LocalFirst<CasStore<B>>`.
pub use tollgate_local::{LocalFirst, LocalFirstBuilder, LocalMode, LocalStats};
pub use url::{check_url, redacted};
