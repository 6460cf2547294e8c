//! `server`: a rate-limited HTTP playground that scripts and tests can drive.
//!
//! ```text
//! cargo run -p tollgate-examples --bin server -- --limit api=3/min
//! curl -i localhost:3000/anything
//! ```
//!
//! Every route answers `200 ok` unless limited; every route is limited. The
//! flags are a contract (scripts rely on them):
//!
//! ```text
//! --listen ADDR            default 127.0.0.1:3000; prints "listening on http://ADDR" once it accepts connections
//! --limit NAME=QUOTA       repeatable; default api=10/s
//! --shadow                 every --limit in shadow: decided and counted as if enforced, never refused, responses left as they are
//! --shadow-limit NAME=QUOTA repeatable: a limit in shadow beside the --limit flags (counted and logged, never refusing)
//! --algorithm ALG          an algorithm's configuration name, listed by --help from the registry (default gcra)
//! --key KIND               ip | global | header:NAME (default ip)
//! --trust-proxy CIDR       repeatable; proxy headers are read only from these peers
//! --store URL              memory (default) | redis://HOST:PORT | redis+cluster://HOST:PORT[,HOST:PORT...] | postgres://USER:PASSWORD@HOST:PORT/DB; or from the environment variable TOLLGATE_STORE
//! --store-file PATH        the --store URL read from a file (its first line), so that a password is on no command line
//! --on-store-error MODE    open | closed | fallback (default open)
//! --store-timeout-ms N     default 100
//! --connect MODE           Redis stores only: eager (default: exit if Redis is absent) | lazy (start anyway, connect in the background)
//! --instances N            with --on-store-error fallback: how many servers share the store, until the store has counted them (default 1)
//! --block-cache MODE       on | off (default on): a Redis or PostgreSQL store refuses a key it refused until its retry time, with no call, also while the store fails
//! --headers STYLE          draft | legacy | both | none (default draft)
//! --max-keys N             bound for the memory store (at least 1)
//! --local MODE             Redis or PostgreSQL stores: off (default: one store call per decision) | exact | periodic=MS
//! --charge-when STATUSES   only responses of these statuses count, e.g. 4xx,5xx or 401,403 (default: every response)
//! --in-flight N            at most N requests of one key (the --key) running at once (default: no such limit)
//! --in-flight-wait-ms N    with --in-flight: a request may wait up to N ms for a slot (default 0: refused at once)
//! --in-flight-lease-ms N   with --in-flight and a Redis --store: a slot's lease (default 30000, at least 100)
//! --header-timeout-ms N    default 10000: a request's head must arrive within N ms
//! --idle-timeout-ms N      default 60000: a connection that moves no byte for N ms is closed
//! --max-connections N      default: the open-file limit less 64; at N, the connection waiting longest for a request head is closed for a new one
//! --quota KEY=QUOTA        repeatable: a key's own quota (e.g. free=5/min, pro=100/min;5000/h, vip=unlimited) instead of the --limit flags
//! --limits-file PATH       NAME=QUOTA lines (# comments) in place of --limit; read again within a second of changing (once whole, see below), each key keeping its usage; a malformed file is reported and the last good one kept (at start: exit code 2)
//! --allow KEY              repeatable: a key (as for --quota) that passes every limit uncounted; a key no request can get is a usage error (exit code 2)
//! --deny KEY               repeatable: a key refused with 403 whatever its budget (problem+json of type urn:tollgate:problem:key-denied)
//! --access-file PATH       `allow KEY` / `deny KEY` lines (# comments) over --allow and --deny; read again within a second of changing (once whole); a malformed or emptied file is reported and the last good one kept (at start: exit code 2)
//! --quota-file PATH        KEY=QUOTA lines (# comments) over the --quota flags; read again within a second of changing (once whole); a malformed or emptied file, or a key named twice, is reported and the last good one kept (at start: exit code 2)
//! --metrics-listen ADDR    serve the metrics as Prometheus text at http://ADDR/metrics; prints "metrics on http://ADDR/metrics" once it accepts connections
//! ```
//!
//! Details a script may need:
//!
//! - `--listen 127.0.0.1:0` picks a free port; the printed line has the real
//!   one. The line is printed after the socket is bound, so a connection made
//!   after reading it is accepted.
//! - Several `--limit` flags all apply (a request must pass each); the
//!   fields list them in the order given. Names are tokens (letters, digits,
//!   `-`, `_`, `.`) because they are written into headers, and must differ.
//! - `--key ip` keys on the peer address; with `--trust-proxy`, on the
//!   client address that trusted peers report in `X-Forwarded-For`. From
//!   other peers that header is ignored.
//!   `--trust-proxy` takes CIDRs or single addresses; it only affects `ip`.
//! - `--key header:NAME`: requests without the header (or with an empty or
//!   oversized one) share one budget, so leaving it out is no way around the
//!   limit.
//! - Keys in `--allow`, `--deny`, `--quota` and the access and quota
//!   files are read in the form the `--key` extractor gives requests
//!   (`tollgate_examples::keys`): for `--key ip`, `::ffff:127.0.0.1` is
//!   `127.0.0.1`, and an IPv6 address stands for its /64 (`2001:db8::1`
//!   is `2001:db8::`, as every client of that /64 is counted); for
//!   `--key global`, the only key is `global`. A key no request can get
//!   is refused (exit code 2 at start; a WARN, the last good file kept,
//!   in a change): not an address for `--key ip`, blank, a header value
//!   over 256 bytes or one no header can carry, or `<no key>` (the key
//!   requests without the header share). A key named twice in the
//!   `--quota` flags or the quota file is refused as a limit named twice
//!   is (two forms of one address are one key).
//! - The three files are followed by one watcher
//!   (`tollgate_examples::watched`): the path is looked at every 250 ms
//!   (following symlinks, so a Kubernetes `..data` swap is seen, whatever
//!   the new file's times); a change is read once it has held still for
//!   a poll (a writer that pauses less than 250 ms mid-write is never
//!   caught half-done), read once and checked again after the read, then
//!   parsed off the request path and put in force in one step. A file
//!   that does not parse, an access or quota file emptied of every entry
//!   while it had some (`: > file`, or a rewrite caught between its
//!   truncation and its write), or a file over 16 MiB (then not read
//!   again until it changes) is refused with one WARN line, a bad line
//!   quoted to its first 80 characters, and what is in force stays; to
//!   drop every entry, restart with the file empty. To be safe from a
//!   writer that pauses longer mid-write, write a new file and rename it
//!   over the old one.
//! - `--algorithm leaky-bucket` shapes: an admitted request may be held
//!   until its slot, so one client sending one request at a time sees delays
//!   rather than 429s; concurrent requests beyond the queue get 429.
//! - `--max-keys` applies to the memory store only; Redis expires its keys.
//! - `--shadow` puts the whole layer in shadow: every request passes with
//!   the response the route gives (no rate-limit field, no `Retry-After`);
//!   a request the limits would have refused is not charged, and is
//!   counted (`tollgate_decisions_total{decision="shadow_limited"}`, see
//!   `--metrics-listen`) and logged (INFO, at most once per 10 s per limit;
//!   `RUST_LOG=info` shows it).
//!   `--shadow-limit NAME=QUOTA` adds a limit that only counts: checked for
//!   the requests the `--limit` flags admit, never refusing, in no field.
//!   With `--charge-when` a shadow limit is a usage error (exit 2).
//! - `--local exact` decides in this process with capacity reserved from
//!   the store (never over the limit); `--local periodic=MS` counts here
//!   and synchronises with the store every MS milliseconds (within a
//!   documented bound of the limit); see `tollgate_local::LocalFirst`. Only
//!   with a Redis or PostgreSQL `--store`, and only for algorithms the
//!   local-first store supports (not `sliding-log` or `leaky-bucket`):
//!   otherwise exit code 2.
//! - Every route answers the status in an `x-status` request header (`200`
//!   when absent; an `x-status` that is not a final status code from 200
//!   to 999 gets `400`: a 1xx is an interim response, which cannot end a
//!   request), so a script can play failed requests. With `--charge-when 4xx,5xx` a
//!   request is charged when admitted and given back when its status is
//!   not listed: any number of `200`s pass, the limit counts the rest.
//!   Every store gives charges back (Redis from a task of its own, so a
//!   request that comes a moment after a refunded one may still find the
//!   charge; with `--local`, through the local-first store; with
//!   `--on-store-error fallback`, to whichever store charged the request).
//! - `--on-store-error fallback`: while the store fails or takes longer
//!   than `--store-timeout-ms`, requests are decided in this process's
//!   memory with the same limits split between the servers that shared the
//!   Redis or PostgreSQL store (`Fallback::new(Timeout::new(store, T),
//!   Split::presence(MemoryStore, store.presence()))`): each server says at
//!   start and then every second, through the store, that it shares it
//!   (Redis: a sorted set `tollgate:instances`; PostgreSQL: one row,
//!   `tollgate:instances`, of the limits table), and counts for 5 s; in an
//!   outage each decides alone at its share of each quota, `N` being how
//!   many servers the store last counted: `⌊L/N⌋`, and one more for the
//!   servers whose id ranks below `L mod N` among the servers counted, so
//!   that together they admit the limit (3/min over two: 2 and 1), not `N`
//!   times it. Until the store has counted (Redis absent from a
//!   `--connect lazy` start), `N` is `--instances` (default 1), with no
//!   remainder. A beat that finds the servers' words gone (the store
//!   restarted) counts no fewer than before until the next. The first
//!   time the fallback decides a key it starts from what the store last
//!   answered for it (what was left, and what refilled since at the
//!   limit's rate, this server's share of it), not from a fresh limit:
//!   a key nearly spent when the store went away stays nearly spent.
//!   The layer then
//!   waits up to twice `--store-timeout-ms` for an answer (the memory store
//!   answers at once). With the memory `--store` it changes nothing, and
//!   the in-flight slots (`--in-flight`) fail open.
//! - A Redis `--store` (without `--local`) is given up on after
//!   `--store-timeout-ms` and sits behind a circuit breaker
//!   (`tollgate::store::Breaker`): after 5 failures or timeouts in a row
//!   it stops asking Redis for a cool-down (1 s, doubling while Redis
//!   stays away, at most 30 s), answering at once by `--on-store-error`,
//!   then lets one request probe Redis; it logs one warning when it opens
//!   and one line when it closes. The block cache (`--block-cache`) stands
//!   in front of the breaker: a key refused stays refused while it is
//!   open.
//! - Every route holds the request for the milliseconds an `x-hold-ms`
//!   request header gives (0 when absent; at most 60000) before it
//!   answers, so a script can play slow requests. A value that is not a
//!   whole number from 0 to 60000 gets `400` with a message saying so, at
//!   once. A hold longer than `--idle-timeout-ms` is cut by it (no byte
//!   moves meanwhile).
//! - `--in-flight N` limits how many requests of one key run at once
//!   (`tollgate::in_flight`): a request is counted from when it is
//!   admitted until its response body has been sent (or the client went
//!   away); the `N + 1`th gets `429` with `RateLimit-Policy:
//!   "inflight";q=N;qu="concurrent-requests"` and `RateLimit:
//!   "inflight";r=0` and no `Retry-After` (when a running request ends is
//!   not known). Allowed responses carry the same fields (as `--headers`
//!   says), after the `--limit` ones in the same fields. It applies before
//!   the rate limits: a request it refuses is not charged. With
//!   `--in-flight-wait-ms N` a request waits up to N ms for a slot of its
//!   key before it is refused. With a Redis `--store` the slots live in
//!   that Redis (`tollgate_redis::RedisSlots`), shared by every server on
//!   it, each with a lease (`--in-flight-lease-ms`, 30 s by default)
//!   renewed while its request runs: the slots of a server that was
//!   killed count until their lease ends, then come back.
//!   `--in-flight-lease-ms` with the memory store is a usage error.
//!   `--on-store-error`, `--store-timeout-ms` and `--connect` apply to the
//!   slots too.
//! - `--store postgres://USER:PASSWORD@HOST:PORT/DB` (or `postgresql://`)
//!   keeps the counts in PostgreSQL (`tollgate_postgres::PostgresBackend`
//!   under tollgate's compare-and-swap store): every server on the same
//!   database shares the limits, decided on the database's clock. The
//!   table (`tollgate_limits`) is created at startup if it is missing;
//!   expired rows are swept every 10 s. Like a Redis store it is given up
//!   on after `--store-timeout-ms`, behind the same circuit breaker, with
//!   the block cache on unless `--block-cache off`. A write that lost
//!   its race to another server's is retried for as long as the store
//!   timeout allows: 8 attempts and one more for every 50 ms of
//!   `--store-timeout-ms` (the longest pause between two), so that
//!   servers sharing one hot key do not fail a request a busy database
//!   could still decide. TLS as the URL's
//!   `sslmode` says (`require`, `verify-full`, …; the server's
//!   certificate checked against the system's roots, or the CA file of
//!   `sslrootcert=PATH`).
//!   With `--local exact|periodic=MS` the local-first store stands in
//!   front of it (as in front of Redis: no timeout, breaker or block cache
//!   around it; it decides with what it holds while the database is slow
//!   or away). `--connect lazy` and `--in-flight` need a Redis store
//!   (usage error, exit 2): shared in-flight slots exist for Redis only.
//!   A database that cannot be reached at startup: exit code 1.
//! - `--connect lazy` (Redis stores): the server starts whether Redis is
//!   up or not, prints `listening on`, and answers by `--on-store-error`
//!   (`closed`: 503 at once) until Redis answers; it tries again after a
//!   pause that doubles from 100 ms to 2 s, and shares the limits from
//!   the first request after it connected. `eager` (the default) exits
//!   with code 1 when Redis is absent at startup. With the memory store
//!   it changes nothing.
//! - `--block-cache` applies to a Redis or PostgreSQL store only (the memory store has
//!   no round trip to save): given with the memory store, default or
//!   named, it is a usage error. On, a flood on a refused key costs Redis
//!   one call per retry period instead of one per request; its hits count
//!   as `tollgate_block_cache_hits_total` (see `--metrics-listen`). Off, every request reaches
//!   Redis. It stands outermost (`BlockCache<Breaker<Timeout<store>>>`,
//!   around the fallback with `--on-store-error fallback`), so that it
//!   answers whatever the store does: while the store fails or is slow
//!   (an outage, or a flood it cannot keep up with), a key refused stays
//!   refused until its retry time, and a key at its limit that fail-open
//!   then lets through is let through once and refused for its quota's
//!   period (`tollgate::store::BlockList::failed`): a 3/min key gets at
//!   most its 3 and one more per minute from each server, however long
//!   the outage. With `--block-cache off` (or a key never seen at its
//!   limit) a failing store lets every request through under
//!   `--on-store-error open`. With `--local`, no block cache goes around
//!   the local-first store: it remembers a refusal itself until its retry
//!   time, and over Redis keeps the Redis store's own block cache.
//! - `--header-timeout-ms`, `--idle-timeout-ms` and `--max-connections`
//!   belong to the server, not to the rate limiter: a client that never
//!   finishes its request head (slowloris) is never counted by a limiter,
//!   so only the server can close it (see `tollgate_examples::serving`).
//!   The header timeout also bounds how long a keep-alive connection may
//!   wait between requests. The connection cap defaults to what the
//!   process can open (its open-file limit less 64 kept for Redis, logs
//!   and the listener); at the cap a new connection is accepted and the
//!   one that has waited longest for a request head is closed, so a
//!   flood of connections that never finish a head cannot lock out a
//!   client with a real request.
//! - `--metrics-listen ADDR` (port 0 picks a free one) serves the
//!   library's metrics (`tollgate::describe_metrics` and
//!   `tollgate_redis::describe_metrics` list them; the guide's metrics
//!   page says what each counts) in Prometheus's text
//!   format at `http://ADDR/metrics`, on a listener of its own, apart from
//!   the limited routes. The line `metrics on http://ADDR/metrics`, with
//!   the bound address, comes right after the `listening on` line, both
//!   printed once both sockets are bound. Without the flag no recorder is
//!   installed and nothing is counted.
//! - The library's log events (a store that failed, a circuit breaker
//!   that opened or closed, a refund that could not land) go to stderr,
//!   one line each: warnings and errors by default, what `RUST_LOG` says
//!   when it is set (`RUST_LOG=info`, `RUST_LOG=tollgate=debug`).
//! - Bad flags or values (a zero timeout or bound, a malformed Redis URL, a
//!   one-server URL that reaches a Cluster node): a message and exit code 2.
//!   A store or address that cannot be used at startup (Redis down, port
//!   taken): a message and exit code 1.

