//! A file followed while the program runs (a plans file, a deny list, a
//! limits file): a change is put in force only once the file is whole and
//! stable, never half-written, never emptied by accident. The playground
//! `server` follows its limits, quota and access files with it, and
//! [`PlanFile`](crate::quotas::PlanFile) its plans.
//!
//! Editors and shells do not replace a file in one step: `printf … > f`
//! truncates, then writes; an editor may write in place, or rename a new
//! file over the old; Kubernetes re-points a `..data` symlink. A watcher
//! that reads at the wrong moment sees an empty or half-written file, and
//! for a deny list or a set of plans an empty file opens the gates. So:
//!
//! - The path is looked at every [`POLL_EVERY`] with a `stat` that follows
//!   symlinks: size, modification and change times, the file's identity
//!   (device and inode on Unix) and the path it resolves to. Any
//!   difference from what was last dealt with is a change, whichever way
//!   the times moved: a symlink re-pointed at an older file of the same
//!   size is noticed by its identity and resolved path.
//! - A change is read only once the stamp is the same on two polls in a
//!   row, at least a poll's time apart (no write for that long), and read
//!   once; the
//!   stamp is taken again after the read, and a read that raced a write is
//!   thrown away and looked at again on the next poll.
//! - A file over [`MAX_FILE_BYTES`] is not read: one WARN, and it is not
//!   looked at again until it changes.
//! - The text is parsed off the request path (the polling and parsing run
//!   on tokio's blocking threads), and handed over whole to be swapped in
//!   one step; the same content as the one in force is not handed over.
//! - A file that does not parse, cannot be read or (for a list or a set of
//!   plans, [`Watched::never_emptied`]) has no entry while entries are in
//!   force is refused with one WARN line, its bad line quoted short
//!   ([`quote`]), and what is in force stays.
//!
//! Adopted within about two polls of the last write (about half a second),
//! which is what "read again within a second of changing" in the playground's
//! docs promises. What this cannot see: a writer that pauses longer than a
//! poll with a *partial but valid* file; write a new file and rename it
//! over the old one to be safe from that too.

use std::collections::hash_map::DefaultHasher;
use std::hash::Hasher as _;
use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

/// How often a watched path is looked at.
pub const POLL_EVERY: Duration = Duration::from_millis(250);

/// The largest file followed: 16 MiB, room for hundreds of thousands of
/// keys. A larger file at a watched path is refused (at start, a usage
/// error), not read again and again.
pub const MAX_FILE_BYTES: u64 = 16 << 20;

/// How many characters of an operator's text a message quotes.
const QUOTE_CHARS: usize = 80;

/// At start, how many times a file that changes while it is read is read
/// again, [`LOAD_PAUSE`] apart, before [`Watched::load`] gives up.
const LOAD_TRIES: u32 = 40;

/// The pause between two reads at start.
const LOAD_PAUSE: Duration = Duration::from_millis(50);

/// `text` quoted for a message, cut to its first 80 characters with `…`
/// after the quote when longer: a malformed line of megabytes must not
/// become a log line of megabytes.
pub fn quote(text: &str) -> String {
    match text.char_indices().nth(QUOTE_CHARS) {
        Some((end, _)) => format!("{:?}…", &text[..end]),
        None => format!("{text:?}"),
    }
}

/// A message that may quote an operator's text (the library's errors
/// do), cut after 160 characters with `…`.
pub fn short(message: &str) -> String {
    match message.char_indices().nth(2 * QUOTE_CHARS) {
        Some((end, _)) => format!("{}…", &message[..end]),
        None => message.to_owned(),
    }
}

/// What one look at the path found: the file's stamp, or why there is
/// none to read.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Seen {
    File(Stamp),
    Unreadable(String),
}

/// What tells one version of a file from another without reading it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Stamp {
    len: u64,
    modified: Option<SystemTime>,
    /// The inode's change time (seconds, nanoseconds): moved by every
    /// write, and by no `touch -d`.
    #[cfg(unix)]
    changed: (i64, i64),
    /// Device and inode: another file behind the same path (a rename over
    /// it, a re-pointed symlink), whatever its times.
    #[cfg(unix)]
    identity: (u64, u64),
    /// The path after every symlink.
    resolved: Option<PathBuf>,
}

