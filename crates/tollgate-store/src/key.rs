//! [`Key`]: what a request is counted under, in every store.

use std::borrow::Cow;
use std::net::IpAddr;
use std::sync::Arc;

/// Keys up to this many bytes are stored inline, without a heap allocation.
const INLINE: usize = 22;

/// What a request is counted under. Cheap to clone and hash; IP addresses and
/// values of up to 22 bytes do not allocate.
///
/// Made with `From` a text (`&str`, `String`, `&String`, `Box<str>`,
/// `Arc<str>`, `Cow<str>`: the same text makes the same key, whichever its
/// form), an [`IpAddr`] or a `u64` (its 8 bytes, big-endian), or with
/// [`Key::from_bytes`].
///
/// ```
/// use std::sync::Arc;
/// use tollgate_store::Key;
///
/// let user = String::from("alice");
/// assert_eq!(Key::from(&user), Key::from("alice"));
/// assert_eq!(Key::from(Arc::<str>::from("alice")), Key::from(user));
/// ```
///
/// Equal values make equal keys, in every store, however they were made:
/// the representation is private, and one value has one form (bytes of up
/// to 22 held inline, longer ones on the heap). To look inside a key, use
/// [`Key::view`].
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Key(Repr);

/// The one form of each value (see [`Key`]): bytes are `Short` exactly
/// when there are at most `INLINE` of them, so the derived `Eq` and
/// `Hash` compare values.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Repr {
    Global,
    Ip(IpAddr),
    Short(ShortKey),
    Long(Arc<[u8]>),
}

/// What a [`Key`] holds, to read it (a store writing its own name for a
/// key, an error message): borrowed from the key by [`Key::view`].
///
/// ```
/// use tollgate_store::{Key, KeyView};
///
/// let key = Key::from("alice");
/// assert_eq!(key.view(), KeyView::Bytes(b"alice"));
/// assert_eq!(Key::GLOBAL.view(), KeyView::Global);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KeyView<'a> {
    /// The key shared by every request ([`Key::GLOBAL`]).
    Global,
    /// A client address.
    Ip(IpAddr),
    /// Arbitrary bytes.
    Bytes(&'a [u8]),
}

/// Up to 22 bytes held inline. Only [`Key::from_bytes`] (and the `From`
/// conversions into [`Key`]) make one, so its length always fits its
/// array.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord)]
struct ShortKey {
    /// How many bytes of `bytes` are used: at most `INLINE`.
    len: u8,
    /// The value, padded with zeros.
    bytes: [u8; INLINE],
}

impl ShortKey {
    /// `bytes` held inline, if there are at most `INLINE` of them.
    #[inline]
    fn new(bytes: &[u8]) -> Option<ShortKey> {
        if bytes.len() > INLINE {
            return None;
        }
        let mut inline = [0; INLINE];
        inline[..bytes.len()].copy_from_slice(bytes);
        Some(ShortKey {
            len: bytes.len() as u8,
            bytes: inline,
        })
    }

    /// The key's bytes.
    #[inline]
    fn as_bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }
}

/// One write of the bytes and one of the length, consistent with the
/// derived `Eq` (the padding is always zeros).
impl std::hash::Hash for ShortKey {
    #[inline]
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        state.write(self.as_bytes());
        state.write_u8(self.len);
    }
}

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.view() {
            KeyView::Global => f.write_str("Key::GLOBAL"),
            KeyView::Ip(ip) => write!(f, "Key({ip})"),
            KeyView::Bytes(bytes) => match std::str::from_utf8(bytes) {
                Ok(text) => write!(f, "Key({text:?})"),
                Err(_) => write!(f, "Key({bytes:?})"),
            },
        }
    }
}

impl Key {
    /// One key shared by every request: what tollgate's `GlobalKey` extractor gives.
    pub const GLOBAL: Key = Key(Repr::Global);

    /// A key made of `bytes`.
    pub fn from_bytes(bytes: &[u8]) -> Key {
        match ShortKey::new(bytes) {
            Some(short) => Key(Repr::Short(short)),
            None => Key(Repr::Long(bytes.into())),
        }
    }