use axum::Router;
use axum::http::{HeaderMap, StatusCode};
use clap::{CommandFactory, Parser, ValueEnum};
use ipnet::IpNet;
use std::collections::HashSet;
use std::io::Write as _;
use std::net::{IpAddr, SocketAddr};
use std::process::ExitCode;
use std::time::Duration;
use tollgate::core::Algorithm;
use tollgate::in_flight::InFlightLayer;
use tollgate::quotas::{KeyQuotas, LiveLimits, QuotaAnswer};
use tollgate::store::{BlockCache, BoxStore, Breaker, Fallback, Presence, Split, Timeout};
use tollgate::{
    GlobalKey, KeyExtractor, MemoryStore, NamedLimit, OnStoreError, RateLimitLayer, Rejection,
    Rejector, access::AccessLists, headers::HeaderStyle, settings::ChargeWhen,
};
use tollgate_axum::{ClientIp, ProblemJson};
use tollgate_cas::CasStore;
use tollgate_examples::keys::KeyKind;
use tollgate_examples::serving::{ServeLimits, serve};
use tollgate_examples::{access, limits, plans};
use tollgate_local::{LocalFirst, LocalMode};
use tollgate_postgres::PostgresBackend;
use tollgate_redis::{RedisSlots, RedisStore};

/// The command line (see the module docs for the contract).
#[derive(Debug, Parser)]
#[command(
    name = "server",
    about = "A rate-limited HTTP playground: every route answers `200 ok` unless limited."
)]
struct Args {
    /// Address to listen on; port 0 picks a free one.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:3000")]
    listen: SocketAddr,

