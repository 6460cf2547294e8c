//! One attempt's decision, from what the backend read: the answer, and
//! the value to write for it, if any. No I/O; the same semantics as the
//! memory store's (`store/memory.rs`), operation by operation.

use super::backend::Snapshot;
use super::error::CasError;
use super::share;
use super::value::{self, Books, States};
use bytes::Bytes;
use smallvec::SmallVec;
use std::sync::Arc;
use tollgate_core::{Decision, Limiter};
use tollgate_store::Policy;
use tollgate_store::shared::ShareOp;
use tollgate_store::{PolicyDecision, PolicyRefund};

/// What a call does to a key's states.
#[derive(Clone, Debug)]
pub(super) enum Op {
    /// A request of this cost, all limits or none.
    Check(u32),
    /// Each limit's state now, charging nothing.
    Peek,
    /// A charge given back.
    Refund(PolicyRefund),
    /// Units charged whatever the limits say, each limit its own (a debit:
    /// the same for each; a carried plan: what each used).
    Force(SmallVec<[u32; 2]>),
    /// The side of a carry a key leaves (see `tollgate_store::Carried`):
    /// each limit that moved made fresh (`None`), each that stays charged
    /// its units.
    Release(SmallVec<[Option<u32>; 2]>),
    /// The key forgotten.
    Reset,
    /// A local-first store's reservation, sync or give-back.
    Share(ShareOp),
}

/// What a call answers: the limits' decision, and for a local-first
/// store's operation the three numbers before it (see
/// [`tollgate_store::shared::ShareReply`]); when the backend read its clock (ns).
#[derive(Clone, Debug)]
pub(super) struct Reply {
    pub(super) decision: PolicyDecision,
    pub(super) head: [i64; 3],
    pub(super) now: u64,
}

/// What an attempt decided.
#[derive(Debug)]
pub(super) enum Step {
    /// The answer, with nothing to write.
    Answer(Reply),
    /// The answer, once `bytes` are written in place of what was read.
    Write {
        bytes: Bytes,
        expires_at: u64,
        answer: Reply,
    },
}

impl Step {
    /// The step with `head` before its decision.
    fn with_head(self, head: [i64; 3]) -> Step {
        match self {
            Step::Answer(reply) => Step::Answer(Reply { head, ..reply }),
            Step::Write {
                bytes,
                expires_at,
                answer,
            } => Step::Write {
                bytes,
                expires_at,
                answer: Reply { head, ..answer },
            },
        }
    }
}