    /// What the key holds.
    #[inline]
    pub fn view(&self) -> KeyView<'_> {
        match &self.0 {
            Repr::Global => KeyView::Global,
            Repr::Ip(ip) => KeyView::Ip(*ip),
            Repr::Short(short) => KeyView::Bytes(short.as_bytes()),
            Repr::Long(bytes) => KeyView::Bytes(bytes),
        }
    }

    /// Whether this is [`Key::GLOBAL`].
    #[inline]
    pub fn is_global(&self) -> bool {
        matches!(self.0, Repr::Global)
    }

    /// The client address of a key made from one.
    #[inline]
    pub fn as_ip(&self) -> Option<IpAddr> {
        match self.0 {
            Repr::Ip(ip) => Some(ip),
            _ => None,
        }
    }

    /// The key's bytes, for stores that need a flat form; `Global` is empty
    /// and an IP address is its 4 or 16 octets.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.write_bytes(&mut out);
        out
    }

    /// The bytes of a key made of bytes (or text); `None` for
    /// [`Key::GLOBAL`] and a client address.
    ///
    /// ```
    /// use tollgate_store::Key;
    ///
    /// assert_eq!(Key::from("alice").as_slice(), Some(&b"alice"[..]));
    /// assert_eq!(Key::GLOBAL.as_slice(), None);
    /// ```
    #[inline]
    pub fn as_slice(&self) -> Option<&[u8]> {
        match &self.0 {
            Repr::Global | Repr::Ip(_) => None,
            Repr::Short(short) => Some(short.as_bytes()),
            Repr::Long(bytes) => Some(bytes),
        }
    }

    fn write_bytes(&self, out: &mut Vec<u8>) {
        match &self.0 {
            Repr::Global => {}
            Repr::Ip(IpAddr::V4(ip)) => out.extend_from_slice(&ip.octets()),
            Repr::Ip(IpAddr::V6(ip)) => out.extend_from_slice(&ip.octets()),
            Repr::Short(short) => out.extend_from_slice(short.as_bytes()),
            Repr::Long(bytes) => out.extend_from_slice(bytes),
        }
    }

    /// A key made of several, unambiguously: each part is written with a
    /// kind tag and its length, so `("ab", "c")` and `("a", "bc")` differ.
    pub fn composite(parts: &[Key]) -> Key {
        let mut out = Vec::with_capacity(parts.len() * 8);
        for part in parts {
            part.append_as_part(&mut out);
        }
        Key::from_bytes(&out)
    }

    /// The [`composite`](Self::composite) of `parts`, taken one at a time,
    /// or `None` at the first part that is `None` (the rest are not
    /// computed): for extractors that combine a run-time number of parts.
    #[doc(hidden)]
    pub fn try_composite(parts: impl IntoIterator<Item = Option<Key>>) -> Option<Key> {
        let mut out = Vec::new();
        for part in parts {
            part?.append_as_part(&mut out);
        }
        Some(Key::from_bytes(&out))
    }

    /// Appends this key as one part of a composite: tag, length, bytes.
    fn append_as_part(&self, out: &mut Vec<u8>) {
        let before = out.len();
        out.push(self.tag());
        out.extend_from_slice(&[0, 0, 0, 0]);
        self.write_bytes(out);
        let len = (out.len() - before - 5) as u32;
        out[before + 1..before + 5].copy_from_slice(&len.to_be_bytes());
    }

    fn tag(&self) -> u8 {
        match &self.0 {
            Repr::Global => 0,
            Repr::Ip(_) => 1,
            Repr::Short(_) | Repr::Long(_) => 2,
        }
    }
}

/// One or two word-sized writes per key, where the derived `Hash` would
/// make several small ones: this hash runs on every request.
impl std::hash::Hash for Repr {
    #[inline]
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        match self {
            Repr::Global => state.write_u8(0),
            Repr::Ip(IpAddr::V4(ip)) => state.write_u64(1 << 32 | u64::from(ip.to_bits())),
            Repr::Ip(IpAddr::V6(ip)) => {
                state.write_u8(2);
                state.write_u128(ip.to_bits());
            }
            // One form per value: a short key never equals a long one.
            Repr::Short(short) => std::hash::Hash::hash(short, state),
            Repr::Long(bytes) => {
                state.write(bytes);
                state.write_u8(0xff);
            }
        }
    }
}

impl From<IpAddr> for Key {
    fn from(ip: IpAddr) -> Key {
        Key(Repr::Ip(ip))
    }
}

impl From<&str> for Key {
    fn from(text: &str) -> Key {
        Key::from_bytes(text.as_bytes())
    }
}

