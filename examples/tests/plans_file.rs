//! The plans-file recipe (`examples/plans_file.rs`) over real HTTP: a
//! key's plan from the file, the default for a key it does not name, a
//! change to the file in force for the key's next requests within about a
//! second (its usage kept), a bad change refused with the last plans kept,
//! and a bad file at start an error naming its line.

#[allow(dead_code)] // its `main` is the example's, not the test's
#[path = "../examples/plans_file.rs"]
mod example;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A file of its own under the system's temporary directory.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tollgate-plans-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

async fn start(path: &std::path::Path) -> SocketAddr {
    let (app, follow) = example::app(path.to_str().unwrap()).unwrap();
    tokio::spawn(follow);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr
}

/// `GET /` with `x-api-key: key`: the status.
async fn get(addr: SocketAddr, key: &str) -> u16 {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let head =
        format!("GET / HTTP/1.1\r\nhost: test\r\nx-api-key: {key}\r\nconnection: close\r\n\r\n");
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    response[9..12].parse().unwrap()
}

/// How many of `n` requests as `key` are admitted.
async fn admitted(addr: SocketAddr, key: &str, n: usize) -> usize {
    let mut admitted = 0;
    for _ in 0..n {
        admitted += usize::from(get(addr, key).await == 200);
    }
    admitted
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plans_come_from_the_file_and_follow_its_changes() {
    let path = scratch("plans.txt");
    // Plans per hour: no refill to speak of while the test runs.
    std::fs::write(&path, "# plans\nacme = 3/h\nvip = unlimited\n").unwrap();
    let addr = start(&path).await;
    assert_eq!(admitted(addr, "acme", 5).await, 3);
    assert_eq!(admitted(addr, "vip", 30).await, 30);
    assert_eq!(admitted(addr, "other", 12).await, 10, "the default");

    // acme moves to 6 an hour: 3 more (its 3 used carried over).
    std::fs::write(&path, "acme = 6/h\nvip = unlimited\n").unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while get(addr, "acme").await != 200 {
        assert!(
            Instant::now() < deadline,
            "the change was never put in force"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(admitted(addr, "acme", 5).await, 2, "6 in all this hour");

    // A change that does not parse is refused: the plans read last stay
    // (vip unlimited, not the default's 10; acme spent at 6, where the
    // default would have 4 left).
    std::fs::write(&path, "acme = lots\n").unwrap();
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert_eq!(admitted(addr, "vip", 15).await, 15, "vip still unlimited");
    assert_eq!(
        admitted(addr, "acme", 1).await,
        0,
        "acme still on 6 an hour"
    );
    // And the file is still followed: a good change after it is read.
    std::fs::write(&path, "acme = 8/h\nvip = unlimited\n").unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while get(addr, "acme").await != 200 {
        assert!(
            Instant::now() < deadline,
            "the good change was never put in force"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // A bad file at start: an error naming the file and the line.
    let bad = scratch("bad.txt");
    std::fs::write(&bad, "acme = 3/min\nbeta = 3 a minute\n").unwrap();
    let error = match example::app(bad.to_str().unwrap()) {
        Ok(_) => panic!("a bad file was read"),
        Err(error) => error.to_string(),
    };
    assert!(
        error.contains("bad.txt") && error.contains("line 2"),
        "{error}"
    );
}