/// Decides `op` for the value `snapshot` read under `name`, a key of
/// `policy`.
pub(super) fn decide<E>(
    policy: &Policy,
    name: &Arc<str>,
    op: &Op,
    snapshot: &Snapshot,
) -> Result<Step, CasError<E>> {
    let now = snapshot.now;
    // An empty value is a reset key: no state, as a key never seen.
    let stored = snapshot
        .value
        .as_ref()
        .map(|value| &value.bytes)
        .filter(|bytes| !bytes.is_empty());
    if let Op::Reset = op {
        return Ok(reset(policy, stored, now));
    }
    let read = match stored {
        Some(bytes) => Some(states_of(policy, name, bytes, now)?),
        None => None,
    };
    let known = read.is_some();
    let (before, books, requoted) =
        read.unwrap_or_else(|| (fresh(policy), Books::default(), false));
    let key = Key {
        policy,
        before: &before,
        books: &books,
        requoted,
        now,
    };
    let mut states = before.clone();
    match op {
        Op::Check(cost) => {
            let (merged, each) = policy.check_states(&mut states, now, *cost);
            if !merged.allowed() {
                // A refusal charges nothing: nothing to write, but for
                // states read under other quotas, written under these
                // from now on.
                let answer = PolicyDecision::new(each);
                if requoted {
                    return Ok(key.settled(states, &books, answer));
                }
                return Ok(Step::Answer(reply(answer, now)));
            }
            let answer = PolicyDecision::new(each).charged(now);
            Ok(key.write_if_changed(&states, &books, rest_at(policy, now, &merged), answer))
        }
        Op::Peek => {
            let (_, each) = policy.check_states(&mut states, now, 0);
            Ok(Step::Answer(reply(PolicyDecision::new(each), now)))
        }
        Op::Refund(refund) => {
            // A key the backend no longer holds has nothing to give back.
            if !known {
                return Ok(Step::Answer(reply(nothing(), now)));
            }
            let limits = policy.limiters().iter().zip(states.iter_mut());
            for (index, (limiter, state)) in limits.enumerate() {
                limiter.refund(state, refund.for_limit(index, now), now);
            }
            Ok(key.settled(states, &books, nothing()))
        }
        Op::Force(units) => {
            let limits = policy.limiters().iter().zip(states.iter_mut());
            for ((limiter, state), units) in limits.zip(units.iter()) {
                if *units > 0 {
                    limiter.debit(state, now, *units);
                }
            }
            Ok(key.settled(states, &books, nothing()))
        }
        Op::Release(kept) => {
            let limits = policy.limiters().iter().zip(states.iter_mut());
            for ((limiter, state), kept) in limits.zip(kept.iter()) {
                match kept {
                    None => *state = limiter.new_state(),
                    Some(0) => {}
                    Some(units) => limiter.debit(state, now, *units),
                }
            }
            Ok(key.settled(states, &books, nothing()))
        }
        Op::Share(op) => {
            let mut new_books = books.clone();
            let answer = share::run(policy, &mut states, &mut new_books, now, op);
            Ok(key
                .settled(states, &new_books, answer.decision)
                .with_head(answer.head))
        }
        Op::Reset => Ok(Step::Answer(reply(nothing(), now))),
    }
}

/// A reset: the key replaced by nothing, at rest at once, but for the
/// instances' last report numbers (periodic local-first), which are kept
/// as the Redis store keeps its `~sync` hash through a reset: a report
/// sent before the reset and sent again after it is not counted twice. A
/// value that cannot be read is replaced all the same.
fn reset(policy: &Policy, stored: Option<&Bytes>, now: u64) -> Step {
    let Some(bytes) = stored else {
        return Step::Answer(reply(nothing(), now));
    };
    let sequences = value::decode(bytes)
        .map(|(_, books, _)| books.sequences)
        .unwrap_or_default();
    let (bytes, expires_at) = if sequences.is_empty() {
        (Bytes::new(), now)
    } else {
        let books = Books {
            sequences,
            ..Books::default()
        };
        let mut bytes = Vec::new();
        value::encode(&fresh(policy), &books, quotas(policy), &mut bytes);
        (Bytes::from(bytes), share::books_rest(policy, &books))
    };
    Step::Write {
        bytes,
        expires_at,
        answer: reply(nothing(), now),
    }
}

/// A plain answer: the decision alone.
fn reply(decision: PolicyDecision, now: u64) -> Reply {
    Reply {
        decision,
        head: [0; 3],
        now,
    }
}

/// What a call read of its key.
struct Key<'a> {
    policy: &'a Policy,
    before: &'a States,
    books: &'a Books,
    /// Whether `before` was read from states written under other quotas
    /// (and must be written under these, even unchanged).
    requoted: bool,
    now: u64,
}

impl Key<'_> {
    /// `states` and `books` after a refund, a debit or a local-first
    /// store's operation: written, kept until back at rest.
    fn settled(&self, states: States, books: &Books, answer: PolicyDecision) -> Step {
        let (rest, _) = self.policy.check_states(&mut states.clone(), self.now, 0);
        let rest = rest_at(self.policy, self.now, &rest);
        self.write_if_changed(&states, books, rest, answer)
    }

    /// A write of `states` and `books` if they differ from what was read
    /// (or, for a key that held nothing, from a fresh key's); the answer
    /// alone if not. Kept until the states are back at rest and the books
    /// hold nothing that still matters.
    fn write_if_changed(
        &self,
        states: &States,
        books: &Books,
        rest: u64,
        answer: PolicyDecision,
    ) -> Step {
        let answer = reply(answer, self.now);
        if states == self.before && books == self.books && !self.requoted {
            return Step::Answer(answer);
        }
        let mut bytes = Vec::with_capacity(8 + 36 * states.len());
        value::encode(states, books, quotas(self.policy), &mut bytes);
        Step::Write {
            bytes: Bytes::from(bytes),
            expires_at: rest.max(share::books_rest(self.policy, books)),
            answer,
        }
    }
}

