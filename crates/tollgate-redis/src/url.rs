//! Store URLs: which kind of server they name, whether they are well formed,
//! and how to show them without their secrets.

use crate::RedisStoreError;

/// The URL schemes of a cluster, without and with TLS:
/// `redis+cluster://host:port,host:port`.
const CLUSTER_SCHEMES: [(&str, &str); 2] = [
    ("redis+cluster://", "redis://"),
    ("rediss+cluster://", "rediss://"),
];

/// The URL schemes of a master found through Sentinel, without and with
/// TLS: `redis+sentinel://host:port,host:port/service_name[/db]`.
const SENTINEL_SCHEMES: [(&str, &str); 2] = [
    ("redis+sentinel://", "redis://"),
    ("rediss+sentinel://", "rediss://"),
];

/// What a store URL names.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Target {
    /// One server: the URL as the redis client reads it.
    Single(String),
    /// A cluster: a `redis://` (or `rediss://`) URL for each node given.
    Cluster(Vec<String>),
    /// The master of a service that Sentinel watches.
    Sentinel(SentinelTarget),
}

impl Target {
    /// Whether the URL asks for TLS (`rediss…`).
    pub(crate) fn uses_tls(&self) -> bool {
        match self {
            Target::Single(url) => is_tls(url),
            Target::Cluster(nodes) => nodes.iter().any(|node| is_tls(node)),
            Target::Sentinel(target) => target.tls,
        }
    }
}

/// A `redis+sentinel://` URL taken apart.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct SentinelTarget {
    /// A `redis://host:port` (or `rediss://`) URL for each sentinel given.
    pub(crate) sentinels: Vec<String>,
    /// The name the sentinels know the master by (`sentinel monitor NAME`).
    pub(crate) service: String,
    /// A URL of the first sentinel with the user-info and database the
    /// master is to be used with: the client's own parser reads them from
    /// it, percent-escapes included.
    pub(crate) master_settings: String,
    /// Whether the sentinels and the servers are reached over TLS.
    pub(crate) tls: bool,
}

/// Reads `url` as [`RedisStore::builder`](crate::RedisStore::builder)
/// documents it, checking every address it names; errors show the URL
/// [`redacted`].
pub(crate) fn parse(url: &str) -> Result<Target, RedisStoreError> {
    let not_a_url = |reason: &dyn std::fmt::Display| {
        RedisStoreError::config(format!(
            "{} is not a Redis URL ({reason}): use redis://HOST:PORT, \
             redis://:PASSWORD@HOST:PORT/DB, redis+cluster://HOST:PORT,HOST:PORT or \
             redis+sentinel://HOST:PORT,HOST:PORT/SERVICE (rediss… for TLS)",
            redacted(url)
        ))
    };
    let target = if let Some((nodes, scheme)) = strip_any(url, &CLUSTER_SCHEMES) {
        let nodes = with_shared_credentials(node_urls(nodes, scheme));
        if nodes.is_empty() {
            return Err(not_a_url(&"a cluster URL names at least one node"));
        }
        Target::Cluster(nodes)
    } else if let Some((rest, scheme)) = strip_any(url, &SENTINEL_SCHEMES) {
        Target::Sentinel(sentinel_target(rest, scheme).map_err(|why| not_a_url(&why))?)
    } else {
        Target::Single(url.to_owned())
    };
    let urls = match &target {
        Target::Single(url) => std::slice::from_ref(url),
        Target::Cluster(nodes) => nodes.as_slice(),
        Target::Sentinel(sentinel) => sentinel.sentinels.as_slice(),
    };
    for url in urls {
        if is_tls(url) && !cfg!(feature = "tls") {
            return Err(RedisStoreError::config(format!(
                "{} asks for TLS: enable tollgate-redis's `tls` feature",
                redacted(url)
            )));
        }
        // The client's own parser names the problem (a bad port, an
        // unknown scheme) without echoing the URL.
        redis::IntoConnectionInfo::into_connection_info(url.as_str()).map_err(|e| not_a_url(&e))?;
    }
    if let Target::Sentinel(sentinel) = &target {
        redis::IntoConnectionInfo::into_connection_info(sentinel.master_settings.as_str())
            .map_err(|e| not_a_url(&e))?;
    }
    Ok(target)
}

/// Whether a one-server URL asks for TLS (the client also reads
/// `valkeys://` as `rediss://`).
fn is_tls(url: &str) -> bool {
    url.starts_with("rediss://") || url.starts_with("valkeys://")
}

