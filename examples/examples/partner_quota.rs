//! Calling a partner's API that counts at most 5 calls in any second, and
//! refuses the 6th: a limiter that never sends more than the partner
//! counts, however the calls are spread over tasks and however the
//! network delays them.
//!
//! ```sh
//! cargo run -p tollgate-examples --example partner_quota
//! ```
//!
//! `DirectLimiter::at_most(Quota::per_second(5))` is a sliding log: at
//! most 5 admissions in any second (GCRA's `DirectLimiter::new` would let
//! its burst out at once and then its refill, up to 9 in the first
//! second). Each call goes through `call`, which counts it from when it
//! is done rather than from when it was admitted: the partner counts a
//! call when it *arrives*, and a call held up on the way would otherwise
//! land in the same second as calls admitted after it. The stand-in
//! partner here (an axum app on loopback) counts its requests that way
//! and answers 429 past its quota; the run prints how many it refused: 0.

use axum::Router;
use axum::http::StatusCode;
use axum::routing::get;
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tollgate::DirectLimiter;
use tollgate_core::Quota;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let partner = Partner::start(5, Duration::from_secs(1)).await?;
    let limiter = DirectLimiter::at_most(Quota::per_second(5));
    let start = Instant::now();
    // Three tasks, five calls each: fifteen calls, in a little over two
    // seconds (five in each second).
    let tasks: Vec<_> = (0..3)
        .map(|task| {
            let (limiter, addr) = (limiter.clone(), partner.addr);
            tokio::spawn(async move {
                for call in 0..5 {
                    let accepted = limiter.call(get_page(addr)).await??;
                    println!(
                        "task {task} call {call}: {} at {:>4} ms",
                        if accepted { "200" } else { "429" },
                        start.elapsed().as_millis()
                    );
                }
                Ok::<_, Box<dyn std::error::Error + Send + Sync>>(())
            })
        })
        .collect();
    for task in tasks {
        task.await?.map_err(|e| e.to_string())?;
    }
    println!(
        "the partner accepted {} and refused {}",
        partner.accepted(),
        partner.refused()
    );
    Ok(())
}

/// The stand-in partner: an API that counts each request when it
/// arrives, in a sliding log, and refuses one that would make more than
/// `limit` in the last `period`.
pub struct Partner {
    /// Where it listens.
    pub addr: SocketAddr,
    log: Arc<Log>,
}

struct Log {
    limit: usize,
    period: Duration,
    arrivals: Mutex<VecDeque<Instant>>,
    accepted: AtomicU64,
    refused: AtomicU64,
}

impl Log {
    /// A request arrived now: whether it is within the quota.
    fn arrive(&self) -> bool {
        let now = Instant::now();
        let mut arrivals = self.arrivals.lock().unwrap_or_else(|e| e.into_inner());
        while arrivals
            .front()
            .is_some_and(|at| now.duration_since(*at) >= self.period)
        {
            arrivals.pop_front();
        }
        let accepted = arrivals.len() < self.limit;
        if accepted {
            arrivals.push_back(now);
            self.accepted.fetch_add(1, Ordering::Relaxed);
        } else {
            self.refused.fetch_add(1, Ordering::Relaxed);
        }
        accepted
    }
}

impl Partner {
    /// Starts it on a free loopback port.
    pub async fn start(limit: usize, period: Duration) -> std::io::Result<Partner> {
        let log = Arc::new(Log {
            limit,
            period,
            arrivals: Mutex::new(VecDeque::new()),
            accepted: AtomicU64::new(0),
            refused: AtomicU64::new(0),
        });
        let counted = log.clone();
        let app = Router::new().route(
            "/page",
            get(move || {
                let log = counted.clone();
                async move {
                    match log.arrive() {
                        true => StatusCode::OK,
                        false => StatusCode::TOO_MANY_REQUESTS,
                    }
                }
            }),
        );
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        tokio::spawn(async move { axum::serve(listener, app).await });
        Ok(Partner { addr, log })
    }

    /// The requests it accepted.
    pub fn accepted(&self) -> u64 {
        self.log.accepted.load(Ordering::Relaxed)
    }

    /// The requests it refused (429).
    pub fn refused(&self) -> u64 {
        self.log.refused.load(Ordering::Relaxed)
    }
}

/// `GET /page` from the partner at `addr`, on a connection of its own:
/// whether it was accepted (200) or refused (429).
pub async fn get_page(addr: SocketAddr) -> std::io::Result<bool> {
    let mut stream = TcpStream::connect(addr).await?;
    stream
        .write_all(b"GET /page HTTP/1.1\r\nhost: partner\r\nconnection: close\r\n\r\n")
        .await?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response).await?;
    Ok(response.starts_with(b"HTTP/1.1 200"))
}
