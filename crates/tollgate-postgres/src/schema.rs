//! The table and the statements: the one place the SQL is written.
//!
//! One row per value: `key text primary key, value bytea, version bigint,
//! expires_at bigint` (ns since the Unix epoch on the database's clock).
//! A `u64` (a version, an instant) travels as the `bigint` with the same
//! 64 bits. Every statement names the table as prepared once from a
//! checked name, quoted; every key and value is a bind parameter.

use crate::error::PostgresError;

/// The table's name when none is given.
pub(crate) const DEFAULT_TABLE: &str = "tollgate_limits";

/// The database's clock in ns since the Unix epoch, whole microseconds
/// (PostgreSQL's resolution): exact in both `extract`'s `numeric` (14+)
/// and its `double precision` (before 14), and the same expression in
/// every statement.
const CLOCK: &str = "((extract(epoch from clock_timestamp()) * 1000000)::bigint * 1000)";

/// A table name, checked: one identifier, or a schema and an identifier
/// (`limits.tollgate`), each of ASCII letters, digits and `_`, not
/// starting with a digit, at most 63 bytes (PostgreSQL's limit); written
/// quoted, so that it is taken as written (case included).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Table {
    /// As given: `tollgate_limits`, `limits.tollgate`.
    name: String,
    /// Quoted for SQL: `"tollgate_limits"`, `"limits"."tollgate"`.
    quoted: String,
}

impl Table {
    pub(crate) fn new(name: &str) -> Result<Self, PostgresError> {
        let parts: Vec<&str> = name.split('.').collect();
        let well_formed = parts.len() <= 2
            && parts.iter().all(|part| {
                !part.is_empty()
                    && part.len() <= 63
                    && !part.starts_with(|c: char| c.is_ascii_digit())
                    && part.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            });
        if !well_formed {
            return Err(PostgresError::config(format!(
                "{name:?} is not a table name tollgate-postgres takes: one or two \
                 (schema.table) identifiers of ASCII letters, digits and _, not starting \
                 with a digit, at most 63 bytes each"
            )));
        }
        let quoted = parts
            .iter()
            .map(|part| format!("\"{part}\""))
            .collect::<Vec<_>>()
            .join(".");
        Ok(Table {
            name: name.to_owned(),
            quoted,
        })
    }

    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// The index's name: the table's last part and `_expires_at`, at most
    /// 63 bytes.
    fn index(&self) -> String {
        let last = self.name.rsplit('.').next().unwrap_or(&self.name);
        let mut index = format!("{last}_expires_at");
        index.truncate(63);
        index
    }
}

/// The statements over one table, written once.
#[derive(Debug)]
pub(crate) struct Statements {
    /// `$1` key → one row: `now`, `value`, `version` (the last two null
    /// when the key holds no live value).
    pub(crate) read: String,
    /// `$1` key, `$2` value, `$3` version, `$4` expires_at, `$5` deadline
    /// (null: none): written if the key holds no live value.
    pub(crate) insert: String,
    /// The same and `$6` the expected version: written if the key holds
    /// a live value of that version.
    pub(crate) update: String,
    /// `$1` batch size: deletes up to that many expired rows; the count.
    pub(crate) sweep: String,
    /// How many rows the table holds, expired ones included.
    pub(crate) count: String,
}

impl Statements {
    pub(crate) fn new(table: &Table) -> Self {
        let t = &table.quoted;
        Statements {
            // One row whether or not the key has one: the clock comes
            // with it. A value past its expiry reads as absent, as the
            // writes below take it.
            read: format!(
                "SELECT c.now, v.value, v.version \
                 FROM (SELECT {CLOCK} AS now) AS c \
                 LEFT JOIN {t} AS v ON v.key = $1 AND v.expires_at > c.now"
            ),
            // No live value: none at all (inserted), or one past its
            // expiry (replaced, as if swept). The deadline on the same
            // clock, in the same statement.
            insert: format!(
                "INSERT INTO {t} AS v (key, value, version, expires_at) \
                 SELECT $1::text, $2::bytea, $3::bigint, $4::bigint WHERE $5::bigint IS NULL OR {CLOCK} <= $5::bigint \
                 ON CONFLICT (key) DO UPDATE \
                 SET value = excluded.value, version = excluded.version, \
                 expires_at = excluded.expires_at \
                 WHERE v.expires_at <= {CLOCK}"
            ),
            update: format!(
                "UPDATE {t} SET value = $2::bytea, version = $3::bigint, expires_at = $4::bigint \
                 WHERE key = $1::text AND version = $6::bigint AND expires_at > {CLOCK} \
                 AND ($5::bigint IS NULL OR {CLOCK} <= $5::bigint)"
            ),
            // Rows locked by a writer are left for the next sweep; the
            // expiry checked again on the row deleted.
            sweep: format!(
                "DELETE FROM {t} WHERE key IN (\
                 SELECT key FROM {t} WHERE expires_at <= {CLOCK} \
                 LIMIT $1 FOR UPDATE SKIP LOCKED) \
                 AND expires_at <= {CLOCK}"
            ),
            count: format!("SELECT count(*) FROM {t}"),
        }
    }
}