/// `url` without the first of `schemes` it starts with, and the plain
/// scheme that stands for it.
fn strip_any<'u>(
    url: &'u str,
    schemes: &[(&str, &'static str)],
) -> Option<(&'u str, &'static str)> {
    schemes
        .iter()
        .find_map(|(prefix, plain)| Some((url.strip_prefix(prefix)?, *plain)))
}

/// `scheme` + each comma-separated address of `list`, blanks dropped.
fn node_urls(list: &str, scheme: &str) -> Vec<String> {
    list.split(',')
        .map(str::trim)
        .filter(|node| !node.is_empty())
        .map(|node| format!("{scheme}{node}"))
        .collect()
}

/// A Cluster's node URLs, the user-info of the first node that has one
/// given to every node that has none: `redis+cluster://:PW@a:1,b:2` is
/// `:PW@` for both nodes (the client refuses nodes of different
/// passwords), as a Sentinel URL's user-info is for every server.
fn with_shared_credentials(nodes: Vec<String>) -> Vec<String> {
    let userinfo = |node: &str| -> Option<(usize, usize)> {
        let start = node.find("://")? + 3;
        let at = node[start..].rfind('@')? + start;
        Some((start, at + 1))
    };
    let Some(shared) = nodes.iter().find_map(|node| {
        let (start, end) = userinfo(node)?;
        Some(node[start..end].to_owned())
    }) else {
        return nodes;
    };
    nodes
        .into_iter()
        .map(|node| match (userinfo(&node), node.find("://")) {
            (None, Some(start)) => format!("{}{shared}{}", &node[..start + 3], &node[start + 3..]),
            _ => node,
        })
        .collect()
}

/// `[user-info@]host:port,…/service[/db]` taken apart. The user-info is
/// for the servers, not for the sentinels (see
/// [`RedisStoreBuilder::sentinel_password`](crate::RedisStoreBuilder::sentinel_password)).
fn sentinel_target(rest: &str, scheme: &str) -> Result<SentinelTarget, &'static str> {
    let (addresses, path) = rest
        .split_once('/')
        .ok_or("a Sentinel URL ends with /SERVICE, the name the sentinels know the master by")?;
    let (service, db) = match path.split_once('/') {
        Some((service, db)) => (service, db),
        None => (path, ""),
    };
    if service.is_empty() {
        return Err("a Sentinel URL ends with /SERVICE, the name the sentinels know the master by");
    }
    let (userinfo, addresses) = match addresses.rsplit_once('@') {
        Some((userinfo, addresses)) => (Some(userinfo), addresses),
        None => (None, addresses),
    };
    let sentinels = node_urls(addresses, scheme);
    let Some(first) = sentinels.first() else {
        return Err("a Sentinel URL names at least one sentinel");
    };
    let first = &first[scheme.len()..];
    let master_settings = match userinfo {
        Some(userinfo) => format!("{scheme}{userinfo}@{first}/{db}"),
        None => format!("{scheme}{first}/{db}"),
    };
    Ok(SentinelTarget {
        sentinels,
        service: service.to_owned(),
        master_settings,
        tls: scheme == "rediss://",
    })
}

/// Checks that `url` is a store URL, without connecting: for programs that
/// take one from their command line or configuration and want to refuse a
/// malformed one before anything starts. The error shows the URL
/// [`redacted`].
///
/// ```
/// assert!(tollgate_redis::check_url("redis://127.0.0.1:6379").is_ok());
/// assert!(tollgate_redis::check_url("redis+cluster://10.0.0.1:7000,10.0.0.2:7000").is_ok());
/// assert!(tollgate_redis::check_url("redis+sentinel://10.0.0.1:26379,10.0.0.2:26379/mymaster").is_ok());
/// let error = tollgate_redis::check_url("redis://:hunter2@127.0.0.1:port").unwrap_err();
/// assert!(error.is_config());
/// assert!(!error.to_string().contains("hunter2"));
/// ```
pub fn check_url(url: &str) -> Result<(), RedisStoreError> {
    parse(url).map(drop)
}

