//! Keys: which bucket a request is counted in.
//!
//! A [`KeyExtractor`] looks at a request and returns a [`Key`]. Built-ins
//! cover the common cases ([`GlobalKey`], [`PeerIp`], [`HeaderKey`]), a
//! closure covers the rest ([`key_fn`]), and a tuple of extractors combines
//! them (`(PeerIp, HeaderKey::new("x-api-key"))` counts each API key per IP).
//! The key itself is the store contract's ([`tollgate_store::Key`]).

use http::{Extensions, HeaderMap, HeaderName, Method, Request, Uri};
use std::net::SocketAddr;
use std::sync::Arc;
pub use tollgate_store::{Key, KeyView};

/// The parts of a request a key can be made from.
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct RequestView<'a> {
    /// The method.
    pub method: &'a Method,
    /// The URI.
    pub uri: &'a Uri,
    /// The headers.
    pub headers: &'a HeaderMap,
    /// The extensions: connection info, route, whatever other layers added.
    pub extensions: &'a Extensions,
}

impl<'a> RequestView<'a> {
    /// A view of `request`.
    pub fn new<B>(request: &'a Request<B>) -> Self {
        RequestView {
            method: request.method(),
            uri: request.uri(),
            headers: request.headers(),
            extensions: request.extensions(),
        }
    }
}

/// Maps a request to the key it is counted under.
///
/// Return `None` when the request carries no key (a missing header, no
/// connection info); the layer then applies its [`OnMissingKey`] behaviour.
pub trait KeyExtractor: Send + Sync + 'static {
    /// The request's key, or `None`.
    fn extract(&self, request: &RequestView<'_>) -> Option<Key>;

    /// For an extractor that finds a key in every request once the app
    /// is set up right (the peer's address): what a request without one
    /// says about the setup, and the fix. The layer logs it once, at
    /// WARN, the first time a request has no key: until it is fixed,
    /// every such request gets the [`OnMissingKey`] behaviour (by default
    /// they all share one limit). `None`, the default, for an extractor
    /// whose key a request may well lack (a header it did not send).
    fn missing_key_hint(&self) -> Option<&'static str> {
        None
    }
}

/// Logs, once, an extractor's [`missing_key_hint`](KeyExtractor::missing_key_hint)
/// when a request has no key: one per layer.
#[derive(Debug, Default)]
pub(crate) struct MissingKeyWarning(std::sync::atomic::AtomicBool);

impl MissingKeyWarning {
    /// A request had no key under `extractor`.
    #[cold]
    pub(crate) fn missed<K: KeyExtractor + ?Sized>(&self, extractor: &K) {
        use std::sync::atomic::Ordering;
        if let Some(hint) = extractor.missing_key_hint()
            && !self.0.swap(true, Ordering::Relaxed)
        {
            tracing::warn!("{hint}");
        }
    }
}

/// What the layer does with a request whose key cannot be extracted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OnMissingKey {
    /// Count it under one shared key. The default: such requests are still
    /// limited (together), so a missing header is no way around the limit.
    Shared(Key),
    /// Let it through unlimited.
    Skip,
    /// Reject it with this status (and by default no body; the rejector
    /// builds the response from
    /// [`Rejection::MissingKey`](crate::Rejection::MissingKey)).
    Reject(http::StatusCode),
}

impl Default for OnMissingKey {
    fn default() -> Self {
        OnMissingKey::Shared(Key::from("<no key>"))
    }
}

/// Every request shares one key: a limit for the whole service.
#[derive(Clone, Copy, Debug, Default)]
pub struct GlobalKey;

impl KeyExtractor for GlobalKey {
    #[inline]
    fn extract(&self, _: &RequestView<'_>) -> Option<Key> {
        Some(Key::GLOBAL)
    }
}

/// The address of the connection's peer, without any proxy header.
///
/// It reads the first of these a request carries: with the `axum` feature,
/// axum's `ConnectInfo<SocketAddr>` (serve with
/// `into_make_service_with_connect_info::<SocketAddr>()`), then, in an
/// app's tests, its `MockConnectInfo<SocketAddr>` (as axum's `ConnectInfo`
/// extractor does); then a [`PeerAddr`] extension; then a bare
/// `SocketAddr` extension.
/// Behind a proxy every request would come from the proxy; use the trusted
/// client IP extractor of `tollgate-axum` there.
///
/// IPv4-mapped IPv6 addresses are unwrapped to IPv4.
#[derive(Clone, Copy, Debug, Default)]
pub struct PeerIp;

