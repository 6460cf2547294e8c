//! A small TCP proxy that holds the server's replies back at random: each
//! chunk the server sends is passed on at once or after a delay drawn
//! from a range (30–40 ms, say), in order, as a slow or jittery network
//! would deliver it. What the client sends goes through at once, so a
//! command reaches the server in time and its reply comes late: the case
//! where a store charged and its caller stopped waiting.
//!
//! It can also stall ([`JitterProxy::stall`]): every reply held until
//! [`resume`](JitterProxy::resume), as from a server that cannot keep up
//! with what it is sent.
//!
//! Plain threads and blocking sockets: it needs no runtime, and stops
//! accepting when dropped (its connections end with their sockets; a
//! stalled reply is dropped).

use crate::random::Lcg;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::thread;
use std::time::{Duration, Instant};

/// How the proxy holds replies back.
#[derive(Clone, Copy, Debug)]
pub struct Jitter {
    /// The chance, in percent, that a chunk is held back.
    pub held_percent: u64,
    /// How long a held chunk waits at least.
    pub min: Duration,
    /// And at most.
    pub max: Duration,
}

impl Jitter {
    /// Every reply passed on at once (until the proxy stalls).
    pub const NONE: Jitter = Jitter {
        held_percent: 0,
        min: Duration::ZERO,
        max: Duration::ZERO,
    };

    /// Half the replies held 30 to 40 ms, half at once.
    pub const HALF_HELD_30_40_MS: Jitter = Jitter {
        held_percent: 50,
        min: Duration::from_millis(30),
        max: Duration::from_millis(40),
    };
}

/// A proxy on a free loopback port in front of `upstream`.
pub struct JitterProxy {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    held: Arc<AtomicU64>,
    stalled: Arc<AtomicBool>,
}

impl JitterProxy {
    /// Starts a proxy to `upstream` that holds replies back as `jitter`
    /// says, drawing from `seed`.
    pub fn start(upstream: SocketAddr, jitter: Jitter, seed: u64) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the proxy");
        let addr = listener.local_addr().expect("the proxy's address");
        let stop = Arc::new(AtomicBool::new(false));
        let held = Arc::new(AtomicU64::new(0));
        let random = Arc::new(Mutex::new(Lcg(seed)));
        let stalled = Arc::new(AtomicBool::new(false));
        let (stop_, held_) = (stop.clone(), held.clone());
        let stall = Stall {
            stalled: stalled.clone(),
            stop: stop.clone(),
        };
        thread::spawn(move || {
            for client in listener.incoming() {
                if stop_.load(Ordering::Acquire) {
                    return;
                }
                let Ok(client) = client else { continue };
                let Ok(server) = TcpStream::connect(upstream) else {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                };
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                pass_on(&client, &server);
                hold_back(
                    &server,
                    &client,
                    jitter,
                    random.clone(),
                    held_.clone(),
                    stall.clone(),
                );
            }
        });
        JitterProxy {
            addr,
            stop,
            held,
            stalled,
        }
    }

    /// From now on no reply is passed on (each held, in order) until
    /// [`resume`](Self::resume): what is sent still reaches the server,
    /// whose answers wait, as a server's that cannot keep up.
    pub fn stall(&self) {
        self.stalled.store(true, Ordering::Release);
    }

    /// Passes on the replies held since [`stall`](Self::stall), and the
    /// rest as before.
    pub fn resume(&self) {
        self.stalled.store(false, Ordering::Release);
    }

    /// Where clients connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// How many chunks were held back so far: a test can check the proxy
    /// did delay replies.
    pub fn held(&self) -> u64 {
        self.held.load(Ordering::Relaxed)
    }
}

impl Drop for JitterProxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        // Wakes the accept loop so that it sees the flag.
        let _ = TcpStream::connect(self.addr);
    }
}

/// Copies what `from` sends to `to`, at once, until either side closes.
fn pass_on(from: &TcpStream, to: &TcpStream) {
    let (Ok(mut from), Ok(mut to)) = (from.try_clone(), to.try_clone()) else {
        return;
    };
    thread::spawn(move || {
        let mut buffer = [0u8; 16 * 1024];
        while let Ok(n @ 1..) = from.read(&mut buffer) {
            if to.write_all(&buffer[..n]).is_err() {
                break;
            }
        }
        let _ = to.shutdown(Shutdown::Write);
    });
}

/// Whether replies wait ([`JitterProxy::stall`]), and whether the proxy
/// was dropped (they never will be passed on).
#[derive(Clone)]
struct Stall {
    stalled: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
}

impl Stall {
    /// Waits while the proxy stalls: whether to go on (false: it was
    /// dropped while stalled, and the held replies go nowhere).
    fn wait(&self) -> bool {
        while self.stalled.load(Ordering::Acquire) {
            if self.stop.load(Ordering::Acquire) {
                return false;
            }
            thread::sleep(Duration::from_millis(2));
        }
        true
    }
}

/// Copies what `from` sends to `to`, each chunk at once or held back as
/// `jitter` says (or while the proxy stalls), never out of order.
fn hold_back(
    from: &TcpStream,
    to: &TcpStream,
    jitter: Jitter,
    random: Arc<Mutex<Lcg>>,
    held: Arc<AtomicU64>,
    stall: Stall,
) {
    let (Ok(mut from), Ok(mut to)) = (from.try_clone(), to.try_clone()) else {
        return;
    };
    let (send, receive) = mpsc::channel::<(Instant, Vec<u8>)>();
    thread::spawn(move || {
        let mut buffer = [0u8; 16 * 1024];
        let mut last = Instant::now();
        while let Ok(n @ 1..) = from.read(&mut buffer) {
            let delay = {
                let mut random = random.lock().unwrap_or_else(|e| e.into_inner());
                if random.below(100) < jitter.held_percent {
                    let span = (jitter.max - jitter.min).as_micros() as u64;
                    jitter.min + Duration::from_micros(random.below(span + 1))
                } else {
                    Duration::ZERO
                }
            };
            if !delay.is_zero() {
                held.fetch_add(1, Ordering::Relaxed);
            }
            // In order: a chunk never overtakes the one before it.
            last = last.max(Instant::now() + delay);
            if send.send((last, buffer[..n].to_vec())).is_err() {
                break;
            }
        }
    });
    thread::spawn(move || {
        for (at, chunk) in receive {
            thread::sleep(at.saturating_duration_since(Instant::now()));
            if !stall.wait() || to.write_all(&chunk).is_err() {
                break;
            }
        }
        let _ = to.shutdown(Shutdown::Write);
    });
}
