//! `postgres://` URLs: parsed into the client's settings with what TLS
//! they ask for, checked without connecting, shown without their secrets.

use crate::error::PostgresError;
use std::path::PathBuf;

/// Whether, and how, a connection uses TLS (`sslmode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TlsMode {
    /// Plain TCP: `sslmode=disable` or `allow`, or no `sslmode` at all.
    Disable,
    /// TLS if the server offers it (its certificate checked), plain if it
    /// does not: `sslmode=prefer`.
    Prefer,
    /// TLS or no connection, the certificate and host name checked:
    /// `sslmode=require`, `verify-ca`, `verify-full`.
    Require,
}

/// A URL taken apart: the client's settings, its TLS mode, and the CA
/// file `sslrootcert` names, if any.
#[derive(Debug)]
pub(crate) struct Target {
    pub(crate) config: tokio_postgres::Config,
    pub(crate) tls: TlsMode,
    pub(crate) root_cert: Option<PathBuf>,
}

/// The URL schemes read.
const SCHEMES: [&str; 2] = ["postgres://", "postgresql://"];

/// Reads `url` as [`PostgresBackend::builder`](crate::PostgresBackend::builder)
/// documents it; errors show the URL [`redacted`].
pub(crate) fn parse(url: &str) -> Result<Target, PostgresError> {
    let not_a_url = |reason: &dyn std::fmt::Display| {
        PostgresError::config(format!(
            "{} is not a PostgreSQL URL ({reason}): use \
             postgres://USER:PASSWORD@HOST:PORT/DATABASE[?sslmode=require]",
            redacted(url)
        ))
    };
    if !SCHEMES.iter().any(|scheme| url.starts_with(scheme)) {
        return Err(not_a_url(&"it starts with postgres:// or postgresql://"));
    }
    // The query's TLS parameters are read here (the client knows only
    // disable, prefer and require, and no CA file); the others are the
    // client's.
    let (base, query) = match url.rsplit_once('?') {
        // A `?` inside the user-info (a password) is not a query.
        Some((base, query)) if !query.contains('@') => (base, Some(query)),
        _ => (url, None),
    };
    let mut tls = TlsMode::Disable;
    let mut root_cert = None;
    let mut rest = Vec::new();
    for pair in query.into_iter().flat_map(|q| q.split('&')) {
        match pair.split_once('=') {
            Some(("sslmode", mode)) => {
                tls = match mode {
                    "disable" | "allow" => TlsMode::Disable,
                    "prefer" => TlsMode::Prefer,
                    "require" | "verify-ca" | "verify-full" => TlsMode::Require,
                    _ => {
                        return Err(not_a_url(
                            &"sslmode is one of disable, allow, prefer, require, verify-ca, \
                              verify-full",
                        ));
                    }
                }
            }
            Some(("sslrootcert", path)) => root_cert = Some(PathBuf::from(decode(path))),
            _ => rest.push(pair),
        }
    }
    if !cfg!(feature = "tls") && (tls == TlsMode::Require || root_cert.is_some()) {
        return Err(PostgresError::config(format!(
            "{} asks for TLS: enable tollgate-postgres's `tls` feature",
            redacted(url)
        )));
    }
    let client_url = if rest.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", rest.join("&"))
    };
    // The client's own parser names the problem (a bad port, an unknown
    // parameter) without echoing a value.
    let mut config: tokio_postgres::Config = client_url.parse().map_err(|e| not_a_url(&e))?;
    if config.get_hosts().is_empty() {
        return Err(not_a_url(&"it names no host"));
    }
    config.ssl_mode(match tls {
        TlsMode::Disable => tokio_postgres::config::SslMode::Disable,
        TlsMode::Prefer => tokio_postgres::config::SslMode::Prefer,
        TlsMode::Require => tokio_postgres::config::SslMode::Require,
    });
    Ok(Target {
        config,
        tls,
        root_cert,
    })
}

/// `%XX` escapes decoded (a path in a query parameter); a malformed escape
/// is kept as written.
fn decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Checks that `url` is a PostgreSQL URL this crate can use, without
/// connecting: for programs that take one from their command line or
/// configuration and want to refuse a malformed one before anything
/// starts. The error shows the URL [`redacted`].
///
/// ```
/// assert!(tollgate_postgres::check_url("postgres://app:pw@127.0.0.1:5432/app").is_ok());
/// assert!(tollgate_postgres::check_url("postgresql://db.internal/limits").is_ok());
/// let error = tollgate_postgres::check_url("postgres://app:hunter2@db:port/app").unwrap_err();
/// assert!(error.is_config());
/// assert!(!error.to_string().contains("hunter2"));
/// assert!(tollgate_postgres::check_url("redis://db:6379").is_err());
/// ```
pub fn check_url(url: &str) -> Result<(), PostgresError> {
    parse(url).map(drop)
}

