//! A PostgreSQL backend for tollgate's compare-and-swap store: one rate
//! limit shared by every instance of a service, kept in a table.
//!
//! ```no_run
//! # async fn run() -> Result<(), tollgate_postgres::PostgresError> {
//! use tollgate::RateLimitLayer;
//! use tollgate_cas::CasStore;
//! use tollgate_postgres::PostgresBackend;
//!
//! let backend = PostgresBackend::builder("postgres://app:secret@db.internal:5432/app")
//!     .create_schema(true)
//!     .connect()
//!     .await?;
//! let layer = RateLimitLayer::builder()
//!     .quota("api", "100/min".parse().unwrap())
//!     .store(CasStore::new(backend))
//!     .build();
//! # let _ = layer;
//! # Ok(()) }
//! ```
//!
//! [`PostgresBackend`] fills in [`CasBackend`](tollgate_cas::CasBackend);
//! [`CasStore`](tollgate_cas::CasStore) over it runs the
//! algorithms: every algorithm of `tollgate-core`, decided as the memory
//! store decides (the conformance kit checks it against a real server),
//! several limits of a request in one value charged all-or-nothing,
//! refunds and debits (`charge_when`, `pay_after`), peek, reset, a plan's
//! carried usage, late checks that charge nothing, lost races read and
//! decided again. [`PostgresStore`] names the pair.
//!
//! # The table
//!
//! One row per (policy, key): the value is every limit's state as bytes
//! (`tollgate_core::encode_states`), with a version the store chose
//! and the moment the states are back at rest:
//!
//! ```sql
//! CREATE TABLE IF NOT EXISTS "tollgate_limits" (
//!     key text PRIMARY KEY,
//!     value bytea NOT NULL,
//!     version bigint NOT NULL,
//!     expires_at bigint NOT NULL   -- ns since 1970 on the database's clock
//! );
//! CREATE INDEX IF NOT EXISTS "tollgate_limits_expires_at" ON "tollgate_limits" (expires_at);
//! ```
//!
//! [`migration`] returns this SQL for a table of your name (run it with
//! your migration tool); or let [`PostgresBackendBuilder::create_schema`]
//! run it at startup (under an advisory lock, so that instances starting
//! together do not collide). [`PostgresBackendBuilder::unlogged`] makes
//! the table `UNLOGGED`: faster writes, emptied by a crash of the
//! database. A table that is missing is named by [`connect`](PostgresBackendBuilder::connect)'s
//! error, with the fix. Keys are the store's names
//! (`{prefix}:{limit names}:{plan}:{user key}`, the user key escaped or
//! hashed when long: see [`CasStore::key_name`](tollgate_cas::CasStore::key_name)),
//! and, like every value, always bind parameters, never spliced into SQL.
//!
//! # The statements
//!
//! One statement per read and one per conditional write, each on a
//! pooled connection, prepared once per connection:
//!
//! - **read**: `SELECT <clock>, value, version FROM (SELECT <clock>) LEFT
//!   JOIN t ON key = $1 AND expires_at > <clock>` — always one row, with the
//!   database's clock (`clock_timestamp()`, in whole microseconds, as ns),
//!   so every instance decides on one clock, as the Redis store does with
//!   the server's `TIME`. A row past its expiry reads as absent.
//! - **write, no value expected**: `INSERT … SELECT … WHERE $deadline IS
//!   NULL OR <clock> <= $deadline ON CONFLICT (key) DO UPDATE … WHERE
//!   t.expires_at <= <clock>`: inserted if the key has no row, or
//!   replaces one that expired; nothing if another writer got there first.
//! - **write, a version expected**: `UPDATE t SET … WHERE key = $1 AND
//!   version = $expected AND expires_at > <clock> AND ($deadline IS NULL
//!   OR <clock> <= $deadline)`.
//!
//! A write answers whether it changed a row. Under PostgreSQL's default
//! isolation (read committed), two writers of one row are serialised by
//! its lock and the second re-checks its `WHERE` against the first's
//! row, so exactly one of two racing writes with the same expectation
//! lands; the store reads and decides again for the other. A late check's
//! deadline is compared with the database's clock inside the statement:
//! a write that would land after its caller gave up is not made. A write
//! that landed in time and whose reply came after the caller stopped
//! waiting is heard out by the layer and given back
//! (`tollgate_store::late`).
//!
//! # Expiry and the sweeper
//!
//! Every write carries the moment its states are back at rest
//! (`expires_at`); from then on the row reads as absent. A sweeper task
//! (started by `connect`, on the current Tokio runtime, stopped when the
//! last clone of the backend is dropped) deletes expired rows every
//! [`sweep_interval`](PostgresBackendBuilder::sweep_interval) (10 s by
//! default), in batches of at most
//! [`sweep_batch`](PostgresBackendBuilder::sweep_batch) rows (1,000),
//! each batch one `DELETE … WHERE key IN (SELECT key … WHERE expires_at
//! <= <clock> LIMIT n FOR UPDATE SKIP LOCKED)`, until a batch finds fewer:
//! **an expired row is gone within one interval plus the sweep's own
//! time** (the tests hold it to two intervals). Several instances each
//! sweep; rows one is deleting are skipped by the others. A failed sweep
//! is logged once (`tracing`, a warning) until one succeeds again.
//! [`no_sweeper`](PostgresBackendBuilder::no_sweeper) leaves it to a job
//! of your own ([`PostgresBackend::sweep`], or the `DELETE` above).
//!
//! # Connecting
//!
//! `postgres://USER:PASSWORD@HOST:PORT/DATABASE` (or `postgresql://`),
//! with any parameter tokio-postgres reads (`application_name`,
//! `connect_timeout`, `options`, several hosts with
//! `target_session_attrs`, …). TLS (feature `tls`: rustls, with its ring
//! provider chosen for these connections, not installed as the process's
//! default) follows the URL's `sslmode`:
//!
//! | `sslmode` | connection |
//! |---|---|
//! | absent, `disable`, `allow` | plain TCP |
//! | `prefer` | TLS if the server offers it (certificate checked), plain if it does not |
//! | `require`, `verify-ca`, `verify-full` | TLS or no connection; the certificate is checked against the roots and must name the host (as libpq's `verify-full`) |
//!
//! The roots are the system's root certificates, or the CA certificates
//! of [`tls_ca_file`](PostgresBackendBuilder::tls_ca_file),
//! [`tls_ca_pem`](PostgresBackendBuilder::tls_ca_pem) or the URL's
//! `sslrootcert=PATH`. Unlike libpq, an absent `sslmode` means plain
//! TCP, not `prefer`: a certificate this crate cannot check fails the
//! connection rather than being trusted blindly, and Debian's default
//! server certificate is self-signed. Without the `tls` feature, a URL
//! that requires TLS is refused with a message that names the feature.
//!
//! **Passwords are never shown**: the backend's `Debug` shows the URL
//! [`redacted`], every error does too, and the client's errors name the
//! server and what failed, never the credentials. [`check_url`] checks a
//! URL without connecting.
//!
//! # Pool
//!
//! [`deadpool-postgres`](https://docs.rs/deadpool-postgres): a pool made
//! for tokio-postgres (bb8 with bb8-postgres would do as well), with a
//! cache of prepared statements per connection (each statement is
//! prepared once per connection, then executed in one round trip), wait
//! and connect timeouts, and recycling that drops connections the server
//! closed (after a restart of the database the pool opens fresh ones;
//! calls in flight at the restart fail, and the layer answers them with
//! its store-error behaviour). 16 connections by default
//! ([`pool_size`](PostgresBackendBuilder::pool_size)); a call holds one
//! for one statement.
//!
//! # Contention
//!
//! The calls of one process on one key take turns (the store queues them),
//! so they never race one another. A key that many instances write at
//! once costs lost races: each write that finds another instance's
//! version is read and decided again after a jittered pause, at most 8
//! attempts (`CasStoreBuilder::max_attempts`), then the call fails with
//! `CasError::Contended`, never admitting without a write.
//! `BENCHMARKS.md` ("PostgreSQL store") has the lost races per decision of
//! a hot key at 64 tasks, in one store and in four; for keys that hot, put a
//! [`BlockCache`](tollgate_store::BlockCache) in front (refused keys
//! answered with no call).
//!
//! # Time
//!
//! The database's `clock_timestamp()` is the clock of every decision. It
//! is the server's wall clock: a server whose clock steps back (an NTP
//! correction) shortens a GCRA's tolerance for that long, as the design
//! says of any clock that runs back; keep the database's clock
//! disciplined (slewed, not stepped). PostgreSQL's resolution is a
//! microsecond: decisions are made in whole microseconds.

#![cfg_attr(docsrs, feature(doc_cfg))]
// tower's lint set: every public item documented and printable, and no
// `pub` where nothing outside the crate can reach it.
#![warn(unreachable_pub, missing_debug_implementations, missing_docs)]

// The README's examples are compiled as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

mod backend;
mod error;
mod schema;
mod sweeper;
mod tls;
mod url;

pub use backend::{PostgresBackend, PostgresBackendBuilder};
pub use error::PostgresError;
pub use schema::migration;
pub use url::{check_url, redacted};

/// The compare-and-swap store over PostgreSQL:
/// `CasStore::new(PostgresBackend::connect(url).await?)`.
pub type PostgresStore = tollgate_cas::CasStore<PostgresBackend>;
