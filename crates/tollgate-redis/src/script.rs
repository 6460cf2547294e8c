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
use tollgate_core::{Decision, DecisionFields, Limiter, ScriptCall};
use tollgate_store::shared::{ShareOp, ShareOutcome, ShareReply};
use tollgate_store::{Key, Policy, PolicyDecision};

const PRELUDE: &str = include_str!("../scripts/prelude.lua");
const CHECK: &str = include_str!("../scripts/check.lua");
const SHARE: &str = include_str!("../scripts/share.lua");
const REFUND: &str = include_str!("../scripts/refund.lua");
const DEBIT: &str = include_str!("../scripts/debit.lua");

/// Makes [`LUA_FILES`] from the algorithm registry's list.
macro_rules! lua_files {
    ($(
        $(#[$doc:meta])*
        $variant:ident($kind:ty, $storage:ty) = $name:literal, lua $lua:literal $(, $flag:ident)*;
    )+) => {
        /// Every algorithm's Lua file, `(stem, source)`, in the registry's
        /// order (the order a script joins them in). A file registers its
        /// functions as `ALGORITHMS.<stem>`.
        const LUA_FILES: &[(&str, &str)] = &[
            $(($lua, include_str!(concat!("../scripts/", $lua, ".lua"))),)+
        ];
    };
}
tollgate_core::for_each_algorithm!(lua_files);

/// How many different scripts there can be: one per set of Lua files.
const SCRIPT_SETS: usize = 1 << LUA_FILES.len();

// A set of files is a `u32` bitmask: a registry of more than 16 Lua files
// (a table of 65,536 entries) fails here, at compile time, not at run time.
const _: () = assert!(
    LUA_FILES.len() <= 16,
    "too many Lua files for the script table"
);

/// The set (one bit per [`LUA_FILES`] entry) holding the file named
/// `script`; `None` for a name no file has.
fn file_bit(script: &str) -> Option<u32> {
    LUA_FILES
        .iter()
        .position(|(stem, _)| *stem == script)
        .map(|i| 1 << i)
}

/// What a script does with the algorithms' files: decide one request
/// (`check.lua`), the local-first store's reservations and syncs
/// (`share.lua`), give a charge back (`refund.lua`), or charge into debt
/// (`debit.lua`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Entry {
    Check,
    Share,
    Refund,
    Debit,
}

/// The script for a set of Lua files (one bit each): the prelude, the
/// files, and the entry's file. Made once per set in the process, however
/// many policies (per-key quotas, reloaded rules) use it.
fn script_for(files: u32, entry: Entry) -> Arc<LuaScript> {
    static CHECKS: [OnceLock<Arc<LuaScript>>; SCRIPT_SETS] =
        [const { OnceLock::new() }; SCRIPT_SETS];
    static SHARES: [OnceLock<Arc<LuaScript>>; SCRIPT_SETS] =
        [const { OnceLock::new() }; SCRIPT_SETS];
    static REFUNDS: [OnceLock<Arc<LuaScript>>; SCRIPT_SETS] =
        [const { OnceLock::new() }; SCRIPT_SETS];
    static DEBITS: [OnceLock<Arc<LuaScript>>; SCRIPT_SETS] =
        [const { OnceLock::new() }; SCRIPT_SETS];
    let (table, tail) = match entry {
        Entry::Check => (&CHECKS, CHECK),
        Entry::Share => (&SHARES, SHARE),
        Entry::Refund => (&REFUNDS, REFUND),
        Entry::Debit => (&DEBITS, DEBIT),
    };
    // `files` is made of `file_bit`s, so it is below SCRIPT_SETS.
    table[files as usize % SCRIPT_SETS]
        .get_or_init(|| {
            let mut source = String::from(PRELUDE);
            for (i, (_, file)) in LUA_FILES.iter().enumerate() {
                if files & (1 << i) != 0 {
                    source.push_str(file);
                }
            }
            let head = source.len();
            source.push_str(tail);
            let hash = redis::Script::new(&source).get_hash().to_owned();
            let function = format!("tollgate_{hash}");
            let library = library(&function, &source[..head], tail);
            Arc::new(LuaScript {
                hash,
                source,
                function,
                library,
            })
        })
        .clone()
}

