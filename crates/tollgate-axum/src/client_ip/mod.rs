//! The client's IP address, with an explicit trust model.
//!
//! Behind a load balancer every connection comes from the balancer; the
//! client's address is in a header the balancer adds. But a client can
//! send that header too. So a header is believed only as far as it was
//! written by proxies you trust: it is read right to left (nearest hop
//! first), trusted hops are skipped, and the first untrusted address is the
//! client. A spoofed `X-Forwarded-For: 1.1.1.1` from a client sits to the
//! left of what your proxy appended, and is never reached.

mod extract;
mod headers;
mod node;

pub use extract::{ClientAddr, NoConnectInfo};
pub use headers::ProxyHeader;
pub use node::{Node, parse_node};

use ipnet::IpNet;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use tollgate::{Key, KeyExtractor, PeerIp, key::RequestView};

/// Which peers may speak for the client.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
enum Trust {
    /// Nobody: proxy headers are ignored (the default).
    #[default]
    Nobody,
    /// Peers and hops whose address lies in one of these networks.
    Networks(Vec<IpNet>),
    /// The nearest `n` hops, whatever their addresses (the peer is the
    /// first): for a fixed chain of proxies with changing addresses.
    Hops(usize),
}

/// Finds the client's IP address of a request; a [`KeyExtractor`] that
/// keys on it (IPv6 grouped by prefix).
///
/// ```
/// use tollgate_axum::ClientIp;
///
/// // Behind a load balancer in 10.0.0.0/8:
/// let client_ip = ClientIp::trusting(["10.0.0.0/8".parse().unwrap()]);
/// // Directly on the internet (the default): the peer address, headers ignored.
/// let peer_only = ClientIp::default();
/// # let _ = (client_ip, peer_only);
/// ```
///
/// # What it answers
///
/// - The peer address (from `ConnectInfo<SocketAddr>`), unless the peer is
///   trusted.
/// - From a trusted peer: the configured header (`X-Forwarded-For` by
///   default; see [`headers`](Self::headers)), read nearest hop first,
///   skipping trusted hops; the first untrusted address.
/// - If every hop is trusted, the furthest one.
/// - Fallback: when the hop to read is not an address (`unknown`, an
///   obfuscated identifier, garbage, non-UTF-8), the answer is the nearest
///   trusted hop that reported it. The client cannot choose its key with a
///   malformed header; at worst such requests share their proxy's limit.
/// - No connection info at all: no key (the layer's `OnMissingKey` applies).
///
/// Ports are dropped and IPv4-mapped IPv6 addresses unwrapped. As a key,
/// an IPv6 address is cut to its first 64 bits by default
/// ([`ipv6_prefix`](Self::ipv6_prefix)): one host usually holds a whole /64.
///
/// With proxy headers arriving but no trusted proxy configured, one warning
/// is logged (once per `ClientIp`) and the headers are ignored.
#[derive(Clone, Debug)]
pub struct ClientIp {
    trust: Trust,
    headers: Vec<ProxyHeader>,
    ipv6_prefix: u8,
    warned: Arc<AtomicBool>,
}

impl Default for ClientIp {
    fn default() -> Self {
        ClientIp {
            trust: Trust::Nobody,
            // Only the header proxies most often write. A header the proxy
            // passes through untouched is the client's to choose, so
            // reading more than the proxy writes would let clients pick
            // their own key.
            headers: vec![ProxyHeader::XForwardedFor],
            ipv6_prefix: 64,
            warned: Arc::default(),
        }
    }
}

/// A `ClientIp` setting out of range.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InvalidPrefix(pub u8);

impl std::fmt::Display for InvalidPrefix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "IPv6 prefix /{} is out of range: choose 32 to 128 (64 groups a typical host)",
            self.0
        )
    }
}

impl std::error::Error for InvalidPrefix {}

