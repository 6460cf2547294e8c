//! A key's value: its limits' states, and, once a local-first store has
//! shared through the key, the bookkeeping kept beside them (what Redis
//! keeps in keys of their own beside the states: see `share.lua`).
//!
//! What the store writes: [`WITH_QUOTAS`] (0xB2), the number of limits
//! (`u32`), each limit's quota as it was written under (limit, period in
//! ns, burst: three `u64`), then one of the two forms that came before
//! it, told apart by their first byte:
//!
//! - `encode_states` alone (its version byte, 1): a key no local-first
//!   store has touched, byte for byte what the store wrote before the
//!   bookkeeping existed;
//! - [`WITH_BOOKS`] (0xB1: far above the states' format versions, which
//!   count up from 1), the states' length (`u32`, little-endian), the
//!   states as `encode_states` writes them, then the [`Books`].
//!
//! A value in one of those two forms alone (written before the quotas
//! were) still reads: its states are taken as written under the quotas
//! of the policy that reads them, as that version read them.
//!
//! Every number of the books is a `u64`, little-endian; every list starts
//! with its length as a `u32`. Bytes that do not read as one of the forms
//! are an error, never a fresh key: a count lost would be admitted again.

use smallvec::SmallVec;
use std::time::Duration;
use tollgate_core::{Quota, State, StateBytesError, decode_states, encode_states};

/// A key's states, one per limit of its policy, in order.
pub(super) type States = SmallVec<[State; 2]>;

/// The quotas a key's states were written under, one per limit, in order.
pub(super) type Quotas = SmallVec<[Quota; 2]>;

/// The first byte of a value that says what quotas its states were
/// written under.
pub(super) const WITH_QUOTAS: u8 = 0xB2;

/// The first byte of a value that carries [`Books`].
pub(super) const WITH_BOOKS: u8 = 0xB1;

/// What a local-first store's calls keep beside a key's states.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Books {
    /// Exact mode, per limit of the policy (empty for a limit that does
    /// not count held units): what each holder holds, and what holders
    /// spent of counts that left.
    pub(super) limits: Vec<LimitBooks>,
    /// Periodic mode: each instance's last report number, and how long it
    /// is kept.
    pub(super) sequences: Vec<Sequence>,
    /// Periodic mode: the live shares.
    pub(super) shares: Vec<Share>,
}

/// One limit's held counts (see `held` in gcra.lua).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct LimitBooks {
    pub(super) held: Vec<Held>,
    pub(super) spent: Vec<Spent>,
}

/// A holder's count of units it holds unspent, until `expiry` (ns), as
/// reservation number `report` recorded it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Held {
    pub(super) holder: u64,
    pub(super) units: u64,
    pub(super) expiry: u64,
    pub(super) report: u64,
}

/// What a holder had spent of the count reservation `report` recorded,
/// when that count left at `at` (ns): charged from then on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Spent {
    pub(super) holder: u64,
    pub(super) report: u64,
    pub(super) units: u64,
    pub(super) at: u64,
}

/// An instance's last applied report, kept until `until` (ns).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Sequence {
    pub(super) instance: u64,
    pub(super) sequence: u64,
    pub(super) until: u64,
}

/// An instance's share: what it may have outstanding until `expiry`
/// (ns), and what it wants beyond it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Share {
    pub(super) instance: u64,
    pub(super) units: u64,
    pub(super) expiry: u64,
    pub(super) short: u64,
}

impl Books {
    /// Whether there is nothing to keep: the value is then the states
    /// alone.
    pub(super) fn is_empty(&self) -> bool {
        self.limits
            .iter()
            .all(|l| l.held.is_empty() && l.spent.is_empty())
            && self.sequences.is_empty()
            && self.shares.is_empty()
    }

    /// The books of `limit`, made if missing.
    pub(super) fn limit(&mut self, limit: usize) -> &mut LimitBooks {
        if self.limits.len() <= limit {
            self.limits.resize_with(limit + 1, LimitBooks::default);
        }
        &mut self.limits[limit]
    }
}

/// The value for `states` and `books`, written under `quotas`.
pub(super) fn encode(
    states: &[State],
    books: &Books,
    quotas: impl ExactSizeIterator<Item = Quota>,
    out: &mut Vec<u8>,
) {
    out.push(WITH_QUOTAS);
    put_len(out, quotas.len());
    for quota in quotas {
        put(out, &[quota.limit(), quota.period_nanos(), quota.burst()]);
    }
    encode_without_quotas(states, books, out);
}