/// The function library of a script (see [`crate::functions`]): `head`
/// (the prelude and the algorithms' files) defined once, on the first
/// call, and `entry` (what a call does) run on every call, as the body of
/// a function of the call's keys and arguments. A library's top level
/// sees none of Lua's standard libraries, so the definitions wait for the
/// first call; `KEYS` and `ARGV`, globals in a script, are locals here,
/// set by each call, and so are the tables a call keeps its notes in.
fn library(function: &str, head: &str, entry: &str) -> String {
    format!(
        "#!lua name={function}\n\
         local entry\n\
         local function define()\n\
         local KEYS, ARGV\n\
         {head}\n\
         return function(keys, args)\n\
         KEYS, ARGV = keys, args\n\
         WRITTEN, WRITING = {{}}, {{}}\n\
         {entry}\n\
         end\n\
         end\n\
         redis.register_function('{function}', function(keys, args)\n\
         if not entry then entry = define() end\n\
         return entry(keys, args)\n\
         end)\n"
    )
}

/// A script: its source, the SHA-1 that `EVALSHA` calls it by, and the
/// same script as a function library and the function's name.
#[derive(Debug)]
pub(crate) struct LuaScript {
    hash: String,
    source: String,
    function: String,
    library: String,
}

impl LuaScript {
    /// The SHA-1, in hex.
    pub(crate) fn get_hash(&self) -> &str {
        &self.hash
    }

    /// The name `FCALL` calls the script by: `tollgate_` and its SHA-1,
    /// so that a changed script is another function.
    pub(crate) fn function(&self) -> &str {
        &self.function
    }

    /// The source `FUNCTION LOAD` loads, defining [`function`](Self::function).
    pub(crate) fn library(&self) -> &str {
        &self.library
    }

    /// Starts a call of the script: `FCALL function` where the server has
    /// functions (`functions`), else `EVALSHA sha`. The rest of the call
    /// (the number of keys, the keys, the arguments) is the same for both.
    fn start(&self, command: &mut Cmd, functions: bool) {
        if functions {
            command.arg("FCALL").arg(self.function.as_str());
        } else {
            command.arg("EVALSHA").arg(self.hash.as_str());
        }
    }

    /// `command` (an `EVALSHA` or `FCALL` of this script) as an `EVAL` carrying the
    /// script's source: for a server that lacks the script. Routed by the
    /// same keys, so on a Cluster it reaches the node that lacks it (where
    /// `SCRIPT LOAD`, sent to every master, fails while one of them is
    /// down), and it runs once, loading the script as it does.
    pub(crate) fn with_source(&self, command: &Cmd) -> Cmd {
        let mut eval = Cmd::new();
        eval.arg("EVAL").arg(self.source.as_str());
        for arg in command.args_iter().skip(2) {
            if let redis::Arg::Simple(bytes) = arg {
                eval.arg(bytes);
            }
        }
        eval
    }
}

/// One limit as the script sees it.
#[derive(Clone, Debug)]
struct LimitArgs {
    call: ScriptCall,
    /// `}:name:state`, the part of the Redis key after the user's key; a
    /// per-key quota's (a [plan](tollgate_store::Policy::plan)) ends with
    /// `:pPLAN` (16 hex digits), so that no other plan reads its state.
    key_suffix: String,
}

impl LimitArgs {
    fn new(name: &str, limiter: &Limiter, plan: Option<u64>) -> Self {
        let call = limiter.script();
        let mut key_suffix = String::from("}:");
        escape_into(&mut key_suffix, name.as_bytes());
        key_suffix.push(':');
        key_suffix.push_str(call.state);
        if let Some(plan) = plan {
            key_suffix.push_str(&format!(":p{plan:016x}"));
        }
        LimitArgs { call, key_suffix }
    }
}

/// Everything about a policy that is the same for every request: its
/// script, its limits' arguments and the ends of its key names.
#[derive(Debug)]
pub(crate) struct PreparedPolicy {
    /// Shared by every policy that uses the same algorithms.
    pub(crate) script: Arc<LuaScript>,
    /// The same algorithms' script for the local-first store.
    pub(crate) share_script: Arc<LuaScript>,
    /// The same algorithms' script that gives a charge back.
    pub(crate) refund_script: Arc<LuaScript>,
    /// The same algorithms' script that charges into debt.
    pub(crate) debit_script: Arc<LuaScript>,
    /// Whether the local-first store can decide the policy in memory
    /// (checked once here, read on every request).
    pub(crate) local_first: bool,
    /// Five arguments per limit: the algorithm's name and four parameters.
    pub(crate) args: Vec<Vec<u8>>,
    key_suffixes: Vec<String>,
}