/// Looks at `path`, following symlinks.
fn look(path: &Path) -> Seen {
    let metadata = match std::fs::metadata(path) {
        Ok(metadata) => metadata,
        Err(error) => return Seen::Unreadable(error.to_string()),
    };
    if !metadata.is_file() {
        return Seen::Unreadable("it is not a file".to_owned());
    }
    #[cfg(unix)]
    use std::os::unix::fs::MetadataExt as _;
    Seen::File(Stamp {
        len: metadata.len(),
        modified: metadata.modified().ok(),
        #[cfg(unix)]
        changed: (metadata.ctime(), metadata.ctime_nsec()),
        #[cfg(unix)]
        identity: (metadata.dev(), metadata.ino()),
        resolved: std::fs::canonicalize(path).ok(),
    })
}

/// The whole file at `path`, at most [`MAX_FILE_BYTES`] of it.
fn read_bounded(path: &Path) -> Result<Vec<u8>, String> {
    let file = std::fs::File::open(path).map_err(|error| error.to_string())?;
    let mut bytes = Vec::new();
    file.take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|error| error.to_string())?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(too_large(bytes.len() as u64));
    }
    Ok(bytes)
}

/// Why a file of `len` bytes is not read.
fn too_large(len: u64) -> String {
    format!(
        "it is {len} bytes, over the {MAX_FILE_BYTES} (16 MiB) a watched file may have; split \
         the keys over fewer lines or keep them in a store (Redis quotas)"
    )
}

fn digest(bytes: &[u8]) -> u64 {
    let mut hasher = DefaultHasher::new();
    hasher.write(bytes);
    hasher.finish()
}

/// The parser of a watched file's text.
type Parse<T> = Box<dyn Fn(&str) -> Result<T, String> + Send>;

/// A file followed while the program runs, parsed into a `T`: read at
/// start with [`load`](Self::load), then [`follow`]ed.
pub struct Watched<T> {
    path: PathBuf,
    /// What the file is, for messages: `access file`.
    what: &'static str,
    /// What stays when a change is refused, for messages: `the lists read
    /// last`.
    kept: &'static str,
    parse: Parse<T>,
    /// How many entries a content has, for a file that must not be
    /// emptied while entries are in force.
    entries: Option<fn(&T) -> usize>,
    /// The entries of the content in force.
    in_force: usize,
    /// The digest of the content in force.
    digest: Option<u64>,
    /// What the last change dealt with (put in force, refused, reported)
    /// looked like.
    settled: Option<Seen>,
    /// What the last poll saw, when it differs from `settled`, and when
    /// it was first seen: a change not yet stable.
    pending: Option<(Seen, Instant)>,
    /// How long a change must hold still: [`POLL_EVERY`] (shorter in
    /// this module's tests).
    stable_for: Duration,
}

impl<T> std::fmt::Debug for Watched<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watched")
            .field("path", &self.path)
            .field("what", &self.what)
            .field("in_force", &self.in_force)
            .finish_non_exhaustive()
    }
}

impl<T> Watched<T> {
    /// The file at `path`, a `what` (`quota file`) whose text `parse`
    /// reads; when a change is refused, `kept` (`the plans read last`)
    /// stays in force.
    pub fn new(
        path: PathBuf,
        what: &'static str,
        kept: &'static str,
        parse: impl Fn(&str) -> Result<T, String> + Send + 'static,
    ) -> Self {
        Watched {
            path,
            what,
            kept,
            parse: Box::new(parse),
            entries: None,
            in_force: 0,
            digest: None,
            settled: None,
            pending: None,
            stable_for: POLL_EVERY,
        }
    }

    /// Refuses, while the content in force has entries, a change to a
    /// content of none (`entries` counts them): an emptied deny list or
    /// plan file is far more often a file caught between its truncation
    /// and its write than a wish to drop every entry.
    pub fn never_emptied(mut self, entries: fn(&T) -> usize) -> Self {
        self.entries = Some(entries);
        self
    }

