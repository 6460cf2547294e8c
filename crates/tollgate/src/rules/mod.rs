//! Limits declared in a file, reloadable without a restart.
//!
//! A rules file is TOML: a list of `[[rule]]` tables. A request gets the
//! first rule whose `match` holds (every condition of it); a request no rule
//! matches is not limited. Each rule names its limits (all of which a
//! request must pass), its key and its behaviour.
//!
//! ```toml
//! # Logins: 10 a minute and at least 2 s apart, per client IP.
//! [[rule]]
//! name = "login"
//! match = { method = "POST", path = "/login" }
//! key = "ip"
//! limits = [
//!   { name = "login-minute", quota = "10/min" },
//!   { name = "login-spacing", quota = "1/2s" },
//! ]
//!
//! # The API: 500 an hour and 10 a minute per API key; requests over the
//! # limit wait up to 2 s rather than fail.
//! [[rule]]
//! name = "api"
//! match = { path = "/api/*", header = "x-api-key" }
//! key = "header:x-api-key"
//! behaviour = "delay"
//! max_delay = "2s"
//! limits = [
//!   { name = "api-hour", quota = "500/h" },
//!   { name = "api-minute", quota = "10/min", algorithm = "sliding-window" },
//! ]
//!
//! # Everything else: 100 a minute per IP, in shadow mode for now.
//! [[rule]]
//! name = "rest"
//! behaviour = "shadow"
//! limits = [{ name = "default", quota = "100/min", algorithm = "token-bucket", burst = 20 }]
//! ```
//!
//! - `match` (optional; none matches everything): `method` (one or a
//!   list), `path` (exact, or a prefix ending in `*`), `route` (axum's
//!   matched route template, with the `axum` feature), `header` (`"name"`
//!   present, or `"name=value"`), `grpc_method` (`"package.Service/Method"`).
//! - `key` (default `"ip"`): `ip` (the peer address), `global`,
//!   `header:NAME`, `route`, `method` (the path: a gRPC method), or a list
//!   of them, combined.
//! - `behaviour`: `reject` (429, the default), `delay` (with `max_delay`),
//!   `shadow` (never rejects; headers, logs and metrics say what would have
//!   happened).
//! - `limits`: `name` (unique in the file), `quota` (`"10/min"`),
//!   `algorithm` (`gcra` by default), `burst`.
//!
//! Mistakes are found at load, and the error names the file, the rule and
//! the field: ``rules.toml: rule "login" (#1): field `limits[0].quota`:
//! "10/mni": ...``.
//!
//! [`RulesLayer::from_file`] builds the layer in one call; its
//! [`RulesHandle`] swaps in a new rule set atomically (requests in flight
//! finish on the rules they started with), refuses a file with mistakes
//! (the old rules stay), and can watch the file. Counters of a rule that a
//! reload leaves unchanged carry on; a changed rule starts afresh in a
//! memory store (in Redis, counters are named by limit and carry on).

mod file;
mod layer;
mod matcher;
mod service;
mod set;

pub use file::{Behaviour, RulesError};
pub use layer::{RulesHandle, RulesLayer};
pub use service::Rules;
