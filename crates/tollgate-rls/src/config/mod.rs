//! envoyproxy/ratelimit's configuration, read as that server reads it.
//!
//! A file holds one `domain` and its `descriptors`: each a `key`, an
//! optional `value` (with `*` wildcards), an optional `rate_limit`
//! (`requests_per_unit` per `unit`, or `unlimited: true`; a `name`, and
//! the names it `replaces`), nested `descriptors`, and the switches
//! `shadow_mode`, `quota_mode`, `detailed_metric`, `value_to_metric`,
//! `share_threshold` and `metadata`. [`Config::load`] reads a file or a
//! directory of them.
//!
//! What that server refuses, this refuses, naming the file: an unknown
//! key; an empty domain, or a domain in two files; a descriptor without a
//! key, or twice at one level; an invalid unit, or a unit beside
//! `unlimited`; an empty `replaces` entry, or a rule that replaces itself;
//! `share_threshold` without a wildcard. One key is tollgate's own,
//! `algorithm`, in a `rate_limit` or at the top of a file (the domain's
//! default): a rule decided by GCRA, a token bucket, a sliding window, …
//! rather than that server's fixed window. envoyproxy/ratelimit refuses a
//! file with it (an unknown key), so a file is never misread by either.

mod keys;
mod lookup;
mod metadata;
mod rule;
mod tree;
mod unit;
mod wildcard;

pub use lookup::{Entry, Found};
pub use rule::{Limit, Rule};
pub use unit::Unit;

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use tree::{Node, YamlRoot};

/// Every domain's rules.
#[derive(Debug, Default)]
pub struct Config {
    domains: HashMap<String, Node>,
}

/// A file that cannot be loaded: which, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoadError {
    file: String,
    message: String,
}

impl LoadError {
    fn new(file: impl Into<String>, message: impl Into<String>) -> Self {
        LoadError {
            file: file.into(),
            message: message.into(),
        }
    }

    /// The file at fault (a path, or the name given to
    /// [`Config::from_yaml`]).
    pub fn file(&self) -> &str {
        &self.file
    }

    /// What is wrong, naming the key.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.file, self.message)
    }
}

impl std::error::Error for LoadError {}

impl Config {
    /// The rules of one file's text; `name` is what errors call it.
    ///
    /// # Errors
    ///
    /// What envoyproxy/ratelimit would refuse, naming `name` and the key.
    pub fn from_yaml(name: &str, text: &str) -> Result<Config, LoadError> {
        let mut config = Config::default();
        config.add_yaml(name, text)?;
        Ok(config)
    }

    /// The rules of `path`: one file, or every file of a directory whose
    /// name ends in `.yaml` or `.yml` and does not start with a dot (so
    /// that a Kubernetes ConfigMap's `..data` folder and its links are
    /// read once), in the order of their names. Links are followed.
    ///
    /// # Errors
    ///
    /// A file that cannot be read, or what envoyproxy/ratelimit would
    /// refuse in one, naming the file and the key; a domain in two files.
    pub fn load(path: &Path) -> Result<Config, LoadError> {
        let shown = path.display().to_string();
        let metadata =
            std::fs::metadata(path).map_err(|e| LoadError::new(&shown, e.to_string()))?;
        let files = if metadata.is_dir() {
            config_files(path).map_err(|e| LoadError::new(&shown, e.to_string()))?
        } else {
            vec![path.to_path_buf()]
        };
        let mut config = Config::default();
        for file in files {
            let shown = file.display().to_string();
            let text = std::fs::read_to_string(&file)
                .map_err(|e| LoadError::new(&shown, e.to_string()))?;
            config.add_yaml(&shown, &text)?;
        }
        Ok(config)
    }

    /// The domains, in no order.
    pub fn domains(&self) -> impl Iterator<Item = &str> {
        self.domains.keys().map(String::as_str)
    }

    fn add_yaml(&mut self, name: &str, text: &str) -> Result<(), LoadError> {
        let fail = |message: String| LoadError::new(name, message);
        let value: serde_yaml_ng::Value =
            serde_yaml_ng::from_str(text).map_err(|e| fail(format!("not YAML: {e}")))?;
        if value.is_null() {
            return Err(fail("the file is empty: it has no `domain`".to_owned()));
        }
        keys::check(&value).map_err(fail)?;
        let root: YamlRoot = serde_yaml_ng::from_value(value).map_err(|e| fail(e.to_string()))?;
        let domain = root.domain.clone();
        if self.domains.contains_key(&domain) {
            return Err(fail(format!(
                "domain '{domain}' is in another file already"
            )));
        }
        let tree = root.into_tree().map_err(fail)?;
        self.domains.insert(domain, tree);
        Ok(())
    }
}

/// The files of `dir` a configuration is read from, by name.
pub(crate) fn config_files(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        let yaml = name.ends_with(".yaml") || name.ends_with(".yml");
        if yaml && !name.starts_with('.') && path.is_file() {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}
