//! Issue 58: the playground `server`'s watched files (`--access-file`,
//! `--quota-file`, `--limits-file`) written as editors and shells write
//! them while requests run, and keys written in another form than the
//! extractor's. No denied key is ever admitted, no plan lost, no limit
//! missing; a file emptied, too large or malformed is refused with one
//! short WARN and the last good one kept; a key no request can get is
//! refused at start.
//!
//! Every wait is bounded (a deadline of [`playground::STEP`]); what is
//! judged is what the server promises (a change that holds still for a
//! poll is adopted within a second or so; a write that pauses less than a
//! poll is never caught half-done), not how fast it runs.

mod playground;

use playground::{STEP, Server, request, run_to_exit, try_request};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

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

/// The playground keyed by `x-api-key`, 1,000 a minute by default, its
/// plans followed from the quota file at `path`; `extra` flags after.
fn quota_server(path: &Path, extra: &[&str]) -> Server {
    let path = path.to_str().unwrap();
    let mut args = vec!["--limit", "api=1000/min", "--key", "header:x-api-key"];
    args.extend_from_slice(&["--quota-file", path]);
    args.extend_from_slice(extra);
    Server::start(&args)
}

/// As `printf … > path` with a slow shell: truncated (the same file, in
/// place), then, after `pause`, written in one write.
fn truncate_then_write(path: &Path, text: &str, pause: Duration) {
    let mut file = std::fs::File::create(path).unwrap();
    std::thread::sleep(pause);
    file.write_all(text.as_bytes()).unwrap();
}

/// One response seen by a [`Hammer`]: when, its status, its
/// `RateLimit-Policy`.
struct Seen {
    at: Instant,
    status: u16,
    policy: String,
}

/// A thread sending requests of one key until stopped, a few
/// milliseconds apart, keeping every response.
struct Hammer {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<Vec<Seen>>,
}

impl Hammer {
    fn start(addr: &str, key: &'static str) -> Hammer {
        let stop = Arc::new(AtomicBool::new(false));
        let (addr, flag) = (addr.to_owned(), stop.clone());
        let thread = std::thread::spawn(move || {
            let mut seen = Vec::new();
            // Bounded by the test's own length: the flag is set on every
            // path out of it, and a failed request ends the loop too.
            while !flag.load(Ordering::Relaxed) {
                let headers: &[(&str, &str)] = if key.is_empty() {
                    &[]
                } else {
                    &[("x-api-key", key)]
                };
                let Some(response) = try_request(&addr, "/", headers) else {
                    break;
                };
                seen.push(Seen {
                    at: Instant::now(),
                    status: response.status,
                    policy: response
                        .header("ratelimit-policy")
                        .unwrap_or_default()
                        .to_owned(),
                });
                std::thread::sleep(Duration::from_millis(5));
            }
            seen
        });
        Hammer { stop, thread }
    }

    fn stop(self) -> Vec<Seen> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().expect("the hammer thread")
    }
}

