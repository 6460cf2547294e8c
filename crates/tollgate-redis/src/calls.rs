//! The loop that sends a call until Redis answers: a call is sent again
//! only where its script cannot have run (a Cluster moving slots or
//! failing over, a Sentinel-watched master replaced), since a second run
//! of a script that did run would charge twice.

use crate::RedisStoreError;
use crate::connection::{Connection, Failure, Topology};
use crate::functions::{Functions, Lacking};
use crate::script::LuaScript;
use redis::{ErrorKind, ServerErrorKind};
use std::time::Duration;

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
pub(crate) async fn call_until_answered(
    topology: &Topology,
    functions: &Functions,
    script: &LuaScript,
    command: &redis::Cmd,
) -> Result<Vec<i64>, RedisStoreError> {
    let mut generation = topology.live().await?;
    let mut attempt = 0;
    loop {
        let error = match call(script, command, &generation.connection, functions).await {
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
            match topology.refreshed_after(generation.number, why).await {
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
                match topology.refreshed_after(generation.number, why).await {
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

/// Sends the decision's command on `connection`: `FCALL` or `EVALSHA`,
/// and if the server lacks the script (restarted, flushed, a replica just
/// promoted) or functions, the same call as an `EVAL` with the script's
/// source, which loads it; a missing function is loaded for the next
/// calls (see [`Functions::mend`]). Neither failed call ran the script,
/// so the `EVAL` charges once.
async fn call(
    script: &LuaScript,
    command: &redis::Cmd,
    connection: &Connection,
    functions: &Functions,
) -> Result<Vec<i64>, redis::RedisError> {
    let mut connection = connection.clone();
    let error = match command.query_async(&mut connection).await {
        Err(error) => error,
        reply => return reply,
    };
    if error.kind() != ErrorKind::Server(ServerErrorKind::NoScript) {
        let lacking = is_fcall(command).then(|| Lacking::of(&error)).flatten();
        let Some(lacking) = lacking else {
            return Err(error);
        };
        functions
            .mend(lacking, script, &mut connection, &error)
            .await;
    }
    script
        .with_source(command)
        .query_async(&mut connection)
        .await
}

/// Whether `command` calls a function (rather than a script by its SHA-1).
fn is_fcall(command: &redis::Cmd) -> bool {
    matches!(
        command.args_iter().next(),
        Some(redis::Arg::Simple(b"FCALL"))
    )
}
