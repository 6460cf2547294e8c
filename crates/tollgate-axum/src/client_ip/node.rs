//! One hop of a proxy header: `203.0.113.7`, `203.0.113.7:4711`,
//! `2001:db8::17`, `[2001:db8::17]:4711`, `"[2001:db8::17]"`, `unknown`,
//! `_hidden`.

use std::net::{IpAddr, Ipv6Addr};

/// What a proxy wrote for one hop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Node {
    /// An address (port dropped; IPv4-mapped IPv6 unwrapped).
    Ip(IpAddr),
    /// `unknown` (RFC 7239): the proxy did not know the address.
    Unknown,
    /// An obfuscated identifier such as `_hidden` (RFC 7239).
    Obfuscated,
    /// Anything else: empty, not UTF-8, not an address.
    Invalid,
}

/// Reads one hop. Whitespace around it and one pair of double quotes (as
/// in `Forwarded`) are ignored.
pub fn parse_node(raw: &[u8]) -> Node {
    let Ok(text) = std::str::from_utf8(raw) else {
        return Node::Invalid;
    };
    let text = text.trim_matches(|c: char| c == ' ' || c == '\t');
    let text = match text.strip_prefix('"').and_then(|t| t.strip_suffix('"')) {
        Some(unquoted) => unquoted,
        None => text,
    };
    if text.eq_ignore_ascii_case("unknown") {
        return Node::Unknown;
    }
    if let Some(rest) = text.strip_prefix('_') {
        let valid = !rest.is_empty()
            && rest
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
        return if valid {
            Node::Obfuscated
        } else {
            Node::Invalid
        };
    }
    match parse_address(text) {
        Some(ip) => Node::Ip(ip.to_canonical()),
        None => Node::Invalid,
    }
}

/// An address with or without a port: `a.b.c.d`, `a.b.c.d:port`, a bare
/// IPv6 address, `[v6]` or `[v6]:port`.
fn parse_address(text: &str) -> Option<IpAddr> {
    if let Some(rest) = text.strip_prefix('[') {
        let (inside, after) = rest.split_once(']')?;
        if !(after.is_empty() || is_port(after.strip_prefix(':')?)) {
            return None;
        }
        return inside.parse::<Ipv6Addr>().ok().map(IpAddr::V6);
    }
    if let Ok(ip) = text.parse::<IpAddr>() {
        return Some(ip);
    }
    // IPv4 with a port: exactly one colon.
    let (host, port) = text.split_once(':')?;
    if !is_port(port) {
        return None;
    }
    host.parse::<std::net::Ipv4Addr>().ok().map(IpAddr::V4)
}

/// A port as RFC 7239 allows it: digits (at most 5), or an obfuscated one.
fn is_port(port: &str) -> bool {
    let digits = !port.is_empty() && port.len() <= 5 && port.bytes().all(|b| b.is_ascii_digit());
    let obfuscated = port.len() > 1
        && port.starts_with('_')
        && port[1..]
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    digits || obfuscated
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> Node {
        Node::Ip(text.parse().unwrap())
    }

    #[test]
    fn addresses_with_and_without_ports() {
        assert_eq!(parse_node(b"203.0.113.7"), ip("203.0.113.7"));
        assert_eq!(parse_node(b" 203.0.113.7:4711 "), ip("203.0.113.7"));
        assert_eq!(parse_node(b"2001:db8::17"), ip("2001:db8::17"));
        assert_eq!(parse_node(b"[2001:db8::17]"), ip("2001:db8::17"));
        assert_eq!(parse_node(b"\"[2001:db8::17]:4711\""), ip("2001:db8::17"));
        assert_eq!(parse_node(b"::ffff:192.0.2.1"), ip("192.0.2.1"));
        assert_eq!(parse_node(b"[::ffff:192.0.2.1]:80"), ip("192.0.2.1"));
        assert_eq!(parse_node(b"192.0.2.1:_port"), ip("192.0.2.1"));
    }

    #[test]
    fn identifiers_and_garbage() {
        assert_eq!(parse_node(b"unknown"), Node::Unknown);
        assert_eq!(parse_node(b"\"UNKNOWN\""), Node::Unknown);
        assert_eq!(parse_node(b"_hidden"), Node::Obfuscated);
        assert_eq!(parse_node(b"_"), Node::Invalid);
        assert_eq!(parse_node(b""), Node::Invalid);
        assert_eq!(parse_node(b"\""), Node::Invalid);
        assert_eq!(parse_node(&[0xff, 0xfe]), Node::Invalid);
        assert_eq!(parse_node(b"999.1.1.1"), Node::Invalid);
        assert_eq!(parse_node(b"1.2.3.4:99999999"), Node::Invalid);
        assert_eq!(parse_node(b"[2001:db8::17"), Node::Invalid);
        assert_eq!(parse_node(b"[2001:db8::17]x"), Node::Invalid);
        assert_eq!(parse_node(b"[1.2.3.4]"), Node::Invalid);
        assert_eq!(parse_node(b"example.com"), Node::Invalid);
    }
}