    /// A limit, e.g. api=10/s or hourly=500/h; repeat for several.
    #[arg(long = "limit", value_name = "NAME=QUOTA", default_value = "api=10/s", value_parser = limits::parse_limit)]
    limits: Vec<NamedLimit>,

    /// Every --limit in shadow: decided and counted exactly as if
    /// enforced, never refused; responses carry no rate-limit fields.
    #[arg(long)]
    shadow: bool,

    /// A limit in shadow beside the --limit flags, e.g. next=5/min:
    /// checked for the requests they admit, counted and logged, never
    /// refusing; repeat for several.
    #[arg(long = "shadow-limit", value_name = "NAME=QUOTA", value_parser = limits::parse_limit)]
    shadow_limits: Vec<NamedLimit>,

    #[arg(long, value_name = "ALG", default_value = "gcra", help = algorithm_help())]
    algorithm: Algorithm,

    /// ip | global | header:NAME.
    #[arg(long, value_name = "KIND", default_value = "ip", value_parser = KeyKind::parse)]
    key: KeyKind,

    /// A proxy network whose proxy headers are believed; repeat for several.
    #[arg(long = "trust-proxy", value_name = "CIDR", value_parser = parse_network)]
    trust_proxy: Vec<IpNet>,

    /// memory | redis://HOST:PORT | redis+cluster://HOST:PORT[,HOST:PORT...] |
    /// postgres://USER:PASSWORD@HOST:PORT/DB.
    /// Read after the other flags (see `store_url`): clap would echo a
    /// rejected value whole, password included. From `TOLLGATE_STORE`
    /// when the flag is absent (its value never shown in `--help`).
    #[arg(
        long,
        value_name = "URL",
        default_value = "memory",
        env = "TOLLGATE_STORE",
        hide_env_values = true
    )]
    store: String,

    /// A file whose first line is the --store URL: a password in it is on
    /// no command line (`/proc/PID/cmdline`) and in no environment.
    #[arg(long, value_name = "PATH", conflicts_with = "store")]
    store_file: Option<std::path::PathBuf>,

    /// Whether a Redis or PostgreSQL store refuses, with no call, a key it
    /// refused until its retry time (default on). Not for the memory store.
    #[arg(long, value_name = "MODE", value_enum)]
    block_cache: Option<Switch>,

    /// What requests get when the store fails or is slow.
    #[arg(long, value_name = "MODE", value_enum, default_value_t = FailMode::Open)]
    on_store_error: FailMode,

    /// Redis stores only: eager (connect before listening; exit if Redis is
    /// absent) or lazy (start anyway; connect in the background and share
    /// the limits as soon as Redis answers; meanwhile --on-store-error).
    #[arg(long, value_name = "MODE", value_enum, default_value_t = Connect::Eager)]
    connect: Connect,

    /// With --on-store-error fallback: how many servers share the store,
    /// until the store has counted them (at least 1; default 1); each
    /// then decides at its share of the limits while the store is away.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    instances: u32,

    /// How long a store may take to answer, in milliseconds (at least 1).
    #[arg(long, value_name = "N", default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..))]
    store_timeout_ms: u64,

    /// Which rate-limit fields responses carry.
    #[arg(long, value_name = "STYLE", value_enum, default_value_t = Headers::Draft)]
    headers: Headers,

    /// The most keys the memory store keeps (at least 1).
    #[arg(long, value_name = "N", value_parser = at_least_one)]
    max_keys: Option<usize>,

    /// Redis or PostgreSQL stores: off (one store call per decision, the
    /// default), exact (reservations) or periodic=MS (synchronise every MS
    /// ms).
    #[arg(long, value_name = "MODE", value_parser = parse_local)]
    local: Option<Local>,

    /// Only responses of these statuses count against the limit, e.g.
    /// 4xx,5xx or 401,403 (default: every response counts).
    #[arg(long, value_name = "STATUSES", value_parser = parse_charge_when)]
    charge_when: Option<ChargeWhen>,

    /// At most N requests of one key running at once (at least 1).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    in_flight: Option<u32>,

    /// With --in-flight: how long a request may wait for a slot, in
    /// milliseconds (default 0: refused at once).
    #[arg(long, value_name = "N", requires = "in_flight")]
    in_flight_wait_ms: Option<u64>,

    /// With --in-flight and a Redis --store: how long a slot outlives its
    /// server's last renewal, in milliseconds (at least 100).
    #[arg(long, value_name = "N", requires = "in_flight", value_parser = clap::value_parser!(u64).range(100..))]
    in_flight_lease_ms: Option<u64>,

    /// How long a client may take to send a request's head, in milliseconds.
    #[arg(long, value_name = "N", default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..))]
    header_timeout_ms: u64,

    /// How long a connection may move no byte before it is closed, in
    /// milliseconds.
    #[arg(long, value_name = "N", default_value_t = 60_000, value_parser = clap::value_parser!(u64).range(1..))]
    idle_timeout_ms: u64,

    /// The most connections open at once (default: the open-file limit,
    /// `ulimit -n`, less 64); at the cap, the connection that has waited
    /// longest for a request head is closed to make room.
    #[arg(long, value_name = "N", value_parser = connection_cap)]
    max_connections: Option<usize>,

    /// A key's own quota, e.g. free=5/min, pro=100/min;5000/h or
    /// vip=unlimited: its requests are limited by it instead of the
    /// --limit flags (its limits named after the first); repeat for
    /// several. KEY is the --key's text: the header's value, the address
    /// (read as the extractor gives it: ::ffff:127.0.0.1 is 127.0.0.1); a
    /// key no request can get, or named twice, is a usage error.
    #[arg(long = "quota", value_name = "KEY=QUOTA", value_parser = plans::parse_plan)]
    quotas: Vec<(String, QuotaAnswer)>,

    /// A file of NAME=QUOTA lines (`#` starts a comment line) in place of
    /// the --limit flags, read again within a second of changing: each
    /// key keeps its usage under the new limits; a malformed file is
    /// reported and the last good one kept (at start: exit code 2).
    #[arg(long, value_name = "PATH", conflicts_with_all = ["limits", "quotas", "quota_file"])]
    limits_file: Option<std::path::PathBuf>,

    /// A key that passes every limit uncounted (KEY as for --quota: the
    /// address for --key ip, the header's value for --key header:NAME);
    /// repeat for several.
    #[arg(long = "allow", value_name = "KEY")]
    allow: Vec<String>,

    /// A key refused with 403 whatever its budget (KEY as for --allow);
    /// repeat for several. A key both allowed and denied is denied.
    #[arg(long = "deny", value_name = "KEY")]
    deny: Vec<String>,

    /// A file of `allow KEY` and `deny KEY` lines (`#` starts a comment
    /// line), over the --allow and --deny flags, read again within a
    /// second of changing, once whole; a malformed file, or one emptied
    /// of every entry, is reported and the last good one kept (at start:
    /// exit code 2).
    #[arg(long, value_name = "PATH")]
    access_file: Option<std::path::PathBuf>,

    /// A file of KEY=QUOTA lines (`#` starts a comment line), over the
    /// --quota flags; read again within a second of changing, once whole
    /// (a key whose plan changed gets it from its next request); a
    /// malformed file, a key named twice, or a file emptied of every plan
    /// is reported and the last good one kept (at start: exit code 2).
    #[arg(long, value_name = "PATH")]
    quota_file: Option<std::path::PathBuf>,

    /// Serve the metrics as Prometheus text at http://ADDR/metrics, on a
    /// listener of its own; port 0 picks a free one.
    #[arg(long, value_name = "ADDR")]
    metrics_listen: Option<SocketAddr>,
}

