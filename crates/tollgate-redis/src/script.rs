//! The Lua scripts, and what a policy sends to them.
//!
//! One file per algorithm under `scripts/`. A policy's script is the prelude,
//! the files of the algorithms it uses, and `check.lua`, joined: one script,
//! so that a request's limits are checked and charged in one atomic call.
//! Parameters travel as `ARGV`, keys as `KEYS`: nothing a user sends ever
//! becomes Lua source.

use crate::RedisStoreError;
use crate::keys::{escape_into, push_user_key};
use redis::Cmd;
use smallvec::SmallVec;
use std::sync::{Arc, OnceLock};
use tollgate::{Key, Policy, PolicyDecision};
use tollgate_core::{Decision, Limiter, Refill};

const PRELUDE: &str = include_str!("../scripts/prelude.lua");
const CHECK: &str = include_str!("../scripts/check.lua");

/// The scripts' algorithms, in the order their files are joined.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Code {
    Gcra,
    LeakyBucket,
    TokenBucketInterval,
    FixedWindow,
    SlidingLog,
    SlidingWindow,
}

impl Code {
    /// The name `check.lua` dispatches on.
    fn name(self) -> &'static str {
        match self {
            Code::Gcra => "gcra",
            Code::LeakyBucket => "leaky",
            Code::TokenBucketInterval => "interval",
            Code::FixedWindow => "fixed",
            Code::SlidingLog => "log",
            Code::SlidingWindow => "sliding",
        }
    }

    fn source(self) -> &'static str {
        match self {
            Code::Gcra => include_str!("../scripts/gcra.lua"),
            Code::LeakyBucket => include_str!("../scripts/leaky_bucket.lua"),
            Code::TokenBucketInterval => include_str!("../scripts/token_bucket.lua"),
            Code::FixedWindow => include_str!("../scripts/fixed_window.lua"),
            Code::SlidingLog => include_str!("../scripts/sliding_log.lua"),
            Code::SlidingWindow => include_str!("../scripts/sliding_window.lua"),
        }
    }
}

impl Code {
    /// Every code, in the order their files are joined.
    const ALL: [Code; 6] = [
        Code::Gcra,
        Code::LeakyBucket,
        Code::TokenBucketInterval,
        Code::FixedWindow,
        Code::SlidingLog,
        Code::SlidingWindow,
    ];

    /// This code's bit in a set of codes.
    fn bit(self) -> u8 {
        1 << self as u8
    }
}

/// The script for a set of codes (one bit each): the prelude, the codes'
/// files, and `check.lua`. Made once per set in the process, at most 63,
/// however many policies (per-key quotas, reloaded rules) use it.
fn script_for(codes: u8) -> Arc<LuaScript> {
    static SCRIPTS: [OnceLock<Arc<LuaScript>>; 64] = [const { OnceLock::new() }; 64];
    SCRIPTS[usize::from(codes & 63)]
        .get_or_init(|| {
            let mut source = String::from(PRELUDE);
            for code in Code::ALL.into_iter().filter(|c| codes & c.bit() != 0) {
                source.push_str(code.source());
            }
            source.push_str(CHECK);
            Arc::new(LuaScript {
                hash: redis::Script::new(&source).get_hash().to_owned(),
                source,
            })
        })
        .clone()
}

/// A script's source and the SHA-1 that `EVALSHA` calls it by.
#[derive(Debug)]
pub(crate) struct LuaScript {
    hash: String,
    source: String,
}

impl LuaScript {
    /// The SHA-1, in hex.
    pub(crate) fn get_hash(&self) -> &str {
        &self.hash
    }
}

/// Nanoseconds to the scripts' microseconds, rounded up: a rate is never
/// made faster by the coarser unit.
fn micros_up(nanos: u64) -> u64 {
    nanos.div_ceil(1_000).max(1)
}

/// One limit as the script sees it.
#[derive(Clone, Debug)]
struct LimitArgs {
    code: Code,
    params: [u64; 4],
    /// `:name:algorithm`, the part of the Redis key after the user's key.
    key_suffix: String,
}

