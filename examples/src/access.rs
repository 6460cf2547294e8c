//! The playground `server`'s allow and deny lists: `--allow KEY` and
//! `--deny KEY` on the command line, and `--access-file PATH`, a file of
//! `allow KEY` and `deny KEY` lines the server follows while it runs
//! (through a [`tollgate::access::AccessLists`] handle, so the lists change for
//! the next request, both at once).
//!
//! Every key is put in the form the `--key` extractor gives requests
//! ([`KeyKind::canonical`]), and a key no request can get is refused: at
//! start a usage error, in a change of the file a WARN. The file is
//! followed by [`crate::watched`]: a change is read once it is whole; a
//! file that does not parse is reported (one WARN naming the line, quoted
//! short) and the lists read last kept; so is a file emptied of every
//! entry while it had some (an `: > access.txt`, or a rewrite caught
//! between its truncation and its write, would otherwise lift the deny
//! list).

use crate::keys::KeyKind;
use crate::watched::{Watched, follow, quote};
use std::path::PathBuf;
use tollgate::{Key, access::AccessLists};

/// Allow and deny lists, their keys in the extractor's form.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Lists {
    /// Keys that pass uncounted.
    pub allowed: Vec<Key>,
    /// Keys refused with 403.
    pub denied: Vec<Key>,
}

impl Lists {
    /// The lists of `--allow` and `--deny`, each key in `kind`'s form; the
    /// first key no request can get fails them, named with its flag.
    pub fn from_flags(allow: &[String], deny: &[String], kind: &KeyKind) -> Result<Lists, String> {
        let keys = |flag: &str, texts: &[String]| {
            texts
                .iter()
                .map(|text| {
                    kind.canonical(text.trim())
                        .map_err(|error| format!("--{flag} {}: {error}", quote(text)))
                })
                .collect::<Result<Vec<_>, _>>()
        };
        Ok(Lists {
            allowed: keys("allow", allow)?,
            denied: keys("deny", deny)?,
        })
    }

    /// These lists with `other`'s keys added.
    pub fn and(mut self, other: &Lists) -> Lists {
        self.allowed.extend(other.allowed.iter().cloned());
        self.denied.extend(other.denied.iter().cloned());
        self
    }

    /// How many keys they name.
    pub fn len(&self) -> usize {
        self.allowed.len() + self.denied.len()
    }

    /// Whether they name no key.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Puts them in force in `lists`, both at once.
    pub fn put_in(self, lists: &AccessLists) {
        lists.replace(self.allowed, self.denied);
    }
}

/// An access file: one `allow KEY` or `deny KEY` per line, each key in
/// `kind`'s form; blank lines and lines whose first non-blank character is
/// `#` are skipped. The first bad line fails the whole file, with its
/// number and its text quoted short.
pub fn parse_file(text: &str, kind: &KeyKind) -> Result<Lists, String> {
    let mut lists = Lists::default();
    for (number, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let at = |error: String| format!("line {}: {error}", number + 1);
        let bad = || {
            at(format!(
                "expected `allow KEY` or `deny KEY`, not {}",
                quote(line)
            ))
        };
        let (verb, key) = line.split_once(char::is_whitespace).ok_or_else(bad)?;
        let list = match verb {
            "allow" => &mut lists.allowed,
            "deny" => &mut lists.denied,
            _ => return Err(bad()),
        };
        list.push(kind.canonical(key.trim()).map_err(at)?);
    }
    Ok(lists)
}

/// The access file at `path`, to [`load`](Watched::load) at start and
/// then [`watch`]: its keys in `kind`'s form, a change that empties it
/// refused.
pub fn watched(path: PathBuf, kind: KeyKind) -> Watched<Lists> {
    Watched::new(path, "access file", "the lists read last", move |text| {
        parse_file(text, &kind)
    })
    .never_emptied(Lists::len)
}

/// Follows the access file (ends with the runtime): each change read whole
/// puts `fixed` (the flags' lists) with the file's in force in `lists`,
/// both at once.
pub async fn watch(file: Watched<Lists>, fixed: Lists, lists: AccessLists) {
    follow(file, move |from_file: Lists| {
        fixed.clone().and(&from_file).put_in(&lists);
        Ok(())
    })
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header() -> KeyKind {
        KeyKind::parse("header:x-api-key").unwrap()
    }

    #[test]
    fn a_file_parses_with_comments_and_names_its_bad_line() {
        let lists =
            parse_file("# lists\n\nallow monitor\n  deny  leaked-key \n", &header()).unwrap();
        assert_eq!(lists.allowed, [Key::from("monitor")]);
        assert_eq!(lists.denied, [Key::from("leaked-key")]);
        let error = parse_file("allow a\nblock b\n", &header()).unwrap_err();
        assert!(error.starts_with("line 2: "), "{error}");
        assert!(parse_file("allow", &header()).is_err());
        assert!(parse_file("deny   ", &header()).is_err());
    }

    #[test]
    fn keys_are_canonical_and_keys_never_matched_are_refused() {
        let lists = parse_file("deny ::ffff:127.0.0.1\nallow 2001:db8::1\n", &KeyKind::Ip).unwrap();
        assert_eq!(lists.denied, [KeyKind::Ip.canonical("127.0.0.1").unwrap()]);
        assert_eq!(
            lists.allowed,
            [KeyKind::Ip.canonical("2001:db8::").unwrap()]
        );
        for never in [
            "deny <no key>".to_owned(),
            format!("deny {}", "k".repeat(257)),
        ] {
            let error = parse_file(&format!("allow a\n{never}\n"), &header()).unwrap_err();
            assert!(error.starts_with("line 2: "), "{error}");
            assert!(error.len() < 300, "quoted short: {error}");
        }
        let flags = Lists::from_flags(&["<no key>".to_owned()], &[], &header()).unwrap_err();
        assert!(flags.starts_with("--allow \"<no key>\": "), "{flags}");
        let ip = Lists::from_flags(&[], &["::ffff:10.1.2.3".to_owned()], &KeyKind::Ip).unwrap();
        assert_eq!(ip.denied, [KeyKind::Ip.canonical("10.1.2.3").unwrap()]);
    }

    #[test]
    fn a_long_bad_line_is_quoted_short() {
        let line = format!("block {}", "x".repeat(50_000));
        let error = parse_file(&line, &header()).unwrap_err();
        assert!(error.len() < 200, "{error}");
        assert!(error.contains('…'), "{error}");
    }
}