    /// The path followed.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Reads the file now (at start), as a change is read: checked by its
    /// stamp before and after the read, and read again (a few times, a
    /// moment apart) while it changes under the read. Its content is then
    /// the one in force. The error names the file and says why.
    pub fn load(&mut self) -> Result<T, String> {
        let path = self.path.display().to_string();
        for _ in 0..LOAD_TRIES {
            let before = look(&self.path);
            let stamp = match &before {
                Seen::File(stamp) => stamp,
                Seen::Unreadable(error) => return Err(format!("cannot read {path}: {error}")),
            };
            if stamp.len > MAX_FILE_BYTES {
                return Err(format!("{path}: {}", too_large(stamp.len)));
            }
            let bytes = read_bounded(&self.path).map_err(|e| format!("cannot read {path}: {e}"))?;
            if look(&self.path) != before {
                std::thread::sleep(LOAD_PAUSE);
                continue;
            }
            let text = std::str::from_utf8(&bytes)
                .map_err(|_| format!("{path}: not UTF-8 text; save it as UTF-8"))?;
            let content = (self.parse)(text).map_err(|error| format!("{path}: {error}"))?;
            self.in_force = self.entries.map_or(0, |entries| entries(&content));
            self.digest = Some(digest(&bytes));
            self.settled = Some(before);
            return Ok(content);
        }
        Err(format!(
            "{path} kept changing while it was read; start again once it is written"
        ))
    }

    /// Looks at the file once (a poll): when a change has held still for a
    /// poll's time (the same stamp on two looks that far apart), reads it
    /// once and hands its content to `adopt` unless it
    /// is refused; each refusal, and `adopt`'s error, is one WARN line
    /// (`adopt`'s success one INFO line). Blocking: file I/O and parsing.
    pub fn poll(&mut self, adopt: &mut impl FnMut(T) -> Result<(), String>) {
        let seen = look(&self.path);
        if self.settled.as_ref() == Some(&seen) {
            self.pending = None;
            return;
        }
        match &self.pending {
            // Unchanged for a poll's time: whole, unless its writer paused
            // longer than that.
            Some((pending, since)) if *pending == seen && since.elapsed() >= self.stable_for => {}
            // Seen before, but a late poll came sooner than a poll's time
            // after that look: wait for the next.
            Some((pending, _)) if *pending == seen => return,
            // Changed since the last poll: wait until it holds still.
            _ => {
                self.pending = Some((seen, Instant::now()));
                return;
            }
        }
        self.pending = None;
        let file = self.path.display().to_string();
        let (what, kept) = (self.what, self.kept);
        let stamp = match &seen {
            Seen::Unreadable(error) => {
                tracing::warn!(%file, %error, "cannot read the {what}; keeping {kept}");
                self.settled = Some(seen);
                return;
            }
            Seen::File(stamp) => stamp,
        };
        if stamp.len > MAX_FILE_BYTES {
            let error = too_large(stamp.len);
            tracing::warn!(%file, %error, "the {what} is not read; keeping {kept}");
            // Not looked at again until it changes.
            self.settled = Some(seen);
            return;
        }
        let read = read_bounded(&self.path);
        let after = look(&self.path);
        if after != seen {
            // Written while read: what was read may be half of it.
            self.pending = Some((after, Instant::now()));
            return;
        }
        self.settled = Some(seen);
        let bytes = match read {
            Ok(bytes) => bytes,
            Err(error) => {
                // Not a race with a writer (the stamp held): say so once.
                tracing::warn!(%file, %error, "cannot read the {what}; keeping {kept}");
                return;
            }
        };
        let digest = digest(&bytes);
        if self.digest == Some(digest) {
            return;
        }
        let Ok(text) = std::str::from_utf8(&bytes) else {
            tracing::warn!(%file, "the {what} is not UTF-8 text; keeping {kept}");
            return;
        };
        let content = match (self.parse)(text) {
            Ok(content) => content,
            Err(error) => {
                tracing::warn!(%file, %error, "the {what} does not parse; keeping {kept}");
                return;
            }
        };
        let entries = self.entries.map_or(0, |entries| entries(&content));
        if self.entries.is_some() && entries == 0 && self.in_force > 0 {
            tracing::warn!(
                %file,
                in_force = self.in_force,
                "the {what} has no entries (emptied, or caught between its truncation and its \
                 write): refused, keeping {kept}; to drop every entry, restart the program"
            );
            return;
        }
        match adopt(content) {
            Ok(()) => {
                self.in_force = entries;
                self.digest = Some(digest);
                tracing::info!(%file, "{what} read again");
            }
            Err(error) => {
                tracing::warn!(%file, %error, "the {what} was not put in force; keeping {kept}")
            }
        }
    }
}

