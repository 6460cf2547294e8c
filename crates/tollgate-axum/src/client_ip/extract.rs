//! The client's address as an axum extractor.

use super::ClientIp;
use axum::extract::FromRequestParts;
use http::StatusCode;
use http::request::Parts;
use std::net::IpAddr;
use std::sync::LazyLock;
use tollgate::PeerIp;

/// The client's IP address, resolved as [`ClientIp`] does, for a handler.
///
/// It uses the `ClientIp` found in the request's extensions (add one with
/// `.layer(Extension(client_ip))`, the same you give the rate-limit layer),
/// or the default one (the peer address, headers ignored). Without
/// connection info (serve with
/// `into_make_service_with_connect_info::<SocketAddr>()`) it rejects with
/// a 500 that says so.
///
/// ```
/// use tollgate_axum::ClientAddr;
///
/// async fn handler(ClientAddr(ip): ClientAddr) -> String {
///     format!("you are {ip}")
/// }
/// # let _ = handler;
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClientAddr(pub IpAddr);

impl<S: Send + Sync> FromRequestParts<S> for ClientAddr {
    type Rejection = (StatusCode, &'static str);

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        let peer = PeerIp::peer_addr(&parts.extensions).ok_or((
            StatusCode::INTERNAL_SERVER_ERROR,
            "no connection info: serve the app with \
             into_make_service_with_connect_info::<SocketAddr>()",
        ))?;
        // One default for the process: built per request, its "warn once"
        // about ignored proxy headers would warn on every request.
        static DEFAULT: LazyLock<ClientIp> = LazyLock::new(ClientIp::default);
        let client_ip = parts.extensions.get::<ClientIp>().unwrap_or(&DEFAULT);
        let ip = client_ip.resolve(peer, &parts.headers);
        Ok(ClientAddr(ip))
    }
}
