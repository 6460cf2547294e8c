//! The `tollgate-rls` binary started by a test, as an operator runs it
//! (shared by the test binaries that need it).

#![allow(dead_code)] // each test binary uses part of it

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

/// A running `tollgate-rls`, killed when dropped.
pub struct Rls {
    child: Child,
    /// `HOST:PORT` of its gRPC listener.
    pub addr: String,
}

impl Rls {
    /// Starts the binary with `args` (and `--grpc 127.0.0.1:0`), and waits
    /// for its `listening on` line.
    pub fn start(args: &[&str]) -> Rls {
        Rls::start_reading(args, 0).0
    }

    /// [`start`](Self::start), also reading `more` lines after the
    /// `listening on grpc://` one.
    pub fn start_reading(args: &[&str], more: usize) -> (Rls, Vec<String>) {
        let mut child = Command::new(env!("CARGO_BIN_EXE_tollgate-rls"))
            .args(["--grpc", "127.0.0.1:0"])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        let addr = line
            .trim()
            .strip_prefix("listening on grpc://")
            .unwrap_or_else(|| panic!("not a listening line: {line:?}"))
            .to_owned();
        let lines = (0..more)
            .map(|_| {
                let mut line = String::new();
                stdout.read_line(&mut line).unwrap();
                line.trim().to_owned()
            })
            .collect();
        (Rls { child, addr }, lines)
    }

    pub async fn client(&self) -> RateLimitServiceClient<tonic::transport::Channel> {
        RateLimitServiceClient::connect(format!("http://{}", self.addr))
            .await
            .unwrap()
    }
}

impl Drop for Rls {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
