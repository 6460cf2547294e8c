//! Redis key names: `prefix:{user key}:limit name:algorithm`.
//!
//! The user's key sits in a Cluster hash tag, so the keys of every limit of
//! one request land in one slot and one script can charge them together,
//! while different users spread over the cluster. It is escaped so that no
//! user key can end the tag early or pose as another key, and hashed when
//! long so that a 10 KB header value costs Redis 40 bytes, not 10 KB.

use std::fmt::Write;
use tollgate_store::{Key, KeyView};

/// User keys whose escaped form is longer than this many bytes are replaced
/// by `#` and the SHA-1 of their bytes.
pub const MAX_KEY_LEN: usize = 128;

/// Appends the escaped form of `key` to `out`: `~` for the global key, `~`
/// and the address for an IP, the bytes otherwise, each byte outside
/// printable ASCII and each of `%{}~#` written as `%XX`.
///
/// The escaping is injective: `~` and `#` start only the global, IP and
/// hashed forms, and `}` never appears, so the first `}` closes the tag.
/// The empty key is written `%` (escapes are always three characters, so
/// no other key reads `%`): Redis Cluster ignores an empty hash tag `{}`,
/// which would scatter one request's keys over slots.
pub(crate) fn push_user_key(out: &mut String, key: &Key) {
    match key.view() {
        KeyView::Global => out.push('~'),
        KeyView::Ip(ip) => {
            // Writing to a String cannot fail.
            let _ = write!(out, "~{ip}");
        }
        KeyView::Bytes(bytes) => push_bytes(out, bytes),
    }
}

fn push_bytes(out: &mut String, bytes: &[u8]) {
    if bytes.is_empty() {
        out.push('%');
        return;
    }
    let escaped_len: usize = bytes.iter().map(|&b| if is_plain(b) { 1 } else { 3 }).sum();
    if escaped_len > MAX_KEY_LEN {
        out.push('#');
        out.push_str(&sha1_smol::Sha1::from(bytes).digest().to_string());
    } else {
        escape_into(out, bytes);
    }
}

/// Appends `bytes` with every byte that is not plain written as `%XX`.
pub(crate) fn escape_into(out: &mut String, bytes: &[u8]) {
    for &b in bytes {
        if is_plain(b) {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
}

fn is_plain(b: u8) -> bool {
    b.is_ascii_graphic() && !matches!(b, b'%' | b'{' | b'}' | b'~' | b'#')
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::IpAddr;

    fn user_key(key: &Key) -> String {
        let mut out = String::new();
        push_user_key(&mut out, key);
        out
    }

    #[test]
    fn readable_keys_stay_readable() {
        assert_eq!(user_key(&Key::from_bytes(b"alice")), "alice");
        assert_eq!(user_key(&Key::GLOBAL), "~");
        let ip: IpAddr = "2001:db8::1".parse().unwrap();
        assert_eq!(user_key(&Key::from(ip)), "~2001:db8::1");
    }

    #[test]
    fn short_and_long_keys_are_written_whole_at_the_inline_boundary() {
        for len in [0, 22, 23] {
            let key = Key::from_bytes(&vec![b'a'; len]);
            let expected = if len == 0 {
                "%".to_owned()
            } else {
                "a".repeat(len)
            };
            assert_eq!(user_key(&key), expected);
        }
    }

    #[test]
    fn the_empty_key_is_a_non_empty_tag_of_its_own() {
        assert_eq!(user_key(&Key::from_bytes(b"")), "%");
        assert_ne!(user_key(&Key::from_bytes(b"%")), "%");
    }

    #[test]
    fn braces_and_control_bytes_are_escaped() {
        assert_eq!(user_key(&Key::from_bytes(b"a}b{c")), "a%7Db%7Bc");
        assert_eq!(user_key(&Key::from_bytes(b"x\ny z")), "x%0Ay%20z");
        assert_eq!(user_key(&Key::from_bytes(&[0xff, b'%'])), "%FF%25");
        // A byte key cannot pose as the global key, an IP or a hash.
        assert_eq!(user_key(&Key::from_bytes(b"~")), "%7E");
        assert_eq!(user_key(&Key::from_bytes(b"#00")), "%2300");
    }

    #[test]
    fn long_keys_are_hashed_to_a_fixed_length() {
        let long = user_key(&Key::from_bytes(&[b'a'; 10_000]));
        assert_eq!(long.len(), 41);
        assert!(long.starts_with('#'));
        let other = user_key(&Key::from_bytes(&[b'b'; 10_000]));
        assert_ne!(long, other);
        // At the bound the key is kept; one escaped byte more and it is hashed.
        assert_eq!(
            user_key(&Key::from_bytes(&[b'a'; MAX_KEY_LEN])).len(),
            MAX_KEY_LEN
        );
        let mut over = vec![b'a'; MAX_KEY_LEN - 2];
        over.push(b'{');
        assert!(user_key(&Key::from_bytes(&over)).starts_with('#'));
    }
}