/// The key's states as `bytes` hold them, one per limit of `policy`, read
/// at `now` under the policy's quotas ([`Limiter::read_as`]: a state
/// written under another quota, by a process configured otherwise, is
/// the same usage under this one), the books beside them, and whether any
/// state was written under another quota.
fn states_of<E>(
    policy: &Policy,
    name: &Arc<str>,
    bytes: &[u8],
    now: u64,
) -> Result<(States, Books, bool), CasError<E>> {
    let (mut states, books, written_under) =
        value::decode(bytes).map_err(|error| CasError::Unreadable {
            key: name.clone(),
            error,
        })?;
    let limiters = policy.limiters();
    let counts = written_under.as_ref().map_or(states.len(), |q| q.len());
    if states.len() != limiters.len() || counts != limiters.len() {
        return Err(CasError::Mismatched {
            key: name.clone(),
            states: states.len(),
            limits: limiters.len(),
        });
    }
    let mut requoted = false;
    for (index, quota) in written_under.iter().flatten().enumerate() {
        if *quota != limiters[index].quota() {
            states[index] = limiters[index].read_as(*quota, &states[index], now);
            requoted = true;
        }
    }
    Ok((states, books, requoted))
}

/// The quotas `policy`'s states are written under.
fn quotas(policy: &Policy) -> impl ExactSizeIterator<Item = tollgate_core::Quota> + '_ {
    policy.limiters().iter().map(Limiter::quota)
}

/// The states of a key never seen.
fn fresh(policy: &Policy) -> States {
    policy.limiters().iter().map(Limiter::new_state).collect()
}

/// When a key decided `merged` at `now` is back at rest: whole again, and
/// holding nothing a fresh key would not (as the memory store reckons it).
fn rest_at(policy: &Policy, now: u64, merged: &Decision) -> u64 {
    now.saturating_add(merged.reset_after_nanos())
        .saturating_add(policy.rest_slack_nanos())
}