/// The peer address of a connection, as a request extension. Servers that are
/// not axum can insert it for [`PeerIp`] to read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerAddr(pub SocketAddr);

impl PeerIp {
    /// The peer address the request's extensions carry.
    #[inline(always)]
    pub fn peer_addr(extensions: &Extensions) -> Option<SocketAddr> {
        // axum's, when enabled, is by far the most common: look there first,
        // inline; the other places out of line.
        #[cfg(feature = "axum")]
        if let Some(info) = extensions.get::<axum::extract::ConnectInfo<SocketAddr>>() {
            return Some(info.0);
        }
        Self::peer_addr_elsewhere(extensions)
    }

    /// [`peer_addr`](Self::peer_addr) past axum's `ConnectInfo`.
    #[inline(never)]
    fn peer_addr_elsewhere(extensions: &Extensions) -> Option<SocketAddr> {
        // What an app's tests give with `Router::layer(MockConnectInfo(addr))`,
        // as axum's own `ConnectInfo` extractor reads it.
        #[cfg(feature = "axum")]
        if let Some(mock) =
            extensions.get::<axum::extract::connect_info::MockConnectInfo<SocketAddr>>()
        {
            return Some(mock.0);
        }
        if let Some(PeerAddr(addr)) = extensions.get::<PeerAddr>() {
            return Some(*addr);
        }
        extensions.get::<SocketAddr>().copied()
    }
}

impl KeyExtractor for PeerIp {
    // Inline, so that the key stays in registers: returned through memory
    // from a call, it was read back in wider words than it was written,
    // which stalls the load (with the memory store's like stall, about
    // 11 ns a request: BENCHMARKS.md, issue 51's third session).
    #[inline(always)]
    fn extract(&self, request: &RequestView<'_>) -> Option<Key> {
        PeerIp::peer_addr(request.extensions).map(|addr| Key::from(addr.ip().to_canonical()))
    }

    fn missing_key_hint(&self) -> Option<&'static str> {
        Some(PEER_IP_HINT)
    }
}

/// What a request without a peer address says about the setup.
pub(crate) const PEER_IP_HINT: &str = "PeerIp found no peer address on a request, so requests \
    without one share the missing-key limit (by default one limit for all of them): with \
    axum, serve the app with `into_make_service_with_connect_info::<SocketAddr>()`; with \
    another server, insert a `tollgate::key::PeerAddr` extension; in tests, add \
    `MockConnectInfo`. This is logged once per layer.";

/// The value of one request header, e.g. an API key.
///
/// A missing header gives no key. Values longer than `max_len` bytes (256 by
/// default) also give no key rather than a huge one.
#[derive(Clone, Debug)]
pub struct HeaderKey {
    name: HeaderName,
    max_len: usize,
}

impl HeaderKey {
    /// Keys on the header `name`, in any case (`"X-Api-Key"` is
    /// `x-api-key`: HTTP header names are case-insensitive).
    ///
    /// # Panics
    ///
    /// If `name` is not a header name (a space, a colon, a non-ASCII
    /// letter), with a message naming it, when the layer's key is set up;
    /// use [`HeaderKey::try_new`] for names from configuration.
    ///
    /// ```
    /// use tollgate::HeaderKey;
    ///
    /// let key = HeaderKey::new("X-Api-Key");
    /// assert_eq!(key.name().as_str(), "x-api-key");
    /// ```
    pub fn new(name: &str) -> Self {
        match Self::try_new(name) {
            Ok(key) => key,
            Err(error) => panic!("{error}"),
        }
    }

    /// Keys on the header `name`, in any case; an error naming it if it is
    /// not a header name.
    ///
    /// ```
    /// use tollgate::HeaderKey;
    ///
    /// assert!(HeaderKey::try_new("X-Tenant").is_ok());
    /// let error = HeaderKey::try_new("x api key").unwrap_err();
    /// assert!(error.to_string().contains("\"x api key\""));
    /// ```
    pub fn try_new(name: &str) -> Result<Self, crate::ConfigError> {
        HeaderName::from_bytes(name.as_bytes())
            .map(Self::from_name)
            .map_err(|_| {
                crate::ConfigError::new(format!(
                    "{name:?} is not a header name: use letters, digits and \
                     !#$%&'*+-.^_`|~ only (no spaces or colons)"
                ))
            })
    }

