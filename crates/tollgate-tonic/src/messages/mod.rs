//! Limits on the messages of a stream: [`MessageLimitLayer`].
//!
//! The rate-limit layer ([`builder`](crate::builder)) counts a call once,
//! when it starts: a server-streaming call that sends a thousand messages
//! costs what a unary call costs. A [`MessageLimitLayer`] counts each
//! message instead — one check of cost 1 against its limits, under the
//! call's key, per message — in the client's stream, the server's, or both
//! ([`Direction`]; both by default, against one budget). Use both layers
//! for a limit on calls and one on messages.
//!
//! ```no_run
//! use tollgate::core::Quota;
//! use tollgate_tonic::{MessageLimitLayer, MetadataKey};
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! # let (_, health) = tonic_health::server::health_reporter();
//!
//! let calls = tollgate_tonic::builder()
//!     .quota("calls", Quota::per_second(10))
//!     .key(MetadataKey::new("x-api-key"))
//!     .build();
//! let messages = MessageLimitLayer::builder()
//!     .quota("messages", Quota::per_second(500))
//!     .key(MetadataKey::new("x-api-key"))
//!     .build();
//!
//! tonic::transport::Server::builder()
//!     .layer(calls)
//!     .layer(messages)
//!     .add_service(health)
//!     .serve("127.0.0.1:50051".parse()?)
//!     .await?;
//! # Ok(())
//! # }
//! ```
//!
//! # A stream out of budget
//!
//! - The server's stream (response messages): the messages before the
//!   refused one are sent, then the response ends with trailers —
//!   `grpc-status` 8 (`RESOURCE_EXHAUSTED`), a `grpc-message` naming the
//!   limit and the delay, `grpc-status-details-bin` with
//!   `google.rpc.RetryInfo` (when a retry can pass: the exact delay) and
//!   `google.rpc.QuotaFailure`, and the rate-limit fields
//!   (`ratelimit-policy`, `ratelimit`, `retry-after`) — exactly as the
//!   rate-limit layer's [`GrpcRejector`](crate::GrpcRejector) answers a
//!   limited call. The client reads that status at the end of the stream;
//!   the service's stream is dropped.
//! - The client's stream (request messages): the handler receives the
//!   messages before the refused one, then `Streaming::message()` returns
//!   that same status (the request body's error is the
//!   [`tonic::Status`]); a handler that passes it on with `?` ends the
//!   call with it. What a handler does instead is its own business (it
//!   may answer with what it has).
//!
//! In delay mode ([`MessageLimitBuilder::max_delay`]) a message that will
//! conform within the bound is charged and held until then (a tokio
//! timer, nothing spins), and the messages behind it wait in turn; one that
//! would wait longer ends the stream as above.
//!
//! # What counts as a message
//!
//! The bodies are read as gRPC framing (a flag byte, a 4-byte big-endian
//! length, the payload), however HTTP/2 cut them into chunks: a message is
//! counted once, on its first byte, and decided before that byte is
//! forwarded. Every message counts, the one message of a unary call too
//! (so with [`Direction::Both`] a unary call costs two); use
//! [`MessageLimitBuilder::method`] to count only the streaming methods. A
//! gRPC-Web trailers frame is not a message. Bytes that are not gRPC
//! framing (a flag other than 0 and 1) stop the count for the rest of the
//! body and pass through untouched: tonic ends such a call with `INTERNAL`
//! on its own, so the layer adds no error of its own, and no input makes
//! it panic. For gRPC-Web, put the layer inside `tonic-web`'s, where the
//! bodies are plain gRPC.
//!
//! # The store
//!
//! Any [`Store`](tollgate::Store): the memory store (the default) answers
//! at once; a store that does I/O (Redis) is awaited for each message, at
//! most [`store_timeout`](MessageLimitBuilder::store_timeout), while the
//! message waits. A store that fails or is late lets the message through
//! (fail open, the default), or ends the stream with `UNAVAILABLE`
//! ([`OnStoreError::Closed`](tollgate::OnStoreError::Closed)); either way
//! the failure is logged with `tracing`.

mod body;
mod framer;
pub mod future;
mod gate;
mod layer;
mod service;
mod shared;

pub use body::{RequestBody, ResponseBody};
pub use layer::{
    DEFAULT_LIMIT_NAME, DEFAULT_STORE_TIMEOUT, MessageLimitBuilder, MessageLimitLayer,
};
pub use service::MessageLimit;
pub use shared::Direction;
