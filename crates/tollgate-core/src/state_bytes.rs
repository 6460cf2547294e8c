//! States as bytes, for a store that keeps them outside this process (a
//! database row, a key-value store's value): one state with
//! [`State::to_bytes`] and [`State::from_bytes`], a request's limits in
//! one value with [`encode_states`] and [`decode_states`].
//!
//! ```
//! use tollgate_core::{Algorithm, Limiter, Quota, State, decode_states, encode_states};
//!
//! let limiter = Limiter::new(Algorithm::SlidingLog, Quota::per_minute(10));
//! let mut state = limiter.new_state();
//! limiter.check(&mut state, 1_000, 1);
//! limiter.check(&mut state, 2_000, 3);
//! let bytes = state.to_bytes();
//! assert_eq!(State::from_bytes(&bytes), Ok(state.clone()));
//!
//! // Several limits' states, one value.
//! let mut value = Vec::new();
//! encode_states(&[state.clone(), limiter.new_state()], &mut value);
//! let back: Vec<State> = decode_states(&value).unwrap();
//! assert_eq!(back, [state, limiter.new_state()]);
//! // Garbage is refused with an error, never a panic.
//! assert!(State::from_bytes(b"\x01\xff").is_err());
//! ```
//!
//! # The format
//!
//! Compact, versioned and canonical: each state has exactly one encoding,
//! and a byte string that decodes is the encoding of what it decodes to.
//!
//! - One state: the version byte ([`STATE_BYTES_VERSION`], now 1), the
//!   algorithm's tag byte, its body.
//! - Several: the version byte, their count, then each one's tag and body.
//! - Integers are unsigned LEB128 varints (seven bits a byte, the least
//!   significant first; in their shortest form), so small counts and
//!   nearby times take a byte or two.
//!
//! | tag | algorithm | body |
//! |---|---|---|
//! | 1 | GCRA | `tat` |
//! | 2 | token bucket | its state, as for tag 3 |
//! | 3 | interval token bucket | `0`, `full_at` (128 bits) — or `1`, `interval`, `used` |
//! | 4 | leaky bucket | `next_free` |
//! | 5 | fixed window | `window`, `count` |
//! | 6 | sliding log | the entry count `n`; then the first entry's time and cost; then each next entry's time as its difference from the one before (zigzag: entries may be a little out of order) and its cost |
//! | 7 | sliding window | `window`, `previous`, `current` |
//! | 8 | sliding window buckets | `newest`, the ring's length (at most 1,024), each count |
//!
//! A tag is never reused: an algorithm added later takes the next free
//! one. Each algorithm's encoding is written beside it, in its file under
//! `algorithm/`.
//!
//! Decoding refuses with a [`StateBytesError`] anything that is not such
//! an encoding: an unknown version or tag, a truncated or overlong
//! integer, a length the bytes cannot hold, bytes left over. It never
//! panics and never allocates more than the input's length warrants; and
//! every state it accepts can be checked, refunded and charged by its
//! algorithm without a panic (property-tested on random bytes).

use crate::State;
use crate::algorithm::RateAlgorithm;
use std::borrow::Borrow;
use std::fmt;

/// The format version written first in every encoding; decoding refuses
/// any other ([`StateBytesError::Version`]).
pub const STATE_BYTES_VERSION: u8 = 1;

/// Bytes that are not a state's encoding: what [`State::from_bytes`] and
/// [`decode_states`] refuse, with where in the bytes they found it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum StateBytesError {
    /// No bytes at all.
    Empty,
    /// A format version this build does not read (the first byte).
    Version(u8),
    /// An algorithm tag this build does not know, at byte `at`.
    Algorithm {
        /// The tag.
        tag: u8,
        /// Its offset.
        at: usize,
    },
    /// The bytes end inside a state (or a count promises more states or
    /// entries than the bytes can hold), at byte `at`.
    Truncated {
        /// Where the missing bytes were expected.
        at: usize,
    },
    /// A field that no state has, at byte `at`: an integer too large for
    /// its field or not in its shortest form, an unknown variant, a ring
    /// too long.
    Malformed {
        /// The field's offset.
        at: usize,
        /// What is wrong, in a few words.
        what: &'static str,
    },
    /// Bytes left over after the last state, from byte `at`.
    Trailing {
        /// The first byte left over.
        at: usize,
    },
}

