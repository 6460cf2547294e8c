//! [`PostgresError`]: why the Postgres backend could not be built or did
//! not answer.

use std::fmt;

/// Why a [`PostgresBackend`](crate::PostgresBackend) could not be built,
/// or a call of it failed. No message shows a password: URLs are shown
/// [`redacted`](crate::redacted), and the client's own errors name the
/// server and what went wrong, never the credentials.
#[derive(Debug)]
pub struct PostgresError {
    kind: Kind,
}

#[derive(Debug)]
enum Kind {
    /// A setting that cannot work (a malformed URL, a bad table name, a
    /// TLS setting without the `tls` feature).
    Config(String),
    /// No connection could be had from the pool (the server is down,
    /// refused the credentials, the pool stayed full).
    Pool(deadpool_postgres::PoolError),
    /// A statement failed on the server or on the way to it.
    Query(tokio_postgres::Error),
    /// The table is not there: it was never created.
    NoTable { table: String },
}

impl PostgresError {
    pub(crate) fn config(message: impl Into<String>) -> Self {
        PostgresError {
            kind: Kind::Config(message.into()),
        }
    }

    pub(crate) fn pool(error: deadpool_postgres::PoolError) -> Self {
        PostgresError {
            kind: Kind::Pool(error),
        }
    }

    /// A failed statement; a missing table (SQLSTATE 42P01) named as one.
    pub(crate) fn query(error: tokio_postgres::Error, table: &str) -> Self {
        if error.code() == Some(&tokio_postgres::error::SqlState::UNDEFINED_TABLE) {
            return PostgresError {
                kind: Kind::NoTable {
                    table: table.to_owned(),
                },
            };
        }
        PostgresError {
            kind: Kind::Query(error),
        }
    }

    /// Whether the settings are at fault (a malformed URL, say), rather
    /// than the server: trying again will not help.
    pub fn is_config(&self) -> bool {
        matches!(self.kind, Kind::Config(_) | Kind::NoTable { .. })
    }

    /// Whether the table the backend uses does not exist (help: create it
    /// with [`PostgresBackendBuilder::create_schema`](crate::PostgresBackendBuilder::create_schema)
    /// or the migration, [`migration`](crate::migration)).
    pub fn is_missing_table(&self) -> bool {
        matches!(self.kind, Kind::NoTable { .. })
    }
}

impl fmt::Display for PostgresError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            Kind::Config(message) => f.write_str(message),
            Kind::Pool(error) => write!(f, "no connection to PostgreSQL: {}", pool_error(error)),
            Kind::Query(error) => {
                write!(f, "a PostgreSQL statement failed: {}", query_error(error))
            }
            Kind::NoTable { table } => write!(
                f,
                "the table {table} does not exist; help: create it with \
                 `PostgresBackendBuilder::create_schema(true)` or run the migration \
                 (`tollgate_postgres::migration`)"
            ),
        }
    }
}

/// A pool error in words, the client's error with its cause.
fn pool_error(error: &deadpool_postgres::PoolError) -> String {
    match error {
        deadpool_postgres::PoolError::Backend(error) => query_error(error),
        other => other.to_string(),
    }
}

/// The client's error and its cause ("error connecting to server:
/// Connection refused"): tokio-postgres puts the cause in `source`.
fn query_error(error: &tokio_postgres::Error) -> String {
    if let Some(db) = error.as_db_error() {
        return format!("{}: {}", db.severity(), db.message());
    }
    match std::error::Error::source(error) {
        Some(source) => format!("{error}: {source}"),
        None => error.to_string(),
    }
}

impl std::error::Error for PostgresError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.kind {
            Kind::Pool(error) => Some(error),
            Kind::Query(error) => Some(error),
            Kind::Config(_) | Kind::NoTable { .. } => None,
        }
    }
}
