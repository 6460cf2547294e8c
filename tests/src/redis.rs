//! Real Redis servers for tests.
//!
//! Each server runs on a free loopback port, keeps nothing on disk beyond a
//! temporary directory, and is killed when its handle is dropped. On Linux
//! it is also killed when the thread that started it ends, so a test
//! process killed outright (SIGKILL, a CI timeout) leaves no server behind;
//! start servers on the thread that uses them, as every test here does. The
//! binaries come from the system: `scripts/test.sh` installs them when they
//! are missing.
//!
//! `TOLLGATE_TEST_SERVER` picks the server the tests run against: unset,
//! `redis-server` and `redis-cli`; otherwise a prefix to which `-server`
//! and `-cli` are added, so `valkey` runs `valkey-server` and `valkey-cli`
//! from the `PATH`, and `/opt/valkey/bin/valkey` the binaries there. Every
//! process the tests start, servers and the Cluster tool alike, goes
//! through [`server_program`] and [`cli_program`], so one variable moves
//! the whole suite to another Redis-compatible server.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::thread::sleep;
use std::time::{Duration, Instant};

/// The environment variable that selects the server (see the module docs).
pub const SERVER_VARIABLE: &str = "TOLLGATE_TEST_SERVER";

/// The prefix of the binaries under test: `redis` unless
/// `TOLLGATE_TEST_SERVER` says otherwise.
fn program_prefix() -> String {
    match std::env::var(SERVER_VARIABLE) {
        Ok(prefix) if !prefix.is_empty() => prefix,
        _ => "redis".to_owned(),
    }
}

/// The server binary the tests start: `redis-server`, or the one
/// `TOLLGATE_TEST_SERVER` selects.
pub fn server_program() -> String {
    format!("{}-server", program_prefix())
}

/// The command-line client the tests run (`--cluster create`, `--cluster
/// reshard`): `redis-cli`, or the one `TOLLGATE_TEST_SERVER` selects.
pub fn cli_program() -> String {
    format!("{}-cli", program_prefix())
}

/// What `server_program() --version` prints, e.g. `Redis server v=7.0.15
/// sha=…` or `Valkey server v=8.1.8 sha=…`; empty if it cannot run.
pub fn server_version() -> &'static str {
    static VERSION: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    VERSION.get_or_init(|| {
        Command::new(server_program())
            .arg("--version")
            .output()
            .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_owned())
            .unwrap_or_default()
    })
}

/// One `redis-server` process (or the server `TOLLGATE_TEST_SERVER`
/// selects).
pub struct RedisServer {
    port: u16,
    dir: PathBuf,
    extra: Vec<String>,
    child: Option<Child>,
    /// The port of a server not started yet, held (`not_started`).
    held: Option<HeldPort>,
}

impl OnFreePort for RedisServer {
    fn try_spawn(&mut self) -> Result<(), String> {
        self.try_spawn_here()
    }

    fn move_to(&mut self, port: u16) {
        self.port = port;
    }
}

impl RedisServer {
    /// Starts a standalone server on a free port and waits until it answers.
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    /// Starts a server with extra `redis-server` arguments. A server that
    /// exits at once (another process took the free port first) is started
    /// again on another port, twice at most.
    pub fn start_with(extra: &[&str]) -> Self {
        let mut server = RedisServer {
            port: free_port(),
            dir: temp_dir(),
            extra: extra.iter().map(|s| s.to_string()).collect(),
            child: None,
            held: None,
        };
        spawn_on_a_free_port(&mut server);
        server
    }

    /// A server whose port is chosen but which is not running (Redis
    /// absent), for a store that must start without it;
    /// [`start_now`](Self::start_now) starts it on that port. Until then
    /// the port is held bound, not listening: a connection to it is
    /// refused, as to a server that is down, and no other process (nor an
    /// outgoing connection's ephemeral port) can take it meanwhile.
    pub fn not_started() -> Self {
        let (port, held) = held_free_port();
        RedisServer {
            port,
            dir: temp_dir(),
            extra: Vec::new(),
            child: None,
            held,
        }
    }

