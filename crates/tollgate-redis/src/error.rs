//! What can go wrong talking to Redis.

use std::fmt;

/// An error of the Redis store: the layer answers it with its store-failure
/// behaviour (fail open by default) and logs it.
#[derive(Debug)]
pub struct RedisStoreError {
    kind: Kind,
}

#[derive(Debug)]
enum Kind {
    Config(String),
    Redis(redis::RedisError),
    UnexpectedReply(String),
    Late,
    /// Redis cannot be asked now (not connected yet, a reset that found
    /// no answer).
    Unavailable(String),
    /// The local-first store's call for a key failed, and what this
    /// instance held for it is spent.
    LocalSpent(String),
}

impl RedisStoreError {
    pub(crate) fn config(message: impl Into<String>) -> Self {
        RedisStoreError {
            kind: Kind::Config(message.into()),
        }
    }

    pub(crate) fn unexpected_reply(message: impl Into<String>) -> Self {
        RedisStoreError {
            kind: Kind::UnexpectedReply(message.into()),
        }
    }

    pub(crate) fn unavailable(message: String) -> Self {
        RedisStoreError {
            kind: Kind::Unavailable(message),
        }
    }

    /// The local-first store cannot decide: what it held is spent and its
    /// call to Redis failed (`message`).
    pub(crate) fn local_spent(message: String) -> Self {
        RedisStoreError {
            kind: Kind::LocalSpent(message),
        }
    }

    pub(crate) fn late() -> Self {
        RedisStoreError { kind: Kind::Late }
    }

    /// Whether the decision reached the server after its caller had stopped
    /// waiting (the layer's `store_timeout`): the script then charged
    /// nothing, since the request was already answered.
    pub fn is_late(&self) -> bool {
        matches!(self.kind, Kind::Late)
    }

    /// The error of the Redis client, if that is what failed.
    pub fn redis_error(&self) -> Option<&redis::RedisError> {
        match &self.kind {
            Kind::Redis(error) => Some(error),
            _ => None,
        }
    }

    /// Whether the store was configured wrongly (bad URL, bad prefix, a
    /// setting a script refused as out of range), as opposed to failing at
    /// run time.
    pub fn is_config(&self) -> bool {
        matches!(self.kind, Kind::Config(_))
    }
}

/// The error code of the scripts' replies to an argument they cannot use
/// (`bad_argument` in `scripts/prelude.lua`, and the in-flight scripts):
/// they return it before writing anything.
const SCRIPT_ARGUMENT_CODE: &str = "TOLLGATEARG";

impl From<redis::RedisError> for RedisStoreError {
    /// A script's refusal of its arguments is a configuration error (a
    /// setting out of the range the scripts take), not a failure of Redis.
    fn from(error: redis::RedisError) -> Self {
        if error.code() == Some(SCRIPT_ARGUMENT_CODE) {
            return RedisStoreError::config(format!(
                "a tollgate script refused its arguments, and wrote nothing: {}",
                error.detail().unwrap_or("(no detail)")
            ));
        }
        RedisStoreError {
            kind: Kind::Redis(error),
        }
    }
}

impl fmt::Display for RedisStoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            Kind::Config(message) => write!(f, "invalid Redis store configuration: {message}"),
            Kind::Redis(error) => write!(
                f,
                "Redis call failed: {error} (is the server up and reachable? the layer \
                 applies its store-failure behaviour meanwhile)"
            ),
            Kind::Late => f.write_str(
                "the decision reached Redis after the layer stopped waiting for it \
                 (store_timeout), so nothing was charged (is the server overloaded or \
                 stalled?)",
            ),
            Kind::Unavailable(message) => write!(
                f,
                "Redis is not available: {message}; the layer applies its store-failure \
                 behaviour meanwhile"
            ),
            Kind::LocalSpent(message) => write!(
                f,
                "the local-first store has spent what it held for this key and cannot \
                 reach Redis for more ({message}); the layer applies its store-failure \
                 behaviour meanwhile"
            ),
            Kind::UnexpectedReply(message) => write!(
                f,
                "unexpected reply from the rate-limit script: {message} (is another program \
                 writing to keys under this store's prefix?)"
            ),
        }
    }
}

impl std::error::Error for RedisStoreError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.kind {
            Kind::Redis(error) => Some(error),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_names_the_store_there_is() {
        let plain = crate::connection::not_connected().to_string();
        assert!(
            plain.starts_with("Redis is not available: not connected"),
            "{plain}"
        );
        assert!(!plain.contains("local-first"), "{plain}");
        let local = RedisStoreError::local_spent("connection refused".into()).to_string();
        assert!(local.contains("the local-first store has spent"), "{local}");
    }
}