    /// Keys on the header `name`.
    pub fn from_name(name: HeaderName) -> Self {
        HeaderKey { name, max_len: 256 }
    }

    /// The header it keys on, in its canonical (lowercase) form.
    pub fn name(&self) -> &HeaderName {
        &self.name
    }

    /// Values longer than this give no key.
    pub fn max_len(self, max_len: usize) -> Self {
        HeaderKey { max_len, ..self }
    }

    /// The key this extractor gives a request whose header has `value`:
    /// its canonical form, to compare keys written in configuration (an
    /// allow list, a plan) with the keys requests get. `None` for a value
    /// that gives no key (empty, or longer than [`max_len`](Self::max_len)):
    /// such requests count under the [`OnMissingKey`] key, so a list entry
    /// of that value would never match.
    ///
    /// ```
    /// use tollgate::{HeaderKey, Key};
    ///
    /// let extractor = HeaderKey::new("x-api-key");
    /// assert_eq!(extractor.key_for(b"alice"), Some(Key::from("alice")));
    /// assert_eq!(extractor.key_for(&[b'a'; 257]), None);
    /// ```
    #[inline]
    pub fn key_for(&self, value: &[u8]) -> Option<Key> {
        (!value.is_empty() && value.len() <= self.max_len).then(|| Key::from_bytes(value))
    }
}

impl KeyExtractor for HeaderKey {
    fn extract(&self, request: &RequestView<'_>) -> Option<Key> {
        self.key_for(request.headers.get(&self.name)?.as_bytes())
    }
}

/// A key extractor from a closure.
///
/// ```
/// use tollgate::{key_fn, Key};
///
/// // Key on the first path segment.
/// let by_tenant = key_fn(|req| {
///     req.uri.path().split('/').nth(1).filter(|s| !s.is_empty()).map(Key::from)
/// });
/// # let _ = by_tenant;
/// ```
pub fn key_fn<F>(f: F) -> FnKey<F>
where
    F: Fn(&RequestView<'_>) -> Option<Key> + Send + Sync + 'static,
{
    FnKey(f)
}

/// See [`key_fn`].
#[derive(Clone, Copy, Debug)]
pub struct FnKey<F>(F);

impl<F> KeyExtractor for FnKey<F>
where
    F: Fn(&RequestView<'_>) -> Option<Key> + Send + Sync + 'static,
{
    fn extract(&self, request: &RequestView<'_>) -> Option<Key> {
        (self.0)(request)
    }
}

impl<K: KeyExtractor + ?Sized> KeyExtractor for Arc<K> {
    fn extract(&self, request: &RequestView<'_>) -> Option<Key> {
        (**self).extract(request)
    }

    fn missing_key_hint(&self) -> Option<&'static str> {
        (**self).missing_key_hint()
    }
}

impl<K: KeyExtractor + ?Sized> KeyExtractor for Box<K> {
    fn extract(&self, request: &RequestView<'_>) -> Option<Key> {
        (**self).extract(request)
    }

    fn missing_key_hint(&self) -> Option<&'static str> {
        (**self).missing_key_hint()
    }
}

macro_rules! tuple_extractor {
    ($($name:ident),+) => {
        /// All parts must be present; the key is their [`Key::composite`].
        impl<$($name: KeyExtractor),+> KeyExtractor for ($($name,)+) {
            #[allow(non_snake_case)]
            fn extract(&self, request: &RequestView<'_>) -> Option<Key> {
                let ($($name,)+) = self;
                Some(Key::composite(&[$($name.extract(request)?),+]))
            }

            /// The first part's hint that has one.
            #[allow(non_snake_case)]
            fn missing_key_hint(&self) -> Option<&'static str> {
                let ($($name,)+) = self;
                None$(.or_else(|| $name.missing_key_hint()))+
            }
        }
    };
}

