//! The playground `server`'s allow and deny lists: `--allow KEY` and
//! `--deny KEY` on the command line, and `--access-file PATH`, a file of
//! `allow KEY` and `deny KEY` lines the server follows while it runs
//! (through a [`tollgate::AccessLists`] handle, so the lists change for
//! the next request). A file that does not parse is reported (a warning
//! naming the line) and the lists read last kept.

use crate::plans::on_change;
use std::path::{Path, PathBuf};
use tollgate::{AccessLists, Key};

/// The keys of a list, as text (turned into [`Key`]s as the `--key`
/// extractor makes them, by the server).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Lists {
    /// Keys that pass uncounted.
    pub allowed: Vec<String>,
    /// Keys refused with 403.
    pub denied: Vec<String>,
}

impl Lists {
    /// These lists with `other`'s keys added.
    pub fn and(mut self, other: Lists) -> Lists {
        self.allowed.extend(other.allowed);
        self.denied.extend(other.denied);
        self
    }
}

/// An access file: one `allow KEY` or `deny KEY` per line; blank lines and
/// lines whose first non-blank character is `#` are skipped. The first bad
/// line fails the whole file, with its number.
pub fn parse_file(text: &str) -> Result<Lists, String> {
    let mut lists = Lists::default();
    for (number, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let bad = || {
            format!(
                "line {}: expected `allow KEY` or `deny KEY`, not {line:?}",
                number + 1
            )
        };
        let (verb, key) = line.split_once(char::is_whitespace).ok_or_else(bad)?;
        let key = key.trim();
        match verb {
            "allow" if !key.is_empty() => lists.allowed.push(key.to_owned()),
            "deny" if !key.is_empty() => lists.denied.push(key.to_owned()),
            _ => return Err(bad()),
        }
    }
    Ok(lists)
}

/// Reads and parses the access file at `path`.
pub fn read_file(path: &Path) -> Result<Lists, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|error| format!("cannot read {}: {error}", path.display()))?;
    parse_file(&text).map_err(|error| format!("{}: {error}", path.display()))
}

/// Follows the access file at `path` (ends with the runtime): whenever its
/// contents change, puts `fixed` (the flags' lists) with the file's in
/// force in `lists`, each key made by `key_of`; a file that does not parse
/// (or names a key `key_of` refuses) is reported once per change, and the
/// lists in force kept.
pub async fn watch(
    path: PathBuf,
    fixed: Lists,
    lists: AccessLists,
    key_of: impl Fn(&str) -> Result<Key, String>,
) {
    on_change(path.clone(), || {
        let read = read_file(&path).and_then(|file| {
            let both = fixed.clone().and(file);
            let keys = |texts: &[String]| {
                texts
                    .iter()
                    .map(|t| key_of(t))
                    .collect::<Result<Vec<_>, _>>()
            };
            Ok((keys(&both.allowed)?, keys(&both.denied)?))
        });
        match read {
            Ok((allowed, denied)) => {
                lists.replace(allowed, denied);
                tracing::info!(file = %path.display(), "access file read again");
            }
            Err(error) => tracing::warn!(
                %error,
                "the access file does not parse; keeping the lists read last"
            ),
        }
    })
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_parses_with_comments_and_names_its_bad_line() {
        let lists = parse_file("# lists\n\nallow monitor\n  deny  leaked-key \n").unwrap();
        assert_eq!(lists.allowed, ["monitor"]);
        assert_eq!(lists.denied, ["leaked-key"]);
        let error = parse_file("allow a\nblock b\n").unwrap_err();
        assert!(error.starts_with("line 2: "), "{error}");
        assert!(parse_file("allow").is_err());
        assert!(parse_file("deny   ").is_err());
    }
}