    /// A listener on the port of a server not started yet, that takes
    /// connections and never answers (as a host that is down behind a
    /// load balancer does), in place of the held port's refusals; dropping
    /// it resets what waits on it.
    pub fn silent_listener(&mut self) -> TcpListener {
        self.held = None;
        TcpListener::bind(("127.0.0.1", self.port)).expect("the held port binds")
    }

    /// Starts a server made by [`not_started`](Self::not_started) (or
    /// killed) on its port.
    pub fn start_now(&mut self) {
        self.spawn();
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Kills the process (as a crash would: SIGKILL, no goodbye).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Freezes the process (SIGSTOP): connections stay open, nothing is
    /// answered, as a stalled server's.
    pub fn freeze(&self) {
        self.signal("-STOP");
    }

    /// Lets a frozen process go on (SIGCONT): it then answers what was
    /// sent meanwhile.
    pub fn thaw(&self) {
        self.signal("-CONT");
    }

    fn signal(&self, signal: &str) {
        let child = self.child.as_ref().expect("the server runs");
        let status = std::process::Command::new("kill")
            .args([signal, &child.id().to_string()])
            .status()
            .expect("kill runs");
        assert!(status.success(), "kill {signal} failed");
    }

    /// Starts the server again on the same port, empty.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }

    /// Sends one command and returns the raw reply (RESP), for checks the
    /// store under test should not do itself (`MEMORY USAGE`, `DEBUG SLEEP`).
    pub fn command(&self, args: &[&str]) -> String {
        command(self.port, args)
    }

    /// `calls` of every command in the server's `INFO commandstats`, by
    /// name.
    pub fn command_calls(&self) -> Vec<(String, u64)> {
        self.command(&["INFO", "commandstats"])
            .lines()
            .filter_map(|line| {
                let (name, stats) = line.strip_prefix("cmdstat_")?.split_once(':')?;
                let calls = stats.strip_prefix("calls=")?.split(',').next()?;
                Some((name.to_owned(), calls.parse().ok()?))
            })
            .collect()
    }

    /// Whether the server has the function library `name` (a
    /// `RedisStore`'s are `tollgate_` and its script's SHA-1, see
    /// `RedisStore::script_hash`).
    pub fn has_library(&self, name: &str) -> bool {
        self.command(&["FUNCTION", "LIST", "LIBRARYNAME", name])
            .contains(&format!("\r\n{name}\r\n"))
    }

    /// How many script calls (`FCALL` or `EVALSHA`, and `EVAL` when the
    /// server lacked the function or script) the server has run: one per
    /// decision a `RedisStore` asked it for, one per reservation or sync
    /// of a local-first store.
    pub fn script_calls(&self) -> u64 {
        self.command_calls()
            .into_iter()
            .filter(|(name, _)| ["fcall", "evalsha", "eval"].contains(&name.as_str()))
            .map(|(_, calls)| calls)
            .sum()
    }

    /// Starts the process on `self.port`; panics, with the server's log, if
    /// it does not come up.
    fn spawn(&mut self) {
        if let Err(why) = self.try_spawn_here() {
            panic!("{why}");
        }
    }

    fn try_spawn_here(&mut self) -> Result<(), String> {
        // Let go of a held port just before the server binds it.
        self.held = None;
        let log = self.dir.join("redis.log");
        let program = server_program();
        let mut cmd = Command::new(&program);
        cmd.args(["--port", &self.port.to_string()])
            .args(["--bind", "127.0.0.1"])
            .args(["--save", ""])
            .args(["--appendonly", "no"])
            .args(debug_command_flag())
            .arg("--dir")
            .arg(&self.dir)
            .arg("--logfile")
            .arg(&log)
            .args(&self.extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        die_with_this_thread(&mut cmd);
        let child = cmd.spawn().unwrap_or_else(|e| {
            panic!("cannot start {program} ({e}); scripts/test.sh installs it when missing")
        });
        let child = self.child.insert(child);
        wait_until_ready(self.port, child).map_err(|exit| {
            self.child = None;
            let log = std::fs::read_to_string(&log).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(5).collect();
            format!(
                "{program} on port {} {exit}; its log ends:\n{}",
                self.port,
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            )
        })
    }
}

/// Has the kernel send the process SIGKILL when the calling thread ends.
#[cfg(target_os = "linux")]
pub(crate) fn die_with_this_thread(cmd: &mut Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure runs in the forked child before exec and only
    // calls prctl, which is async-signal-safe and touches no parent state.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        });
    }
}

/// Elsewhere a server outlives a test process that is killed outright.
#[cfg(not(target_os = "linux"))]
pub(crate) fn die_with_this_thread(_: &mut Command) {}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A Cluster on loopback: masters holding all 16384 slots, and replicas
/// where asked for.
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
}

