//! tollgate for axum.
//!
//! - [`ClientIp`]: the client's address behind proxies, with an explicit
//!   trust model (trusted networks or a hop count; `X-Forwarded-For`,
//!   `Forwarded`, `X-Real-IP` read right to left), as a key extractor.

mod client_ip;

pub use client_ip::{ClientIp, InvalidPrefix, Node, ProxyHeader, parse_node};
