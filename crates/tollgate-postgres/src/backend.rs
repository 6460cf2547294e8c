//! [`PostgresBackend`]: the compare-and-swap backend over a PostgreSQL
//! table, and its builder.

use crate::error::PostgresError;
use crate::schema::{self, DEFAULT_TABLE, Statements, Table};
use crate::sweeper::Sweep;
use crate::tls::Pem;
use crate::url::{self, Target, TlsMode};
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::oneshot;
use tollgate_cas::{CasBackend, Snapshot, Stored, Swap};

/// A boxed future of the backend: one allocation a call, beside a round
/// trip.
type Call<T> = Pin<Box<dyn Future<Output = Result<T, PostgresError>> + Send>>;

/// A [`CasBackend`] over a PostgreSQL table: each read and each
/// conditional write one statement on a pooled connection, the time the
/// database's clock, expired rows swept in the background. Cheap to clone
/// (its clones share the pool and the sweeper); the sweeper stops when the
/// last clone is dropped.
///
/// Build it with [`PostgresBackend::builder`], then put a
/// [`CasStore`](tollgate_cas::CasStore) over it: see the [crate
/// docs](crate) for the table, the statements and the promises.
#[derive(Clone)]
pub struct PostgresBackend {
    inner: Arc<Inner>,
}

struct Inner {
    pool: Pool,
    statements: Statements,
    table: Arc<str>,
    /// The URL as it may be shown.
    shown: String,
    create: String,
    sweep: Sweep,
    sweep_every: Option<Duration>,
    /// Dropped with the last clone: the sweeper then ends.
    _sweeper: Option<oneshot::Sender<()>>,
}

impl std::fmt::Debug for PostgresBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresBackend")
            .field("url", &self.inner.shown)
            .field("table", &self.inner.table)
            .field("pool_size", &self.inner.pool.status().max_size)
            .field("sweep_every", &self.inner.sweep_every)
            .finish()
    }
}

impl PostgresBackend {
    /// A builder for a backend over the database `url` names:
    /// `postgres://USER:PASSWORD@HOST:PORT/DATABASE`, with
    /// `?sslmode=require` (or `prefer`, `verify-ca`, `verify-full`) for
    /// TLS (feature `tls`), `&sslrootcert=PATH` for a CA of your own, and
    /// any parameter tokio-postgres reads (`application_name`,
    /// `connect_timeout`, …).
    pub fn builder(url: impl Into<String>) -> PostgresBackendBuilder {
        PostgresBackendBuilder {
            url: url.into(),
            table: DEFAULT_TABLE.to_owned(),
            pool_size: 16,
            timeout: Duration::from_secs(5),
            create_schema: false,
            unlogged: false,
            sweep_every: Some(Duration::from_secs(10)),
            sweep_batch: 1_000,
            tls_roots: None,
        }
    }

    /// A backend over `url` with the defaults (the table
    /// `tollgate_limits`, which must exist, 16 connections, a sweep every
    /// 10 s).
    pub async fn connect(url: &str) -> Result<Self, PostgresError> {
        Self::builder(url).connect().await
    }

    /// The table it keeps values in, as named to the builder.
    pub fn table(&self) -> &str {
        &self.inner.table
    }

    /// Creates the table and its index if they do not exist (the SQL of
    /// [`migration`](crate::migration)), under a transaction-scoped
    /// advisory lock, so that instances starting at once do not trip over
    /// each other's `CREATE`.
    pub async fn create_schema(&self) -> Result<(), PostgresError> {
        create_schema(&self.inner.pool, &self.inner.create, &self.inner.table).await
    }

    /// Deletes every expired row now, in batches, as the sweeper does
    /// every interval; how many it deleted.
    pub async fn sweep(&self) -> Result<u64, PostgresError> {
        self.inner.sweep.once().await
    }

    /// How many rows the table holds, expired ones included until swept
    /// (`SELECT count(*)`: for tests and operators, not for a hot path).
    pub async fn rows(&self) -> Result<u64, PostgresError> {
        let inner = &self.inner;
        let client = inner.pool.get().await.map_err(PostgresError::pool)?;
        let row = client
            .query_one(&inner.statements.count, &[])
            .await
            .map_err(|e| PostgresError::query(e, &inner.table))?;
        let count: i64 = row
            .try_get(0)
            .map_err(|e| PostgresError::query(e, &inner.table))?;
        Ok(count.unsigned_abs())
    }
}

/// Builds a [`PostgresBackend`]; [`connect`](Self::connect) makes it.
/// Its `Debug` shows the URL [`redacted`](crate::redacted).
#[must_use = "a builder does nothing until connected"]
pub struct PostgresBackendBuilder {
    url: String,
    table: String,
    pool_size: usize,
    timeout: Duration,
    create_schema: bool,
    unlogged: bool,
    sweep_every: Option<Duration>,
    sweep_batch: u32,
    tls_roots: Option<Pem>,
}