impl fmt::Display for StateBytesError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("not a rate-limit state: ")?;
        match self {
            StateBytesError::Empty => f.write_str("no bytes"),
            StateBytesError::Version(version) => write!(
                f,
                "format version {version}, where this build reads version \
                 {STATE_BYTES_VERSION}"
            ),
            StateBytesError::Algorithm { tag, at } => {
                write!(f, "unknown algorithm tag {tag} at byte {at}")
            }
            StateBytesError::Truncated { at } => write!(f, "the bytes end early, at byte {at}"),
            StateBytesError::Malformed { at, what } => write!(f, "{what} at byte {at}"),
            StateBytesError::Trailing { at } => {
                write!(f, "bytes left over after the last state, from byte {at}")
            }
        }
    }
}

impl std::error::Error for StateBytesError {}

/// Appends the encoding of `states` (a request's limits, in their order)
/// to `out`: one value for all of them, read back by [`decode_states`].
pub fn encode_states(states: &[State], out: &mut Vec<u8>) {
    out.push(STATE_BYTES_VERSION);
    put_u64(out, states.len() as u64);
    for state in states {
        state.encode_tagged(out);
    }
}

/// The states [`encode_states`] wrote, in their order, into any
/// collection (a `Vec<State>`, a `SmallVec`), or why `bytes` are not such
/// an encoding.
pub fn decode_states<C>(bytes: &[u8]) -> Result<C, StateBytesError>
where
    C: Default + Extend<State>,
{
    let mut input = Reader::new(bytes);
    input.version()?;
    let count = input.u64()?;
    // Each state takes two bytes at least: a count beyond that is a lie,
    // refused before anything is read (or allocated) for it.
    input.can_hold(count, 2)?;
    let mut states = C::default();
    for _ in 0..count {
        states.extend(Some(State::decode_tagged(&mut input)?));
    }
    input.end()?;
    Ok(states)
}

impl State {
    /// Appends this state's encoding (version, tag, body) to `out`; see
    /// the [module docs](crate::state_bytes) for the format.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.push(STATE_BYTES_VERSION);
        self.encode_tagged(out);
    }

    /// This state's encoding, in a new vector.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(16);
        self.encode(&mut out);
        out
    }

    /// The state `bytes` encode, as [`encode`](Self::encode) wrote it, or
    /// why they are not such an encoding (never a panic).
    pub fn from_bytes(bytes: &[u8]) -> Result<State, StateBytesError> {
        let mut input = Reader::new(bytes);
        input.version()?;
        let state = State::decode_tagged(&mut input)?;
        input.end()?;
        Ok(state)
    }
}

