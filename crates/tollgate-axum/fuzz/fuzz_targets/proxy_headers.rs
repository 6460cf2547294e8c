//! Feeds arbitrary bytes to the proxy-header parsers as `Forwarded`,
//! `X-Forwarded-For` and `X-Real-IP` values, from a trusted and an untrusted
//! peer: nothing may panic, and the answer is always an address.
#![no_main]

use http::{HeaderMap, HeaderValue};
use libfuzzer_sys::fuzz_target;
use std::net::SocketAddr;
use tollgate_axum::{ClientIp, ProxyHeader, parse_node};

fuzz_target!(|data: &[u8]| {
    let _ = parse_node(data);
    let Ok(value) = HeaderValue::from_bytes(data) else {
        return;
    };
    let trusted = ClientIp::trusting(["10.0.0.0/8".parse().unwrap()]);
    let by_hops = ClientIp::trusting_hops(2);
    for header in ProxyHeader::ALL {
        let mut headers = HeaderMap::new();
        headers.append(header.name().clone(), value.clone());
        for peer in ["10.0.0.1:1", "203.0.113.1:1"] {
            let peer: SocketAddr = peer.parse().unwrap();
            let _ = trusted.key_for(trusted.resolve(peer, &headers));
            let _ = by_hops.key_for(by_hops.resolve(peer, &headers));
        }
    }
});