/// Parses `--charge-when`.
fn parse_charge_when(text: &str) -> Result<ChargeWhen, String> {
    ChargeWhen::statuses(text).map_err(|e| e.to_string())
}

/// The longest hold an `x-hold-ms` header may ask for, in milliseconds.
const MAX_HOLD_MS: u64 = 60_000;

/// The status an `x-status` request header asks for (`200` without one),
/// after holding the request for the milliseconds an `x-hold-ms` header
/// asks for (none without one); `400` (with why, at once) for a header
/// that is not a status code, or not a hold from 0 to 60000.
async fn answer(headers: HeaderMap) -> (StatusCode, &'static str) {
    let hold = match headers.get("x-hold-ms") {
        None => 0,
        Some(value) => match value
            .to_str()
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
            .filter(|ms| *ms <= MAX_HOLD_MS)
        {
            Some(ms) => ms,
            None => {
                return (
                    StatusCode::BAD_REQUEST,
                    "x-hold-ms must be a whole number of milliseconds from 0 to 60000\n",
                );
            }
        },
    };
    let status = match headers.get("x-status") {
        None => StatusCode::OK,
        Some(value) => match value
            .to_str()
            .ok()
            .and_then(|s| s.trim().parse::<u16>().ok())
            .and_then(|code| StatusCode::from_u16(code).ok())
            // An interim status cannot be a request's answer: hyper would
            // turn it into a 500 of its own.
            .filter(|status| !status.is_informational())
        {
            Some(status) => status,
            None => {
                return (
                    StatusCode::BAD_REQUEST,
                    "x-status must be a final status code (200 to 999)\n",
                );
            }
        },
    };
    if hold > 0 {
        tokio::time::sleep(Duration::from_millis(hold)).await;
    }
    (status, "ok")
}