/// The answer of a call that decides no request (a refund, a debit, a
/// reset, a policy of no limits): allowed, no limit.
pub(super) fn nothing() -> PolicyDecision {
    PolicyDecision::new([])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Stored;
    use std::convert::Infallible;
    use tollgate_core::{Algorithm, Quota, State, encode_states};
    use tollgate_store::NamedLimit;

    const SECOND: u64 = 1_000_000_000;

    fn snapshot(now: u64, bytes: Option<Bytes>) -> Snapshot {
        Snapshot {
            now,
            value: bytes.map(|bytes| Stored { bytes, version: 1 }),
        }
    }

    fn run(policy: &Policy, op: Op, snapshot: &Snapshot) -> Result<Step, CasError<Infallible>> {
        decide(policy, &Arc::from("k"), &op, snapshot)
    }

    #[test]
    fn a_refusal_a_peek_and_a_free_check_write_nothing() {
        let policy = Policy::new(vec![NamedLimit::new("api", Quota::per_minute(1))]);
        let Ok(Step::Write { bytes, .. }) = run(&policy, Op::Check(1), &snapshot(SECOND, None))
        else {
            panic!("an admission writes");
        };
        let full = snapshot(SECOND, Some(bytes));
        for op in [Op::Check(1), Op::Peek, Op::Check(0)] {
            assert!(
                matches!(run(&policy, op.clone(), &full), Ok(Step::Answer(_))),
                "{op:?}"
            );
        }
        // Nothing to give back to a key that is not there, nothing to
        // forget either.
        let refund = PolicyRefund::of(&nothing(), 1, std::time::Duration::ZERO);
        let empty = snapshot(SECOND, None);
        assert!(matches!(
            run(&policy, Op::Refund(refund), &empty),
            Ok(Step::Answer(_))
        ));
        assert!(matches!(
            run(&policy, Op::Reset, &empty),
            Ok(Step::Answer(_))
        ));
    }

    #[test]
    fn a_write_expires_when_the_key_is_back_at_rest() {
        let policy = Policy::new(vec![
            NamedLimit::new("minute", Quota::per_minute(10)).with_algorithm(Algorithm::FixedWindow),
            NamedLimit::new("second", Quota::per_second(2)),
        ]);
        // 90 s into the epoch: the minute's window ends at 120 s.
        let Ok(Step::Write { expires_at, .. }) =
            run(&policy, Op::Check(1), &snapshot(90 * SECOND, None))
        else {
            panic!("an admission writes");
        };
        assert_eq!(expires_at, 120 * SECOND);
        // A reset: nothing, at rest at once.
        let stored = snapshot(90 * SECOND, Some(Bytes::from_static(b"garbage")));
        let Ok(Step::Write {
            bytes, expires_at, ..
        }) = run(&policy, Op::Reset, &stored)
        else {
            panic!("a reset writes");
        };
        assert!(bytes.is_empty());
        assert_eq!(expires_at, 90 * SECOND);
    }

    /// The reply of a step, written or not.
    fn answer(step: Result<Step, CasError<Infallible>>) -> Reply {
        match step {
            Ok(Step::Answer(reply) | Step::Write { answer: reply, .. }) => reply,
            Err(error) => panic!("{error}"),
        }
    }

    #[test]
    fn a_reset_keeps_the_report_numbers_so_a_report_sent_again_counts_once() {
        let policy = Policy::new(vec![NamedLimit::new("api", Quota::per_minute(10))]);
        let sync = Op::Share(ShareOp::Sync {
            spent: 3,
            instance: 7,
            sequence: 1,
            life_micros: 1_000_000,
            instances: 0,
            need: 0,
            left: 0,
            want: 1,
        });
        let Ok(Step::Write {
            bytes,
            answer: first,
            ..
        }) = run(&policy, sync.clone(), &snapshot(SECOND, None))
        else {
            panic!("a report is written");
        };
        assert_eq!(first.head[0], 1, "applied");
        assert_eq!(first.decision.each()[0].remaining(), 7);
        let Ok(Step::Write { bytes, .. }) = run(&policy, Op::Reset, &snapshot(SECOND, Some(bytes)))
        else {
            panic!("a reset writes");
        };
        // The key is whole again, and the report sent again is not
        // counted a second time.
        let again = answer(run(&policy, sync, &snapshot(SECOND, Some(bytes))));
        assert_eq!(again.head[0], 0, "not applied again");
        assert_eq!(again.decision.each()[0].remaining(), 10);
    }

    #[test]
    fn values_that_are_not_the_policys_states_are_errors() {
        let policy = Policy::new(vec![NamedLimit::new("api", Quota::per_minute(1))]);
        let garbage = snapshot(SECOND, Some(Bytes::from_static(b"\x01\xff\xff")));
        assert!(matches!(
            run(&policy, Op::Check(1), &garbage),
            Err(CasError::Unreadable { .. })
        ));
        let mut two = Vec::new();
        encode_states(
            &[
                State::Gcra(Default::default()),
                State::Gcra(Default::default()),
            ],
            &mut two,
        );
        let other = snapshot(SECOND, Some(Bytes::from(two)));
        assert!(matches!(
            run(&policy, Op::Peek, &other),
            Err(CasError::Mismatched {
                states: 2,
                limits: 1,
                ..
            })
        ));
    }
}