impl std::fmt::Debug for PostgresBackendBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresBackendBuilder")
            .field("url", &url::redacted(&self.url))
            .field("table", &self.table)
            .field("pool_size", &self.pool_size)
            .field("timeout", &self.timeout)
            .field("create_schema", &self.create_schema)
            .field("unlogged", &self.unlogged)
            .field("sweep_every", &self.sweep_every)
            .field("sweep_batch", &self.sweep_batch)
            .field("tls_roots", &self.tls_roots)
            .finish()
    }
}

impl PostgresBackendBuilder {
    /// The table the values live in (default `tollgate_limits`): an
    /// identifier, or `schema.table`, of ASCII letters, digits and `_`
    /// (checked by [`connect`](Self::connect); quoted in every
    /// statement, so taken as written).
    pub fn table(mut self, table: impl Into<String>) -> Self {
        self.table = table.into();
        self
    }

    /// The most connections open at once (default 16; at least 1). Each
    /// call holds one for its statement only.
    pub fn pool_size(mut self, size: usize) -> Self {
        self.pool_size = size.max(1);
        self
    }

    /// How long a call may wait for a connection from the pool, and how
    /// long a new connection may take to open (default 5 s each); past
    /// it, the call fails (the layer answers with its store-error
    /// behaviour, usually much sooner: its store timeout).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Whether [`connect`](Self::connect) creates the table and its index
    /// when they do not exist (default `false`: they must, from the
    /// [`migration`](crate::migration), and `connect` says so if not).
    pub fn create_schema(mut self, create: bool) -> Self {
        self.create_schema = create;
        self
    }

    /// Whether a table [`create_schema`](Self::create_schema) creates is
    /// `UNLOGGED` (default `false`): no write-ahead log, so faster writes,
    /// but emptied after a crash of the database (every key starts
    /// afresh, as after a Redis restart) and not replicated.
    pub fn unlogged(mut self, unlogged: bool) -> Self {
        self.unlogged = unlogged;
        self
    }

    /// How often the sweeper deletes expired rows (default 10 s): a row
    /// is gone within one interval of its expiry plus the time the sweep
    /// takes (the test holds it to twice the interval). Expired rows are
    /// read as absent whether swept or not: the sweep only keeps the
    /// table small.
    pub fn sweep_interval(mut self, every: Duration) -> Self {
        self.sweep_every = Some(every.max(Duration::from_millis(1)));
        self
    }

    /// No sweeper in this process (another instance sweeps, or a job of
    /// your own runs [`PostgresBackend::sweep`] or the `DELETE` in the
    /// crate docs).
    pub fn no_sweeper(mut self) -> Self {
        self.sweep_every = None;
        self
    }

    /// How many rows one `DELETE` of a sweep removes at most (default
    /// 1,000; at least 1): a sweep runs batches until one finds fewer,
    /// each its own short transaction.
    pub fn sweep_batch(mut self, rows: u32) -> Self {
        self.sweep_batch = rows.max(1);
        self
    }

    /// Trusts the CA certificates of this PEM file (read when connecting)
    /// instead of the system's root certificates, for a TLS URL (feature
    /// `tls`); the URL's `sslrootcert` does the same.
    #[cfg(feature = "tls")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tls")))]
    pub fn tls_ca_file(mut self, path: impl Into<std::path::PathBuf>) -> Self {
        self.tls_roots = Some(Pem::File(path.into()));
        self
    }

    /// Trusts these PEM CA certificates instead of the system's root
    /// certificates, for a TLS URL (feature `tls`).
    #[cfg(feature = "tls")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tls")))]
    pub fn tls_ca_pem(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.tls_roots = Some(Pem::Bytes(pem.into()));
        self
    }

    /// Connects: parses the URL, opens one connection (failing if the
    /// database cannot be reached or refuses the credentials), creates
    /// the schema if asked, checks that the table is there, and starts
    /// the sweeper on the current Tokio runtime.
    pub async fn connect(self) -> Result<PostgresBackend, PostgresError> {
        let shown = url::redacted(&self.url);
        let Target {
            mut config,
            tls,
            root_cert,
        } = url::parse(&self.url)?;
        let table = Table::new(&self.table)?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(self.timeout);
        }
        let roots = self.tls_roots.or(root_cert.map(Pem::File));
        if roots.is_some() && tls == TlsMode::Disable {
            return Err(PostgresError::config(format!(
                "a CA certificate was given for {shown}, which does not ask for TLS: add \
                 ?sslmode=require (or verify-full)"
            )));
        }
        let manager_config = ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        };
        let manager = match tls {
            TlsMode::Disable => Manager::from_config(config, tokio_postgres::NoTls, manager_config),
            #[cfg(feature = "tls")]
            TlsMode::Prefer | TlsMode::Require => Manager::from_config(
                config,
                crate::tls::connector(roots.as_ref())?,
                manager_config,
            ),
            // `url::parse` refuses `require` without the feature; `prefer`
            // is plain then, as with a client built without TLS.
            #[cfg(not(feature = "tls"))]
            TlsMode::Prefer | TlsMode::Require => {
                let _ = roots;
                config.ssl_mode(tokio_postgres::config::SslMode::Disable);
                Manager::from_config(config, tokio_postgres::NoTls, manager_config)
            }
        };
        let pool = Pool::builder(manager)
            .max_size(self.pool_size)
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(self.timeout))
            .create_timeout(Some(self.timeout))
            .recycle_timeout(Some(self.timeout))
            .build()
            .map_err(|e| PostgresError::config(format!("cannot build the pool: {e}")))?;
        let statements = Statements::new(&table);
        let create = schema::create(&table, self.unlogged);
        let name: Arc<str> = Arc::from(table.name());
        if self.create_schema {
            create_schema(&pool, &create, &name).await?;
        }
        // The read prepared once: the table is there (or the error says
        // how to make it), and the connection works.
        let client = pool.get().await.map_err(PostgresError::pool)?;
        client
            .prepare_cached(&statements.read)
            .await
            .map_err(|e| PostgresError::query(e, &name))?;
        drop(client);
        let sweep = Sweep {
            pool: pool.clone(),
            sql: Arc::from(statements.sweep.as_str()),
            batch: i64::from(self.sweep_batch),
            table: name.clone(),
        };
        let sweeper = self.sweep_every.map(|every| sweep.clone().spawn(every));
        Ok(PostgresBackend {
            inner: Arc::new(Inner {
                pool,
                statements,
                table: name,
                shown,
                create,
                sweep,
                sweep_every: self.sweep_every,
                _sweeper: sweeper,
            }),
        })
    }
}

