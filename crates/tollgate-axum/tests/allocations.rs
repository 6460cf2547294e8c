//! Keying a request by `ClientIp` allocates nothing, even behind trusted
//! proxies that forward a long `X-Forwarded-For` or `Forwarded` list: the
//! hops are parsed as they are walked, from the right, and the walk stops at
//! the first untrusted one. Counted by a global allocator.

use axum::extract::ConnectInfo;
use http::Request;
use std::net::SocketAddr;
use tollgate::{Key, KeyExtractor, key::RequestView};
use tollgate_axum::{ClientIp, ProxyHeader};
use tollgate_tests::alloc::{CountingAllocator, allocations_here};

#[global_allocator]
static GLOBAL: CountingAllocator = CountingAllocator;

/// A request from a trusted proxy whose `header` lists 200 hops a client
/// wrote, then the client's address, then two more proxies.
fn forwarded_request(header: ProxyHeader) -> Request<()> {
    let hop = |ip: &str| match header {
        ProxyHeader::Forwarded => format!("for={ip}"),
        _ => ip.to_owned(),
    };
    let mut hops: Vec<String> = (0..200).map(|i| hop(&format!("198.51.100.{i}"))).collect();
    hops.extend(["203.0.113.9", "10.0.0.3", "10.0.0.2"].map(hop));
    let mut request = Request::builder()
        .header(header.name(), hops.join(", "))
        .body(())
        .unwrap();
    let peer: SocketAddr = "10.0.0.1:5000".parse().unwrap();
    request.extensions_mut().insert(ConnectInfo(peer));
    request
}

#[test]
fn keying_by_client_ip_behind_proxies_allocates_nothing() {
    for header in [ProxyHeader::XForwardedFor, ProxyHeader::Forwarded] {
        let client_ip = ClientIp::trusting(["10.0.0.0/8".parse().unwrap()]).headers([header]);
        let request = forwarded_request(header);
        let info = RequestView::new(&request);
        let expected = Key::from("203.0.113.9".parse::<std::net::IpAddr>().unwrap());
        assert_eq!(client_ip.extract(&info), Some(expected.clone()));
        let before = allocations_here();
        for _ in 0..100 {
            let key = client_ip.extract(&info);
            assert!(key.as_ref() == Some(&expected));
        }
        let allocations = allocations_here() - before;
        assert_eq!(allocations, 0, "{header:?}: allocations in 100 extractions");
    }
}