/// Waits, boundedly, until `ready` says the server follows the file's
/// latest content.
fn wait_for(server: &Server, what: &str, mut ready: impl FnMut() -> bool) {
    let deadline = Instant::now() + STEP;
    while !ready() {
        assert!(
            Instant::now() < deadline,
            "never saw {what}: {:#?}",
            server.logs()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The WARN lines the server logged that contain `text`.
fn warnings(server: &Server, text: &str) -> Vec<String> {
    server
        .logs()
        .into_iter()
        .filter(|line| line.contains("WARN") && line.contains(text))
        .collect()
}

/// `: > path`, left so for several polls (the [`Hammer`] meanwhile
/// judging what it does); the refusal's WARNs before it, to hand to
/// [`refused_once`].
fn empty_for_a_while(server: &Server, path: &Path) -> usize {
    // Pauses of the rounds before may have been refused already.
    let before = warnings(server, "has no entries").len();
    std::fs::File::create(path).unwrap();
    std::thread::sleep(Duration::from_millis(1_500));
    before
}

/// The emptied file was refused with one WARN (not one a poll).
fn refused_once(server: &Server, before: usize) {
    wait_for(server, "the emptied file refused", || {
        warnings(server, "has no entries").len() > before
    });
    std::thread::sleep(Duration::from_millis(600));
    assert_eq!(
        warnings(server, "has no entries").len(),
        before + 1,
        "one WARN for the emptied file"
    );
}

/// The pauses a slow shell or editor leaves between truncating a file and
/// writing it: none, less than a poll, several polls.
const PAUSES: [u64; 4] = [0, 100, 600, 1_500];

/// `: > access.txt`, and rewrites with a pause between truncation and
/// write: the denied key is refused all along; each new content is
/// followed.
#[test]
fn an_access_file_emptied_or_caught_between_truncation_and_write_never_lifts_a_deny() {
    let dir = scratch();
    let path = dir.join("access.txt");
    std::fs::write(&path, "deny foe\nallow friend-0\n").unwrap();
    let server = Server::start(&[
        "--limit",
        "api=1/min",
        "--key",
        "header:x-api-key",
        "--access-file",
        path.to_str().unwrap(),
    ]);
    let hammer = Hammer::start(&server.addr, "foe");
    for (round, pause) in PAUSES.iter().enumerate() {
        let friend = format!("friend-{}", round + 1);
        let text = format!("deny foe\nallow {friend}\n");
        truncate_then_write(&path, &text, Duration::from_millis(*pause));
        // An allowed key passes past the 1/min limit.
        wait_for(&server, &friend, || {
            (0..2).all(|_| request(&server.addr, "/", &[("x-api-key", &friend)]).status == 200)
        });
    }
    let before = empty_for_a_while(&server, &path);
    let seen = hammer.stop();
    assert!(!seen.is_empty());
    let admitted = seen.iter().filter(|s| s.status != 403).count();
    assert_eq!(admitted, 0, "{admitted} of {} admitted", seen.len());
    refused_once(&server, before);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The same writes to a quota file: a 5/min key keeps its plan all along
/// (every response shows it; at the 1,000/min default it would not).
#[test]
fn a_quota_file_emptied_or_caught_between_truncation_and_write_never_loses_a_plan() {
    let dir = scratch();
    let path = dir.join("quota.txt");
    std::fs::write(&path, "free=5/min\nmarker=100/min\n").unwrap();
    let server = quota_server(&path, &[]);
    let hammer = Hammer::start(&server.addr, "free");
    for (round, pause) in PAUSES.iter().enumerate() {
        let marker = 101 + round;
        let text = format!("free=5/min\nmarker={marker}/min\n");
        truncate_then_write(&path, &text, Duration::from_millis(*pause));
        let policy = format!("\"api\";q={marker};w=60");
        wait_for(&server, &policy, || {
            request(&server.addr, "/", &[("x-api-key", "marker")]).header("ratelimit-policy")
                == Some(policy.as_str())
        });
    }
    let before = empty_for_a_while(&server, &path);
    let seen = hammer.stop();
    assert!(!seen.is_empty());
    let lost: Vec<&Seen> = seen
        .iter()
        .filter(|s| s.policy != "\"api\";q=5;w=60")
        .collect();
    assert!(
        lost.is_empty(),
        "{} of {} responses without the 5/min plan, first {:?}",
        lost.len(),
        seen.len(),
        lost.first().map(|s| &s.policy)
    );
    // 5 at once, then one every 12 s: at the default it would be far more.
    let first = seen[0].at;
    let admitted = seen.iter().filter(|s| s.status == 200).count() as u64;
    let most = 5
        + 1
        + seen
            .last()
            .map_or(0, |s| s.at.duration_since(first).as_secs() / 12);
    assert!(admitted <= most, "{admitted} admitted, at most {most}");
    refused_once(&server, before);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A limits file rewritten in place a line at a time, with a pause between
/// the lines shorter than a poll: no response is ever decided without the
/// second limit. A round whose pause overran (the machine was busy) is
/// not judged: only a pause shorter than a poll is promised.
#[test]
fn a_limits_file_rewritten_in_place_is_never_caught_missing_a_limit() {
    let dir = scratch();
    let path = dir.join("limits.txt");
    std::fs::write(&path, "api=1000/min\nburst=100/min\n").unwrap();
    let server = Server::start(&[
        "--key",
        "header:x-api-key",
        "--limits-file",
        path.to_str().unwrap(),
    ]);
    let hammer = Hammer::start(&server.addr, "user");
    // (start, end) of the rounds whose pause overran.
    let mut unjudged = Vec::new();
    for round in 1..=8 {
        let burst = 100 + round;
        let mut file = std::fs::File::options()
            .write(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        let start = Instant::now();
        file.write_all(b"api=1000/min\n").unwrap();
        std::thread::sleep(Duration::from_millis(100));
        file.write_all(format!("burst={burst}/min\n").as_bytes())
            .unwrap();
        drop(file);
        let end = Instant::now();
        if end - start >= Duration::from_millis(200) {
            unjudged.push((start, end));
        }
        let expected = format!("\"burst\";q={burst};w=60");
        static PROBE: AtomicUsize = AtomicUsize::new(0);
        wait_for(&server, &expected, || {
            let probe = format!("probe-{}", PROBE.fetch_add(1, Ordering::Relaxed));
            request(&server.addr, "/", &[("x-api-key", &probe)])
                .header("ratelimit-policy")
                .is_some_and(|policy| policy.contains(&expected))
        });
    }
    let seen = hammer.stop();
    assert!(!seen.is_empty());
    let excused = |at: Instant| {
        unjudged
            .iter()
            .any(|(start, end)| *start <= at && at <= *end + Duration::from_secs(2))
    };
    let missing: Vec<&Seen> = seen
        .iter()
        .filter(|s| !s.policy.contains("\"burst\"") && !excused(s.at))
        .collect();
    assert!(
        missing.is_empty(),
        "{} responses without the burst limit, first {:?}",
        missing.len(),
        missing.first().map(|s| &s.policy)
    );
    println!("{} rounds not judged (a pause overran)", unjudged.len());
    let _ = std::fs::remove_dir_all(&dir);
}

/// A Kubernetes-style `..data` swap: the watched path is a symlink to
/// `..data/quota.txt`, and `..data` is re-pointed at a new directory whose
/// file has the same size and an older modification time. Each swap is
/// followed (back to a directory seen before too); the 5/min plan holds
/// throughout.
#[cfg(unix)]
#[test]
fn a_data_symlink_swap_is_followed_even_to_an_older_file_of_the_same_size() {
    use std::os::unix::fs::symlink;
    let dir = scratch();
    let version = |n: u32| {
        let name = format!("..v{n}");
        let sub = dir.join(&name);
        if !sub.exists() {
            std::fs::create_dir(&sub).unwrap();
            let file = sub.join("quota.txt");
            std::fs::write(&file, format!("free=5/min\nmarker=1{n}/min\n")).unwrap();
            // Each newer version is older on disk.
            let hours = Duration::from_secs(3600 * u64::from(n));
            std::fs::File::options()
                .write(true)
                .open(&file)
                .unwrap()
                .set_modified(std::time::SystemTime::now() - hours)
                .unwrap();
        }
        name
    };
    symlink(version(1), dir.join("..data")).unwrap();
    symlink("..data/quota.txt", dir.join("quota.txt")).unwrap();
    let server = quota_server(&dir.join("quota.txt"), &[]);
    let hammer = Hammer::start(&server.addr, "free");
    for n in [2, 3, 2, 4] {
        let _ = std::fs::remove_file(dir.join("..data_tmp"));
        symlink(version(n), dir.join("..data_tmp")).unwrap();
        std::fs::rename(dir.join("..data_tmp"), dir.join("..data")).unwrap();
        let policy = format!("\"api\";q=1{n};w=60");
        wait_for(&server, &policy, || {
            request(&server.addr, "/", &[("x-api-key", "marker")]).header("ratelimit-policy")
                == Some(policy.as_str())
        });
    }
    let seen = hammer.stop();
    assert!(!seen.is_empty());
    assert!(seen.iter().all(|s| s.policy == "\"api\";q=5;w=60"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// A file over the 16 MiB cap is refused with one WARN (not read again on
/// every poll), a malformed line of 100 KB is quoted short, a key no
/// request can get or a key named twice is refused: each time the plans
/// in force stay. A good file is then followed again.
#[test]
fn a_quota_file_too_large_malformed_or_never_matching_is_refused_with_one_short_warn() {
    let dir = scratch();
    let path = dir.join("quota.txt");
    std::fs::write(&path, "free=5/min\n").unwrap();
    let server = quota_server(&path, &[]);
    let free_policy = || {
        request(&server.addr, "/", &[("x-api-key", "free")])
            .header("ratelimit-policy")
            .map(str::to_owned)
    };
    // 17 MiB of plans.
    let line = "free=5/min\n";
    let big = line.repeat((17 << 20) / line.len() + 1);
    truncate_then_write(&path, &big, Duration::ZERO);
    wait_for(&server, "the large file refused", || {
        !warnings(&server, "is not read").is_empty()
    });
    std::thread::sleep(Duration::from_millis(1_200));
    assert_eq!(warnings(&server, "is not read").len(), 1, "one WARN");
    assert_eq!(free_policy().as_deref(), Some("\"api\";q=5;w=60"));

    let refused = [
        format!("free=5/min\n{}\n", "x".repeat(100_000)),
        "free=5/min\n<no key>=unlimited\n".to_owned(),
        format!("free=5/min\n{}=unlimited\n", "k".repeat(300)),
        "free=5/min\nfree=unlimited\n".to_owned(),
    ];
    for (n, text) in refused.iter().enumerate() {
        truncate_then_write(&path, text, Duration::ZERO);
        wait_for(&server, "the refusal", || {
            warnings(&server, "does not parse").len() > n
        });
        assert_eq!(free_policy().as_deref(), Some("\"api\";q=5;w=60"), "{n}");
    }
    for warning in warnings(&server, "does not parse") {
        assert!(warning.len() < 1_000, "quoted short: {warning}");
        assert!(warning.contains("line 2"), "{warning}");
    }
    truncate_then_write(&path, "free=7/min\n", Duration::ZERO);
    wait_for(&server, "the good file", || {
        free_policy().as_deref() == Some("\"api\";q=7;w=60")
    });
    let _ = std::fs::remove_dir_all(&dir);
}

/// Keys are compared in the extractor's form: `--deny ::ffff:127.0.0.1`
/// refuses requests from 127.0.0.1, and a plan for it applies.
#[test]
fn keys_written_in_another_form_match_as_the_extractor_gives_them() {
    let server = Server::start(&["--limit", "api=1/min", "--deny", "::ffff:127.0.0.1"]);
    assert_eq!(request(&server.addr, "/", &[]).status, 403);
    let dir = scratch();
    let access = dir.join("access.txt");
    std::fs::write(&access, "deny ::FFFF:127.0.0.1\n").unwrap();
    let server = Server::start(&[
        "--limit",
        "api=1/min",
        "--access-file",
        access.to_str().unwrap(),
    ]);
    assert_eq!(request(&server.addr, "/", &[]).status, 403);
    let server = Server::start(&[
        "--limit",
        "api=100/min",
        "--quota",
        "::ffff:127.0.0.1=2/min",
    ]);
    let response = request(&server.addr, "/", &[]);
    assert_eq!(
        response.header("ratelimit-policy"),
        Some("\"api\";q=2;w=60")
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A key no request can get, or a key planned twice, stops the server at
/// start with a message (exit code 2, as for any bad flag).
#[test]
fn keys_that_can_never_match_are_refused_at_start() {
    let dir = scratch();
    let header = ["--key", "header:x-api-key"];
    let long = "k".repeat(300);
    let file = |name: &str, text: &str| {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path.to_str().unwrap().to_owned()
    };
    let duplicates = file("dup.txt", "a=1/s\nb=2/s\na=3/s\n");
    let mapped = file("mapped.txt", "::ffff:127.0.0.1=1/s\n127.0.0.1=2/s\n");
    let no_key = file("no-key.txt", "allow friend\ndeny <no key>\n");
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["--allow", "<no key>"], "without the header"),
        (vec!["--deny", &long], "300 bytes"),
        (vec!["--quota", "<no key>=unlimited"], "without the header"),
        (
            vec!["--quota", "x=1/s", "--quota", "x=2/s"],
            "a second plan",
        ),
        (
            vec!["--quota-file", &duplicates],
            "line 3: a second plan for \"a\"",
        ),
        (vec!["--access-file", &no_key], "line 2"),
    ];
    for (args, message) in cases {
        let all: Vec<&str> = header.iter().copied().chain(args.iter().copied()).collect();
        let (status, stderr) = run_to_exit(&all);
        assert_eq!(status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(message), "{args:?}: {stderr}");
        assert!(stderr.len() < 1_000, "{args:?}: quoted short: {stderr}");
    }
    let (status, stderr) = run_to_exit(&["--quota-file", &mapped]);
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("same key"), "{stderr}");
    let (status, stderr) = run_to_exit(&["--key", "global", "--deny", "someone"]);
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--key global"), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A quota file of a million keys, written in place while requests run,
/// is read and parsed off the requests' path and swapped in one step: no
/// request waits past the store timeout (1 s here) while it loads (a
/// whole-book swap on the request path stalled every request 2.4 s), and
/// its plans are in force once it is.
#[test]
fn a_million_line_quota_file_loads_without_stalling_a_request() {
    let dir = scratch();
    let path = dir.join("quota.txt");
    std::fs::write(&path, "free=1000/min\n").unwrap();
    let server = quota_server(&path, &["--store-timeout-ms", "1000"]);
    let stop = Arc::new(AtomicBool::new(false));
    let timer = {
        let (addr, stop) = (server.addr.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut slowest = Duration::ZERO;
            let mut sent = 0u32;
            while !stop.load(Ordering::Relaxed) && sent < 1_000_000 {
                let started = Instant::now();
                let answered = try_request(&addr, "/", &[("x-api-key", "free")]);
                assert!(answered.is_some(), "a request went unanswered");
                slowest = slowest.max(started.elapsed());
                sent += 1;
                std::thread::sleep(Duration::from_millis(5));
            }
            (slowest, sent)
        })
    };
    std::thread::sleep(Duration::from_millis(300));
    let mut text = String::with_capacity(14 << 20);
    for i in 0..1_000_000 {
        text.push_str(&format!("k{i}=5/min\n"));
    }
    text.push_str("free=1000/min\nmarker=77/min\n");
    std::fs::write(&path, &text).unwrap();
    let policy = "\"api\";q=77;w=60";
    let deadline = Instant::now() + Duration::from_secs(120);
    while request(&server.addr, "/", &[("x-api-key", "marker")]).header("ratelimit-policy")
        != Some(policy)
    {
        assert!(
            Instant::now() < deadline,
            "never loaded: {:#?}",
            server.logs()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_millis(300));
    stop.store(true, Ordering::Relaxed);
    let (slowest, sent) = timer.join().unwrap();
    println!("{sent} requests while a million plans loaded, the slowest {slowest:?}");
    assert!(
        slowest < Duration::from_secs(1),
        "a request took {slowest:?} while the file loaded"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
