//! What the tests of the `server` playground share: starting the binary
//! on `127.0.0.1:0` and reading the address it prints, plain HTTP/1.1
//! requests on fresh connections, and running it to a usage error.

#![allow(dead_code)] // not every test binary uses every helper

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex, PoisonError, mpsc};
use std::time::{Duration, Instant};

/// How long any one step (startup, a request, an exit) may take.
pub const STEP: Duration = Duration::from_secs(30);

/// A running `server`, killed when dropped.
pub struct Server {
    child: Child,
    /// The address it announced (`listening on http://ADDR`).
    pub addr: String,
    /// What it wrote to stderr (its logs), line by line.
    stderr: Arc<Mutex<Vec<String>>>,
    /// Its stdout's lines after the first, as they come (read on a thread
    /// to the end, so the server never writes into a closed pipe).
    stdout: Mutex<Option<mpsc::Receiver<String>>>,
}

impl Server {
    /// Starts `server --listen 127.0.0.1:0 ARGS...` and waits for its address.
    pub fn start(args: &[&str]) -> Server {
        Server::start_with_env(args, &[])
    }

    /// [`start`](Self::start) with these environment variables set.
    pub fn start_with_env(args: &[&str], env: &[(&str, &str)]) -> Server {
        let mut command = Command::new(env!("CARGO_BIN_EXE_server"));
        command.envs(env.iter().copied());
        Server::spawn(command, args)
    }

    /// [`start`](Self::start) in a process that may open at most `files`
    /// files (`ulimit -n`, through `sh`).
    pub fn start_limited_files(files: u32, args: &[&str]) -> Server {
        let mut command = Command::new("sh");
        command.args([
            "-c",
            &format!("ulimit -n {files} && exec \"$0\" \"$@\""),
            env!("CARGO_BIN_EXE_server"),
        ]);
        Server::spawn(command, args)
    }

    fn spawn(mut command: Command, args: &[&str]) -> Server {
        let mut child = command
            .args(["--listen", "127.0.0.1:0"])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the server binary starts");
        let stdout = child.stdout.take().expect("stdout is piped");
        let stderr = child.stderr.take().expect("stderr is piped");
        // The guard exists before the wait, so a failed wait still kills it.
        let mut server = Server {
            child,
            addr: String::new(),
            stderr: Arc::default(),
            stdout: Mutex::new(None),
        };
        let lines = server.stderr.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                lines
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(line);
            }
        });
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let first = rx
            .recv_timeout(STEP)
            .expect("the server prints its address in time");
        server.addr = first
            .strip_prefix("listening on http://")
            .expect("the first line announces the address")
            .trim()
            .to_owned();
        server.stdout = Mutex::new(Some(rx));
        server
    }

    /// The next line it writes to stdout after `listening on`, within
    /// [`STEP`].
    pub fn next_line(&self) -> String {
        self.stdout
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .expect("stdout is read")
            .recv_timeout(STEP)
            .expect("the server prints another line in time")
    }

    /// The address of its metrics (started with `--metrics-listen`): read
    /// from the line `metrics on http://ADDR/metrics` that follows
    /// `listening on`.
    pub fn metrics_addr(&self) -> String {
        let line = self.next_line();
        line.strip_prefix("metrics on http://")
            .and_then(|rest| rest.strip_suffix("/metrics"))
            .unwrap_or_else(|| panic!("expected \"metrics on http://ADDR/metrics\", got {line:?}"))
            .to_owned()
    }

    /// The lines it has written to stderr so far (its logs).
    pub fn logs(&self) -> Vec<String> {
        self.stderr
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Its logs once `ready` holds for them, read again until then (a line
    /// written to stderr reaches the test a moment later, later on a
    /// loaded machine): at most [`STEP`]; then the logs as they are.
    #[allow(dead_code)]
    pub fn logs_once(&self, ready: impl Fn(&[String]) -> bool) -> Vec<String> {
        let deadline = std::time::Instant::now() + STEP;
        loop {
            let logs = self.logs();
            if ready(&logs) || std::time::Instant::now() >= deadline {
                return logs;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    /// Kills it now (SIGKILL: no chance to clean up), and reaps it.
    pub fn kill(&mut self) {
        self.child.kill().expect("kill the server");
        self.child.wait().expect("reap it");
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The first line `stdout` writes, read on a thread so a silent child
/// fails the test after `timeout` instead of hanging it.
pub fn first_line_within(stdout: impl Read + Send + 'static, timeout: Duration) -> String {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = BufReader::new(stdout).read_line(&mut line);
        let _ = tx.send(line);
    });
    rx.recv_timeout(timeout)
        .expect("the server prints its address in time")
}

/// A response: status, headers (names lowercased) and body.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Response {
    /// The value of header `name` (lowercase), if present.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// One HTTP/1.1 `GET path` on a fresh connection, read until the server
/// closes it (`Connection: close`).
pub fn request(addr: &str, path: &str, headers: &[(&str, &str)]) -> Response {
    try_request(addr, path, headers).expect("a complete response")
}

/// [`request`], `None` if the connection broke first (the server died).
pub fn try_request(addr: &str, path: &str, headers: &[(&str, &str)]) -> Option<Response> {
    let mut stream = TcpStream::connect(addr).ok()?;
    // Longer than a step: a request may be held (`x-hold-ms`) or queued.
    stream.set_read_timeout(Some(STEP * 3)).ok()?;
    stream.set_write_timeout(Some(STEP)).ok()?;
    let mut text = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (name, value) in headers {
        text.push_str(&format!("{name}: {value}\r\n"));
    }
    text.push_str("\r\n");
    stream.write_all(text.as_bytes()).ok()?;
    let mut raw = String::new();
    stream.read_to_string(&mut raw).ok()?;
    parse_response(&raw)
}

/// Parses a response with a `Content-Length` body (all the server sends).
pub fn parse_response(raw: &str) -> Option<Response> {
    let (head, body) = raw.split_once("\r\n\r\n")?;
    let mut lines = head.split("\r\n");
    let status = lines.next()?.split(' ').nth(1)?.parse().ok()?;
    let headers = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    Some(Response {
        status,
        headers,
        body: body.to_owned(),
    })
}

/// Runs `server ARGS...` expecting it to exit by itself; its status and
/// stderr. Killed (and the test failed) if it is still running after `STEP`.
pub fn run_to_exit(args: &[&str]) -> (ExitStatus, String) {
    run_to_exit_with_env(args, &[])
}

/// [`run_to_exit`] with these environment variables set.
pub fn run_to_exit_with_env(args: &[&str], env: &[(&str, &str)]) -> (ExitStatus, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_server"))
        .args(["--listen", "127.0.0.1:0"])
        .args(args)
        .envs(env.iter().copied())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the server binary starts");
    let deadline = Instant::now() + STEP;
    let status = loop {
        if let Some(status) = child.try_wait().expect("poll the child") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("server {args:?} kept running; it should have refused to start");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    let _ = child
        .stderr
        .take()
        .expect("stderr is piped")
        .read_to_string(&mut stderr);
    (status, stderr)
}
