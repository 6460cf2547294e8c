//! The test harness itself: a redis-server it started does not outlive a
//! test process that is killed outright.

use std::io::{BufRead, BufReader};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use tollgate_tests::redis::RedisServer;

const CHILD: &str = "TOLLGATE_HARNESS_CHILD";
const NAME: &str = "a_server_dies_with_a_killed_test_process";

#[cfg(target_os = "linux")]
#[test]
fn a_server_dies_with_a_killed_test_process() {
    if std::env::var_os(CHILD).is_some() {
        // The child: start a server, say where, and wait to be killed.
        let server = RedisServer::start();
        println!("port {}", server.port());
        std::thread::sleep(Duration::from_secs(60));
        return;
    }
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", NAME, "--nocapture", "--test-threads=1"])
        .env(CHILD, "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = BufReader::new(child.stdout.take().unwrap());
    let port: u16 = stdout
        .lines()
        .map_while(Result::ok)
        // libtest may print the test's name on the same line first.
        .find_map(|line| line.rsplit_once("port ")?.1.trim().parse().ok())
        .expect("the child reports its server's port");
    assert!(
        TcpStream::connect(("127.0.0.1", port)).is_ok(),
        "the server is up"
    );
    child.kill().unwrap();
    child.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(("127.0.0.1", port)).is_ok() {
        assert!(
            Instant::now() < deadline,
            "redis-server on port {port} outlived the killed test process"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}