/// `url` with its credentials replaced by `***`, for errors, logs and
/// `Debug` output: everything between `://` and the *last* `@` is hidden
/// whole, user names included, and in a cluster or Sentinel URL the
/// addresses before that `@` too. A password may contain any character
/// (`@`, `/`, `,`, `:`, `%`, raw or percent-encoded) and pieces that read
/// as `user:` or `host:port`: no split of what comes before the last `@`
/// can be trusted, so none is shown. What follows it (the host, the other
/// addresses, the database) is kept.
///
/// ```
/// use tollgate_redis::redacted;
///
/// assert_eq!(redacted("redis://:hunter2@db:6379/2"), "redis://***@db:6379/2");
/// assert_eq!(redacted("redis://app:hunter2@db:6379"), "redis://***@db:6379");
/// assert_eq!(redacted("redis://hunter2@db:6379"), "redis://***@db:6379");
/// assert_eq!(redacted("redis://:s3cr/3t,p@ss@db:6379/0"), "redis://***@db:6379/0");
/// assert_eq!(
///     redacted("redis+cluster://app:pw@a:7000,:pw@b:7000"),
///     "redis+cluster://***@b:7000"
/// );
/// assert_eq!(
///     redacted("redis+cluster://:s3cr,3t@a:7000,b:7000"),
///     "redis+cluster://***@a:7000,b:7000"
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
    // Everything up to the last `@` may be user-info (or a piece of it):
    // hidden whole; after it, a host.
    match rest.rfind('@') {
        Some(at) => format!("{scheme}://***{}", &rest[at..]),
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_with_at_signs_and_slashes_are_hidden() {
        assert_eq!(redacted("redis://:p@ss@db:1/0"), "redis://***@db:1/0");
        assert_eq!(redacted("redis://:p@ss"), "redis://***@ss");
        assert_eq!(redacted("not a url with s3cret@"), "***");
    }

    #[test]
    fn cluster_urls_name_every_node() {
        assert_eq!(
            parse("redis+cluster://a:1, b:2,").unwrap(),
            Target::Cluster(vec!["redis://a:1".into(), "redis://b:2".into()])
        );
        // A password on the first node is every node's.
        assert_eq!(
            parse("redis+cluster://:pw@a:1,b:2,app:pw2@c:3").unwrap(),
            Target::Cluster(vec![
                "redis://:pw@a:1".into(),
                "redis://:pw@b:2".into(),
                "redis://app:pw2@c:3".into()
            ])
        );
        assert!(parse("redis+cluster://").unwrap_err().is_config());
        assert!(parse("redis+cluster://a:1,b:port").unwrap_err().is_config());
    }

    #[test]
    fn sentinel_urls_name_the_sentinels_the_service_and_the_master_settings() {
        let Target::Sentinel(target) =
            parse("redis+sentinel://app:p%40ss@a:26379, b:26380/mymaster/2").unwrap()
        else {
            panic!("not a Sentinel target");
        };
        assert_eq!(
            target,
            SentinelTarget {
                sentinels: vec!["redis://a:26379".into(), "redis://b:26380".into()],
                service: "mymaster".into(),
                master_settings: "redis://app:p%40ss@a:26379/2".into(),
                tls: false,
            }
        );
        let settings =
            redis::IntoConnectionInfo::into_connection_info(target.master_settings.as_str())
                .unwrap();
        let settings = settings.redis_settings();
        assert_eq!(
            (settings.username(), settings.password(), settings.db()),
            (Some("app"), Some("p@ss"), 2)
        );
        for bad in [
            "redis+sentinel://a:26379",
            "redis+sentinel://a:26379/",
            "redis+sentinel:///mymaster",
            "redis+sentinel://a:port/mymaster",
            "redis+sentinel://a:1/mymaster/notadb",
        ] {
            let error = parse(bad).unwrap_err();
            assert!(error.is_config(), "{bad}");
        }
        assert_eq!(
            redacted("redis+sentinel://:s3cret@a:1,b:2/mymaster"),
            "redis+sentinel://***@a:1,b:2/mymaster"
        );
    }

    #[test]
    fn tls_urls_need_the_tls_feature() {
        for url in [
            "rediss://a:6380",
            "rediss+cluster://a:1,b:2",
            "rediss+sentinel://a:1/m",
        ] {
            let parsed = parse(url);
            if cfg!(feature = "tls") {
                assert!(parsed.is_ok(), "{url}");
            } else {
                let error = parsed.unwrap_err().to_string();
                assert!(error.contains("`tls` feature"), "{error}");
            }
        }
        if let Ok(Target::Cluster(nodes)) = parse("rediss+cluster://a:1,b:2") {
            assert_eq!(nodes, ["rediss://a:1", "rediss://b:2"]);
        }
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

    mod redaction {
        use super::super::*;
        use proptest::prelude::*;

        /// `password` with every byte but letters and digits
        /// percent-encoded, as a user would write it in a URL.
        fn percent_encoded(password: &str) -> String {
            password
                .bytes()
                .map(|b| {
                    if b.is_ascii_alphanumeric() {
                        (b as char).to_string()
                    } else {
                        format!("%{b:02X}")
                    }
                })
                .collect()
        }

        /// The URL forms a password can be written in, `{ui}` standing for
        /// the user-info (without its `@`).
        const FORMS: &[&str] = &[
            "redis://{ui}@127.0.0.1:6390",
            "redis://{ui}@127.0.0.1:6390/2",
            "rediss://{ui}@db.example:6380/0",
            "redis+cluster://{ui}@10.0.0.1:7000,{ui}@10.0.0.2:7000",
            "redis+cluster://{ui}@10.0.0.1:7000,10.0.0.2:7000,10.0.0.3:7000",
            "rediss+cluster://{ui}@10.0.0.1:7000,{ui}@[::1]:7001",
            "redis+sentinel://{ui}@10.0.0.1:26379,10.0.0.2:26379/mymaster/1",
            "rediss+sentinel://{ui}@10.0.0.1:26379/mymaster",
            "redis+sentinel://{ui}@10.0.0.1:26379,{ui}@10.0.0.2:26379/mymaster",
        ];

        /// The user-info forms: a password alone, after an empty user, or
        /// after a user name.
        const USERINFO: &[&str] = &["{pw}", ":{pw}", "app:{pw}", "app-user.2:{pw}"];

        fn url(form: &str, userinfo: &str, password: &str) -> String {
            form.replace("{ui}", &userinfo.replace("{pw}", password))
        }

        fn passwords() -> impl Strategy<Value = String> {
            prop_oneof![
                // Printable ASCII: `/ , @ : %` and the rest.
                "[ -~]{3,24}",
                // Those characters above all.
                "[/,@:%a-z0-9]{3,16}",
                // Any printable character.
                "\\PC{3,12}",
            ]
        }

        /// The password, raw and percent-encoded, shows in none of `shown`.
        fn hidden(password: &str, shown: &str) -> Result<(), TestCaseError> {
            for secret in [password.to_owned(), percent_encoded(password)] {
                prop_assert!(!shown.contains(&secret), "{secret:?} shows in {shown:?}");
            }
            Ok(())
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(2000))]

            #[test]
            fn passwords_never_show_in_redacted_urls_nor_in_url_errors(
                password in passwords(),
                form in 0..FORMS.len(),
                userinfo in 0..USERINFO.len(),
                encoded in any::<bool>(),
            ) {
                let (form, userinfo) = (FORMS[form], USERINFO[userinfo]);
                let written = if encoded { percent_encoded(&password) } else { password.clone() };
                // A password that the rest of what is shown already holds
                // (a digit of the address, `***`, `kind: Config` of an
                // error's `Debug`) proves nothing.
                let skeleton = shown(&url(form, userinfo, "PW")) + &shown("not a URL");
                prop_assume!(!skeleton.contains(&password));
                prop_assume!(!skeleton.contains(&percent_encoded(&password)));
                hidden(&password, &shown(&url(form, userinfo, &written)))?;
            }
        }

        /// Everything a user may see of `url`: its redacted form, and the
        /// errors (`Display` and `Debug`) of it and of it with a
        /// password-shaped typo in the port.
        fn shown(url: &str) -> String {
            let broken = url
                .replacen(":7000", ":70x0", 1)
                .replacen(":6390", ":63x0", 1);
            let mut text = redacted(url);
            for url in [url, broken.as_str()] {
                if let Err(error) = check_url(url) {
                    text += &format!(" {error} {error:?}");
                }
            }
            text
        }

        /// Forms to connect with: nothing listens on ports 1 and 2.
        const UNREACHABLE: &[&str] = &[
            "redis://{ui}@127.0.0.1:1",
            "redis://{ui}@127.0.0.1:1/3",
            "redis+cluster://{ui}@127.0.0.1:1,{ui}@127.0.0.1:2",
            "redis+sentinel://{ui}@127.0.0.1:1/mymaster",
        ];

        proptest! {
            // Each case connects (and fails at once): few of them.
            #![proptest_config(ProptestConfig::with_cases(16))]

            #[test]
            fn passwords_never_show_in_connection_errors(
                password in passwords(),
                form in 0..UNREACHABLE.len(),
                userinfo in 0..USERINFO.len(),
                encoded in any::<bool>(),
            ) {
                let (form, userinfo) = (UNREACHABLE[form], USERINFO[userinfo]);
                let skeleton = redacted(&url(form, userinfo, "PW"))
                    + &connection_shown(&url(form, userinfo, "PW"))
                    + &shown("not a URL");
                prop_assume!(!skeleton.contains(&password));
                prop_assume!(!skeleton.contains(&percent_encoded(&password)));
                let written = if encoded { percent_encoded(&password) } else { password.clone() };
                hidden(&password, &connection_shown(&url(form, userinfo, &written)))?;
            }
        }

        /// What a failed connection to `url` shows: its error (`Display`
        /// and `Debug`) and the builder's `Debug`.
        fn connection_shown(url: &str) -> String {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            let connected = runtime.block_on(
                crate::RedisStore::builder(url)
                    .connect_timeout(std::time::Duration::from_millis(300))
                    .connect(),
            );
            let Err(error) = connected else {
                panic!("{} connected", redacted(url));
            };
            let builder = crate::RedisStore::builder(url);
            format!("{error} {error:?} {builder:?}")
        }
    }
}