/// `url` with its secrets replaced by `***`, for errors, logs and `Debug`
/// output: everything between `://` and the *last* `@` is hidden whole
/// (user name and password: a password may hold any character, `@`, `/`
/// and `:` included, so no split of it can be trusted), and so is the
/// value of a `password` query parameter. The host, port, database and
/// other parameters are kept.
///
/// ```
/// use tollgate_postgres::redacted;
///
/// assert_eq!(redacted("postgres://app:hunter2@db:5432/app"), "postgres://***@db:5432/app");
/// assert_eq!(redacted("postgres://app:p@ss/w:rd@db/app"), "postgres://***@db/app");
/// assert_eq!(
///     redacted("postgres://db/app?user=app&password=hunter2&sslmode=require"),
///     "postgres://db/app?user=app&password=***&sslmode=require"
/// );
/// assert_eq!(redacted("postgres://db:5432/app"), "postgres://db:5432/app");
/// ```
pub fn redacted(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        // Not a URL at all: it may be a secret pasted in the wrong place.
        return if url.contains('@') || url.contains("password") {
            "***".to_owned()
        } else {
            url.to_owned()
        };
    };
    let shown = match rest.rfind('@') {
        Some(at) => format!("***{}", &rest[at..]),
        None => rest.to_owned(),
    };
    let (head, query) = match shown.split_once('?') {
        Some((head, query)) => (head, query),
        None => return format!("{scheme}://{shown}"),
    };
    let query: Vec<String> = query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((key, _)) if key.eq_ignore_ascii_case("password") => format!("{key}=***"),
            _ => pair.to_owned(),
        })
        .collect();
    format!("{scheme}://{head}?{}", query.join("&"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_client_gets_the_user_password_host_and_database() {
        let target = parse("postgres://app:p%40ss@127.0.0.1:6543/limits").unwrap();
        assert_eq!(target.config.get_user(), Some("app"));
        assert_eq!(target.config.get_password(), Some(&b"p@ss"[..]));
        assert_eq!(target.config.get_ports(), &[6543]);
        assert_eq!(target.config.get_dbname(), Some("limits"));
        assert_eq!(target.tls, TlsMode::Disable);
        assert!(target.root_cert.is_none());
    }

    #[test]
    fn sslmode_is_read_and_the_rest_goes_to_the_client() {
        let target = parse("postgres://db/app?sslmode=prefer&application_name=gate").unwrap();
        assert_eq!(target.tls, TlsMode::Prefer);
        assert_eq!(target.config.get_application_name(), Some("gate"));
        assert_eq!(
            target.config.get_ssl_mode(),
            tokio_postgres::config::SslMode::Prefer
        );
        assert_eq!(
            parse("postgres://db/app?sslmode=allow").unwrap().tls,
            TlsMode::Disable
        );
        let bad = parse("postgres://app:hunter2@db/app?sslmode=sometimes").unwrap_err();
        assert!(bad.is_config());
        assert!(!bad.to_string().contains("hunter2"), "{bad}");
    }

    #[cfg(feature = "tls")]
    #[test]
    fn verify_modes_require_tls_and_sslrootcert_names_a_ca_file() {
        for mode in ["require", "verify-ca", "verify-full"] {
            let url = format!("postgres://db/app?sslmode={mode}&sslrootcert=%2Ftmp%2Fca.pem");
            let target = parse(&url).unwrap();
            assert_eq!(target.tls, TlsMode::Require, "{mode}");
            assert_eq!(target.root_cert, Some(PathBuf::from("/tmp/ca.pem")));
        }
    }

    #[cfg(not(feature = "tls"))]
    #[test]
    fn tls_without_the_feature_is_a_configuration_error() {
        let error = parse("postgres://app:hunter2@db/app?sslmode=require").unwrap_err();
        assert!(error.is_config());
        assert!(error.to_string().contains("`tls` feature"), "{error}");
        assert!(!error.to_string().contains("hunter2"), "{error}");
    }

    #[test]
    fn malformed_urls_are_refused_without_their_password() {
        for url in [
            "postgres://app:hunter2@db:port/app",
            "postgres://app:hunter2@db/app?no_such_option=1",
            "redis://app:hunter2@db:6379",
            "app:hunter2@db",
            "postgres://app:hunter2@/app",
        ] {
            let error = parse(url).unwrap_err();
            assert!(error.is_config(), "{url}");
            assert!(!error.to_string().contains("hunter2"), "{url}: {error}");
        }
    }

    #[test]
    fn passwords_with_any_character_are_hidden() {
        assert_eq!(redacted("postgres://:p@ss@db:1/0"), "postgres://***@db:1/0");
        assert_eq!(redacted("postgres://u:a?b@db/x"), "postgres://***@db/x");
        assert_eq!(
            redacted("postgres://u:pw@db/x?application_name=a@b"),
            "postgres://***@b"
        );
        assert_eq!(redacted("not a url with s3cret@"), "***");
        assert_eq!(
            redacted("postgresql://db/x?PASSWORD=s3cret"),
            "postgresql://db/x?PASSWORD=***"
        );
    }

    #[test]
    fn escapes_in_a_path_are_decoded() {
        assert_eq!(decode("%2Fetc%2Fca.pem"), "/etc/ca.pem");
        assert_eq!(decode("100%"), "100%");
        assert_eq!(decode("%zz"), "%zz");
    }
}