/// Parses `--max-connections`: at least one, and at most what the
/// server's semaphore can count (checked here, before `listening on`, so
/// that a huge value is a usage error rather than a panic once serving).
fn connection_cap(text: &str) -> Result<usize, String> {
    let most = tokio::sync::Semaphore::MAX_PERMITS;
    match at_least_one(text)? {
        n if n > most => Err(format!("must be at most {most}")),
        n => Ok(n),
    }
}

/// Parses a count of at least one.
fn at_least_one(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(0) => Err("must be at least 1".to_owned()),
        Ok(n) => Ok(n),
        Err(e) => Err(format!("{text:?} is not a count: {e}")),
    }
}

/// Where the counters live.
#[derive(Clone, Debug)]
enum StoreUrl {
    /// In this process.
    Memory,
    /// In Redis or Redis Cluster at this URL.
    Redis(String),
    /// In a PostgreSQL table, through the compare-and-swap store.
    Postgres(String),
}

/// `--on-store-error`.
#[derive(Clone, Copy, Debug, ValueEnum)]
enum FailMode {
    /// Let requests through.
    Open,
    /// Answer 503.
    Closed,
    /// Decide in this process's memory with the same limits.
    Fallback,
}

/// `--connect`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Connect {
    /// Connect before listening; exit (code 1) if Redis is absent.
    Eager,
    /// Start anyway; connect in the background.
    Lazy,
}

/// `--block-cache`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Switch {
    /// A key Redis refused is refused here until its retry time.
    On,
    /// Every request reaches Redis.
    Off,
}

/// `--headers`.
#[derive(Clone, Copy, Debug, ValueEnum)]
enum Headers {
    /// `RateLimit-Policy` and `RateLimit` (IETF draft).
    Draft,
    /// `X-RateLimit-Limit`, `-Remaining`, `-Reset`.
    Legacy,
    /// Both sets.
    Both,
    /// None (`Retry-After` is still sent on rejections).
    None,
}

/// Parses `NAME=QUOTA`.
/// `--algorithm`'s help: every algorithm of the registry, by name.
fn algorithm_help() -> String {
    let names: Vec<&str> = Algorithm::ALL.iter().map(|a| a.name()).collect();
    format!("{}.", names.join(" | "))
}

/// Parses a CIDR, or a single address (a /32 or /128).
fn parse_network(text: &str) -> Result<IpNet, String> {
    text.parse::<IpNet>()
        .or_else(|_| text.parse::<IpAddr>().map(IpNet::from))
        .map_err(|_| format!("expected a network such as 10.0.0.0/8 or an address, not {text:?}"))
}

/// `--local`.
#[derive(Clone, Copy, Debug)]
enum Local {
    Off,
    On(LocalMode),
}

/// Parses `off`, `exact` or `periodic=MS`.
fn parse_local(text: &str) -> Result<Local, String> {
    match text {
        "off" => Ok(Local::Off),
        _ => text.parse::<LocalMode>().map(Local::On).map_err(|_| {
            format!("expected off, exact or periodic=MS (MS at least 1), not {text:?}")
        }),
    }
}

/// Parses `memory`, a Redis URL or a PostgreSQL URL.
fn parse_store(text: &str) -> Result<StoreUrl, String> {
    if text == "memory" {
        return Ok(StoreUrl::Memory);
    }
    // rediss:// (TLS) is left out: the redis client is built without TLS.
    if text.starts_with("redis://") || text.starts_with("redis+cluster://") {
        // Malformed URLs are refused here, with the password hidden.
        tollgate_redis::check_url(text).map_err(|e| e.to_string())?;
        return Ok(StoreUrl::Redis(text.to_owned()));
    }
    if text.starts_with("postgres://") || text.starts_with("postgresql://") {
        // Malformed URLs are refused here, with the password hidden.
        tollgate_postgres::check_url(text).map_err(|e| e.to_string())?;
        return Ok(StoreUrl::Postgres(text.to_owned()));
    }
    Err(format!(
        "expected memory, redis://HOST:PORT, redis+cluster://HOST:PORT[,...] or \
         postgres://USER:PASSWORD@HOST:PORT/DB, not {:?}",
        tollgate_redis::redacted(text)
    ))
}

/// The store URL: `--store-file`'s first line, or `--store` (or
/// `TOLLGATE_STORE`). A file that cannot be read is a usage error (code 2)
/// that names the file, never its content.
fn store_text(args: &Args) -> String {
    let Some(path) = &args.store_file else {
        return args.store.clone();
    };
    match std::fs::read_to_string(path) {
        Ok(text) => text.lines().next().unwrap_or_default().trim().to_owned(),
        Err(error) => Args::command()
            .error(
                clap::error::ErrorKind::ValueValidation,
                format!("cannot read --store-file {}: {error}", path.display()),
            )
            .exit(),
    }
}

