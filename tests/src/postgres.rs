//! Real PostgreSQL servers for tests.
//!
//! Each server gets a fresh cluster (`initdb`, under a second) in a
//! temporary directory, listens on a free loopback port (its Unix socket
//! in that directory, not in `/var/run`), and is stopped when its handle
//! is dropped; on Linux it is also killed when the thread that started it
//! ends, so a test process killed outright leaves no server behind.
//!
//! The binaries: those under `TOLLGATE_TEST_POSTGRES_BIN` (a directory)
//! when it is set, else the newest `/usr/lib/postgresql/*/bin` (Debian's
//! and Ubuntu's `postgresql` package), else `postgres`, `initdb` and
//! `psql` from the `PATH`. `scripts/test.sh` installs the package when
//! they are missing.
//!
//! PostgreSQL refuses to run as root: a test process running as root
//! runs `initdb` and `postgres` as the system user `tollgate-pg`, made
//! with `useradd --system` when it is missing (`nobody` if that fails).
//! The cluster's superuser is `postgres`, with the password
//! [`PASSWORD`] over TCP (SCRAM), so that tests connect as an
//! application would.

use crate::redis::{OnFreePort, free_port, spawn_on_a_free_port, temp_dir};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::thread::sleep;
use std::time::{Duration, Instant};

/// The environment variable naming a directory of PostgreSQL binaries.
pub const BIN_VARIABLE: &str = "TOLLGATE_TEST_POSTGRES_BIN";

/// The password of the `postgres` user in every test cluster.
pub const PASSWORD: &str = "tollgate-pw";

/// The user the servers run as when the tests run as root.
const SYSTEM_USER: &str = "tollgate-pg";

/// The directory holding `postgres`, `initdb` and `psql`, or `None` to
/// take them from the `PATH`.
fn bin_dir() -> Option<PathBuf> {
    static DIR: OnceLock<Option<PathBuf>> = OnceLock::new();
    DIR.get_or_init(|| {
        if let Ok(dir) = std::env::var(BIN_VARIABLE)
            && !dir.is_empty()
        {
            return Some(PathBuf::from(dir));
        }
        // The newest major version installed.
        let versions = std::fs::read_dir("/usr/lib/postgresql").ok()?;
        versions
            .filter_map(Result::ok)
            .filter_map(|entry| {
                let major: u32 = entry.file_name().to_str()?.parse().ok()?;
                let bin = entry.path().join("bin");
                bin.join("postgres").exists().then_some((major, bin))
            })
            .max_by_key(|(major, _)| *major)
            .map(|(_, bin)| bin)
    })
    .clone()
}

/// The path of PostgreSQL's program `name`.
pub fn program(name: &str) -> PathBuf {
    match bin_dir() {
        Some(dir) => dir.join(name),
        None => PathBuf::from(name),
    }
}

/// Whether the PostgreSQL binaries can be found (for programs, such as
/// the bench, that skip what needs them).
pub fn available() -> bool {
    Command::new(program("postgres"))
        .arg("--version")
        .output()
        .is_ok_and(|out| out.status.success())
}

/// What `postgres --version` prints, e.g. `postgres (PostgreSQL) 15.14`.
pub fn version() -> &'static str {
    static VERSION: OnceLock<String> = OnceLock::new();
    VERSION.get_or_init(|| {
        Command::new(program("postgres"))
            .arg("--version")
            .output()
            .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_owned())
            .unwrap_or_default()
    })
}

/// The user and group ids the server runs as: `None` when this process is
/// not root (it runs as this process's user).
fn run_as() -> Option<(u32, u32)> {
    static IDS: OnceLock<Option<(u32, u32)>> = OnceLock::new();
    *IDS.get_or_init(|| {
        if !running_as_root() {
            return None;
        }
        if let Some(ids) = user_ids(SYSTEM_USER) {
            return Some(ids);
        }
        let _ = Command::new("useradd")
            .args([
                "--system",
                "--no-create-home",
                "--shell",
                "/usr/sbin/nologin",
            ])
            .arg(SYSTEM_USER)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let ids = user_ids(SYSTEM_USER).or_else(|| user_ids("nobody"));
        assert!(
            ids.is_some(),
            "running as root, and neither the user {SYSTEM_USER} (useradd failed) nor nobody \
             exists to run PostgreSQL as"
        );
        ids
    })
}

#[cfg(unix)]
fn running_as_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

#[cfg(not(unix))]
fn running_as_root() -> bool {
    false
}

/// The uid and gid of `user`, from `id` (no libc call that is not
/// thread-safe).
fn user_ids(user: &str) -> Option<(u32, u32)> {
    let id = |flag: &str| -> Option<u32> {
        let out = Command::new("id").args([flag, user]).output().ok()?;
        if !out.status.success() {
            return None;
        }
        String::from_utf8_lossy(&out.stdout).trim().parse().ok()
    };
    Some((id("-u")?, id("-g")?))
}

