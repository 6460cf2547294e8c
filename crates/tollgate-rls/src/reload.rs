//! Following a configuration on disk: the files are read again every
//! [`POLL`]; a change that has held still for one poll (so that a file
//! caught mid-write is never adopted) and loads replaces the rules in
//! force; one that does not load, or that leaves no file at all, leaves
//! the last good rules in force and is logged once.

use crate::config::{Config, LoadError};
use arc_swap::ArcSwap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// How often the files are read again: a change is in force within this
/// much and the time to read it (well within a second).
pub const POLL: Duration = Duration::from_millis(250);

/// The rules in force, shared by a [`RateLimitServer`](crate::RateLimitServer)
/// and whatever replaces them: [`Rules::set`], or [`Rules::follow`] for a
/// file or a directory.
#[derive(Clone, Debug)]
pub struct Rules(Arc<ArcSwap<Config>>);

impl Rules {
    pub(crate) fn new(config: Config) -> Self {
        Rules(Arc::new(ArcSwap::from_pointee(config)))
    }

    /// The rules in force now.
    pub fn current(&self) -> Arc<Config> {
        self.0.load_full()
    }

    /// Puts `config` in force for every call that starts from now. The
    /// counts carry on: a rule keeps its counts where it stays in place
    /// (its identity is its place in the configuration).
    pub fn set(&self, config: Config) {
        self.0.store(Arc::new(config));
    }

    /// Follows `path` (a file or a directory, as [`Config::load`] reads
    /// it) on a task of the current Tokio runtime: every [`POLL`] its
    /// files' contents are compared with the last read, and a change that
    /// reads the same at two polls in a row is loaded and put in force; a
    /// change that does not load, or a folder left without a file, is
    /// logged (one WARN, naming the file and the key) and the rules in
    /// force stay.
    /// A Kubernetes ConfigMap's `..data` link swapped to a new folder is a
    /// change like any other. Stops when every clone of these rules is
    /// gone.
    pub fn follow(&self, path: &Path) -> tokio::task::JoinHandle<()> {
        let rules = Arc::downgrade(&self.0);
        let path = path.to_path_buf();
        tokio::spawn(async move {
            let mut last = snapshot(&path);
            let mut refused: Option<Snapshot> = None;
            let mut seen: Option<Snapshot> = None;
            loop {
                tokio::time::sleep(POLL).await;
                let Some(rules) = rules.upgrade() else {
                    return;
                };
                let now = snapshot(&path);
                if now == last || refused.as_ref() == Some(&now) {
                    seen = None;
                    continue;
                }
                // Adopted only once it reads the same twice in a row.
                if seen.as_ref() != Some(&now) {
                    seen = Some(now);
                    continue;
                }
                seen = None;
                if now.is_empty() {
                    tracing::warn!(
                        path = %path.display(),
                        "the rate-limit configuration's folder holds no .yaml or .yml file now; \
                         the last good configuration stays in force"
                    );
                    refused = Some(now);
                    continue;
                }
                match Config::load(&path) {
                    Ok(config) => {
                        rules.store(Arc::new(config));
                        tracing::info!(path = %path.display(), "rate-limit configuration reloaded");
                        last = now;
                        refused = None;
                    }
                    Err(error) => {
                        warn_refused(&error);
                        refused = Some(now);
                    }
                }
            }
        })
    }
}

fn warn_refused(error: &LoadError) {
    tracing::warn!(
        %error,
        "the changed rate-limit configuration does not load; the last good one stays in force"
    );
}

/// What the files of a configuration hold: each path read, with its
/// contents (or why it could not be read).
type Snapshot = Vec<(PathBuf, Result<Vec<u8>, String>)>;

fn snapshot(path: &Path) -> Snapshot {
    let files = match std::fs::metadata(path) {
        Ok(metadata) if metadata.is_dir() => match crate::config::config_files(path) {
            Ok(files) => files,
            Err(error) => return vec![(path.to_path_buf(), Err(error.to_string()))],
        },
        Ok(_) => vec![path.to_path_buf()],
        Err(error) => return vec![(path.to_path_buf(), Err(error.to_string()))],
    };
    files
        .into_iter()
        .map(|file| {
            let read = std::fs::read(&file).map_err(|e| e.to_string());
            (file, read)
        })
        .collect()
}
