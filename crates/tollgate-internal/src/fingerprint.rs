//! Maps keyed by fingerprints: 64-bit seeded hashes of (policy, key),
//! which are already uniformly random, so the map uses them as their own
//! hash instead of hashing them again.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// A map keyed by fingerprints. The stores of this crate keep no key
/// beside its fingerprint (see tollgate's `MemoryStore` for the
/// odds of two keys sharing one); a store that keeps the key in the value
/// can check it on every hit.
///
/// ```
/// use tollgate_internal::fingerprint::ByFingerprint;
///
/// let mut map: ByFingerprint<&str> = ByFingerprint::default();
/// map.insert(0x9E37_79B9_7F4A_7C15, "a key's state");
/// assert_eq!(map.get(&0x9E37_79B9_7F4A_7C15), Some(&"a key's state"));
/// ```
pub type ByFingerprint<V> = HashMap<u64, V, BuildHasherDefault<FingerprintHasher>>;

/// Passes a fingerprint through as its own hash.
#[derive(Clone, Copy, Debug, Default)]
pub struct FingerprintHasher(u64);

impl Hasher for FingerprintHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only `write_u64` is used; fold anything else rather than lose it.
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}
