//! The hops a request's proxy headers list, nearest first.

use super::node::{Node, parse_node};
use http::HeaderMap;
use http::header::{FORWARDED, HeaderName};

/// A header that proxies use to pass on the client's address.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ProxyHeader {
    /// `Forwarded` (RFC 7239): its `for=` parameters.
    Forwarded,
    /// `X-Forwarded-For`: a comma-separated list, client first.
    XForwardedFor,
    /// `X-Real-IP`: one address.
    XRealIp,
}

static X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
static X_REAL_IP: HeaderName = HeaderName::from_static("x-real-ip");

impl ProxyHeader {
    /// Every supported header, the standard one first. Not the default
    /// (`X-Forwarded-For` only): list only the headers your proxy writes or
    /// strips, or a client can send one it passes through and choose its
    /// own key.
    pub const ALL: [ProxyHeader; 3] = [
        ProxyHeader::Forwarded,
        ProxyHeader::XForwardedFor,
        ProxyHeader::XRealIp,
    ];

    /// The header's name.
    pub fn name(self) -> &'static HeaderName {
        match self {
            ProxyHeader::Forwarded => &FORWARDED,
            ProxyHeader::XForwardedFor => &X_FORWARDED_FOR,
            ProxyHeader::XRealIp => &X_REAL_IP,
        }
    }

    /// The hops the header lists, nearest (right-most) first, over every
    /// occurrence of the header in order. `None` when the request does not
    /// carry it.
    ///
    /// Values are read from the right, so whatever a client put to the
    /// left (an unclosed quote, say) cannot change how the hops its proxies
    /// appended are read. Hops are parsed as the iterator is advanced: a
    /// caller that stops at the first untrusted hop never reads the rest of
    /// a long, client-written list, and nothing is allocated.
    pub fn hops_nearest_first(
        self,
        headers: &HeaderMap,
    ) -> Option<impl Iterator<Item = Node> + '_> {
        let mut values = headers.get_all(self.name()).iter().rev().peekable();
        values.peek()?;
        Some(values.flat_map(move |value| self.hops_in(value.as_bytes())))
    }

    /// The hops of one header value, nearest first. One iterator type for
    /// the three headers: each header's own reader is an `Option` that is
    /// `Some` for that header only, and the three are chained.
    fn hops_in(self, bytes: &[u8]) -> impl Iterator<Item = Node> + '_ {
        // No quoting in X-Forwarded-For: every comma separates.
        let x_forwarded_for = (self == ProxyHeader::XForwardedFor)
            .then(|| bytes.rsplit(|&b| b == b',').map(parse_node));
        let forwarded = (self == ProxyHeader::Forwarded)
            .then(|| rsplit_outside_quotes(bytes, b',').map(forwarded_for));
        let x_real_ip = (self == ProxyHeader::XRealIp).then(|| parse_node(bytes));
        x_forwarded_for
            .into_iter()
            .flatten()
            .chain(forwarded.into_iter().flatten())
            .chain(x_real_ip)
    }
}

/// The `for=` node of one `Forwarded` element (`for=…;proto=…;by=…`); an
/// element without one is an unknown hop.
fn forwarded_for(element: &[u8]) -> Node {
    for pair in split_outside_quotes(element, b';') {
        let Some(eq) = pair.iter().position(|&b| b == b'=') else {
            continue;
        };
        let (name, value) = (trim(&pair[..eq]), &pair[eq + 1..]);
        if name.eq_ignore_ascii_case(b"for") {
            return parse_node(value);
        }
    }
    Node::Unknown
}

fn trim(bytes: &[u8]) -> &[u8] {
    let start = bytes
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .unwrap_or(bytes.len());
    let end = bytes
        .iter()
        .rposition(|b| !b.is_ascii_whitespace())
        .map_or(start, |e| e + 1);
    &bytes[start..end.max(start)]
}