/// Runs `command` as the server's user.
fn as_server_user(command: &mut Command) {
    #[cfg(unix)]
    if let Some((uid, gid)) = run_as() {
        use std::os::unix::process::CommandExt;
        command.uid(uid).gid(gid);
    }
    #[cfg(not(unix))]
    let _ = command;
}

/// Hands `path` to the server's user.
fn give_to_server_user(path: &Path) {
    #[cfg(unix)]
    if let Some((uid, gid)) = run_as() {
        std::os::unix::fs::chown(path, Some(uid), Some(gid)).expect("chown a test directory");
    }
    #[cfg(not(unix))]
    let _ = path;
}

/// One PostgreSQL server, with a cluster of its own.
pub struct PostgresServer {
    port: u16,
    dir: PathBuf,
    extra: Vec<String>,
    child: Option<Child>,
}

impl OnFreePort for PostgresServer {
    fn try_spawn(&mut self) -> Result<(), String> {
        self.try_spawn_here()
    }

    fn move_to(&mut self, port: u16) {
        self.port = port;
    }
}

impl PostgresServer {
    /// Makes a cluster and starts a server on a free port; waits until it
    /// accepts connections.
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    /// [`start`](Self::start) with extra settings (`-c name=value` pairs,
    /// as `["-c", "ssl=on"]`). A server that exits at once (another
    /// process took the free port first) is started again on another
    /// port, twice at most.
    pub fn start_with(extra: &[&str]) -> Self {
        let mut server = Self::not_started();
        server.extra = extra.iter().map(|s| s.to_string()).collect();
        spawn_on_a_free_port(&mut server);
        server
    }