/// How an algorithm's state is written: its tag (never reused) and its
/// body. Every algorithm of the registry implements it, in its own file
/// under `algorithm/`: the dispatch below is generated from the list, and
/// does not compile without it.
pub(crate) trait StateEncoding: RateAlgorithm {
    /// The byte that names the algorithm in an encoding.
    const TAG: u8;
    /// Appends the body of `state`.
    fn encode_state(state: &Self::State, out: &mut Vec<u8>);
    /// Reads a body written by [`encode_state`](Self::encode_state).
    fn decode_state(input: &mut Reader<'_>) -> Result<Self::State, StateBytesError>;
}

/// `State`'s tagged encoding and decoding, one arm per algorithm of the
/// registry.
macro_rules! define_state_bytes {
    ($(
        $(#[$doc:meta])*
        $variant:ident($kind:ty, $storage:ty) = $name:literal, lua $lua:literal $(, $flag:ident)*;
    )+) => {
        impl State {
            /// Appends the tag and the body.
            fn encode_tagged(&self, out: &mut Vec<u8>) {
                match self {
                    $(State::$variant(state) => {
                        out.push(<$kind as StateEncoding>::TAG);
                        <$kind as StateEncoding>::encode_state(state.borrow(), out);
                    })+
                }
            }

            /// Reads a tag and the body it announces.
            fn decode_tagged(input: &mut Reader<'_>) -> Result<State, StateBytesError> {
                let at = input.at;
                let tag = input.byte()?;
                $(
                    if tag == <$kind as StateEncoding>::TAG {
                        let state = <$kind as StateEncoding>::decode_state(input)?;
                        return Ok(State::$variant(state.into()));
                    }
                )+
                Err(StateBytesError::Algorithm { tag, at })
            }
        }

        /// Each algorithm's tag, for the tests.
        #[cfg(test)]
        pub(crate) fn tags() -> Vec<(crate::Algorithm, u8)> {
            vec![$((crate::Algorithm::$variant, <$kind as StateEncoding>::TAG)),+]
        }
    };
}

crate::for_each_algorithm!(crate::state_bytes::define_state_bytes);
pub(crate) use define_state_bytes;

/// Reads an encoding, keeping the offset for errors.
pub(crate) struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn new(bytes: &'a [u8]) -> Self {
        Reader { bytes, at: 0 }
    }

    /// The version byte, which must be this build's.
    fn version(&mut self) -> Result<(), StateBytesError> {
        match self.bytes.first() {
            None => Err(StateBytesError::Empty),
            Some(&STATE_BYTES_VERSION) => {
                self.at = 1;
                Ok(())
            }
            Some(&other) => Err(StateBytesError::Version(other)),
        }
    }

    /// Nothing may follow.
    fn end(&self) -> Result<(), StateBytesError> {
        match self.at < self.bytes.len() {
            true => Err(StateBytesError::Trailing { at: self.at }),
            false => Ok(()),
        }
    }

    /// Whether the bytes left can hold `count` items of at least `each`
    /// bytes: a count that cannot be true is refused before it is acted on.
    pub(crate) fn can_hold(&self, count: u64, each: u64) -> Result<(), StateBytesError> {
        let left = (self.bytes.len() - self.at) as u64;
        match count.checked_mul(each) {
            Some(needed) if needed <= left => Ok(()),
            _ => Err(StateBytesError::Truncated {
                at: self.bytes.len(),
            }),
        }
    }

    /// The offset of the next byte.
    pub(crate) fn at(&self) -> usize {
        self.at
    }

    pub(crate) fn byte(&mut self) -> Result<u8, StateBytesError> {
        let byte = *self
            .bytes
            .get(self.at)
            .ok_or(StateBytesError::Truncated { at: self.at })?;
        self.at += 1;
        Ok(byte)
    }

    pub(crate) fn u64(&mut self) -> Result<u64, StateBytesError> {
        // At most 64 bits by construction.
        Ok(self.varint(64)? as u64)
    }

    pub(crate) fn u32(&mut self) -> Result<u32, StateBytesError> {
        let at = self.at;
        u32::try_from(self.u64()?).map_err(|_| StateBytesError::Malformed {
            at,
            what: "a cost above 2^32 − 1",
        })
    }

    pub(crate) fn u128(&mut self) -> Result<u128, StateBytesError> {
        self.varint(128)
    }

    /// An unsigned LEB128 integer of at most `bits` bits, in its shortest
    /// form.
    fn varint(&mut self, bits: u32) -> Result<u128, StateBytesError> {
        let start = self.at;
        let too_large = StateBytesError::Malformed {
            at: start,
            what: "an integer too large for its field",
        };
        let mut value = 0u128;
        let mut shift = 0u32;
        loop {
            let byte = self.byte()?;
            let part = u128::from(byte & 0x7f);
            if shift >= bits {
                return Err(too_large);
            }
            let shifted = part << shift;
            if shifted >> shift != part || (bits < 128 && shifted >> bits != 0) {
                return Err(too_large);
            }
            value |= shifted;
            if byte & 0x80 == 0 {
                if byte == 0 && shift > 0 {
                    return Err(StateBytesError::Malformed {
                        at: start,
                        what: "an integer not in its shortest form",
                    });
                }
                return Ok(value);
            }
            shift += 7;
        }
    }
}

/// Appends `value` as a varint.
pub(crate) fn put_u64(out: &mut Vec<u8>, value: u64) {
    put_u128(out, u128::from(value));
}

/// Appends `value` as a varint.
pub(crate) fn put_u128(out: &mut Vec<u8>, mut value: u128) {
    while value >= 0x80 {
        out.push((value as u8 & 0x7f) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// A difference modulo 2^64, read as signed, as an unsigned integer that is
/// small when the difference is near zero: 0, −1, 1, −2, … as 0, 1, 2, 3, …
pub(crate) fn zigzag(difference: u64) -> u64 {
    let signed = difference as i64;
    ((signed << 1) ^ (signed >> 63)) as u64
}

/// The difference [`zigzag`] wrote.
pub(crate) fn unzigzag(value: u64) -> u64 {
    (((value >> 1) as i64) ^ -((value & 1) as i64)) as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Algorithm, Limiter, Quota};

    #[test]
    fn every_algorithm_has_its_own_tag_which_never_changes() {
        // Tags are written into stores: these never change. An algorithm
        // added later takes a tag of its own (the next free one).
        let pinned = [
            (Algorithm::Gcra, 1),
            (Algorithm::TokenBucket, 2),
            (Algorithm::TokenBucketInterval, 3),
            (Algorithm::LeakyBucket, 4),
            (Algorithm::FixedWindow, 5),
            (Algorithm::SlidingLog, 6),
            (Algorithm::SlidingWindow, 7),
            (Algorithm::SlidingWindowBuckets, 8),
        ];
        let tags = tags();
        for pin in pinned {
            assert!(tags.contains(&pin), "{pin:?}: a tag never changes");
        }
        assert_eq!(tags.len(), Algorithm::ALL.len());
        let distinct: std::collections::HashSet<u8> = tags.iter().map(|(_, tag)| *tag).collect();
        assert_eq!(
            distinct.len(),
            tags.len(),
            "two algorithms share a tag: {tags:?}"
        );
    }

    #[test]
    fn varints_are_shortest_and_bounded() {
        for value in [0u64, 1, 127, 128, 300, u64::from(u32::MAX), u64::MAX] {
            let mut out = Vec::new();
            put_u64(&mut out, value);
            let mut input = Reader::new(&out);
            assert_eq!(input.u64(), Ok(value));
            assert!(input.end().is_ok());
        }
        let mut out = Vec::new();
        put_u128(&mut out, u128::MAX);
        assert_eq!(out.len(), 19);
        assert_eq!(Reader::new(&out).u128(), Ok(u128::MAX));
        assert!(matches!(
            Reader::new(&out).u64(),
            Err(StateBytesError::Malformed { at: 0, .. })
        ));
        // 2^64 exactly: one bit too many for a u64.
        let over = [0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x02];
        assert!(Reader::new(&over).u64().is_err());
        // Zero written in two bytes.
        assert!(matches!(
            Reader::new(&[0x80, 0x00]).u64(),
            Err(StateBytesError::Malformed {
                what: "an integer not in its shortest form",
                ..
            })
        ));
        assert_eq!(
            Reader::new(&[0x80]).u64(),
            Err(StateBytesError::Truncated { at: 1 })
        );
    }

    #[test]
    fn zigzag_round_trips_at_the_edges() {
        for value in [0u64, 1, 2, u64::MAX, u64::MAX - 1, 1 << 63, (1 << 63) - 1] {
            assert_eq!(unzigzag(zigzag(value)), value);
        }
        // −1 (the wrapping difference 3 − 4) takes one byte.
        assert_eq!(zigzag(3u64.wrapping_sub(4)), 1);
        assert_eq!(zigzag(1), 2);
    }

    #[test]
    fn a_log_out_of_order_and_at_the_edges_round_trips() {
        // Entries (at, cost) in the format's own words: 5 of them.
        let mut bytes = vec![STATE_BYTES_VERSION, 6, 5];
        let entries = [
            (u64::MAX, u32::MAX),
            (0, 1),
            (5, 0),
            (3, 7),
            (u64::MAX - 1, 2),
        ];
        let mut previous = 0u64;
        for (i, (at, cost)) in entries.into_iter().enumerate() {
            match i {
                0 => put_u64(&mut bytes, at),
                _ => put_u64(&mut bytes, zigzag(at.wrapping_sub(previous))),
            }
            put_u64(&mut bytes, u64::from(cost));
            previous = at;
        }
        let state = State::from_bytes(&bytes).unwrap();
        let State::SlidingLog(log) = &state else {
            panic!("a log: {state:?}");
        };
        assert_eq!(log.len(), 5);
        assert_eq!(state.to_bytes(), bytes);
    }

    #[test]
    fn a_log_is_a_few_bytes_an_entry() {
        let limiter = Limiter::new(Algorithm::SlidingLog, Quota::per_second(1_000));
        let mut state = limiter.new_state();
        let start = 1_700_000_000_000_000_000u64;
        for i in 0..1_000u64 {
            assert!(limiter.check(&mut state, start + i * 997_000, 1).allowed());
        }
        let bytes = state.to_bytes();
        // Times ~1 ms apart: a 3-byte difference and a 1-byte cost each.
        assert!(bytes.len() < 4 * 1_000 + 16, "{} bytes", bytes.len());
        assert_eq!(State::from_bytes(&bytes), Ok(state));
    }

    #[test]
    fn each_kind_of_garbage_has_its_error() {
        assert_eq!(State::from_bytes(&[]), Err(StateBytesError::Empty));
        assert_eq!(
            State::from_bytes(&[9, 1, 0]),
            Err(StateBytesError::Version(9))
        );
        assert_eq!(
            State::from_bytes(&[1, 200, 0]),
            Err(StateBytesError::Algorithm { tag: 200, at: 1 })
        );
        assert_eq!(
            State::from_bytes(&[1, 1]),
            Err(StateBytesError::Truncated { at: 2 })
        );
        assert_eq!(
            State::from_bytes(&[1, 1, 0, 0]),
            Err(StateBytesError::Trailing { at: 3 })
        );
        assert!(matches!(
            State::from_bytes(&[1, 2, 7]),
            Err(StateBytesError::Malformed { at: 2, .. })
        ));
        // A log that claims more entries than its bytes can hold.
        assert!(matches!(
            State::from_bytes(&[1, 6, 0xff, 0xff, 0xff, 0xff, 0x0f, 1, 1]),
            Err(StateBytesError::Truncated { .. })
        ));
        // A ring longer than any configuration keeps.
        assert!(matches!(
            State::from_bytes(&[1, 8, 0, 0x81, 0x08]),
            Err(StateBytesError::Malformed { at: 3, .. })
        ));
        // Many states claimed, none there.
        assert!(matches!(
            decode_states::<Vec<State>>(&[1, 0xff, 0xff, 0x03]),
            Err(StateBytesError::Truncated { .. })
        ));
        let error = State::from_bytes(&[1, 200]).unwrap_err();
        assert_eq!(
            error.to_string(),
            "not a rate-limit state: unknown algorithm tag 200 at byte 1"
        );
    }

    #[test]
    fn no_states_is_a_value_too() {
        let mut out = Vec::new();
        encode_states(&[], &mut out);
        assert_eq!(out, [STATE_BYTES_VERSION, 0]);
        assert_eq!(decode_states::<Vec<State>>(&out), Ok(Vec::new()));
    }
}