impl PreparedPolicy {
    pub(crate) fn new(policy: &Policy) -> Self {
        let limits: Vec<LimitArgs> = policy
            .limits()
            .iter()
            .map(|l| LimitArgs::new(l.name(), l.limiter(), policy.plan()))
            .collect();
        // A script name with no file (an algorithm's mistake) sends the
        // name anyway: `check.lua` answers "unknown algorithm", an error
        // the store reports, rather than a wrong script.
        let files = limits
            .iter()
            .fold(0, |set, l| set | file_bit(l.call.script).unwrap_or(0));
        let mut args = Vec::with_capacity(limits.len() * 5);
        for limit in &limits {
            args.push(limit.call.script.as_bytes().to_vec());
            args.extend(limit.call.params.iter().map(|p| p.to_string().into_bytes()));
        }
        PreparedPolicy {
            script: script_for(files, Entry::Check),
            share_script: script_for(files, Entry::Share),
            refund_script: script_for(files, Entry::Refund),
            debit_script: script_for(files, Entry::Debit),
            local_first: tollgate_store::shared::supports(policy).is_ok(),
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

    /// The call that decides one request of `cost` for `key`:
    /// `FCALL function numkeys keys… cost now deadline params…` (with
    /// `functions`; else `EVALSHA sha …`), written straight into the
    /// command's buffer. `now` is the time in µs, or
    /// `None` for the script to read the server's clock; `deadline`, in the
    /// server's µs, the moment after which the script charges nothing.
    pub(crate) fn command(
        &self,
        prefix: &str,
        key: &Key,
        cost: u32,
        now: Option<u64>,
        deadline: Option<u64>,
        functions: bool,
    ) -> Cmd {
        let count = self.key_suffixes.len();
        let mut command = Cmd::with_capacity(5 + count + self.args.len(), 256);
        self.script.start(&mut command, functions);
        command.arg(count);
        self.for_each_key(prefix, key, |name| {
            command.arg(name);
        });
        command.arg(cost);
        for micros in [now, deadline] {
            optional_arg(&mut command, micros);
        }
        for arg in &self.args {
            command.arg(arg.as_slice());
        }
        command
    }

    /// The call that gives `refund` back for `key` (`refund.lua`):
    /// `FCALL function numkeys keys… cost now charged_at ago resets…
    /// params…` (or `EVALSHA sha …`, as [`command`](Self::command)). Times in µs; a charge time or reset unknown is "".
    pub(crate) fn refund_command(
        &self,
        prefix: &str,
        key: &Key,
        refund: &tollgate_store::PolicyRefund,
        now: Option<u64>,
        functions: bool,
    ) -> Cmd {
        let count = self.key_suffixes.len();
        let mut command = Cmd::with_capacity(7 + 2 * count + self.args.len(), 256);
        self.refund_script.start(&mut command, functions);
        command.arg(count);
        self.for_each_key(prefix, key, |name| {
            command.arg(name);
        });
        let micros = |nanos: u64| nanos / 1_000;
        let ago = u64::try_from(refund.ago.as_micros()).unwrap_or(u64::MAX);
        command.arg(refund.cost);
        for value in [now, refund.charged_at().map(micros), Some(ago)] {
            optional_arg(&mut command, value);
        }
        for index in 0..count {
            optional_arg(&mut command, refund.resets.get(index).copied().map(micros));
        }
        for arg in &self.args {
            command.arg(arg.as_slice());
        }
        command
    }

    /// The call that charges `cost` into debt for `key` (`debit.lua`):
    /// `FCALL function numkeys keys… cost now params…` (or `EVALSHA sha …`).
    pub(crate) fn debit_command(
        &self,
        prefix: &str,
        key: &Key,
        cost: u32,
        now: Option<u64>,
        functions: bool,
    ) -> Cmd {
        let count = self.key_suffixes.len();
        let mut command = Cmd::with_capacity(5 + count + self.args.len(), 256);
        self.debit_script.start(&mut command, functions);
        command.arg(count);
        self.for_each_key(prefix, key, |name| {
            command.arg(name);
        });
        command.arg(cost);
        optional_arg(&mut command, now);
        for arg in &self.args {
            command.arg(arg.as_slice());
        }
        command
    }

    /// The local-first store's call (`share.lua`) for `key`: a
    /// reservation or a sync, `FCALL function numkeys keys… op now a b c
    /// params…` (or `EVALSHA sha …`).
    pub(crate) fn share_command(
        &self,
        prefix: &str,
        key: &Key,
        op: ShareOp,
        now: Option<u64>,
        functions: bool,
    ) -> Cmd {
        let count = self.key_suffixes.len();
        let sync = matches!(op, ShareOp::Sync { .. });
        let keys = if sync { count + 2 } else { 2 * count };
        let mut command = Cmd::with_capacity(12 + keys + self.args.len() + count, 256);
        self.share_script.start(&mut command, functions);
        command.arg(keys);
        self.for_each_key(prefix, key, |name| {
            command.arg(name);
        });
        if !sync {
            // What instances hold of each limit, beside its state.
            self.for_each_key(prefix, key, |name| {
                let mut held = String::with_capacity(name.len() + HELD_SUFFIX.len());
                held.push_str(name);
                held.push_str(HELD_SUFFIX);
                command.arg(held);
            });
        }
        if sync {
            let mut name = String::with_capacity(prefix.len() + 40);
            name.push_str(prefix);
            name.push_str(":{");
            push_user_key(&mut name, key);
            name.push_str(SEQUENCES_SUFFIX);
            command.arg(name);
            // The shares of this policy's limits: beside its first limit's
            // state, so that policies sharing that state share them too.
            let mut first = true;
            self.for_each_key(prefix, key, |name| {
                if std::mem::take(&mut first) {
                    command.arg(share_key(name));
                }
            });
        }
        let (name, args) = match &op {
            &ShareOp::Reserve {
                need,
                want,
                fanout,
                holder,
                held,
                hold_micros,
                ahead_micros,
                report,
            } => (
                "reserve",
                [
                    u64::from(need),
                    want,
                    u64::from(fanout),
                    holder,
                    held,
                    hold_micros,
                    ahead_micros,
                    report,
                ],
            ),
            &ShareOp::Sync {
                spent,
                instance,
                sequence,
                life_micros,
                instances,
                need,
                left,
                want,
            } => (
                "sync",
                [
                    spent,
                    instance,
                    sequence,
                    life_micros,
                    u64::from(instances),
                    u64::from(need),
                    left,
                    want,
                ],
            ),
            ShareOp::Refund {
                cost,
                holder,
                report,
                ago_micros,
                ..
            } => (
                "refund",
                [u64::from(*cost), *holder, *report, *ago_micros, 0, 0, 0, 0],
            ),
        };
        command.arg(name);
        optional_arg(&mut command, now);
        for arg in args {
            command.arg(arg);
        }
        for arg in &self.args {
            command.arg(arg.as_slice());
        }
        if let ShareOp::Refund { resets, .. } = &op {
            for index in 0..count {
                optional_arg(&mut command, resets.get(index).map(|nanos| nanos / 1_000));
            }
        }
        command
    }

    /// Reads `share.lua`'s reply: three integers, read by `read` (the
    /// operation's [`ShareOp::reader`]), then what
    /// [`verdict`](Self::verdict) reads.
    pub(crate) fn share_reply(
        &self,
        read: fn([i64; 3]) -> ShareOutcome,
        reply: &[i64],
    ) -> (Option<u64>, Result<ShareReply, RedisStoreError>) {
        let Some((head, rest)) = reply.split_first_chunk::<3>() else {
            return (
                None,
                Err(RedisStoreError::unexpected_reply("a short reply")),
            );
        };
        let (server_now, verdict) = self.verdict(rest);
        let reply = verdict.map(|decision| ShareReply {
            outcome: read(*head),
            decision,
            server_micros: server_now.unwrap_or(0),
        });
        (server_now, reply)
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
        (server_now, Ok(self.decisions(fields, server_now)))
    }

    /// The verdict of `fields`, seven per limit, decided at `server_now`
    /// (µs; the script's clock, which a refund's charge time is read on).
    fn decisions(&self, fields: &[i64], server_now: Option<u64>) -> PolicyDecision {
        let verdict = PolicyDecision::new(fields.chunks_exact(FIELDS).map(decision));
        match server_now {
            Some(micros) if verdict.merged().allowed() => {
                verdict.charged(micros.saturating_mul(1_000))
            }
            _ => verdict,
        }
    }
}

/// A number argument, or "" for none (the scripts' "unknown" or "read the
/// server's clock").
fn optional_arg(command: &mut Cmd, value: Option<u64>) {
    match value {
        Some(value) => command.arg(value),
        None => command.arg(""),
    };
}

/// The end of the key that holds the instances' sync sequence numbers:
/// `~` is not allowed in limit names, so it is no limit's key.
const SEQUENCES_SUFFIX: &str = "}:~sync";

/// After a limit's state key: the hash of what instances hold of it (see
/// `held` in gcra.lua).
const HELD_SUFFIX: &str = "~held";

/// The key of the shares periodic instances were given of a policy whose
/// first limit's state is at `state`.
pub(crate) fn share_key(state: &str) -> String {
    let mut share = String::with_capacity(state.len() + SHARE_SUFFIX.len());
    share.push_str(state);
    share.push_str(SHARE_SUFFIX);
    share
}

/// See [`share_key`].
const SHARE_SUFFIX: &str = "~share";

/// The key of what instances hold of the limit whose state is at `state`.
pub(crate) fn held_key(state: &str) -> String {
    let mut held = String::with_capacity(state.len() + HELD_SUFFIX.len());
    held.push_str(state);
    held.push_str(HELD_SUFFIX);
    held
}

/// How many integers the scripts send per limit (`decision` in prelude.lua).
const FIELDS: usize = 7;

/// What the scripts send for "never" (`NEVER` in prelude.lua).
const NEVER: i64 = -1;

/// One limit's seven integers as a [`Decision`]; times come in microseconds.
/// Negative times other than a retry's `NEVER` read as 0; a negative
/// remaining count is a window's debt: remaining 0, that many units
/// [`over the limit`](Decision::over_limit).
fn decision(fields: &[i64]) -> Decision {
    let count = |v: i64| u64::try_from(v).unwrap_or(0);
    let nanos = |v: i64| u64::try_from(v).unwrap_or(0).saturating_mul(1_000);
    let over_limit = fields[2].checked_neg().map_or(0, count);
    Decision::from(DecisionFields {
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
    })
    .with_over_limit(over_limit)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tollgate_core::{Algorithm, Quota, Refill, TokenBucket};

    #[test]
    fn every_algorithm_runs_a_script_that_a_lua_file_registers() {
        let quota = Quota::per_second(10);
        let interval = Limiter::TokenBucket(TokenBucket::new(quota).with_refill(Refill::Interval));
        let limiters = Algorithm::ALL
            .iter()
            .map(|a| Limiter::new(*a, quota))
            .chain([interval]);
        for limiter in limiters {
            let call = limiter.script();
            let Some(bit) = file_bit(call.script) else {
                panic!(
                    "{}: no Lua file named {:?}",
                    limiter.algorithm(),
                    call.script
                );
            };
            let (stem, source) = LUA_FILES[bit.trailing_zeros() as usize];
            let registers = format!("ALGORITHMS.{stem} = {{");
            assert!(
                source.contains(&registers),
                "{stem}.lua lacks `{registers}`"
            );
            assert!(script_for(bit, Entry::Check).source.contains(&registers));
        }
    }

    #[test]
    fn never_is_only_a_retry_and_other_negative_times_are_zero() {
        let never = decision(&[0, 5, 0, 2_000, NEVER, 0, 1_000]);
        assert_eq!(never.retry_after_nanos(), Decision::NEVER_NANOS);
        assert!(!never.can_ever_pass());
        assert_eq!(never.reset_after_nanos(), 2_000_000);
        assert_eq!(never.replenish_after_nanos(), 1_000_000);
        let odd = decision(&[1, 5, 4, -1, 0, -7, -3]);
        assert_eq!(
            (
                odd.reset_after_nanos(),
                odd.wait_nanos(),
                odd.replenish_after_nanos()
            ),
            (0, 0, 0)
        );
        assert_eq!(
            decision(&[0, 5, 0, 0, 250, 0, 0]).retry_after_nanos(),
            250_000
        );
    }

    #[test]
    fn policies_with_the_same_algorithms_share_one_script() {
        use tollgate_core::{Algorithm, Quota};
        use tollgate_store::NamedLimit;
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
