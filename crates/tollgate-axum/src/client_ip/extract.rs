//! The client's address as an axum extractor.

use super::ClientIp;
use axum::extract::FromRequestParts;
use axum::response::{IntoResponse, Response};
use http::StatusCode;
use http::request::Parts;
use std::net::IpAddr;
use std::sync::LazyLock;
use tollgate::PeerIp;

/// The client's IP address, resolved as [`ClientIp`] does, for a handler.
///
/// It uses the `ClientIp` found in the request's extensions (add one with
/// `.layer(Extension(client_ip))`, the same you give the rate-limit layer),
/// or the default one (the peer address, headers ignored). The peer
/// address is axum's connection info (serve with
/// `into_make_service_with_connect_info::<SocketAddr>()`), or in tests its
/// `MockConnectInfo`; without either it rejects with [`NoConnectInfo`], a
/// 500 whose body says how to serve the app.
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
    type Rejection = NoConnectInfo;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        let peer = PeerIp::peer_addr(&parts.extensions).ok_or(NoConnectInfo)?;
        // One default for the process: built per request, its "warn once"
        // about ignored proxy headers would warn on every request.
        static DEFAULT: LazyLock<ClientIp> = LazyLock::new(ClientIp::default);
        let client_ip = parts.extensions.get::<ClientIp>().unwrap_or(&DEFAULT);
        let ip = client_ip.resolve(peer, &parts.headers);
        Ok(ClientAddr(ip))
    }
}

/// Why [`ClientAddr`] could not answer: the request carries no peer
/// address, because the app is served without connection info. A
/// mistake in how the server is built, so it answers `500 Internal Server
/// Error`, with a body that says the fix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NoConnectInfo;

impl NoConnectInfo {
    /// The status it answers with: `500 Internal Server Error`.
    pub const STATUS: StatusCode = StatusCode::INTERNAL_SERVER_ERROR;
}

impl std::fmt::Display for NoConnectInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(
            "no connection info: serve the app with \
             into_make_service_with_connect_info::<SocketAddr>() \
             (in tests, layer axum's MockConnectInfo)",
        )
    }
}

impl std::error::Error for NoConnectInfo {}

impl IntoResponse for NoConnectInfo {
    fn into_response(self) -> Response {
        (Self::STATUS, self.to_string()).into_response()
    }
}