impl RedisCluster {
    /// Starts `masters` servers with `--cluster-enabled yes` and joins them
    /// with `redis-cli --cluster create` (or the [`cli_program`] selected).
    pub fn start(masters: usize) -> Self {
        Self::start_with_replicas(masters, 0)
    }

    /// Starts `masters × (1 + replicas)` servers and joins them, each master
    /// with `replicas` replicas (`--cluster-replicas`).
    pub fn start_with_replicas(masters: usize, replicas: usize) -> Self {
        Self::start_with_node_args(masters, replicas, |_| Vec::new())
    }

    /// [`start_with_replicas`](Self::start_with_replicas), node `i` started
    /// with the extra arguments `node_args(i)` (TLS ports, say).
    pub fn start_with_node_args(
        masters: usize,
        replicas: usize,
        mut node_args: impl FnMut(usize) -> Vec<String>,
    ) -> Self {
        let nodes: Vec<RedisServer> = (0..masters * (1 + replicas))
            .map(|i| {
                let mut args: Vec<String> =
                    ["--cluster-enabled", "yes", "--cluster-node-timeout", "5000"]
                        .map(str::to_owned)
                        .to_vec();
                args.extend(node_args(i));
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                RedisServer::start_with(&args)
            })
            .collect();
        let addresses: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port()))
            .collect();
        let cli = cli_program();
        let status = Command::new(&cli)
            .arg("--cluster")
            .arg("create")
            .args(&addresses)
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .unwrap_or_else(|e| {
                panic!("cannot run {cli} ({e}); scripts/test.sh installs it when missing")
            });
        assert!(status.success(), "{cli} --cluster create failed");
        let cluster = RedisCluster { nodes };
        cluster.wait_until_ok();
        cluster.wait_until_replicas_synced();
        cluster
    }

    /// Waits until every replica has finished its first sync: a replica
    /// that never synced refuses to take over from a failed master.
    fn wait_until_replicas_synced(&self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        for i in self.replicas() {
            while !self.nodes[i]
                .command(&["INFO", "replication"])
                .contains("master_link_status:up")
            {
                assert!(Instant::now() < deadline, "a replica never synced");
                sleep(Duration::from_millis(50));
            }
        }
    }

    /// `redis+cluster://127.0.0.1:P1,127.0.0.1:P2,…`.
    pub fn url(&self) -> String {
        let nodes: Vec<String> = self
            .nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port()))
            .collect();
        format!("redis+cluster://{}", nodes.join(","))
    }

    /// The servers.
    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }

    /// The servers that are replicas now (`role:slave` in `INFO
    /// replication`), by index in [`nodes`](Self::nodes).
    pub fn replicas(&self) -> Vec<usize> {
        (0..self.nodes.len())
            .filter(|&i| {
                self.nodes[i]
                    .command(&["INFO", "replication"])
                    .contains("role:slave")
            })
            .collect()
    }

    /// Kills node `index` (as a crash would).
    pub fn kill(&mut self, index: usize) {
        self.nodes[index].kill();
    }

    /// Starts node `index` again on its port and in its directory: empty,
    /// but with its cluster configuration (`nodes.conf`), so it rejoins.
    pub fn restart(&mut self, index: usize) {
        self.nodes[index].restart();
    }

    /// Waits until every node says the cluster is ok (after a failover, say).
    pub fn wait_until_ok(&self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let all_ok = self
                .nodes
                .iter()
                .all(|n| n.command(&["CLUSTER", "INFO"]).contains("cluster_state:ok"));
            if all_ok {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the cluster never reached state ok"
            );
            sleep(Duration::from_millis(50));
        }
    }
}

