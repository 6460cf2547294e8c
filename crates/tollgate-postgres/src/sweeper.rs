//! The sweeper: a task that deletes expired rows in bounded batches, every
//! interval, until the backend that started it is dropped.

use crate::error::PostgresError;
use deadpool_postgres::Pool;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::oneshot;

/// What a sweep needs: the pool, the statement, the batch size, and the
/// table's name (for the log).
#[derive(Clone, Debug)]
pub(crate) struct Sweep {
    pub(crate) pool: Pool,
    pub(crate) sql: Arc<str>,
    pub(crate) batch: i64,
    pub(crate) table: Arc<str>,
}

impl Sweep {
    /// Deletes expired rows, `batch` at a time (each batch one statement,
    /// its own transaction), until a batch finds fewer than `batch`: how
    /// many it deleted.
    pub(crate) async fn once(&self) -> Result<u64, PostgresError> {
        let client = self.pool.get().await.map_err(PostgresError::pool)?;
        let statement = client
            .prepare_cached(&self.sql)
            .await
            .map_err(|e| PostgresError::query(e, &self.table))?;
        let mut deleted = 0;
        loop {
            let rows = client
                .execute(&statement, &[&self.batch])
                .await
                .map_err(|e| PostgresError::query(e, &self.table))?;
            deleted += rows;
            if rows < self.batch.unsigned_abs() {
                return Ok(deleted);
            }
            // Let requests have the runtime between batches.
            tokio::task::yield_now().await;
        }
    }

    /// Starts sweeping every `interval` on the current Tokio runtime;
    /// the task ends when the returned sender is dropped.
    pub(crate) fn spawn(self, interval: Duration) -> oneshot::Sender<()> {
        let (stop, mut stopped) = oneshot::channel::<()>();
        tokio::spawn(async move {
            let mut failing = false;
            loop {
                // The sender dropped (or sent): the backend is gone.
                if tokio::time::timeout(interval, &mut stopped).await.is_ok() {
                    return;
                }
                match self.once().await {
                    Ok(deleted) => {
                        if std::mem::take(&mut failing) {
                            tracing::info!(table = %self.table, "tollgate-postgres: sweeping again");
                        }
                        tracing::trace!(table = %self.table, deleted, "tollgate-postgres: swept");
                    }
                    Err(error) if !failing => {
                        failing = true;
                        tracing::warn!(
                            table = %self.table,
                            %error,
                            "tollgate-postgres: the sweep of expired rows failed; tried again \
                             every interval (expired rows are read as absent meanwhile)"
                        );
                    }
                    Err(_) => {}
                }
            }
        });
        stop
    }
}
