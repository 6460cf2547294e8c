//! Redis Functions: the store's scripts loaded once per server as function
//! libraries (`FUNCTION LOAD`) and called with `FCALL`, where the server
//! has them (Redis 7 and later, Valkey).
//!
//! Why: an `EVALSHA` runs its script from the top on every call, so the
//! prelude's forty-odd functions are defined anew before a request is
//! decided, and collected after it. A library defines them once, on its
//! first call. On a fixed-window decision that is about a third of the
//! server's time per call (21 µs against 14 µs here; BENCHMARKS.md, "The
//! rate-limit service").
//!
//! A library is the script's own source, wrapped (see
//! [`LuaScript`](crate::script::LuaScript)): the same prelude, algorithms
//! and entry, so an `FCALL` and an `EVALSHA` of one script decide alike,
//! and the store can move from one to the other at any call.
//!
//! When the server lacks the function (its first call, a restart, a
//! `FUNCTION FLUSH`, a replica promoted before the library reached it),
//! the call is answered by an `EVAL` of the script's source, which cannot
//! have run twice (the `FCALL` did not run at all), and the library is
//! loaded for the next calls. When the server has no functions (an older
//! Redis: "unknown command"), refuses them (an ACL without `FCALL` or
//! `FUNCTION`), or fails to load the library, the store calls its scripts
//! with `EVALSHA` from then on, as it did before functions, and says so
//! once at INFO.

use crate::script::LuaScript;
use redis::aio::ConnectionLike;
use std::sync::atomic::{AtomicBool, Ordering};

/// Whether a store calls its scripts as functions, and whether one of its
/// calls is loading a library now.
#[derive(Debug)]
pub(crate) struct Functions {
    on: AtomicBool,
    /// Set while a call loads a library, so that the calls that found the
    /// function missing at the same moment (all of them, after a restart)
    /// load it once between them; the others answer with `EVAL`.
    loading: AtomicBool,
}

/// What a failed `FCALL` says about the server's functions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lacking {
    /// The server has functions but not this one: load it.
    Function,
    /// The server has no functions, or may not use them: stop calling them.
    Functions,
}

impl Lacking {
    /// What `error`, the reply to an `FCALL`, says is lacking; `None` for
    /// any other error (the script's own, a connection's), which is the
    /// call's answer.
    pub(crate) fn of(error: &redis::RedisError) -> Option<Lacking> {
        let detail = error.detail().unwrap_or_default();
        match error.code() {
            Some("ERR") if detail.starts_with("Function not found") => Some(Lacking::Function),
            Some("ERR") if detail.starts_with("unknown command") => Some(Lacking::Functions),
            Some("NOPERM") => Some(Lacking::Functions),
            _ => None,
        }
    }
}

impl Functions {
    /// Functions on (tried first, left if the server lacks them) or off.
    pub(crate) fn new(on: bool) -> Self {
        Functions {
            on: AtomicBool::new(on),
            loading: AtomicBool::new(false),
        }
    }

    /// Whether calls are made as `FCALL` (else `EVALSHA`).
    pub(crate) fn on(&self) -> bool {
        self.on.load(Ordering::Relaxed)
    }

    /// After an `FCALL` failed for want of `lacking`: loads `script`'s
    /// library on `connection` (every master, on a Cluster), or turns
    /// functions off. The failed call itself is the caller's to answer.
    pub(crate) async fn mend<C: ConnectionLike>(
        &self,
        lacking: Lacking,
        script: &LuaScript,
        connection: &mut C,
        why: &redis::RedisError,
    ) {
        if lacking == Lacking::Functions {
            self.turn_off(why);
            return;
        }
        if self.loading.swap(true, Ordering::Acquire) {
            return;
        }
        // REPLACE: on a Cluster the load goes to every master, and those
        // that have the library must not fail it for the one that lost it.
        let loaded: Result<String, _> = redis::cmd("FUNCTION")
            .arg("LOAD")
            .arg("REPLACE")
            .arg(script.library())
            .query_async(connection)
            .await;
        self.loading.store(false, Ordering::Release);
        match loaded {
            Ok(_) => tracing::debug!(function = script.function(), "loaded a Redis function"),
            Err(error) => self.turn_off(&error),
        }
    }

    fn turn_off(&self, why: &redis::RedisError) {
        if self.on.swap(false, Ordering::Relaxed) {
            tracing::info!(
                "Redis functions unavailable ({why}): the store calls its scripts with EVALSHA"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(text: &str) -> redis::RedisError {
        let value = redis::parse_redis_value(format!("-{text}\r\n").as_bytes())
            .expect("an error reply parses");
        match value.extract_error() {
            Err(error) => error,
            Ok(_) => panic!("{text:?} is not read as an error"),
        }
    }

    #[test]
    fn failed_calls_say_what_is_lacking() {
        assert_eq!(
            Lacking::of(&reply("ERR Function not found")),
            Some(Lacking::Function)
        );
        assert_eq!(
            Lacking::of(&reply(
                "ERR unknown command 'FCALL', with args beginning with: 'x'"
            )),
            Some(Lacking::Functions)
        );
        assert_eq!(
            Lacking::of(&reply(
                "NOPERM User app has no permissions to run the 'fcall' command"
            )),
            Some(Lacking::Functions)
        );
        // The script's own errors are answers.
        assert_eq!(Lacking::of(&reply("TOLLGATEARG ARGV[1] (the cost)")), None);
        assert_eq!(
            Lacking::of(&reply("ERR user_script:1: Script attempted")),
            None
        );
    }
}
