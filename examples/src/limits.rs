//! The playground `server`'s limits: `--limit NAME=QUOTA` on the command
//! line, or `--limits-file PATH`, a file of such lines the server follows
//! while it runs (through [`tollgate::quotas::LiveLimits`], each key
//! keeping its usage). The file is followed by [`crate::watched`]: a
//! change is read once it is whole and stable (an editor's rewrite in
//! place is never caught half-written, with a limit missing), parsed off
//! the request path and put in force in one step. A file that does not
//! parse (or has no limit) is reported (one WARN naming the line, quoted
//! short) and the limits read last kept.

use crate::watched::{Watched, follow, quote, short};
use std::collections::HashSet;
use std::path::PathBuf;
use tollgate::NamedLimit;
use tollgate::core::{Algorithm, Quota};
use tollgate::quotas::LiveLimits;

/// One `NAME=QUOTA`, such as `api=10/s`.
pub fn parse_limit(text: &str) -> Result<NamedLimit, String> {
    let (name, quota) = text
        .split_once('=')
        .ok_or_else(|| format!("expected NAME=QUOTA, such as api=10/s, not {}", quote(text)))?;
    let quota: Quota = quota.trim().parse().map_err(|e| short(&format!("{e}")))?;
    // The name is written into header fields: the crate checks it.
    NamedLimit::try_new(name.trim(), quota).map_err(|e| short(&e.to_string()))
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

/// The limits file at `path`, to [`load`](Watched::load) at start and
/// then [`watch`].
pub fn watched(path: PathBuf) -> Watched<Vec<NamedLimit>> {
    Watched::new(path, "limits file", "the limits read last", parse_file)
}

/// Follows the limits file (ends with the runtime): each change read whole
/// puts its limits (under `algorithm`), then `extra` (the limits in
/// shadow), in force through `live`, in one step; limits the store cannot
/// decide are reported and the limits in force kept.
pub async fn watch(
    file: Watched<Vec<NamedLimit>>,
    algorithm: Algorithm,
    extra: Vec<NamedLimit>,
    live: LiveLimits,
) {
    follow(file, move |limits: Vec<NamedLimit>| {
        let limits = limits
            .into_iter()
            .map(|limit| limit.with_algorithm(algorithm))
            .chain(extra.iter().cloned())
            .collect();
        live.set(limits).map_err(|error| error.to_string())
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

    #[test]
    fn a_long_bad_line_is_quoted_short() {
        for line in [
            format!("api={}", "x".repeat(50_000)),
            format!("{}=1/s", "n".repeat(50_000)),
            "x".repeat(50_000),
        ] {
            let error = parse_file(&format!("ok=1/s\n{line}\n")).unwrap_err();
            assert!(error.starts_with("line 2: "), "{error}");
            assert!(error.len() < 300, "{error}");
        }
    }
}