/// Follows `watched` (ends with the runtime): [`Watched::poll`] every
/// [`POLL_EVERY`], on tokio's blocking threads, so that neither the file
/// I/O nor the parsing of a large file holds up a request; `adopt` puts a
/// content in force, in one step, there too.
pub async fn follow<T: Send + 'static>(
    mut watched: Watched<T>,
    mut adopt: impl FnMut(T) -> Result<(), String> + Send + 'static,
) {
    let mut ticks = tokio::time::interval(POLL_EVERY);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The first tick is now: the file was just read.
    ticks.tick().await;
    loop {
        ticks.tick().await;
        let poll = tokio::task::spawn_blocking(move || {
            watched.poll(&mut adopt);
            (watched, adopt)
        });
        match poll.await {
            Ok(back) => (watched, adopt) = back,
            Err(error) => {
                tracing::error!(%error, "the file watcher stopped; restart the program to follow \
                                          its files again");
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A directory of its own under the system's temporary directory.
    fn scratch() -> PathBuf {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "tollgate-watched-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// Lines, each an entry; a line `bad` does not parse.
    fn lines(path: PathBuf) -> Watched<Vec<String>> {
        Watched::new(path, "test file", "the lines read last", |text: &str| {
            text.lines()
                .filter(|line| !line.starts_with('#'))
                .map(|line| match line {
                    "bad" => Err(format!("line: {}", quote(line))),
                    _ => Ok(line.to_owned()),
                })
                .collect()
        })
        .never_emptied(Vec::len)
        .stable_for(STABLE)
    }

    /// How long a change must hold still in these tests.
    const STABLE: Duration = Duration::from_millis(40);

    impl<T> Watched<T> {
        fn stable_for(mut self, stable: Duration) -> Self {
            self.stable_for = stable;
            self
        }
    }

    /// Writes `text` to `path` in place, a moment after the last write: a
    /// file's times move at the clock's tick (a few milliseconds), and in
    /// use a change is dealt with at least a poll after the one before.
    fn rewrite(path: &Path, text: &str) {
        std::thread::sleep(Duration::from_millis(30));
        std::fs::write(path, text).unwrap();
    }

    /// Polls `n` times; what was adopted.
    fn polls(watched: &mut Watched<Vec<String>>, n: usize) -> Vec<Vec<String>> {
        let mut adopted = Vec::new();
        for _ in 0..n {
            std::thread::sleep(STABLE);
            watched.poll(&mut |lines| {
                adopted.push(lines);
                Ok(())
            });
        }
        adopted
    }

    #[test]
    fn a_change_is_adopted_once_it_holds_still_for_two_polls() {
        let dir = scratch();
        let path = dir.join("f");
        rewrite(&path, "a\n");
        let mut watched = lines(path.clone());
        assert_eq!(watched.load().unwrap(), ["a"]);
        assert!(polls(&mut watched, 3).is_empty(), "unchanged");
        rewrite(&path, "a\nb\n");
        assert!(polls(&mut watched, 1).is_empty(), "seen once: not yet");
        assert_eq!(polls(&mut watched, 1), [["a", "b"]]);
        assert!(polls(&mut watched, 3).is_empty(), "adopted once");
        // Truncated, then written before the next poll: the empty file is
        // never read.
        rewrite(&path, "");
        assert!(polls(&mut watched, 1).is_empty());
        rewrite(&path, "c\n");
        assert!(polls(&mut watched, 1).is_empty(), "changed again");
        assert_eq!(polls(&mut watched, 1), [["c"]]);
    }

    /// Two looks that find the same stamp are not enough when they are
    /// closer together than the time a change must hold still (a late
    /// poll, then a prompt one).
    #[test]
    fn a_change_must_hold_still_for_its_time_not_just_two_polls() {
        let dir = scratch();
        let path = dir.join("f");
        std::fs::write(&path, "a\n").unwrap();
        let mut watched = lines(path.clone()).stable_for(Duration::from_secs(3600));
        watched.load().unwrap();
        rewrite(&path, "b\n");
        assert!(polls(&mut watched, 5).is_empty());
        watched.stable_for = Duration::ZERO;
        assert_eq!(polls(&mut watched, 1), [["b"]]);
    }

    #[test]
    fn an_emptied_or_bad_file_is_refused_and_the_last_good_one_kept() {
        let dir = scratch();
        let path = dir.join("f");
        rewrite(&path, "a\n");
        let mut watched = lines(path.clone());
        watched.load().unwrap();
        for refused in ["", "# nothing\n", "bad\n"] {
            rewrite(&path, refused);
            assert!(polls(&mut watched, 4).is_empty(), "{refused:?}");
        }
        // The same content as the one in force is not handed over again.
        rewrite(&path, "a\n");
        assert!(polls(&mut watched, 4).is_empty());
        rewrite(&path, "b\n");
        assert_eq!(polls(&mut watched, 2), [["b"]]);
    }

    #[test]
    fn a_file_over_the_cap_is_refused_and_not_read_again() {
        let dir = scratch();
        let path = dir.join("f");
        rewrite(&path, "a\n");
        let mut watched = lines(path.clone());
        watched.load().unwrap();
        let big = std::fs::File::create(&path).unwrap();
        big.set_len(MAX_FILE_BYTES + 1).unwrap();
        drop(big);
        assert!(polls(&mut watched, 4).is_empty());
        assert!(
            matches!(&watched.settled, Some(Seen::File(stamp)) if stamp.len > MAX_FILE_BYTES),
            "remembered, so not read on every poll"
        );
        let error = lines(path.clone()).load().err().unwrap();
        assert!(error.contains("16 MiB"), "{error}");
        rewrite(&path, "b\n");
        assert_eq!(polls(&mut watched, 2), [["b"]]);
    }

    /// A `..data` swap as Kubernetes does it: the path is a symlink to
    /// `..data/f`, `..data` a symlink re-pointed at another directory;
    /// the new file is the same size and older, and still noticed.
    #[cfg(unix)]
    #[test]
    fn a_data_symlink_swap_to_an_older_file_of_the_same_size_is_noticed() {
        use std::os::unix::fs::symlink;
        let dir = scratch();
        for (version, text) in [("v1", "a\n"), ("v2", "b\n")] {
            std::fs::create_dir(dir.join(version)).unwrap();
            std::fs::write(dir.join(version).join("f"), text).unwrap();
        }
        // v2 is older than v1.
        let old = SystemTime::now() - Duration::from_secs(3600);
        std::fs::File::options()
            .write(true)
            .open(dir.join("v2/f"))
            .unwrap()
            .set_modified(old)
            .unwrap();
        symlink("v1", dir.join("..data")).unwrap();
        symlink("..data/f", dir.join("f")).unwrap();
        let mut watched = lines(dir.join("f"));
        assert_eq!(watched.load().unwrap(), ["a"]);
        symlink("v2", dir.join("..data_tmp")).unwrap();
        std::fs::rename(dir.join("..data_tmp"), dir.join("..data")).unwrap();
        assert_eq!(polls(&mut watched, 2), [["b"]]);
    }

    #[test]
    fn a_missing_file_is_reported_and_followed_when_it_comes_back() {
        let dir = scratch();
        let path = dir.join("f");
        rewrite(&path, "a\n");
        let mut watched = lines(path.clone());
        watched.load().unwrap();
        std::fs::remove_file(&path).unwrap();
        assert!(polls(&mut watched, 3).is_empty());
        assert!(matches!(watched.settled, Some(Seen::Unreadable(_))));
        rewrite(&path, "b\n");
        assert_eq!(polls(&mut watched, 2), [["b"]]);
        let error = lines(dir.join("absent")).load().err().unwrap();
        assert!(error.starts_with("cannot read"), "{error}");
    }

    #[test]
    fn quotes_are_short() {
        assert_eq!(quote("deny a"), "\"deny a\"");
        let long = quote(&"é".repeat(10_000));
        assert_eq!(long, format!("{:?}…", "é".repeat(80)));
    }
}
