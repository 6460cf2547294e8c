//! Properties of the client-IP resolution over arbitrary input: no header
//! can make it panic, and nothing a client sends can displace the address
//! its trusted proxy appended.

use http::header::{FORWARDED, HeaderName};
use http::{HeaderMap, HeaderValue};
use proptest::prelude::*;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use tollgate_axum::{ClientIp, ProxyHeader, parse_node};

const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");

fn header_value() -> impl Strategy<Value = Vec<u8>> {
    // Header values hold tab, printable ASCII and bytes 0x80 and up; bias towards the
    // bytes the parsers care about.
    let interesting = prop_oneof![
        Just(b','),
        Just(b';'),
        Just(b'"'),
        Just(b'='),
        Just(b':'),
        Just(b'['),
        Just(b']'),
        Just(b'\\'),
        Just(b' '),
        Just(b'_'),
        b'0'..=b'9',
        b'a'..=b'f',
        any::<u8>().prop_filter("a byte a header value may hold", |&b| b == b'\t'
            || (b >= 0x20 && b != 0x7f)),
    ];
    prop::collection::vec(interesting, 0..200)
}

fn untrusted_ip() -> impl Strategy<Value = IpAddr> {
    any::<u32>()
        .prop_filter("outside 10.0.0.0/8", |ip| {
            Ipv4Addr::from(*ip).octets()[0] != 10
        })
        .prop_map(|ip| IpAddr::V4(Ipv4Addr::from(ip)))
}

/// What a proxy in 10.0.0.0/8 reports after appending `appended` to a
/// client's `spoofed` value of `header`; `None` when the bytes cannot be a
/// header value at all.
fn resolve_appended(header: HeaderName, spoofed: &[u8], appended: &str) -> Option<IpAddr> {
    let value = HeaderValue::from_bytes(&[spoofed, appended.as_bytes()].concat()).ok()?;
    let which: Vec<ProxyHeader> = ProxyHeader::ALL
        .into_iter()
        .filter(|h| *h.name() == header)
        .collect();
    let mut headers = HeaderMap::new();
    headers.insert(header, value);
    let client_ip = ClientIp::trusting(["10.0.0.0/8".parse().unwrap()]).headers(which);
    Some(client_ip.resolve(SocketAddr::new("10.0.0.1".parse().unwrap(), 1), &headers))
}

fn client_ips() -> Vec<ClientIp> {
    vec![
        ClientIp::default(),
        ClientIp::trusting([
            "10.0.0.0/8".parse().unwrap(),
            "2001:db8::/32".parse().unwrap(),
        ]),
        ClientIp::trusting_hops(1),
        ClientIp::trusting_hops(3).headers(ProxyHeader::ALL),
    ]
}

proptest! {
    #[test]
    fn any_header_resolves_without_panicking(
        values in prop::collection::vec((0usize..3, header_value()), 0..4),
        peer_v4 in any::<u32>(),
    ) {
        let mut headers = HeaderMap::new();
        for (which, value) in &values {
            if let Ok(value) = HeaderValue::from_bytes(value) {
                headers.append(ProxyHeader::ALL[*which].name().clone(), value);
            }
        }
        let peer = SocketAddr::new(IpAddr::V4(Ipv4Addr::from(peer_v4)), 1);
        let trusted_peer = SocketAddr::new("10.0.0.1".parse().unwrap(), 1);
        for client_ip in client_ips() {
            let _ = client_ip.key_for(client_ip.resolve(peer, &headers));
            let _ = client_ip.key_for(client_ip.resolve(trusted_peer, &headers));
        }
    }

    #[test]
    fn any_node_parses_without_panicking(bytes in prop::collection::vec(any::<u8>(), 0..64)) {
        let _ = parse_node(&bytes);
    }

    /// Whatever a client puts into `X-Forwarded-For`, the proxy in
    /// 10.0.0.0/8 appends the real address, and that is the answer.
    #[test]
    fn a_client_cannot_displace_the_address_its_proxy_appended(
        spoofed in header_value(),
        real in untrusted_ip(),
    ) {
        prop_assert_eq!(resolve_appended(X_FORWARDED_FOR, &spoofed, &format!(", {real}")), Some(real));
    }

    /// The same for `Forwarded`, where quotes do mean something.
    #[test]
    fn a_client_cannot_displace_the_forwarded_element_its_proxy_appended(
        spoofed in header_value(),
        real in untrusted_ip(),
    ) {
        let appended = format!(", for={real};proto=https");
        prop_assert_eq!(resolve_appended(FORWARDED, &spoofed, &appended), Some(real));
    }
}