impl LimitArgs {
    fn new(name: &str, limiter: &Limiter, quota: tollgate_core::Quota) -> Self {
        let interval = micros_up(quota.emission_interval_nanos());
        let period = micros_up(quota.period_nanos());
        let burst = quota.burst();
        let delay = |max_delay: std::time::Duration| {
            u64::try_from(max_delay.as_micros()).unwrap_or(u64::MAX)
        };
        // Quota bounds keep these products far below 2^63: burst × interval
        // ≤ 2^61 ns.
        let (code, params) = match limiter {
            Limiter::Gcra(gcra) => (
                Code::Gcra,
                [interval, interval * burst, burst, delay(gcra.max_delay())],
            ),
            Limiter::TokenBucket(bucket) if bucket.refill() == Refill::Interval => {
                (Code::TokenBucketInterval, [quota.limit(), period, burst, 0])
            }
            Limiter::TokenBucket(bucket) => (
                Code::Gcra,
                [interval, interval * burst, burst, delay(bucket.max_delay())],
            ),
            Limiter::LeakyBucket(_) => (
                Code::LeakyBucket,
                [interval, (burst + 1) * interval - 1, burst, 0],
            ),
            Limiter::FixedWindow(_) => (Code::FixedWindow, [quota.limit(), period, 0, 0]),
            Limiter::SlidingLog(log) => (
                Code::SlidingLog,
                [
                    quota.limit(),
                    period,
                    u64::try_from(log.max_entries()).unwrap_or(u64::MAX),
                    0,
                ],
            ),
            Limiter::SlidingWindow(_) => (Code::SlidingWindow, [quota.limit(), period, 0, 0]),
        };
        // The two token-bucket styles keep different states: different keys.
        let style = if code == Code::TokenBucketInterval {
            "-interval"
        } else {
            ""
        };
        let mut key_suffix = String::from("}:");
        escape_into(&mut key_suffix, name.as_bytes());
        key_suffix.push(':');
        key_suffix.push_str(limiter.algorithm().name());
        key_suffix.push_str(style);
        LimitArgs {
            code,
            params,
            key_suffix,
        }
    }
}

/// Everything about a policy that is the same for every request: its
/// script, its limits' arguments and the ends of its key names.
#[derive(Debug)]
pub(crate) struct PreparedPolicy {
    /// Shared by every policy that uses the same algorithms.
    pub(crate) script: Arc<LuaScript>,
    /// Five arguments per limit: the algorithm's name and four parameters.
    pub(crate) args: Vec<Vec<u8>>,
    key_suffixes: Vec<String>,
}

impl PreparedPolicy {
    pub(crate) fn new(policy: &Policy) -> Self {
        let limits: Vec<LimitArgs> = policy
            .limits()
            .iter()
            .map(|l| LimitArgs::new(l.name(), l.limiter(), l.quota()))
            .collect();
        let codes = limits.iter().fold(0, |set, l| set | l.code.bit());
        let mut args = Vec::with_capacity(limits.len() * 5);
        for limit in &limits {
            args.push(limit.code.name().as_bytes().to_vec());
            args.extend(limit.params.iter().map(|p| p.to_string().into_bytes()));
        }
        PreparedPolicy {
            script: script_for(codes),
            args,
            key_suffixes: limits.into_iter().map(|l| l.key_suffix).collect(),
        }
    }

    /// The Redis keys of `key`'s state for each limit, under `prefix`.
    pub(crate) fn keys(&self, prefix: &str, key: &Key) -> SmallVec<[String; 2]> {
        let mut keys = SmallVec::new();
        self.for_each_key(prefix, key, |name| keys.push(name.to_owned()));
        keys
    }

    /// Calls `f` with the name of each limit's key in turn, built in one
    /// buffer: the user's part is escaped once, not once per limit.
    fn for_each_key(&self, prefix: &str, key: &Key, mut f: impl FnMut(&str)) {
        let mut name = String::with_capacity(prefix.len() + 80);
        name.push_str(prefix);
        name.push_str(":{");
        push_user_key(&mut name, key);
        let head = name.len();
        for suffix in &self.key_suffixes {
            name.truncate(head);
            name.push_str(suffix);
            f(&name);
        }
    }

    /// The `EVALSHA` that decides one request of `cost` for `key`:
    /// `EVALSHA sha numkeys keys… cost now deadline params…`, written
    /// straight into the command's buffer. `now` is the time in µs, or
    /// `None` for the script to read the server's clock; `deadline`, in the
    /// server's µs, the moment after which the script charges nothing.
    pub(crate) fn command(
        &self,
        prefix: &str,
        key: &Key,
        cost: u32,
        now: Option<u64>,
        deadline: Option<u64>,
    ) -> Cmd {
        let count = self.key_suffixes.len();
        let mut command = Cmd::with_capacity(5 + count + self.args.len(), 256);
        command
            .arg("EVALSHA")
            .arg(self.script.get_hash())
            .arg(count);
        self.for_each_key(prefix, key, |name| {
            command.arg(name);
        });
        command.arg(cost);
        for micros in [now, deadline] {
            match micros {
                Some(micros) => command.arg(micros),
                None => command.arg(""),
            };
        }
        for arg in &self.args {
            command.arg(arg.as_slice());
        }
        command
    }