/// `--store` as a [`StoreUrl`], or a usage error (code 2) whose message
/// shows the URL without its password.
fn store_url(text: &str) -> StoreUrl {
    parse_store(text).unwrap_or_else(|message| {
        Args::command()
            .error(
                clap::error::ErrorKind::ValueValidation,
                format!("invalid value for '--store <URL>': {message}"),
            )
            .exit()
    })
}

/// Exits with a usage error (code 2) if two limits share a name: they would
/// be indistinguishable in the headers and share one key in Redis.
fn reject_duplicate_names(limits: &[NamedLimit]) {
    let mut seen = HashSet::new();
    if let Some(dup) = limits.iter().find(|l| !seen.insert(l.name())) {
        Args::command()
            .error(
                clap::error::ErrorKind::ValueValidation,
                format!(
                    "two limits are called {:?}; give each its own name",
                    dup.name()
                ),
            )
            .exit();
    }
}

/// Exits with a usage error (code 2) if `--block-cache` is given for the
/// memory store, which it does not apply to.
fn reject_block_cache_without_redis(block_cache: Option<Switch>, store: &StoreUrl) {
    if let (Some(_), StoreUrl::Memory) = (block_cache, store) {
        Args::command()
            .error(
                clap::error::ErrorKind::ArgumentConflict,
                "'--block-cache' applies to a Redis or PostgreSQL store only (--store \
                 redis://…, redis+cluster://… or postgres://…), not to the memory store",
            )
            .exit();
    }
}

/// The key extractor `--key` and `--trust-proxy` ask for.
fn key_extractor(kind: &KeyKind, trusted: &[IpNet]) -> Box<dyn KeyExtractor> {
    match kind {
        // No trusted proxy (an empty list): the peer address, proxy headers
        // ignored.
        KeyKind::Ip => Box::new(ClientIp::trusting(trusted.iter().copied())),
        KeyKind::Global => Box::new(GlobalKey),
        KeyKind::Header(extractor) => Box::new(extractor.clone()),
    }
}

/// The lists of `--allow`, `--deny` and `--access-file` (followed from
/// now on), each KEY in the form the `--key` extractor gives requests (an
/// address for `--key ip`): a key no request can get, or a file that
/// cannot be read or parsed, is a usage error.
fn access_lists(args: &Args) -> Result<Option<AccessLists>, Failure> {
    let fixed =
        access::Lists::from_flags(&args.allow, &args.deny, &args.key).map_err(Failure::Usage)?;
    let Some(path) = &args.access_file else {
        if fixed.is_empty() {
            return Ok(None);
        }
        let lists = AccessLists::new();
        fixed.put_in(&lists);
        return Ok(Some(lists));
    };
    let mut file = access::watched(path.clone(), args.key.clone());
    let from_file = file.load().map_err(Failure::Usage)?;
    let lists = AccessLists::new();
    fixed.clone().and(&from_file).put_in(&lists);
    tokio::spawn(access::watch(file, fixed, lists.clone()));
    Ok(Some(lists))
}

/// The playground's rejector: limited requests as tollgate's default
/// (status and fields, an empty body), a denied key as tollgate-axum's
/// problem+json of its own type.
#[derive(Clone, Copy, Debug, Default)]
struct Rejections;

impl Rejector<axum::body::Body> for Rejections {
    fn reject(&self, rejection: Rejection<'_>) -> http::Response<axum::body::Body> {
        match rejection {
            denied @ Rejection::Denied { .. } => ProblemJson.reject(denied),
            other => other.into_response(),
        }
    }
}

/// Why the server could not start: a usage error (exit 2) or a failure of
/// the environment (exit 1), with its message.
enum Failure {
    Usage(String),
    Startup(String),
}

/// The store `--store`, `--max-keys`, `--block-cache` and `--local` ask
/// for; fails if Redis or PostgreSQL is absent (or is not what the URL
/// says).
/// With a shared store and `--on-store-error fallback`, its presence too:
/// how many instances share it is what the fallback divides the limits
/// by.
async fn store(url: &StoreUrl, args: &Args) -> Result<(BoxStore, Option<Presence>), Failure> {
    let (max_keys, block_cache) = (args.max_keys, args.block_cache);
    match url {
        StoreUrl::Memory if args.local.is_some() => Err(Failure::Usage(
            "--local needs a Redis or PostgreSQL --store: the memory store is local already".into(),
        )),
        StoreUrl::Memory => {
            let builder = MemoryStore::builder();
            let builder = match max_keys {
                Some(n) => builder.max_keys(n),
                None => builder,
            };
            Ok((BoxStore::new(builder.build()), None))
        }
        StoreUrl::Postgres(_) if args.connect == Connect::Lazy => Err(Failure::Usage(
            "--connect lazy needs a Redis --store: a PostgreSQL store connects at startup".into(),
        )),
        StoreUrl::Postgres(url) => {
            let backend = PostgresBackend::builder(url.as_str())
                .create_schema(true)
                .connect()
                .await
                .map_err(|e| {
                    let message = format!(
                        "cannot use the PostgreSQL store at {}: {e}",
                        tollgate_postgres::redacted(url)
                    );
                    if e.is_config() {
                        Failure::Usage(message)
                    } else {
                        Failure::Startup(message)
                    }
                })?;
            let cas = CasStore::builder(backend)
                .instances(args.instances)
                .retry_within(Duration::from_millis(args.store_timeout_ms))
                .build();
            // Counted only for a fallback that splits: a write a second.
            let presence =
                matches!(args.on_store_error, FailMode::Fallback).then(|| cas.presence());
            let store = match args.local {
                // In front of the database as in front of Redis.
                Some(Local::On(mode)) => BoxStore::new(LocalFirst::builder(cas, mode).build()),
                // Given up on after the store timeout, behind a breaker,
                // as a Redis store is; the block cache goes around them
                // (`app`).
                Some(Local::Off) | None => BoxStore::new(Breaker::new(Timeout::new(
                    cas,
                    Duration::from_millis(args.store_timeout_ms),
                ))),
            };
            Ok((store, presence))
        }
        StoreUrl::Redis(url) => {
            // The local-first store keeps the Redis store's own block
            // cache; without it, the block cache goes around the breaker
            // (`app`), and the store's own is off.
            let local = matches!(args.local, Some(Local::On(_)));
            let builder = RedisStore::builder(url.as_str())
                .block_cache(local && block_cache != Some(Switch::Off))
                .instances(args.instances);
            let redis = match args.connect {
                Connect::Eager => builder.connect().await,
                Connect::Lazy => builder.connect_lazy(),
            };
            redis
                .map(|redis| {
                    let store = match args.local {
                        Some(Local::On(mode)) => {
                            BoxStore::new(LocalFirst::builder(redis.clone(), mode).build())
                        }
                        // Given up on after the store timeout, behind a
                        // breaker that stops asking a Redis that keeps
                        // failing.
                        Some(Local::Off) | None => BoxStore::new(Breaker::new(Timeout::new(
                            redis.clone(),
                            Duration::from_millis(args.store_timeout_ms),
                        ))),
                    };
                    (store, Some(redis.presence()))
                })
                .map_err(|e| {
                    let message = format!(
                        "cannot use the Redis store at {}: {e}",
                        tollgate_redis::redacted(url)
                    );
                    if e.is_config() {
                        Failure::Usage(message)
                    } else {
                        Failure::Startup(message)
                    }
                })
        }
    }
}

