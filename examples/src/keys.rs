//! Keys as operators write them (`--allow`, `--deny`, `--quota`, the
//! access and quota files), put in the form the playground `server`'s
//! `--key` extractor gives requests, so that a list entry or a plan
//! matches exactly the requests it names.
//!
//! A key is compared with the keys requests get as a value, so a key
//! written in another form than the extractor's would never match, and
//! would fail silently: `::ffff:127.0.0.1` where requests from 127.0.0.1
//! get `127.0.0.1`, or `2001:db8::1` where `--key ip` keys IPv6 clients by
//! their /64. [`KeyKind::canonical`] gives the extractor's form, and
//! refuses, with a message that says why, a key no request can ever get:
//! not an address for `--key ip`, a value over the header extractor's
//! length limit or one no header can carry, the `<no key>` shared by
//! requests without the header, anything but `global` for `--key global`.

use crate::watched::quote;
use axum::http::{HeaderName, HeaderValue};
use std::net::IpAddr;
use tollgate::{HeaderKey, Key, OnMissingKey};
use tollgate_axum::ClientIp;

/// How the server maps requests to keys (`--key`).
#[derive(Clone, Debug)]
pub enum KeyKind {
    /// The client IP (the peer, or what trusted proxies report): IPv4 as
    /// is, an IPv4-mapped IPv6 address as its IPv4, other IPv6 addresses
    /// by their /64 (tollgate-axum's `ClientIp`).
    Ip,
    /// One budget for everybody: the one key `global`.
    Global,
    /// The value of this header.
    Header(HeaderKey),
}

impl KeyKind {
    /// Parses `ip`, `global` or `header:NAME`.
    pub fn parse(text: &str) -> Result<KeyKind, String> {
        match text {
            "ip" => Ok(KeyKind::Ip),
            "global" => Ok(KeyKind::Global),
            _ => {
                let name = text
                    .strip_prefix("header:")
                    .ok_or_else(|| format!("expected ip, global or header:NAME, not {text:?}"))?;
                HeaderName::try_from(name)
                    .map(|name| KeyKind::Header(HeaderKey::from_name(name)))
                    .map_err(|_| format!("{name:?} is not a valid header name"))
            }
        }
    }

    /// The key requests written `text` get (`text` trimmed by the
    /// caller), or why no request ever gets it.
    pub fn canonical(&self, text: &str) -> Result<Key, String> {
        if text.trim().is_empty() {
            return Err("a blank key never matches: write the key after the verb".to_owned());
        }
        match self {
            KeyKind::Ip => {
                let ip: IpAddr = text.parse().map_err(|_| {
                    format!(
                        "{} is not an IP address, which --key ip makes of each request",
                        quote(text)
                    )
                })?;
                // The extractor's own grouping (an IPv6 client by its
                // prefix), after the unwrapping of a mapped IPv4 that it
                // does to every peer and proxy hop.
                Ok(ClientIp::default().key_for(ip.to_canonical()))
            }
            KeyKind::Global if text == "global" => Ok(Key::GLOBAL),
            KeyKind::Global => Err(format!(
                "{} never matches: with --key global every request has the one key \"global\"",
                quote(text)
            )),
            KeyKind::Header(extractor) => {
                let key = extractor.key_for(text.as_bytes()).ok_or_else(|| {
                    format!(
                        "a key of {} bytes never matches: longer header values give no key (and \
                         share the \"<no key>\" budget); shorten it to what clients send",
                        text.len()
                    )
                })?;
                if HeaderValue::from_str(text).is_err() {
                    return Err(format!(
                        "{} never matches: it has a character no header value can carry",
                        quote(text)
                    ));
                }
                if OnMissingKey::default() == OnMissingKey::Shared(key.clone()) {
                    return Err(format!(
                        "{} is the key every request without the header shares (or with an empty \
                         or oversized one): it cannot be listed or given a plan",
                        quote(text)
                    ));
                }
                Ok(key)
            }
        }
    }
}

/// The text a key is written as in messages: an address as usual text,
/// `global`, a header's value (lossy where it is not UTF-8).
pub fn key_text(key: &Key) -> String {
    match key.view() {
        tollgate::key::KeyView::Global => "global".to_owned(),
        tollgate::key::KeyView::Ip(ip) => ip.to_string(),
        tollgate::key::KeyView::Bytes(bytes) => String::from_utf8_lossy(bytes).into_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header() -> KeyKind {
        KeyKind::parse("header:x-api-key").unwrap()
    }

    #[test]
    fn addresses_take_the_form_the_ip_extractor_gives() {
        let ip = |text: &str| KeyKind::Ip.canonical(text).map(|key| key_text(&key));
        assert_eq!(ip("::ffff:127.0.0.1").unwrap(), "127.0.0.1");
        assert_eq!(ip("127.0.0.1").unwrap(), "127.0.0.1");
        // IPv6 clients are keyed by their /64, written as usual.
        assert_eq!(ip("2001:DB8:0:0:1::7").unwrap(), "2001:db8::");
        assert_eq!(ip("2001:db8::").unwrap(), "2001:db8::");
        assert_eq!(
            KeyKind::Ip.canonical("::ffff:10.0.0.1").unwrap(),
            Key::from("10.0.0.1".parse::<IpAddr>().unwrap())
        );
        let error = ip("not-an-address").unwrap_err();
        assert!(error.contains("not an IP address"), "{error}");
    }

    #[test]
    fn keys_no_request_gets_are_refused_with_why() {
        let header = header();
        assert_eq!(header.canonical("alice").unwrap(), Key::from("alice"));
        assert!(header.canonical(&"a".repeat(256)).is_ok());
        let long = header.canonical(&"a".repeat(257)).unwrap_err();
        assert!(long.contains("257 bytes"), "{long}");
        let shared = header.canonical("<no key>").unwrap_err();
        assert!(shared.contains("without the header"), "{shared}");
        assert!(header.canonical("   ").unwrap_err().contains("blank"));
        assert!(header.canonical("a\u{1}b").unwrap_err().contains("header"));
        assert_eq!(KeyKind::Global.canonical("global").unwrap(), Key::GLOBAL);
        assert!(KeyKind::Global.canonical("alice").is_err());
        // A message quotes a long key short.
        let error = KeyKind::Ip.canonical(&"x".repeat(10_000)).unwrap_err();
        assert!(error.len() < 200, "{error}");
    }

    #[test]
    fn the_kinds_parse() {
        assert!(matches!(KeyKind::parse("ip"), Ok(KeyKind::Ip)));
        assert!(matches!(KeyKind::parse("global"), Ok(KeyKind::Global)));
        assert!(matches!(header(), KeyKind::Header(_)));
        assert!(KeyKind::parse("header:bad name").is_err());
        assert!(KeyKind::parse("cookie").is_err());
    }
}
