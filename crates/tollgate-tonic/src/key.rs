//! Keys for gRPC calls: the peer, a metadata value, a bearer token, the
//! method.
//!
//! Combine them in a tuple, as with any tollgate key:
//! `(GrpcMethod, MetadataKey::new("x-api-key"))` gives each API key its own
//! budget per method.

use http::HeaderName;
use http::header::AUTHORIZATION;
use tollgate::{HeaderKey, Key, KeyExtractor, PeerIp, key::RequestView};
use tonic::transport::server::TcpConnectInfo;

/// The peer's IP address, from the connection info tonic's server puts on
/// every request (`TcpConnectInfo`), or else from the extensions tollgate's
/// [`PeerIp`] reads. IPv4-mapped IPv6 addresses are unwrapped.
///
/// Over TLS tonic records `TlsConnectInfo` instead, which this crate does
/// not read: put a [`tollgate::key::PeerAddr`] extension in front (or key on
/// something else, such as the client certificate's identity, with
/// [`tollgate::key_fn`]). Behind a proxy every call comes from the proxy.
#[derive(Clone, Copy, Debug, Default)]
pub struct GrpcPeerIp;

impl KeyExtractor for GrpcPeerIp {
    fn extract(&self, request: &RequestView<'_>) -> Option<Key> {
        request
            .extensions
            .get::<TcpConnectInfo>()
            .and_then(TcpConnectInfo::remote_addr)
            .map(|addr| Key::from(addr.ip().to_canonical()))
            .or_else(|| PeerIp.extract(request))
    }

    fn missing_key_hint(&self) -> Option<&'static str> {
        Some(
            "GrpcPeerIp found no peer address on a call, so calls without one share the \
             missing-key limit (by default one limit for all of them): tonic's server records \
             the address for plain TCP (TcpConnectInfo); over TLS, or with another server, \
             insert a `tollgate::key::PeerAddr` extension in front of the layer. This is \
             logged once per layer.",
        )
    }
}

/// The value of one ASCII metadata entry, e.g. `x-api-key`. A missing
/// entry gives no key (the layer's `OnMissingKey` behaviour applies); so does
/// a value longer than 256 bytes.
#[derive(Clone, Debug)]
pub struct MetadataKey(HeaderKey);

impl MetadataKey {
    /// The entry called `name` (lower case, as gRPC metadata keys are).
    ///
    /// # Panics
    ///
    /// If `name` is not a valid metadata key: it is a constant in the
    /// program, so the mistake shows at startup.
    pub fn new(name: &'static str) -> Self {
        MetadataKey(HeaderKey::new(name))
    }

    /// The entry called `name`.
    pub fn from_name(name: HeaderName) -> Self {
        MetadataKey(HeaderKey::from_name(name))
    }
}

impl KeyExtractor for MetadataKey {
    fn extract(&self, request: &RequestView<'_>) -> Option<Key> {
        self.0.extract(request)
    }
}

/// The token of an `authorization: Bearer <token>` entry, as an opaque
/// value: each token gets its own budget.
///
/// For a budget per user rather than per token, key on the subject that
/// your authentication layer verified (put it in the request's extensions,
/// then read it with [`tollgate::key_fn`]). This extractor deliberately does
/// not decode a JWT's `sub` itself: before verification the claim is
/// whatever the client wrote, so a limit keyed on it could be dodged by
/// minting tokens with fresh subjects.
#[derive(Clone, Copy, Debug, Default)]
pub struct BearerToken;

/// Tokens longer than this give no key rather than a huge one.
const MAX_TOKEN_LEN: usize = 8 * 1024;

impl KeyExtractor for BearerToken {
    fn extract(&self, request: &RequestView<'_>) -> Option<Key> {
        let value = request.headers.get(AUTHORIZATION)?.as_bytes();
        let (scheme, token) = value.split_at_checked(7)?;
        let token = token.trim_ascii();
        (scheme.eq_ignore_ascii_case(b"bearer ")
            && !token.is_empty()
            && token.len() <= MAX_TOKEN_LEN)
            .then(|| Key::from_bytes(token))
    }
}

/// The full method path, `/package.Service/Method`: one budget per method
/// (combine with a client key for one per method and client).
#[derive(Clone, Copy, Debug, Default)]
pub struct GrpcMethod;

impl KeyExtractor for GrpcMethod {
    fn extract(&self, request: &RequestView<'_>) -> Option<Key> {
        let path = request.uri.path();
        // A gRPC path always has a service and a method; anything else is
        // not a gRPC call and gets no key.
        let (service, method) = path.strip_prefix('/')?.split_once('/')?;
        (!service.is_empty() && !method.is_empty()).then(|| Key::from(path))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::Request;

    fn key_of(extractor: &impl KeyExtractor, request: &Request<()>) -> Option<Key> {
        extractor.extract(&RequestView::new(request))
    }

    #[test]
    fn bearer_tokens_are_keys_and_other_schemes_are_not() {
        let with = |value: &str| {
            let request = Request::builder()
                .header("authorization", value)
                .body(())
                .unwrap();
            key_of(&BearerToken, &request)
        };
        assert_eq!(with("Bearer abc"), Some(Key::from("abc")));
        assert_eq!(with("bearer  abc "), Some(Key::from("abc")));
        assert_eq!(with("Basic dXNlcjpwdw=="), None);
        assert_eq!(with("Bearer "), None);
        assert_eq!(with("Bearer"), None);
        assert_eq!(
            with(&format!("Bearer {}", "x".repeat(MAX_TOKEN_LEN + 1))),
            None
        );
        assert_eq!(key_of(&BearerToken, &Request::new(())), None);
    }

    #[test]
    fn methods_are_keys_only_for_grpc_paths() {
        let with = |path: &str| {
            let request = Request::builder().uri(path).body(()).unwrap();
            key_of(&GrpcMethod, &request)
        };
        assert_eq!(
            with("/grpc.health.v1.Health/Check"),
            Some(Key::from("/grpc.health.v1.Health/Check"))
        );
        assert_eq!(with("/"), None);
        assert_eq!(with("/only-a-service"), None);
        assert_eq!(with("//Check"), None);
    }

    #[test]
    fn the_peer_comes_from_tonics_connection_info_or_tollgates_extensions() {
        let mut request = Request::new(());
        assert_eq!(key_of(&GrpcPeerIp, &request), None);
        let addr: std::net::SocketAddr = "[::ffff:192.0.2.7]:5000".parse().unwrap();
        request
            .extensions_mut()
            .insert(tollgate::key::PeerAddr(addr));
        assert_eq!(
            key_of(&GrpcPeerIp, &request),
            Some(Key::from("192.0.2.7".parse::<std::net::IpAddr>().unwrap()))
        );
        // tonic's own connection info comes first...
        request.extensions_mut().insert(TcpConnectInfo {
            local_addr: None,
            remote_addr: Some("203.0.113.4:9".parse().unwrap()),
        });
        assert_eq!(
            key_of(&GrpcPeerIp, &request),
            Some(Key::from(
                "203.0.113.4".parse::<std::net::IpAddr>().unwrap()
            ))
        );
        // ...and without a remote address, the extension is the fallback.
        request.extensions_mut().insert(TcpConnectInfo {
            local_addr: None,
            remote_addr: None,
        });
        assert_eq!(
            key_of(&GrpcPeerIp, &request),
            Some(Key::from("192.0.2.7".parse::<std::net::IpAddr>().unwrap()))
        );
    }
}