impl From<&String> for Key {
    fn from(text: &String) -> Key {
        Key::from(text.as_str())
    }
}

impl From<String> for Key {
    fn from(text: String) -> Key {
        Key::from(text.as_str())
    }
}

impl From<Box<str>> for Key {
    fn from(text: Box<str>) -> Key {
        Key::from(&*text)
    }
}

impl From<Cow<'_, str>> for Key {
    fn from(text: Cow<'_, str>) -> Key {
        Key::from(&*text)
    }
}

/// A text over 22 bytes keeps its allocation (no copy); a shorter one is
/// held inline, as from a `&str`.
impl From<Arc<str>> for Key {
    fn from(text: Arc<str>) -> Key {
        match ShortKey::new(text.as_bytes()) {
            Some(short) => Key(Repr::Short(short)),
            None => Key(Repr::Long(Arc::from(text))),
        }
    }
}

impl From<u64> for Key {
    fn from(n: u64) -> Key {
        Key::from_bytes(&n.to_be_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_keys_are_inline_and_long_keys_are_not() {
        assert!(matches!(Key::from("abc").0, Repr::Short(ref s) if s.as_bytes() == b"abc"));
        assert!(matches!(
            Key::from("a".repeat(23).as_str()).0,
            Repr::Long(_)
        ));
        assert_eq!(Key::from("abc").to_bytes(), b"abc");
        assert!(std::mem::size_of::<Key>() <= 24);
    }

    #[test]
    fn from_bytes_round_trips_at_the_inline_boundary() {
        use std::hash::BuildHasher as _;
        let hasher = std::hash::RandomState::new();
        for len in [0, INLINE, INLINE + 1] {
            let bytes: Vec<u8> = (1..=len as u8).collect();
            let key = Key::from_bytes(&bytes);
            assert_eq!(key.as_slice(), Some(&bytes[..]), "{len} bytes");
            assert_eq!(key.to_bytes(), bytes, "{len} bytes");
            match &key.0 {
                Repr::Short(short) => {
                    assert!(len <= INLINE);
                    assert_eq!(short.as_bytes(), &bytes[..]);
                }
                Repr::Long(long) => {
                    assert!(len > INLINE);
                    assert_eq!(&long[..], &bytes[..]);
                }
                Repr::Global | Repr::Ip(_) => panic!("{len} bytes made {key:?}"),
            }
            let again = Key::from_bytes(&bytes);
            assert_eq!(key, again);
            assert_eq!(hasher.hash_one(&key), hasher.hash_one(&again));
        }
    }

    #[test]
    fn every_form_of_a_text_makes_the_key_its_str_makes() {
        use std::hash::BuildHasher as _;
        let hasher = std::hash::RandomState::new();
        // Inline, at the boundary, and on the heap.
        for text in ["", "alice", &"k".repeat(INLINE), &"k".repeat(INLINE + 1)] {
            let expected = Key::from(text);
            let owned = text.to_owned();
            let forms = [
                Key::from(&owned),
                Key::from(owned.clone()),
                Key::from(Box::<str>::from(text)),
                Key::from(Arc::<str>::from(text)),
                Key::from(Cow::Borrowed(text)),
                Key::from(Cow::<str>::Owned(owned)),
            ];
            for (n, key) in forms.into_iter().enumerate() {
                assert_eq!(key, expected, "form {n} of {text:?}");
                assert_eq!(hasher.hash_one(&key), hasher.hash_one(&expected));
                assert_eq!(key.as_slice(), Some(text.as_bytes()));
            }
        }
        // A long `Arc<str>` keeps its allocation.
        let long: Arc<str> = Arc::from("k".repeat(INLINE + 1));
        let Repr::Long(bytes) = Key::from(Arc::clone(&long)).0 else {
            panic!("a long text makes a long key")
        };
        assert_eq!(bytes.as_ptr(), long.as_ptr());
        // A number: its 8 bytes, big-endian.
        assert_eq!(
            Key::from(258_u64),
            Key::from_bytes(&[0, 0, 0, 0, 0, 0, 1, 2])
        );
    }

    #[test]
    fn composite_keys_are_unambiguous() {
        let ab_c = Key::composite(&[Key::from("ab"), Key::from("c")]);
        let a_bc = Key::composite(&[Key::from("a"), Key::from("bc")]);
        assert_ne!(ab_c, a_bc);
    }
}