/// The form a value had before it said its quotas.
fn encode_without_quotas(states: &[State], books: &Books, out: &mut Vec<u8>) {
    if books.is_empty() {
        encode_states(states, out);
        return;
    }
    out.push(WITH_BOOKS);
    let at = out.len();
    out.extend_from_slice(&[0; 4]);
    encode_states(states, out);
    let length = u32::try_from(out.len() - at - 4).unwrap_or(u32::MAX);
    out[at..at + 4].copy_from_slice(&length.to_le_bytes());
    put_len(out, books.limits.len());
    for limit in &books.limits {
        put_len(out, limit.held.len());
        for h in &limit.held {
            put(out, &[h.holder, h.units, h.expiry, h.report]);
        }
        put_len(out, limit.spent.len());
        for s in &limit.spent {
            put(out, &[s.holder, s.report, s.units, s.at]);
        }
    }
    put_len(out, books.sequences.len());
    for s in &books.sequences {
        put(out, &[s.instance, s.sequence, s.until]);
    }
    put_len(out, books.shares.len());
    for s in &books.shares {
        put(out, &[s.instance, s.units, s.expiry, s.short]);
    }
}

/// The states and books `bytes` hold, and the quotas they were written
/// under (`None` for a value written before values said so), or why they
/// hold none of the forms.
pub(super) fn decode(bytes: &[u8]) -> Result<(States, Books, Option<Quotas>), StateBytesError> {
    if bytes.first() != Some(&WITH_QUOTAS) {
        let (states, books) = decode_without_quotas(bytes)?;
        return Ok((states, books, None));
    }
    let mut input = Input { bytes, at: 1 };
    let mut quotas = Quotas::new();
    for _ in 0..input.count(24)? {
        let at = input.at;
        let [limit, period, burst] = input.words()?;
        let quota = Quota::new(limit, Duration::from_nanos(period))
            .and_then(|quota| quota.with_burst(burst))
            .map_err(|_| StateBytesError::Malformed {
                at,
                what: "a quota no limit can have",
            })?;
        quotas.push(quota);
    }
    let rest = input.at;
    let (states, books) =
        decode_without_quotas(&bytes[rest..]).map_err(|error| shifted(error, rest))?;
    Ok((states, books, Some(quotas)))
}

/// A value of the forms before [`WITH_QUOTAS`].
fn decode_without_quotas(bytes: &[u8]) -> Result<(States, Books), StateBytesError> {
    if bytes.first() != Some(&WITH_BOOKS) {
        return Ok((decode_states(bytes)?, Books::default()));
    }
    let mut input = Input { bytes, at: 1 };
    let length = input.u32()? as usize;
    let start = input.at;
    let end = start
        .checked_add(length)
        .filter(|&end| end <= bytes.len())
        .ok_or(StateBytesError::Truncated { at: bytes.len() })?;
    let states = decode_states(&bytes[start..end]).map_err(|error| shifted(error, start))?;
    input.at = end;
    let mut books = Books::default();
    for _ in 0..input.count(8)? {
        let mut limit = LimitBooks::default();
        for _ in 0..input.count(32)? {
            let [holder, units, expiry, report] = input.words()?;
            limit.held.push(Held {
                holder,
                units,
                expiry,
                report,
            });
        }
        for _ in 0..input.count(32)? {
            let [holder, report, units, at] = input.words()?;
            limit.spent.push(Spent {
                holder,
                report,
                units,
                at,
            });
        }
        books.limits.push(limit);
    }
    for _ in 0..input.count(24)? {
        let [instance, sequence, until] = input.words()?;
        books.sequences.push(Sequence {
            instance,
            sequence,
            until,
        });
    }
    for _ in 0..input.count(32)? {
        let [instance, units, expiry, short] = input.words()?;
        books.shares.push(Share {
            instance,
            units,
            expiry,
            short,
        });
    }
    if input.at != bytes.len() {
        return Err(StateBytesError::Trailing { at: input.at });
    }
    Ok((states, books))
}

/// An error of the states' bytes, with its offset in the whole value.
fn shifted(error: StateBytesError, by: usize) -> StateBytesError {
    match error {
        StateBytesError::Truncated { at } => StateBytesError::Truncated { at: at + by },
        StateBytesError::Trailing { at } => StateBytesError::Trailing { at: at + by },
        StateBytesError::Malformed { at, what } => StateBytesError::Malformed { at: at + by, what },
        StateBytesError::Algorithm { tag, at } => StateBytesError::Algorithm { tag, at: at + by },
        other => other,
    }
}

