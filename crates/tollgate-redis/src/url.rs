//! Store URLs: which kind of server they name, whether they are well formed,
//! and how to show them without their secrets.

use crate::RedisStoreError;

/// The URL scheme of a cluster: `redis+cluster://host:port,host:port`.
const CLUSTER_SCHEME: &str = "redis+cluster://";

/// What a store URL names.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Target {
    /// One server: the URL as the redis client reads it.
    Single(String),
    /// A cluster: a `redis://` URL for each node given.
    Cluster(Vec<String>),
}

/// Reads `url` as [`RedisStore::builder`](crate::RedisStore::builder)
/// documents it, checking every address it names; errors show the URL
/// [`redacted`].
pub(crate) fn parse(url: &str) -> Result<Target, RedisStoreError> {
    let not_a_url = |reason: &dyn std::fmt::Display| {
        RedisStoreError::config(format!(
            "{} is not a Redis URL ({reason}): use redis://HOST:PORT, \
             redis://:PASSWORD@HOST:PORT/DB or redis+cluster://HOST:PORT,HOST:PORT",
            redacted(url)
        ))
    };
    let target = match url.strip_prefix(CLUSTER_SCHEME) {
        Some(nodes) => {
            let nodes: Vec<String> = nodes
                .split(',')
                .map(str::trim)
                .filter(|node| !node.is_empty())
                .map(|node| format!("redis://{node}"))
                .collect();
            if nodes.is_empty() {
                return Err(not_a_url(&"a cluster URL names at least one node"));
            }
            Target::Cluster(nodes)
        }
        None => Target::Single(url.to_owned()),
    };
    let urls = match &target {
        Target::Single(url) => std::slice::from_ref(url),
        Target::Cluster(nodes) => nodes.as_slice(),
    };
    for url in urls {
        // The client's own parser names the problem (a bad port, an
        // unknown scheme) without echoing the URL.
        redis::IntoConnectionInfo::into_connection_info(url.as_str()).map_err(|e| not_a_url(&e))?;
    }
    Ok(target)
}

/// Checks that `url` is a store URL, without connecting: for programs that
/// take one from their command line or configuration and want to refuse a
/// malformed one before anything starts. The error shows the URL
/// [`redacted`].
///
/// ```
/// assert!(tollgate_redis::check_url("redis://127.0.0.1:6379").is_ok());
/// assert!(tollgate_redis::check_url("redis+cluster://10.0.0.1:7000,10.0.0.2:7000").is_ok());
/// let error = tollgate_redis::check_url("redis://:hunter2@127.0.0.1:port").unwrap_err();
/// assert!(error.is_config());
/// assert!(!error.to_string().contains("hunter2"));
/// ```
pub fn check_url(url: &str) -> Result<(), RedisStoreError> {
    parse(url).map(drop)
}

/// `url` with the password (or a lone user-info token, which Redis reads
/// as a password) of every address replaced by `***`, for errors, logs and
/// `Debug` output. Anything after the host (database, query) is kept.
///
/// ```
/// use tollgate_redis::redacted;
///
/// assert_eq!(redacted("redis://:hunter2@db:6379/2"), "redis://:***@db:6379/2");
/// assert_eq!(redacted("redis://app:hunter2@db:6379"), "redis://app:***@db:6379");
/// assert_eq!(redacted("redis://hunter2@db:6379"), "redis://***@db:6379");
/// assert_eq!(
///     redacted("redis+cluster://:pw@a:7000,:pw@b:7000"),
///     "redis+cluster://:***@a:7000,:***@b:7000"
/// );
/// assert_eq!(redacted("redis://db:6379"), "redis://db:6379");
/// ```
pub fn redacted(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        // Not a URL at all: it may be a secret pasted in the wrong place.
        return if url.contains('@') {
            "***".to_owned()
        } else {
            url.to_owned()
        };
    };
    let nodes: Vec<String> = rest.split(',').map(redact_node).collect();
    format!("{scheme}://{}", nodes.join(","))
}

/// One `userinfo@host...` part with its secret hidden.
fn redact_node(node: &str) -> String {
    // The user-info ends at the last `@` before the path: a password may
    // itself contain `@`.
    let authority_end = node.find('/').unwrap_or(node.len());
    let Some(at) = node[..authority_end].rfind('@') else {
        return node.to_owned();
    };
    let (userinfo, host) = (&node[..at], &node[at..]);
    match userinfo.split_once(':') {
        Some((user, _password)) => format!("{user}:***{host}"),
        None => format!("***{host}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_with_at_signs_and_slashes_are_hidden() {
        assert_eq!(redacted("redis://:p@ss@db:1/0"), "redis://:***@db:1/0");
        assert_eq!(redacted("redis://:p@ss"), "redis://:***@ss");
        assert_eq!(redacted("not a url with s3cret@"), "***");
    }

    #[test]
    fn cluster_urls_name_every_node() {
        assert_eq!(
            parse("redis+cluster://a:1, b:2,").unwrap(),
            Target::Cluster(vec!["redis://a:1".into(), "redis://b:2".into()])
        );
        assert!(parse("redis+cluster://").unwrap_err().is_config());
        assert!(parse("redis+cluster://a:1,b:port").unwrap_err().is_config());
    }

    #[test]
    fn malformed_urls_are_config_errors_that_keep_the_secret() {
        for url in [
            "redis://:s3cret@127.0.0.1:notaport",
            "http://:s3cret@127.0.0.1:6379",
            "s3cret@127.0.0.1",
        ] {
            let error = parse(url).unwrap_err();
            assert!(error.is_config(), "{url}");
            let shown = format!("{error} {error:?}");
            assert!(!shown.contains("s3cret"), "{shown}");
            assert!(shown.contains("is not a Redis URL"), "{shown}");
        }
    }
}