/// Sends one command in RESP and reads what arrives within a short while.
pub fn command(port: u16, args: &[&str]) -> String {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connect to redis-server");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("set a read timeout");
    let mut request = format!("*{}\r\n", args.len());
    for arg in args {
        request.push_str(&format!("${}\r\n{}\r\n", arg.len(), arg));
    }
    stream
        .write_all(request.as_bytes())
        .expect("send to redis-server");
    let mut reply = Vec::new();
    let mut buf = [0; 4096];
    loop {
        let n = stream.read(&mut buf).unwrap_or(0);
        reply.extend_from_slice(&buf[..n]);
        if n == 0 || complete(&reply) {
            break;
        }
    }
    String::from_utf8_lossy(&reply).into_owned()
}

/// Whether `reply` holds one whole RESP value.
fn complete(reply: &[u8]) -> bool {
    value_end(reply, 0).is_some()
}

/// Where the RESP value starting at `at` ends, if it is all there.
fn value_end(reply: &[u8], at: usize) -> Option<usize> {
    let line_end = at + reply.get(at..)?.windows(2).position(|w| w == b"\r\n")?;
    let header = std::str::from_utf8(&reply[at + 1..line_end]).ok()?;
    let after_line = line_end + 2;
    match reply[at] {
        b'$' => {
            let len: i64 = header.parse().ok()?;
            let end = if len < 0 {
                after_line
            } else {
                after_line + len as usize + 2
            };
            (reply.len() >= end).then_some(end)
        }
        b'*' => {
            let count: i64 = header.parse().ok()?;
            let mut next = after_line;
            for _ in 0..count.max(0) {
                next = value_end(reply, next)?;
            }
            Some(next)
        }
        _ => Some(after_line),
    }
}

/// `--enable-debug-command local` (tests use `DEBUG SLEEP`) on Redis 7 and
/// later, which refuse `DEBUG` without it; nothing on older servers, which
/// allow `DEBUG` and refuse the flag. Valkey began at 7.2, so it always
/// gets the flag.
fn debug_command_flag() -> &'static [&'static str] {
    static FLAG: std::sync::OnceLock<&'static [&'static str]> = std::sync::OnceLock::new();
    FLAG.get_or_init(|| {
        // "Redis server v=7.0.15 sha=…", "Valkey server v=8.1.8 sha=…"
        let major: u32 = server_version()
            .split("v=")
            .nth(1)
            .and_then(|v| v.split('.').next())
            .and_then(|major| major.parse().ok())
            .unwrap_or(7);
        if major >= 7 {
            &["--enable-debug-command", "local"]
        } else {
            &[]
        }
    })
}

/// Waits until the server on `port` answers `PING`, and is `child` (its
/// `process_id`); an error saying what
/// happened if `child` exits first or nothing answers within 10 s.
pub(crate) fn wait_until_ready(port: u16, child: &mut Child) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!("exited at start ({status})"));
        }
        // The answer must come from `child`: two tests can be handed the
        // same free port, and on a busy machine the one whose server lost
        // the port may ask before that server has exited, and be answered
        // by the other test's server (seen: a test found the other's keys).
        if TcpStream::connect(("127.0.0.1", port)).is_ok()
            && command(port, &["PING"]).contains("PONG")
            && command(port, &["INFO", "server"])
                .contains(&format!("process_id:{}\r\n", child.id()))
        {
            return Ok(());
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err("never answered within 10 s".to_owned());
        }
        sleep(Duration::from_millis(20));
    }
}

/// A server the harness starts on a port it chose free.
pub(crate) trait OnFreePort {
    /// Starts it on its port: an error when it exits at once.
    fn try_spawn(&mut self) -> Result<(), String>;
    /// Chooses `port` for the next start.
    fn move_to(&mut self, port: u16);
}