/// Whether the store gets a `BlockCache` around it (`app`): a Redis or
/// PostgreSQL store unless `--block-cache off`; not the local-first store,
/// which decides in this process and keeps the Redis store's own.
fn block_cache_around(store_url: &StoreUrl, args: &Args) -> bool {
    let remote = match store_url {
        StoreUrl::Memory => false,
        StoreUrl::Postgres(_) | StoreUrl::Redis(_) => !matches!(args.local, Some(Local::On(_))),
    };
    remote && args.block_cache != Some(Switch::Off)
}

/// The response fields `--headers` asks for.
fn header_style(headers: Headers) -> HeaderStyle {
    match headers {
        Headers::Draft => HeaderStyle::DRAFT,
        Headers::Legacy => HeaderStyle::LEGACY,
        Headers::Both => HeaderStyle::BOTH,
        Headers::None => HeaderStyle::NONE,
    }
}

/// The app: `ok` on every route, behind the layer the flags describe.
async fn app(args: &Args, store_url: &StoreUrl) -> Result<Router, Failure> {
    let on_store_error = on_store_error(args.on_store_error);
    let store_timeout = Duration::from_millis(args.store_timeout_ms);
    let (store, presence) = store(store_url, args).await?;
    let store = match (args.on_store_error, presence) {
        // In memory, each instance at its share of the limits: as many
        // instances as said, through the store, that they share it.
        (FailMode::Fallback, Some(presence)) => BoxStore::new(Fallback::new(
            Timeout::new(store, store_timeout),
            Split::presence(MemoryStore::new(), presence),
        )),
        (FailMode::Fallback, None) => BoxStore::new(Fallback::new(
            Timeout::new(store, store_timeout),
            MemoryStore::new(),
        )),
        (FailMode::Open | FailMode::Closed, _) => store,
    };
    // The block cache outermost: consulted before the breaker, the
    // timeouts and the fallback, so that a key refused stays refused
    // through an outage (an open breaker answers at once, without asking
    // what is inside it), and a key at its limit that a failing store
    // lets through is let through once and blocked for its period (see
    // `BlockList::failed`).
    let store = if block_cache_around(store_url, args) {
        BoxStore::new(BlockCache::new(store))
    } else {
        store
    };
    // A Redis store (or the fallback) gives up after `--store-timeout-ms`
    // itself, so that its breaker counts the timeout: the layer's own
    // bound only has to outlast it.
    let plain_redis = matches!(store_url, StoreUrl::Postgres(_) | StoreUrl::Redis(_))
        && !matches!(args.local, Some(Local::On(_)));
    let gives_up_itself = plain_redis || matches!(args.on_store_error, FailMode::Fallback);
    let store_timeout = if gives_up_itself {
        store_timeout.saturating_mul(2)
    } else {
        store_timeout
    };
    let shadow_limits: Vec<NamedLimit> = args
        .shadow_limits
        .iter()
        .cloned()
        .map(NamedLimit::shadow)
        .collect();
    let live = match &args.limits_file {
        Some(path) => {
            let mut file = limits::watched(path.clone());
            let limits = file.load().map_err(Failure::Usage)?;
            if let Some(both) = limits
                .iter()
                .find(|limit| shadow_limits.iter().any(|s| s.name() == limit.name()))
            {
                return Err(Failure::Usage(format!(
                    "two limits are called {:?}; give each its own name",
                    both.name()
                )));
            }
            let live = LiveLimits::new();
            let extra = shadow_limits.clone();
            tokio::spawn(limits::watch(file, args.algorithm, extra, live.clone()));
            Some((live, limits))
        }
        None => None,
    };
    let enforced = match &live {
        Some((_, from_file)) => from_file.clone(),
        None => args.limits.clone(),
    };
    let mut builder = enforced
        .into_iter()
        .chain(shadow_limits)
        .fold(RateLimitLayer::builder(), |b, limit| b.limit(limit))
        .rejector(Rejections)
        .shadow(args.shadow)
        .algorithm(args.algorithm)
        .key(key_extractor(&args.key, &args.trust_proxy))
        .store(store)
        .on_store_error(on_store_error)
        .store_timeout(store_timeout)
        .headers(header_style(args.headers));
    if let Some(charge_when) = &args.charge_when {
        builder = builder.charge_when(charge_when.clone());
    }
    if let Some(lists) = access_lists(args)? {
        builder = builder.access(lists);
    }
    if let Some(quotas) = key_quotas(args)? {
        builder = builder.quota_source(quotas);
    }
    if let Some((live, _)) = live {
        builder = builder.live_limits(live);
    }
    let layer = builder
        .try_build()
        .map_err(|e| Failure::Usage(e.to_string()))?;
    // A fallback, not a route, so that every path is answered and limited.
    let router = Router::new().fallback(answer).layer(layer);
    // The in-flight limit outside the rate limits: its fields join theirs,
    // and a request it refuses is not charged.
    match args.in_flight {
        Some(limit) => in_flight(router, limit, args, store_url).await,
        None => Ok(router),
    }
}

/// The per-key quotas of `--quota` and `--quota-file` (the file watched
/// from now on), if any; a quota file that cannot be read or parsed is a
/// usage error.
fn key_quotas(args: &Args) -> Result<Option<KeyQuotas>, Failure> {
    if args.quotas.is_empty() && args.quota_file.is_none() {
        return Ok(None);
    }
    let fixed = plans::from_flags(&args.quotas, &args.key).map_err(Failure::Usage)?;
    let Some(path) = &args.quota_file else {
        return Ok(Some(KeyQuotas::new(plans::PlanBook::new(fixed))));
    };
    let mut file = plans::watched(path.clone(), args.key.clone());
    let from_file = file.load().map_err(Failure::Usage)?;
    let book = plans::PlanBook::new(plans::merged(&fixed, from_file));
    let quotas = KeyQuotas::new(book.clone());
    tokio::spawn(plans::watch(file, fixed, book, quotas.clone()));
    Ok(Some(quotas))
}