/// Runs `create` in a transaction under an advisory lock (concurrent
/// `CREATE … IF NOT EXISTS` of one table can fail on PostgreSQL's
/// catalogue).
async fn create_schema(pool: &Pool, create: &str, table: &str) -> Result<(), PostgresError> {
    let client = pool.get().await.map_err(PostgresError::pool)?;
    let sql =
        format!("BEGIN;\nSELECT pg_advisory_xact_lock(7386851017450210133);\n{create}COMMIT;\n");
    client
        .batch_execute(&sql)
        .await
        .map_err(|e| PostgresError::query(e, table))
}

impl CasBackend for PostgresBackend {
    type Error = PostgresError;
    type Read = Call<Snapshot>;
    type Write = Call<bool>;

    /// One statement: the database's clock, and the key's value and
    /// version if it holds a live one.
    fn read(&self, key: &str) -> Self::Read {
        let (inner, key) = (self.inner.clone(), key.to_owned());
        Box::pin(async move {
            let fail = |e| PostgresError::query(e, &inner.table);
            let client = inner.pool.get().await.map_err(PostgresError::pool)?;
            let statement = client
                .prepare_cached(&inner.statements.read)
                .await
                .map_err(fail)?;
            let row = client.query_one(&statement, &[&key]).await.map_err(fail)?;
            let now: i64 = row.try_get(0).map_err(fail)?;
            let value: Option<Vec<u8>> = row.try_get(1).map_err(fail)?;
            let version: Option<i64> = row.try_get(2).map_err(fail)?;
            let now = u64::try_from(now).map_err(|_| {
                PostgresError::config("the database's clock reads before 1970: fix its clock")
            })?;
            let value = match (value, version) {
                (Some(bytes), Some(version)) => {
                    Some(Stored::new(bytes.into(), version.cast_unsigned()))
                }
                _ => None,
            };
            Ok(Snapshot::new(now, value))
        })
    }

    /// One statement: an `INSERT … ON CONFLICT DO UPDATE … WHERE` the row
    /// is expired (no value expected), or an `UPDATE … WHERE version =`
    /// the one expected; either only while the database's clock is at
    /// most the deadline.
    fn write(&self, key: &str, swap: Swap) -> Self::Write {
        let (inner, key) = (self.inner.clone(), key.to_owned());
        Box::pin(async move {
            let fail = |e| PostgresError::query(e, &inner.table);
            let client = inner.pool.get().await.map_err(PostgresError::pool)?;
            let version = swap.version.cast_signed();
            let expires_at = i64::try_from(swap.expires_at).unwrap_or(i64::MAX);
            let deadline = swap
                .deadline
                .map(|deadline| i64::try_from(deadline).unwrap_or(i64::MAX));
            let value: &[u8] = &swap.bytes;
            let written = match swap.expected {
                None => {
                    let statement = client
                        .prepare_cached(&inner.statements.insert)
                        .await
                        .map_err(fail)?;
                    client
                        .execute(
                            &statement,
                            &[&key, &value, &version, &expires_at, &deadline],
                        )
                        .await
                }
                Some(expected) => {
                    let statement = client
                        .prepare_cached(&inner.statements.update)
                        .await
                        .map_err(fail)?;
                    let expected = expected.cast_signed();
                    client
                        .execute(
                            &statement,
                            &[&key, &value, &version, &expires_at, &deadline, &expected],
                        )
                        .await
                }
            };
            Ok(written.map_err(fail)? == 1)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_builder_shows_no_password() {
        let builder = PostgresBackend::builder("postgres://app:hunter2@db:5432/app")
            .table("limits")
            .pool_size(3);
        let shown = format!("{builder:?}");
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(shown.contains("postgres://***@db:5432/app"), "{shown}");
    }
}