/// Splits on `separator` except inside double quotes (a backslash escapes
/// the next byte inside quotes, as in HTTP quoted-strings).
fn split_outside_quotes(bytes: &[u8], separator: u8) -> impl Iterator<Item = &[u8]> {
    let mut start = 0;
    let mut quoted = false;
    let mut escaped = false;
    let mut done = false;
    let mut i = 0;
    std::iter::from_fn(move || {
        if done {
            return None;
        }
        while i < bytes.len() {
            let b = bytes[i];
            i += 1;
            if escaped {
                escaped = false;
            } else if quoted && b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                quoted = !quoted;
            } else if b == separator && !quoted {
                let part = &bytes[start..i - 1];
                start = i;
                return Some(part);
            }
        }
        done = true;
        Some(&bytes[start..])
    })
}

/// Splits on `separator` except inside double quotes, from the right: the
/// last part first. A quote preceded by an odd number of backslashes is
/// escaped.
fn rsplit_outside_quotes(bytes: &[u8], separator: u8) -> impl Iterator<Item = &[u8]> {
    let mut end = bytes.len();
    let mut quoted = false;
    let mut i = bytes.len();
    let mut done = false;
    std::iter::from_fn(move || {
        if done {
            return None;
        }
        while i > 0 {
            i -= 1;
            let b = bytes[i];
            if b == b'"' {
                let backslashes = bytes[..i].iter().rev().take_while(|&&c| c == b'\\').count();
                if backslashes % 2 == 0 {
                    quoted = !quoted;
                }
            } else if b == separator && !quoted {
                let part = &bytes[i + 1..end];
                end = i;
                return Some(part);
            }
        }
        done = true;
        Some(&bytes[..end])
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn hops(header: ProxyHeader, values: &[&[u8]]) -> Vec<Node> {
        let mut headers = HeaderMap::new();
        for value in values {
            headers.append(header.name(), HeaderValue::from_bytes(value).unwrap());
        }
        header.hops_nearest_first(&headers).unwrap().collect()
    }

    fn ip(text: &str) -> Node {
        Node::Ip(text.parse().unwrap())
    }

    #[test]
    fn x_forwarded_for_lists_nearest_first_over_every_line() {
        assert_eq!(
            hops(
                ProxyHeader::XForwardedFor,
                &[b"1.2.3.4, 5.6.7.8", b"9.9.9.9"]
            ),
            [ip("9.9.9.9"), ip("5.6.7.8"), ip("1.2.3.4")]
        );
        assert_eq!(
            hops(ProxyHeader::XForwardedFor, &[b"1.2.3.4,,x"]),
            [Node::Invalid, Node::Invalid, ip("1.2.3.4")]
        );
        // Quotes mean nothing here: a client's stray quote cannot swallow
        // the address its proxy appended.
        assert_eq!(
            hops(ProxyHeader::XForwardedFor, &[b"\"x, 5.6.7.8"]),
            [ip("5.6.7.8"), Node::Invalid]
        );
    }

    #[test]
    fn forwarded_reads_for_parameters_with_quotes() {
        assert_eq!(
            hops(
                ProxyHeader::Forwarded,
                &[b"for=192.0.2.43, For=\"[2001:db8:cafe::17]:4711\";proto=https, by=10.0.0.1;for=unknown"],
            ),
            [Node::Unknown, ip("2001:db8:cafe::17"), ip("192.0.2.43")]
        );
        // A quoted comma does not split the element.
        assert_eq!(
            hops(ProxyHeader::Forwarded, &[b"for=\"_a,b\";proto=http"]),
            [Node::Invalid]
        );
        assert_eq!(
            hops(ProxyHeader::Forwarded, &[b"proto=http"]),
            [Node::Unknown]
        );
        assert_eq!(
            hops(ProxyHeader::Forwarded, &[b"for=_hidden"]),
            [Node::Obfuscated]
        );
    }

    #[test]
    fn absent_headers_give_none() {
        assert!(
            ProxyHeader::XRealIp
                .hops_nearest_first(&HeaderMap::new())
                .is_none()
        );
    }
}