/// Starts `server`; one that exits at once (another process took the free
/// port first) is started again on another free port, twice at most, then
/// its error fails the test.
pub(crate) fn spawn_on_a_free_port(server: &mut impl OnFreePort) {
    for _ in 0..2 {
        match server.try_spawn() {
            Ok(()) => return,
            Err(_) => server.move_to(free_port()),
        }
    }
    if let Err(why) = server.try_spawn() {
        panic!("{why}");
    }
}

/// A port nothing listens on now. Ports are taken from the kernel, so two
/// tests running at once get different ones.
pub fn free_port() -> u16 {
    // Cluster nodes also listen on port + 10000, which must stay below 65536.
    for _ in 0..1_000 {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind a free port");
        let port = listener.local_addr().expect("local address").port();
        if port < 55_000 && TcpListener::bind(("127.0.0.1", port + 10_000)).is_ok() {
            return port;
        }
    }
    panic!("no free loopback port below 55000 (with port + 10000 free) in 1,000 tries");
}

/// A loopback port bound by a socket that does not listen: the port is
/// this process's (no other bind, no ephemeral port for a connection takes
/// it), and a connection to it is refused. Freed when dropped.
// The descriptor is held for its drop, never read.
#[allow(dead_code)]
struct HeldPort(#[cfg(target_os = "linux")] std::os::fd::OwnedFd);

/// A free port (as [`free_port`] picks it) and, on Linux, the port held.
fn held_free_port() -> (u16, Option<HeldPort>) {
    for _ in 0..100 {
        let port = free_port();
        #[cfg(target_os = "linux")]
        if let Some(held) = hold(port) {
            return (port, Some(held));
        }
        #[cfg(not(target_os = "linux"))]
        return (port, None);
    }
    panic!("no free loopback port could be held in 100 tries");
}

/// Binds `port` on 127.0.0.1 without listening, or `None` if taken.
#[cfg(target_os = "linux")]
fn hold(port: u16) -> Option<HeldPort> {
    use std::os::fd::{FromRawFd, OwnedFd};
    // SAFETY: plain socket calls on a descriptor this function owns; the
    // address is a valid `sockaddr_in` of the size passed.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return None;
        }
        let owned = OwnedFd::from_raw_fd(fd);
        let address = libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: port.to_be(),
            sin_addr: libc::in_addr {
                s_addr: u32::from(std::net::Ipv4Addr::LOCALHOST).to_be(),
            },
            sin_zero: [0; 8],
        };
        let bound = libc::bind(
            fd,
            (&raw const address).cast::<libc::sockaddr>(),
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        );
        (bound == 0).then_some(HeldPort(owned))
    }
}

pub(crate) fn temp_dir() -> PathBuf {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let dir = std::env::temp_dir().join(format!(
        "tollgate-redis-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).expect("create a temporary directory");
    dir
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_that_exits_at_start_is_noticed_at_once() {
        // A configuration redis-server refuses: it exits at once.
        let mut server = RedisServer {
            port: free_port(),
            dir: temp_dir(),
            extra: vec!["--no-such-directive".into(), "1".into()],
            child: None,
            held: None,
        };
        let started = Instant::now();
        let error = server.try_spawn().unwrap_err();
        assert!(error.contains("exited at start"), "{error}");
        assert!(started.elapsed() < Duration::from_secs(5));
        assert!(server.child.is_none());
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_server_not_started_refuses_connections_and_keeps_its_port() {
        let mut server = RedisServer::not_started();
        // Held: nothing else binds it, and a connection is refused.
        assert!(TcpListener::bind(("127.0.0.1", server.port())).is_err());
        let refused = std::net::TcpStream::connect(("127.0.0.1", server.port())).unwrap_err();
        assert_eq!(refused.kind(), std::io::ErrorKind::ConnectionRefused);
        server.start_now();
        assert!(server.command(&["PING"]).contains("PONG"));
        // A server started afresh works (the retry in `start_with` is not
        // forced here: another process taking the port cannot be arranged).
        drop(server);
        let server = RedisServer::start();
        assert!(server.command(&["PING"]).contains("PONG"));
    }
}