impl ClientIp {
    /// Trusts peers and hops in `networks` (CIDRs such as `10.0.0.0/8`,
    /// `2001:db8::/32`; a single address is a /32 or /128).
    ///
    /// ```
    /// use tollgate_axum::{ClientIp, IpNet};
    ///
    /// let proxies: Vec<IpNet> = ["10.0.0.0/8", "2001:db8::/32"]
    ///     .iter()
    ///     .map(|cidr| cidr.parse())
    ///     .collect::<Result<_, _>>()?;
    /// let client_ip = ClientIp::trusting(proxies);
    /// # let _ = client_ip;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    /// No networks trusts nobody, like [`trusting_hops(0)`](Self::trusting_hops)
    /// and the default.
    pub fn trusting(networks: impl IntoIterator<Item = IpNet>) -> Self {
        let networks: Vec<IpNet> = networks.into_iter().collect();
        ClientIp {
            trust: if networks.is_empty() {
                Trust::Nobody
            } else {
                Trust::Networks(networks)
            },
            ..ClientIp::default()
        }
    }

    /// Trusts the nearest `hops` hops, the peer being the first: for a
    /// fixed chain of proxies (say, a CDN and a load balancer: 2) whose
    /// addresses change. Zero trusts nobody.
    pub fn trusting_hops(hops: usize) -> Self {
        ClientIp {
            trust: if hops == 0 {
                Trust::Nobody
            } else {
                Trust::Hops(hops)
            },
            ..ClientIp::default()
        }
    }

    /// Which headers to read, in order of preference: the first one a
    /// request carries is used (default: `X-Forwarded-For` only). An empty
    /// list ignores headers altogether.
    ///
    /// Name only headers that your proxy writes or strips on every request:
    /// a header it passes through untouched comes from the client, and if
    /// it is earlier in this list than the one your proxy writes, the
    /// client chooses its own key. Behind a proxy that writes `Forwarded`
    /// (RFC 7239), say `.headers([ProxyHeader::Forwarded])`.
    pub fn headers(mut self, headers: impl IntoIterator<Item = ProxyHeader>) -> Self {
        self.headers = headers.into_iter().collect();
        self
    }

    /// How many leading bits of an IPv6 address make the key (default 64;
    /// 32 to 128).
    pub fn ipv6_prefix(mut self, bits: u8) -> Result<Self, InvalidPrefix> {
        if !(32..=128).contains(&bits) {
            return Err(InvalidPrefix(bits));
        }
        self.ipv6_prefix = bits;
        Ok(self)
    }

    /// The client's address, given the connection's peer and the request's
    /// headers.
    pub fn resolve(&self, peer: SocketAddr, headers: &http::HeaderMap) -> IpAddr {
        let peer = peer.ip().to_canonical();
        match &self.trust {
            Trust::Nobody => {
                self.warn_if_headers(headers);
                peer
            }
            Trust::Networks(networks) => {
                let trusted = |ip: &IpAddr| networks.iter().any(|n| n.contains(ip));
                if !trusted(&peer) {
                    return peer;
                }
                self.walk(peer, headers, |_, ip| trusted(ip))
            }
            Trust::Hops(hops) => self.walk(peer, headers, |position, _| position < *hops),
        }
    }

    /// The key for `ip`: the address, IPv6 cut to the prefix.
    pub fn key_for(&self, ip: IpAddr) -> Key {
        Key::from(match ip {
            IpAddr::V6(v6) if self.ipv6_prefix < 128 => {
                let mask = u128::MAX << (128 - u32::from(self.ipv6_prefix));
                IpAddr::V6(Ipv6Addr::from(u128::from(v6) & mask))
            }
            other => other,
        })
    }

    /// Reads the preferred header from a trusted `peer`. `trusted(position,
    /// ip)` says whether the hop at `position` (the peer is 0) is a proxy.
    fn walk(
        &self,
        peer: IpAddr,
        headers: &http::HeaderMap,
        trusted: impl Fn(usize, &IpAddr) -> bool,
    ) -> IpAddr {
        let Some(hops) = self
            .headers
            .iter()
            .find_map(|h| h.hops_nearest_first(headers))
        else {
            return peer;
        };
        let mut nearest_trusted = peer;
        for (i, hop) in hops.enumerate() {
            match hop {
                Node::Ip(ip) if trusted(i + 1, &ip) => nearest_trusted = ip,
                Node::Ip(ip) => return ip,
                Node::Unknown | Node::Obfuscated | Node::Invalid => return nearest_trusted,
            }
        }
        nearest_trusted
    }

