//! The playground `server`'s limits: `--limit NAME=QUOTA` on the command
//! line, or `--limits-file PATH`, a file of such lines the server follows
//! while it runs (through [`tollgate::quotas::LiveLimits`], each key
//! keeping its usage). A file that does not parse is reported (a warning
//! naming the line) and the limits read last kept.

use crate::plans::on_change;
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use tollgate::NamedLimit;
use tollgate::core::{Algorithm, Quota};
use tollgate::quotas::LiveLimits;

/// One `NAME=QUOTA`, such as `api=10/s`.
pub fn parse_limit(text: &str) -> Result<NamedLimit, String> {
    let (name, quota) = text
        .split_once('=')
        .ok_or_else(|| format!("expected NAME=QUOTA, such as api=10/s, not {text:?}"))?;
    let quota: Quota = quota.trim().parse().map_err(|e| format!("{e}"))?;
    // The name is written into header fields: the crate checks it.
    NamedLimit::try_new(name.trim(), quota).map_err(|e| e.to_string())
}

/// A limits file: one `NAME=QUOTA` per line; blank lines and lines whose
/// first non-blank character is `#` are skipped. The first bad line fails
/// the whole file, with its number; so does a file of no limit, or two
/// limits of one name.
pub fn parse_file(text: &str) -> Result<Vec<NamedLimit>, String> {
    let mut limits = Vec::new();
    let mut names = HashSet::new();
    for (number, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let limit = parse_limit(line).map_err(|error| format!("line {}: {error}", number + 1))?;
        if !names.insert(limit.name().to_owned()) {
            return Err(format!(
                "line {}: a second limit called {:?}",
                number + 1,
                limit.name()
            ));
        }
        limits.push(limit);
    }
    if limits.is_empty() {
        return Err("no limit: give at least one NAME=QUOTA line".to_owned());
    }
    Ok(limits)
}

/// Reads and parses the limits file at `path`.
pub fn read_file(path: &Path) -> Result<Vec<NamedLimit>, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|error| format!("cannot read {}: {error}", path.display()))?;
    parse_file(&text).map_err(|error| format!("{}: {error}", path.display()))
}

/// Follows the limits file at `path` (ends with the runtime): whenever its
/// contents change, puts its limits (under `algorithm`), then `extra` (the
/// limits in shadow), in force through `live`; a file that does not parse,
/// or limits the store cannot decide, are reported once per change and the
/// limits in force kept.
pub async fn watch(path: PathBuf, algorithm: Algorithm, extra: Vec<NamedLimit>, live: LiveLimits) {
    on_change(path.clone(), || {
        let limits = read_file(&path).and_then(|limits| {
            let limits = limits
                .into_iter()
                .map(|limit| limit.with_algorithm(algorithm))
                .chain(extra.iter().cloned())
                .collect();
            live.set(limits).map_err(|error| error.to_string())
        });
        match limits {
            Ok(()) => tracing::info!(file = %path.display(), "limits file read again"),
            Err(error) => tracing::warn!(
                %error,
                "the limits file does not parse; keeping the limits read last"
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
        let limits = parse_file("# limits\n\napi = 10/min\n  # x\nhourly=500/h\n").unwrap();
        let names: Vec<&str> = limits.iter().map(NamedLimit::name).collect();
        assert_eq!(names, ["api", "hourly"]);
        assert_eq!(limits[0].quota(), Quota::per_minute(10));
        let error = parse_file("api=10/min\nhourly=lots\n").unwrap_err();
        assert!(error.starts_with("line 2: "), "{error}");
        assert!(
            parse_file("api=1/s\napi=2/s")
                .unwrap_err()
                .contains("second limit")
        );
        assert!(parse_file("# nothing\n").is_err());
        assert!(parse_file("bad name=1/s").is_err());
    }
}