/// The SQL that creates `table` and its index, if they do not exist:
/// what [`PostgresBackendBuilder::create_schema`](crate::PostgresBackendBuilder::create_schema)
/// runs.
pub(crate) fn create(table: &Table, unlogged: bool) -> String {
    let t = &table.quoted;
    let index = &table.index();
    let kind = if unlogged { "UNLOGGED TABLE" } else { "TABLE" };
    format!(
        "CREATE {kind} IF NOT EXISTS {t} (\n\
         \x20   key text PRIMARY KEY,\n\
         \x20   value bytea NOT NULL,\n\
         \x20   version bigint NOT NULL,\n\
         \x20   expires_at bigint NOT NULL\n\
         );\n\
         CREATE INDEX IF NOT EXISTS \"{index}\" ON {t} (expires_at);\n"
    )
}

/// The migration that creates a table for
/// [`PostgresBackend`](crate::PostgresBackend), for those who manage
/// their schema with a migration tool rather than
/// [`create_schema`](crate::PostgresBackendBuilder::create_schema):
/// `table` as [`PostgresBackendBuilder::table`](crate::PostgresBackendBuilder::table)
/// takes it (`None`: `tollgate_limits`), `unlogged` for an `UNLOGGED`
/// table (faster writes, emptied after a crash of the database).
///
/// ```
/// let sql = tollgate_postgres::migration(None, false).unwrap();
/// assert_eq!(
///     sql,
///     "CREATE TABLE IF NOT EXISTS \"tollgate_limits\" (\n    key text PRIMARY KEY,\n    \
///      value bytea NOT NULL,\n    version bigint NOT NULL,\n    expires_at bigint NOT NULL\n);\n\
///      CREATE INDEX IF NOT EXISTS \"tollgate_limits_expires_at\" ON \"tollgate_limits\" (expires_at);\n"
/// );
/// assert!(tollgate_postgres::migration(Some("x; DROP TABLE y"), false).is_err());
/// ```
pub fn migration(table: Option<&str>, unlogged: bool) -> Result<String, PostgresError> {
    Ok(create(
        &Table::new(table.unwrap_or(DEFAULT_TABLE))?,
        unlogged,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_names_are_identifiers_quoted() {
        assert_eq!(
            Table::new("tollgate_limits").unwrap().quoted,
            "\"tollgate_limits\""
        );
        assert_eq!(Table::new("rl.Limits").unwrap().quoted, "\"rl\".\"Limits\"");
        for bad in [
            "",
            "a.b.c",
            "1abc",
            "a-b",
            "a\"b",
            "x; DROP TABLE y",
            &"a".repeat(64),
            "a.",
        ] {
            assert!(Table::new(bad).unwrap_err().is_config(), "{bad:?}");
        }
    }

    #[test]
    fn the_index_is_named_after_the_table() {
        assert_eq!(
            Table::new("rl.limits").unwrap().index(),
            "limits_expires_at"
        );
        assert_eq!(Table::new(&"a".repeat(63)).unwrap().index().len(), 63);
    }

    #[test]
    fn keys_and_values_are_parameters() {
        let statements = Statements::new(&Table::new("t").unwrap());
        for sql in [
            &statements.read,
            &statements.insert,
            &statements.update,
            &statements.sweep,
        ] {
            assert!(sql.contains("$1"), "{sql}");
            assert!(!sql.contains('\''), "no literal in {sql}");
        }
    }
}