    /// `command` (an `EVALSHA` from [`command`](Self::command)) as an
    /// `EVAL` carrying the script's source: for a server that lacks the
    /// script. Routed by the same keys, so on a Cluster it reaches the node
    /// that lacks it (where `SCRIPT LOAD`, sent to every master, fails while
    /// one of them is down), and it runs once, loading the script as it does.
    pub(crate) fn with_source(&self, command: &Cmd) -> Cmd {
        let mut eval = Cmd::new();
        eval.arg("EVAL").arg(self.script.source.as_str());
        for arg in command.args_iter().skip(2) {
            if let redis::Arg::Simple(bytes) = arg {
                eval.arg(bytes);
            }
        }
        eval
    }

    /// Reads the script's reply: seven integers per limit, then the
    /// server's time in µs (returned too, for the deadlines of later calls,
    /// when the reply is a late call's: that time alone).
    pub(crate) fn verdict(
        &self,
        reply: &[i64],
    ) -> (Option<u64>, Result<PolicyDecision, RedisStoreError>) {
        let Some((&server_now, fields)) = reply.split_last() else {
            return (
                None,
                Err(RedisStoreError::unexpected_reply("an empty reply")),
            );
        };
        let server_now = u64::try_from(server_now).ok();
        if fields.is_empty() {
            return (server_now, Err(RedisStoreError::late()));
        }
        if fields.len() != self.key_suffixes.len() * FIELDS {
            let message = format!(
                "{} integers for {} limits",
                reply.len(),
                self.key_suffixes.len()
            );
            return (server_now, Err(RedisStoreError::unexpected_reply(message)));
        }
        (server_now, Ok(self.decisions(fields)))
    }

    /// The verdict of `fields`, seven per limit.
    fn decisions(&self, fields: &[i64]) -> PolicyDecision {
        let each: SmallVec<[Decision; 2]> = fields.chunks_exact(FIELDS).map(decision).collect();
        let merged = each
            .iter()
            .copied()
            .reduce(Decision::merge)
            .unwrap_or_default();
        PolicyDecision { merged, each }
    }
}

/// How many integers the scripts send per limit (`decision` in prelude.lua).
const FIELDS: usize = 7;

/// What the scripts send for "never" (`NEVER` in prelude.lua).
const NEVER: i64 = -1;

/// One limit's seven integers as a [`Decision`]; times come in microseconds.
/// Negative times other than a retry's `NEVER` read as 0.
fn decision(fields: &[i64]) -> Decision {
    let count = |v: i64| u64::try_from(v).unwrap_or(0);
    let nanos = |v: i64| u64::try_from(v).unwrap_or(0).saturating_mul(1_000);
    Decision {
        allowed: fields[0] == 1,
        limit: count(fields[1]),
        remaining: count(fields[2]),
        reset_after_nanos: nanos(fields[3]),
        // The scripts' NEVER (-1): the cost can never pass.
        retry_after_nanos: match fields[4] {
            NEVER => Decision::NEVER_NANOS,
            micros => nanos(micros),
        },
        wait_nanos: nanos(fields[5]),
        replenish_after_nanos: nanos(fields[6]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_is_only_a_retry_and_other_negative_times_are_zero() {
        let never = decision(&[0, 5, 0, 2_000, NEVER, 0, 1_000]);
        assert_eq!(never.retry_after_nanos, Decision::NEVER_NANOS);
        assert!(!never.can_ever_pass());
        assert_eq!(never.reset_after_nanos, 2_000_000);
        assert_eq!(never.replenish_after_nanos, 1_000_000);
        let odd = decision(&[1, 5, 4, -1, 0, -7, -3]);
        assert_eq!(
            (
                odd.reset_after_nanos,
                odd.wait_nanos,
                odd.replenish_after_nanos
            ),
            (0, 0, 0)
        );
        assert_eq!(
            decision(&[0, 5, 0, 0, 250, 0, 0]).retry_after_nanos,
            250_000
        );
    }

    #[test]
    fn policies_with_the_same_algorithms_share_one_script() {
        use tollgate::NamedLimit;
        use tollgate_core::{Algorithm, Quota};
        let policy = |limits: &[(u64, Algorithm)]| {
            let limits = limits
                .iter()
                .map(|&(n, a)| NamedLimit::new("l", Quota::per_second(n)).with_algorithm(a))
                .collect();
            PreparedPolicy::new(&Policy::new(limits))
        };
        let a = policy(&[(5, Algorithm::Gcra), (9, Algorithm::SlidingLog)]);
        let b = policy(&[(7, Algorithm::SlidingLog), (1, Algorithm::Gcra)]);
        let c = policy(&[(5, Algorithm::Gcra)]);
        assert!(Arc::ptr_eq(&a.script, &b.script));
        assert!(!Arc::ptr_eq(&a.script, &c.script));
        assert_ne!(a.script.get_hash(), c.script.get_hash());
        // A token bucket runs GCRA's code: the same script as GCRA alone.
        let d = policy(&[(3, Algorithm::TokenBucket)]);
        assert!(Arc::ptr_eq(&c.script, &d.script));
    }
}