    fn warn_if_headers(&self, headers: &http::HeaderMap) {
        if self.warned.load(Ordering::Relaxed) {
            return;
        }
        let present: Vec<&str> = ProxyHeader::ALL
            .iter()
            .filter(|h| headers.contains_key(h.name()))
            .map(|h| h.name().as_str())
            .collect();
        if !present.is_empty() && !self.warned.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                headers = ?present,
                "requests carry proxy headers but no proxy is trusted, so they are ignored and \
                 clients are keyed by their peer address; if this app runs behind a proxy, \
                 configure it with ClientIp::trusting or ClientIp::trusting_hops"
            );
        }
    }
}

impl KeyExtractor for ClientIp {
    fn extract(&self, request: &RequestView<'_>) -> Option<Key> {
        let peer = PeerIp::peer_addr(request.extensions)?;
        Some(self.key_for(self.resolve(peer, request.headers)))
    }

    /// As [`PeerIp`]'s: the client's address starts from the peer's.
    fn missing_key_hint(&self) -> Option<&'static str> {
        PeerIp.missing_key_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::{HeaderMap, HeaderValue};

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(
                http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_str(value).unwrap(),
            );
        }
        map
    }

    fn peer(ip: &str) -> SocketAddr {
        SocketAddr::new(ip.parse().unwrap(), 40_000)
    }

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    fn behind_proxy() -> ClientIp {
        ClientIp::trusting(["10.0.0.0/8".parse().unwrap()])
    }

    #[test]
    fn an_untrusted_peer_is_the_client_whatever_it_claims() {
        let xff = headers(&[("x-forwarded-for", "1.1.1.1")]);
        assert_eq!(
            ClientIp::default().resolve(peer("203.0.113.9"), &xff),
            ip("203.0.113.9")
        );
        assert_eq!(
            behind_proxy().resolve(peer("203.0.113.9"), &xff),
            ip("203.0.113.9")
        );
    }

    #[test]
    fn no_networks_zero_hops_and_no_headers_trust_nobody() {
        let xff = headers(&[("x-forwarded-for", "1.1.1.1")]);
        for client in [
            ClientIp::trusting([]),
            ClientIp::trusting_hops(0),
            behind_proxy().headers([]),
        ] {
            assert_eq!(client.resolve(peer("10.0.0.1"), &xff), ip("10.0.0.1"));
        }
        // Like the default, the first two warn that headers are ignored.
        let empty = ClientIp::trusting([]);
        empty.resolve(peer("10.0.0.1"), &xff);
        assert!(empty.warned.load(Ordering::Relaxed));
    }

    #[test]
    fn the_right_most_untrusted_hop_wins() {
        let h = headers(&[("x-forwarded-for", "1.2.3.4, 5.6.7.8, 10.1.1.1")]);
        assert_eq!(behind_proxy().resolve(peer("10.0.0.1"), &h), ip("5.6.7.8"));
        // Every hop trusted: the furthest.
        let h = headers(&[("x-forwarded-for", "10.9.9.9, 10.1.1.1")]);
        assert_eq!(behind_proxy().resolve(peer("10.0.0.1"), &h), ip("10.9.9.9"));
        // No header: the peer itself.
        assert_eq!(
            behind_proxy().resolve(peer("10.0.0.1"), &HeaderMap::new()),
            ip("10.0.0.1")
        );
    }

    #[test]
    fn hop_counts_trust_by_position() {
        let h = headers(&[("x-forwarded-for", "1.1.1.1, 2.2.2.2, 3.3.3.3")]);
        assert_eq!(
            ClientIp::trusting_hops(1).resolve(peer("9.9.9.9"), &h),
            ip("3.3.3.3")
        );
        assert_eq!(
            ClientIp::trusting_hops(2).resolve(peer("9.9.9.9"), &h),
            ip("2.2.2.2")
        );
        // A chain shorter than promised: the furthest hop there is.
        assert_eq!(
            ClientIp::trusting_hops(9).resolve(peer("9.9.9.9"), &h),
            ip("1.1.1.1")
        );
    }

    #[test]
    fn preference_order_and_fallbacks() {
        let h = headers(&[
            ("x-forwarded-for", "5.6.7.8"),
            ("forwarded", "for=\"[2001:db8::17]:4711\""),
            ("x-real-ip", "7.7.7.7"),
        ]);
        // By default only X-Forwarded-For is read: the others may be the
        // client's own, passed through by a proxy that does not write them.
        assert_eq!(behind_proxy().resolve(peer("10.0.0.1"), &h), ip("5.6.7.8"));
        let forwarded_first =
            behind_proxy().headers([ProxyHeader::Forwarded, ProxyHeader::XForwardedFor]);
        assert_eq!(
            forwarded_first.resolve(peer("10.0.0.1"), &h),
            ip("2001:db8::17")
        );
        let xff_first =
            behind_proxy().headers([ProxyHeader::XForwardedFor, ProxyHeader::Forwarded]);
        assert_eq!(xff_first.resolve(peer("10.0.0.1"), &h), ip("5.6.7.8"));
        let real_ip = behind_proxy().headers([ProxyHeader::XRealIp]);
        assert_eq!(real_ip.resolve(peer("10.0.0.1"), &h), ip("7.7.7.7"));
        // Garbage where the client should be: the proxy that wrote it.
        let h = headers(&[("x-forwarded-for", "1.1.1.1, not-an-ip, 10.2.2.2")]);
        assert_eq!(behind_proxy().resolve(peer("10.0.0.1"), &h), ip("10.2.2.2"));
        let h = headers(&[("forwarded", "for=unknown")]);
        let forwarded = behind_proxy().headers([ProxyHeader::Forwarded]);
        assert_eq!(forwarded.resolve(peer("10.0.0.1"), &h), ip("10.0.0.1"));
    }

    #[test]
    fn ipv6_keys_group_by_prefix_and_ipv4_mapped_unwraps() {
        let client = ClientIp::default();
        assert_eq!(
            client.key_for(ip("2001:db8:1:2:3:4:5:6")),
            Key::from(ip("2001:db8:1:2::"))
        );
        let exact = ClientIp::default().ipv6_prefix(128).unwrap();
        assert_eq!(
            exact.key_for(ip("2001:db8::1")),
            Key::from(ip("2001:db8::1"))
        );
        let wide = ClientIp::default().ipv6_prefix(32).unwrap();
        assert_eq!(
            wide.key_for(ip("2001:db8:ffff::1")),
            Key::from(ip("2001:db8::"))
        );
        assert_eq!(
            ClientIp::default().ipv6_prefix(16).unwrap_err(),
            InvalidPrefix(16)
        );
        assert_eq!(
            client.resolve(peer("::ffff:192.0.2.1"), &HeaderMap::new()),
            ip("192.0.2.1")
        );
        assert_eq!(client.key_for(ip("192.0.2.1")), Key::from(ip("192.0.2.1")));
    }

    #[test]
    fn proxy_headers_with_nobody_trusted_warn_once_and_change_nothing() {
        let client = ClientIp::default();
        client.resolve(peer("203.0.113.9"), &HeaderMap::new());
        assert!(
            !client.warned.load(Ordering::Relaxed),
            "no headers, no warning"
        );
        let xff = headers(&[("x-forwarded-for", "1.1.1.1")]);
        assert_eq!(client.resolve(peer("203.0.113.9"), &xff), ip("203.0.113.9"));
        assert!(client.warned.load(Ordering::Relaxed));
        // Clones share the flag: one warning for the app, not per clone.
        assert!(client.clone().warned.load(Ordering::Relaxed));
    }

    #[test]
    fn without_connection_info_there_is_no_key() {
        let request = http::Request::new(());
        assert_eq!(
            ClientIp::default().extract(&RequestView::new(&request)),
            None
        );
        let mut request = http::Request::new(());
        request
            .extensions_mut()
            .insert(tollgate::key::PeerAddr(peer("10.0.0.1")));
        assert_eq!(
            behind_proxy().extract(&RequestView::new(&request)),
            Some(Key::from(ip("10.0.0.1")))
        );
    }
}