    /// A server whose cluster is made and port chosen, but which is not
    /// running; [`start_now`](Self::start_now) starts it.
    pub fn not_started() -> Self {
        let dir = temp_dir();
        give_to_server_user(&dir);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))
                .expect("chmod a test directory");
        }
        let server = PostgresServer {
            port: free_port(),
            dir,
            extra: Vec::new(),
            child: None,
        };
        server.initdb();
        server
    }

    /// Sets the extra settings a start passes (`-c name=value` pairs),
    /// for a server made by [`not_started`](Self::not_started).
    pub fn set_extra(&mut self, extra: &[String]) {
        self.extra = extra.to_vec();
    }

    /// The directory of its cluster, its socket and its log; files put
    /// here (certificates) belong to the server's user.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Copies `file` into the server's directory as `name`, owned by the
    /// server's user and readable by it alone (as PostgreSQL wants a key
    /// file); its path.
    pub fn own_file(&self, file: &Path, name: &str) -> PathBuf {
        let to = self.dir.join(name);
        std::fs::copy(file, &to).expect("copy a file for the server");
        give_to_server_user(&to);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&to, std::fs::Permissions::from_mode(0o600))
                .expect("chmod a file for the server");
        }
        to
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `postgres://postgres:PASSWORD@127.0.0.1:PORT/postgres`.
    pub fn url(&self) -> String {
        format!(
            "postgres://postgres:{PASSWORD}@127.0.0.1:{}/postgres",
            self.port
        )
    }

    /// Starts a server made by [`not_started`](Self::not_started), or
    /// stopped, on its port and cluster.
    pub fn start_now(&mut self) {
        self.spawn();
    }

    /// Stops it as a crash would, for its clients: an immediate shutdown
    /// (SIGQUIT: every session ends at once, no checkpoint; the next
    /// start recovers what was committed from the log, as after a crash).
    /// Waits until it has exited.
    pub fn kill(&mut self) {
        self.stop_with("-QUIT");
    }

    /// Stops it as an operator would: a fast shutdown (SIGINT: sessions
    /// are ended, what was committed is kept). Waits until it has exited.
    pub fn stop(&mut self) {
        self.stop_with("-INT");
    }

    fn stop_with(&mut self, how: &str) {
        if let Some(mut child) = self.child.take() {
            signal(&child, how);
            let deadline = Instant::now() + Duration::from_secs(10);
            while child.try_wait().ok().flatten().is_none() {
                if Instant::now() > deadline {
                    let _ = child.kill();
                    break;
                }
                sleep(Duration::from_millis(10));
            }
            let _ = child.wait();
        }
    }

    /// Stopped ([`stop`](Self::stop)) and started again on the same port,
    /// with the same data.
    pub fn restart(&mut self) {
        self.stop();
        self.spawn();
    }

    /// Runs `sql` with `psql` and returns what it printed (unaligned,
    /// tuples only): for checks the code under test should not make
    /// itself.
    pub fn sql(&self, sql: &str) -> String {
        let out = Command::new(program("psql"))
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string()])
            .args([
                "-U",
                "postgres",
                "-d",
                "postgres",
                "-At",
                "-v",
                "ON_ERROR_STOP=1",
            ])
            .args(["-c", sql])
            .env("PGPASSWORD", PASSWORD)
            .output()
            .expect("psql runs");
        assert!(
            out.status.success(),
            "psql {sql:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    fn data(&self) -> PathBuf {
        self.dir.join("data")
    }

    /// Makes the cluster: the `postgres` superuser with [`PASSWORD`],
    /// SCRAM over TCP, no fsync (a test's data need not survive the
    /// machine).
    fn initdb(&self) {
        let password_file = self.dir.join("password");
        std::fs::write(&password_file, PASSWORD).expect("write the password file");
        give_to_server_user(&password_file);
        let program = program("initdb");
        let mut command = Command::new(&program);
        command
            .arg("-D")
            .arg(self.data())
            .args([
                "-U",
                "postgres",
                "--auth-local=trust",
                "--auth-host=scram-sha-256",
            ])
            .arg(format!("--pwfile={}", password_file.display()))
            .args(["--no-sync", "-E", "UTF8", "--locale=C"]);
        as_server_user(&mut command);
        let out = command.output().unwrap_or_else(|e| {
            panic!(
                "cannot run {} ({e}); scripts/test.sh installs PostgreSQL (Debian's postgresql \
                 package) when missing",
                program.display()
            )
        });
        assert!(
            out.status.success(),
            "initdb failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn spawn(&mut self) {
        if let Err(why) = self.try_spawn_here() {
            panic!("{why}");
        }
    }

    fn try_spawn_here(&mut self) -> Result<(), String> {
        let log_path = self.dir.join("postgres.log");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .expect("open the server's log");
        let program = program("postgres");
        let mut command = Command::new(&program);
        command
            .arg("-D")
            .arg(self.data())
            .args(["-p", &self.port.to_string()])
            .args(["-c", "listen_addresses=127.0.0.1"])
            .arg("-c")
            .arg(format!("unix_socket_directories={}", self.dir.display()))
            // No fsync (a test's data need not survive the machine), but
            // every commit in the log before it returns, so that a crash
            // of the server loses nothing committed.
            .args(["-c", "fsync=off", "-c", "full_page_writes=off"])
            .args(["-c", "max_connections=300"])
            .args([
                "-c",
                "shared_buffers=32MB",
                "-c",
                "dynamic_shared_memory_type=mmap",
            ])
            .args(&self.extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(log));
        as_server_user(&mut command);
        // After the uid change (std runs these closures after setuid,
        // which would clear the signal).
        crate::redis::die_with_this_thread(&mut command);
        let child = command.spawn().unwrap_or_else(|e| {
            panic!(
                "cannot start {} ({e}); scripts/test.sh installs PostgreSQL when missing",
                program.display()
            )
        });
        let data = self.data();
        let child = self.child.insert(child);
        wait_until_ready(self.port, &data, child).map_err(|exit| {
            self.child = None;
            let log = std::fs::read_to_string(&log_path).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(8).collect();
            format!(
                "postgres on port {} {exit}; its log ends:\n{}",
                self.port,
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            )
        })
    }
}

impl Drop for PostgresServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Sends `signal` (`-QUIT`, `-STOP`) to `child`.
fn signal(child: &Child, signal: &str) {
    let _ = Command::new("kill")
        .args([signal, &child.id().to_string()])
        .status();
}

/// Waits until the server says it is ready (`postmaster.pid`'s status
/// line) and its port accepts connections; an error saying what happened
/// if it exits first or is not ready within 20 s.
fn wait_until_ready(port: u16, data: &Path, child: &mut Child) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!("exited at start ({status})"));
        }
        let ready = std::fs::read_to_string(data.join("postmaster.pid"))
            .is_ok_and(|pid| pid.lines().nth(7).is_some_and(|s| s.trim() == "ready"));
        if ready && TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return Ok(());
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err("was not ready within 20 s".to_owned());
        }
        sleep(Duration::from_millis(20));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_starts_answers_restarts_and_keeps_its_data() {
        let mut server = PostgresServer::start();
        assert_eq!(server.sql("SELECT 1 + 1"), "2");
        server.sql("CREATE TABLE kept (n int); INSERT INTO kept VALUES (7)");
        server.restart();
        assert_eq!(server.sql("SELECT n FROM kept"), "7");
        let dir = server.dir().to_owned();
        drop(server);
        assert!(!dir.exists());
    }
}