tuple_extractor!(A, B);
tuple_extractor!(A, B, C);
tuple_extractor!(A, B, C, D);

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{IpAddr, Ipv6Addr};

    fn info<'a>(req: &'a Request<()>) -> RequestView<'a> {
        RequestView::new(req)
    }

    #[test]
    fn a_composite_taken_part_by_part_is_the_same_key_and_stops_at_a_missing_part() {
        let parts = [
            Key::from("192.0.2.1".parse::<IpAddr>().unwrap()),
            Key::from("x"),
            Key::GLOBAL,
        ];
        assert_eq!(
            Key::try_composite(parts.iter().cloned().map(Some)),
            Some(Key::composite(&parts))
        );
        // The part after a missing one is never asked for.
        let mut asked = 0;
        let parts = [Some(Key::GLOBAL), None, Some(Key::GLOBAL)];
        let missing = Key::try_composite(parts.iter().map(|p| {
            asked += 1;
            p.clone()
        }));
        assert_eq!((missing, asked), (None, 2));
    }

    #[test]
    fn peer_ip_unwraps_ipv4_mapped_addresses() {
        let mut req = Request::new(());
        let mapped = Ipv6Addr::from([0, 0, 0, 0, 0, 0xffff, 0x0102, 0x0304]);
        req.extensions_mut()
            .insert(PeerAddr(SocketAddr::new(mapped.into(), 9)));
        assert_eq!(
            PeerIp.extract(&info(&req)),
            Some(Key::from("1.2.3.4".parse::<IpAddr>().unwrap()))
        );
        assert_eq!(PeerIp.extract(&info(&Request::new(()))), None);
        // A bare `SocketAddr` extension (what some servers insert) works too.
        let mut req = Request::new(());
        req.extensions_mut()
            .insert(SocketAddr::from(([192, 0, 2, 9], 443)));
        assert_eq!(
            PeerIp.extract(&info(&req)),
            Some(Key::from("192.0.2.9".parse::<IpAddr>().unwrap()))
        );
    }

    /// The places `PeerIp` reads, in the order its doc gives: each one
    /// wins over every later one, and is found when it is the only one.
    #[cfg(feature = "axum")]
    #[test]
    fn peer_ip_reads_its_places_in_the_documented_order() {
        use axum::extract::ConnectInfo;
        use axum::extract::connect_info::MockConnectInfo;
        let addr = |last: u8| SocketAddr::from(([192, 0, 2, last], 443));
        let key = |last: u8| Some(Key::from(IpAddr::from([192, 0, 2, last])));
        // Each place with its own address: 1 for the first, 4 for the last.
        let places: [fn(&mut http::Extensions, SocketAddr); 4] = [
            |e, a| {
                e.insert(ConnectInfo(a));
            },
            |e, a| {
                e.insert(MockConnectInfo(a));
            },
            |e, a| {
                e.insert(PeerAddr(a));
            },
            |e, a| {
                e.insert(a);
            },
        ];
        for first in 0..places.len() {
            let mut all_from_first = Request::new(());
            for (i, place) in places.iter().enumerate().skip(first) {
                place(all_from_first.extensions_mut(), addr(i as u8 + 1));
            }
            assert_eq!(PeerIp.extract(&info(&all_from_first)), key(first as u8 + 1));
            let mut alone = Request::new(());
            places[first](alone.extensions_mut(), addr(first as u8 + 1));
            assert_eq!(PeerIp.extract(&info(&alone)), key(first as u8 + 1));
        }
    }

    #[test]
    fn header_key_refuses_missing_empty_and_oversized_values() {
        let extractor = HeaderKey::new("x-api-key").max_len(8);
        let with = |v: &[u8]| {
            let mut req = Request::new(());
            req.headers_mut()
                .insert("x-api-key", http::HeaderValue::from_bytes(v).unwrap());
            extractor.extract(&info(&req))
        };
        assert_eq!(with(b"k1"), Some(Key::from("k1")));
        assert_eq!(with(b""), None);
        assert_eq!(with(b"123456789"), None);
        assert_eq!(with(&[0xff, 0xfe]), Some(Key::from_bytes(&[0xff, 0xfe])));
        assert_eq!(extractor.extract(&info(&Request::new(()))), None);
        // By default, up to 256 bytes.
        let default = HeaderKey::new("x-api-key");
        let with_len = |n: usize| {
            let mut req = Request::new(());
            let value = http::HeaderValue::from_bytes(&vec![b'k'; n]).unwrap();
            req.headers_mut().insert("x-api-key", value);
            default.extract(&info(&req)).is_some()
        };
        assert_eq!((with_len(256), with_len(257)), (true, false));
    }

    #[test]
    fn tuples_need_every_part() {
        let both = (GlobalKey, HeaderKey::new("x-user"));
        assert_eq!(both.extract(&info(&Request::new(()))), None);
    }
}
