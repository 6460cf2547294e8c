//! A value's key in the backend:
//! `{prefix}:{limit names}:{plan}:{user key}`.
//!
//! The limit names are the policy's, joined with commas (tokens: no `:`
//! or `,` in them); the plan is the policy's
//! [`plan`](tollgate_store::Policy::plan) in 16 hexadecimal digits, or `-`; the
//! user key comes last, escaped so that no two keys share a name: `*` for
//! the global key, `@` and the address for an IP, the bytes otherwise,
//! each byte outside printable ASCII and each of `%*@#` written `%XX`,
//! and, when that is longer than [`MAX_KEY_LEN`] bytes, `#` and the SHA-1
//! of the bytes (a key of any length costs the backend 41 bytes at most).
//! Every part before the user key ends at a `:` it cannot contain, so
//! two (policy, key) pairs have the same name only if they have the same
//! limit names, plan and key.

use std::fmt::Write;
use tollgate_store::Policy;
use tollgate_store::{Key, KeyView};

/// User keys whose escaped form is longer than this many bytes are written
/// as `#` and the SHA-1 of their bytes.
pub(super) const MAX_KEY_LEN: usize = 128;

/// What the store prepares once per policy (its first prepared form, the
/// fastest to find): the part the policy puts in its keys' names,
/// `{limit names}:{plan}:`, and whether a local-first store in front can
/// decide it (read on every request there).
#[derive(Debug)]
pub(super) struct PolicyPart(pub(super) String, pub(super) bool);

impl PolicyPart {
    pub(super) fn of(policy: &Policy) -> Self {
        PolicyPart(
            name_part(policy),
            tollgate_store::shared::supports(policy).is_ok(),
        )
    }
}

/// `{limit names}:{plan}:`.
fn name_part(policy: &Policy) -> String {
    let mut part = String::with_capacity(policy.label().len() + 18);
    part.push_str(policy.label());
    part.push(':');
    match policy.plan() {
        Some(plan) => {
            // Writing to a String cannot fail.
            let _ = write!(part, "{plan:016x}");
        }
        None => part.push('-'),
    }
    part.push(':');
    part
}

/// The name of `key`'s value under the policy whose part is `policy`.
pub(super) fn key_name(prefix: &str, policy: &PolicyPart, key: &Key) -> String {
    let mut name = String::with_capacity(prefix.len() + 1 + policy.0.len() + 24);
    name.push_str(prefix);
    name.push(':');
    name.push_str(&policy.0);
    match key.view() {
        KeyView::Global => name.push('*'),
        KeyView::Ip(ip) => {
            let _ = write!(name, "@{ip}");
        }
        KeyView::Bytes(bytes) => push_bytes(&mut name, bytes),
    }
    name
}

fn push_bytes(out: &mut String, bytes: &[u8]) {
    let escaped: usize = bytes.iter().map(|&b| if plain(b) { 1 } else { 3 }).sum();
    if escaped > MAX_KEY_LEN {
        out.push('#');
        out.push_str(&sha1_smol::Sha1::from(bytes).digest().to_string());
        return;
    }
    for &b in bytes {
        if plain(b) {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
}

/// Written as itself: printable ASCII but the escape and the markers.
fn plain(b: u8) -> bool {
    b.is_ascii_graphic() && !matches!(b, b'%' | b'*' | b'@' | b'#')
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::IpAddr;
    use tollgate_core::Quota;
    use tollgate_store::NamedLimit;

    fn name(key: &Key) -> String {
        let policy = Policy::new(vec![
            NamedLimit::new("burst", Quota::per_second(1)),
            NamedLimit::new("hourly", Quota::per_hour(1)),
        ]);
        key_name("tg", &PolicyPart::of(&policy), key)
    }

    #[test]
    fn names_are_readable() {
        assert_eq!(name(&Key::from("alice")), "tg:burst,hourly:-:alice");
        assert_eq!(name(&Key::GLOBAL), "tg:burst,hourly:-:*");
        let ip: IpAddr = "2001:db8::1".parse().unwrap();
        assert_eq!(name(&Key::from(ip)), "tg:burst,hourly:-:@2001:db8::1");
        assert_eq!(name(&Key::from_bytes(b"")), "tg:burst,hourly:-:");
    }

    #[test]
    fn no_key_poses_as_another() {
        let ip: IpAddr = "10.0.0.1".parse().unwrap();
        let keys = [
            Key::GLOBAL,
            Key::from("*"),
            Key::from(ip),
            Key::from("@10.0.0.1"),
            Key::from("10.0.0.1"),
            Key::from("#0"),
            Key::from("%2A"),
            Key::from_bytes(b"a b"),
            Key::from_bytes(b"a%20b"),
            Key::from_bytes(&[0xff]),
            Key::from_bytes(b""),
        ];
        let names: std::collections::HashSet<String> = keys.iter().map(name).collect();
        assert_eq!(names.len(), keys.len(), "{names:?}");
        assert_eq!(name(&Key::from("*")), "tg:burst,hourly:-:%2A");
    }

    #[test]
    fn long_keys_are_hashed_to_a_fixed_length() {
        let long = name(&Key::from_bytes(&[b'a'; 10_000]));
        assert_eq!(long.len(), "tg:burst,hourly:-:".len() + 41);
        assert_ne!(long, name(&Key::from_bytes(&[b'b'; 10_000])));
        let at_bound = name(&Key::from_bytes(&[b'a'; MAX_KEY_LEN]));
        assert!(at_bound.ends_with(&"a".repeat(MAX_KEY_LEN)));
    }

    #[test]
    fn plans_are_apart() {
        let limits = || vec![NamedLimit::new("api", Quota::per_minute(5))];
        let plain = Policy::new(limits());
        let planned = Policy::for_plan(7, limits());
        let (a, b) = (PolicyPart::of(&plain).0, PolicyPart::of(&planned).0);
        assert_eq!(a, "api:-:");
        assert!(b.starts_with("api:") && b.len() == "api:".len() + 17, "{b}");
        assert_ne!(a, b);
    }
}