/// `--on-store-error` as the library's setting. With `fallback` the
/// memory store decides when the store fails; should it fail too (it does
/// not), requests pass. The in-flight slots have no fallback: they fail
/// open.
fn on_store_error(mode: FailMode) -> OnStoreError {
    match mode {
        FailMode::Open | FailMode::Fallback => OnStoreError::Open,
        FailMode::Closed => OnStoreError::Closed,
    }
}

/// `router` under the in-flight limit `--in-flight`, `--in-flight-wait-ms`
/// and `--in-flight-lease-ms` ask for, its slots in the `--store`.
async fn in_flight(
    router: Router,
    limit: u32,
    args: &Args,
    store_url: &StoreUrl,
) -> Result<Router, Failure> {
    let mut builder = InFlightLayer::builder()
        .max_in_flight(limit)
        .key(key_extractor(&args.key, &args.trust_proxy))
        .on_store_error(on_store_error(args.on_store_error))
        .store_timeout(Duration::from_millis(args.store_timeout_ms))
        .headers(header_style(args.headers));
    if let Some(ms) = args.in_flight_wait_ms.filter(|ms| *ms > 0) {
        builder = builder.max_delay(Duration::from_millis(ms));
    }
    match store_url {
        StoreUrl::Memory if args.in_flight_lease_ms.is_some() => Err(Failure::Usage(
            "--in-flight-lease-ms needs a Redis --store: slots in memory need no lease".into(),
        )),
        StoreUrl::Memory => {
            let layer = builder
                .try_build()
                .map_err(|e| Failure::Usage(e.to_string()))?;
            Ok(router.layer(layer))
        }
        StoreUrl::Postgres(_) => Err(Failure::Usage(
            "--in-flight needs the memory or a Redis --store: in-flight slots are not kept in \
             PostgreSQL"
                .into(),
        )),
        StoreUrl::Redis(url) => {
            let mut slots = RedisSlots::builder(url.as_str());
            if let Some(ms) = args.in_flight_lease_ms {
                slots = slots.lease(Duration::from_millis(ms));
            }
            let slots = match args.connect {
                Connect::Eager => slots.connect().await,
                Connect::Lazy => slots.connect_lazy(),
            };
            let slots = slots.map_err(|e| {
                let message = format!(
                    "cannot keep in-flight slots in Redis at {}: {e}",
                    tollgate_redis::redacted(url)
                );
                if e.is_config() {
                    Failure::Usage(message)
                } else {
                    Failure::Startup(message)
                }
            })?;
            let layer = builder
                .slots(slots)
                .try_build()
                .map_err(|e| Failure::Usage(e.to_string()))?;
            Ok(router.layer(layer))
        }
    }
}

/// Binds, announces the address, and serves until killed.
async fn run(args: Args, store_url: StoreUrl) -> Result<(), Failure> {
    // The recorder first: the layer and the stores register with the
    // recorder installed when they are built.
    let metrics = match args.metrics_listen {
        Some(addr) => Some(metrics_listener(addr).await?),
        None => None,
    };
    let app = app(&args, &store_url).await?;
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(|e| Failure::Startup(format!("cannot listen on {}: {e}", args.listen)))?;
    let addr = listener
        .local_addr()
        .map_err(|e| Failure::Startup(format!("cannot read the bound address: {e}")))?;
    // Bound before printed: a client that reads this line can connect.
    println!("listening on http://{addr}");
    if let Some((metrics_addr, metrics)) = metrics {
        tokio::spawn(metrics);
        // After the first line, which scripts read for the address; a
        // reader that stopped reading must not stop the server.
        let _ = writeln!(
            std::io::stdout(),
            "metrics on http://{metrics_addr}/metrics"
        );
    }
    // Scripts read this through a pipe; make sure it is not held back.
    let _ = std::io::stdout().flush();
    let limits = ServeLimits {
        header_timeout: Duration::from_millis(args.header_timeout_ms),
        idle_timeout: Duration::from_millis(args.idle_timeout_ms),
        max_connections: args
            .max_connections
            .unwrap_or_else(tollgate_examples::serving::default_connection_cap),
    };
    serve(listener, app, limits)
        .await
        .map_err(|e| Failure::Startup(format!("serving failed: {e}")))
}

/// Installs a Prometheus recorder as the process's `metrics` recorder and
/// binds `addr` for its text: the bound address, and the server to spawn
/// (`GET /metrics`; any other path 404). Bound here, so that a taken port
/// is a startup failure before anything is printed.
async fn metrics_listener(
    addr: SocketAddr,
) -> Result<
    (
        SocketAddr,
        impl std::future::Future<Output = ()> + Send + 'static,
    ),
    Failure,
> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| Failure::Startup(format!("cannot listen on {addr} for metrics: {e}")))?;
    let bound = listener
        .local_addr()
        .map_err(|e| Failure::Startup(format!("cannot read the metrics address: {e}")))?;
    let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    metrics::set_global_recorder(recorder)
        .map_err(|e| Failure::Startup(format!("cannot install the metrics recorder: {e}")))?;
    // tollgate's and the Redis store's.
    tollgate_redis::describe_metrics();
    let router = Router::new().route(
        "/metrics",
        axum::routing::get(move || {
            let text = handle.render();
            async move {
                (
                    [(
                        axum::http::header::CONTENT_TYPE,
                        "text/plain; version=0.0.4; charset=utf-8",
                    )],
                    text,
                )
            }
        }),
    );
    let serve = async move {
        if let Err(error) = axum::serve(listener, router).await {
            tracing::error!(%error, "the metrics listener stopped");
        }
    };
    Ok((bound, serve))
}

/// Writes the library's `tracing` events to stderr (stdout carries the
/// `listening on` line scripts read): those `RUST_LOG` selects, warnings
/// and errors when it is unset or unreadable.
fn install_logs() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .init();
}

/// Parses the flags, then runs; usage errors found at startup exit with
/// code 2, other startup failures with code 1.
#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    install_logs();
    reject_duplicate_names(&[args.limits.as_slice(), &args.shadow_limits].concat());
    let store_url = store_url(&store_text(&args));
    reject_block_cache_without_redis(args.block_cache, &store_url);
    match run(args, store_url).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Usage(message)) => {
            eprintln!("server: {message}");
            ExitCode::from(2)
        }
        Err(Failure::Startup(message)) => {
            eprintln!("server: {message}");
            ExitCode::FAILURE
        }
    }
}