fn put_len(out: &mut Vec<u8>, len: usize) {
    out.extend_from_slice(&u32::try_from(len).unwrap_or(u32::MAX).to_le_bytes());
}

fn put(out: &mut Vec<u8>, words: &[u64]) {
    for word in words {
        out.extend_from_slice(&word.to_le_bytes());
    }
}

/// The books' bytes, read in order.
struct Input<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Input<'_> {
    fn take<const N: usize>(&mut self) -> Result<[u8; N], StateBytesError> {
        let end = self
            .at
            .checked_add(N)
            .filter(|&end| end <= self.bytes.len());
        let Some(end) = end else {
            return Err(StateBytesError::Truncated { at: self.at });
        };
        let mut out = [0; N];
        out.copy_from_slice(&self.bytes[self.at..end]);
        self.at = end;
        Ok(out)
    }

    fn u32(&mut self) -> Result<u32, StateBytesError> {
        self.take::<4>().map(u32::from_le_bytes)
    }

    /// A list's length, refused when the bytes left cannot hold that many
    /// entries of `size` bytes (before anything is allocated for them).
    fn count(&mut self, size: usize) -> Result<usize, StateBytesError> {
        let at = self.at;
        let count = self.u32()? as usize;
        if count.saturating_mul(size) > self.bytes.len() - self.at {
            return Err(StateBytesError::Truncated { at });
        }
        Ok(count)
    }

    fn words<const N: usize>(&mut self) -> Result<[u64; N], StateBytesError> {
        let mut words = [0; N];
        for word in &mut words {
            *word = u64::from_le_bytes(self.take::<8>()?);
        }
        Ok(words)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tollgate_core::GcraState;

    fn states() -> States {
        SmallVec::from_vec(vec![State::Gcra(GcraState { tat: 42 })])
    }

    fn quotas() -> Quotas {
        SmallVec::from_vec(vec![Quota::per_minute(5).with_burst(7).unwrap()])
    }

    #[test]
    fn a_value_says_its_quotas_before_the_states_alone() {
        let mut plain = Vec::new();
        encode_states(&states(), &mut plain);
        let mut value = Vec::new();
        encode(
            &states(),
            &Books::default(),
            quotas().into_iter(),
            &mut value,
        );
        assert_eq!(value[0], WITH_QUOTAS);
        assert_eq!(&value[value.len() - plain.len()..], &plain[..]);
        assert_eq!(
            decode(&value).unwrap(),
            (states(), Books::default(), Some(quotas()))
        );
        // A value written before quotas were: its states, no quotas.
        assert_eq!(decode(&plain).unwrap(), (states(), Books::default(), None));
    }

    #[test]
    fn a_quota_no_limit_can_have_is_an_error() {
        let mut value = Vec::new();
        encode(
            &states(),
            &Books::default(),
            quotas().into_iter(),
            &mut value,
        );
        // The limit (bytes 5 to 12) made 0.
        value[5..13].copy_from_slice(&0u64.to_le_bytes());
        assert!(matches!(
            decode(&value),
            Err(StateBytesError::Malformed { at: 5, .. })
        ));
    }

    #[test]
    fn books_come_back_as_written_and_cut_values_are_errors() {
        let books = Books {
            limits: vec![LimitBooks {
                held: vec![Held {
                    holder: 7,
                    units: 3,
                    expiry: 1_000,
                    report: 2,
                }],
                spent: vec![Spent {
                    holder: 8,
                    report: 1,
                    units: 4,
                    at: 900,
                }],
            }],
            sequences: vec![Sequence {
                instance: 9,
                sequence: 5,
                until: 800,
            }],
            shares: vec![Share {
                instance: 9,
                units: 10,
                expiry: 2_000,
                short: 1,
            }],
        };
        let mut value = Vec::new();
        encode(&states(), &books, quotas().into_iter(), &mut value);
        assert_eq!(value[0], WITH_QUOTAS);
        assert_eq!(value[5 + 24], WITH_BOOKS);
        assert_eq!(decode(&value).unwrap(), (states(), books, Some(quotas())));
        for cut in 0..value.len() {
            assert!(decode(&value[..cut]).is_err(), "cut at {cut}");
        }
        value.push(0);
        assert!(matches!(
            decode(&value),
            Err(StateBytesError::Trailing { .. })
        ));
    }
}
