//! The demo's clients: each request of the trace over real loopback TCP,
//! sent at its time, and what came back.

use indicatif::ProgressBar;
use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tonic::Code;
use tonic::transport::{Channel, Endpoint};
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_client::HealthClient;

use super::servers::ALGORITHM_METADATA;
use super::trace::Trace;

/// How long one request may take before it counts as failed. Generous: the
/// leaky bucket holds requests for up to a period before answering.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// The rate-limit fields a client reads, in the order the demo prints them.
pub const FIELDS: [&str; 3] = ["ratelimit-policy", "ratelimit", "retry-after"];

/// How one request ended, as its client saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    /// Let through: HTTP 200, gRPC `OK`.
    Admitted(Seen),
    /// Limited: HTTP 429, gRPC `RESOURCE_EXHAUSTED`.
    Rejected(Seen),
    /// Anything else (a broken connection, an unexpected status): not
    /// what the demo expects, so it is counted apart and reported.
    Failed(String),
}

impl Reply {
    /// A failure that is the layer's answer to a store that did not
    /// answer in time: HTTP 503 (the demo fails closed). On a busy machine
    /// that is the right answer, not a fault: the request was not
    /// admitted.
    pub fn unavailable(&self) -> bool {
        matches!(self, Reply::Failed(message) if message.contains(" 503 "))
    }
}

/// What a client saw of one response: the status and the rate-limit
/// fields that were present.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Seen {
    /// `429 Too Many Requests`, `RESOURCE_EXHAUSTED`, ...
    pub status: String,
    /// The [`FIELDS`] present, as (name, value).
    pub fields: Vec<(String, String)>,
}

/// Sends `trace` through `send`: request `i` leaves at `start` plus its
/// arrival time, each on a task of its own, so a burst leaves at once and
/// a held request does not hold up the next. Returns the replies in trace
/// order; each reply ticks `progress`.
pub async fn drive<F, Fut>(
    trace: &Trace,
    start: Instant,
    progress: &ProgressBar,
    send: F,
) -> Vec<Reply>
where
    F: Fn(usize) -> Fut,
    Fut: Future<Output = Reply> + Send + 'static,
{
    drive_timed(trace, start, progress, send)
        .await
        .into_iter()
        .map(|timed| timed.reply)
        .collect()
}

/// A reply and how long its client waited for it.
#[derive(Clone, Debug)]
pub struct Timed {
    /// What came back.
    pub reply: Reply,
    /// From the moment the request was sent to the moment its answer was
    /// read (for HTTP, connecting included).
    pub latency: Duration,
    /// When it was really sent, in ns from the trace's start (later than
    /// its arrival time when the machine was busy).
    pub sent_at: u64,
}

impl Timed {
    /// When its answer was read, in ns from the trace's start.
    pub fn answered_at(&self) -> u64 {
        let latency = u64::try_from(self.latency.as_nanos()).unwrap_or(u64::MAX);
        self.sent_at.saturating_add(latency)
    }
}

/// [`drive`], with the latency each client saw.
pub async fn drive_timed<F, Fut>(
    trace: &Trace,
    start: Instant,
    progress: &ProgressBar,
    send: F,
) -> Vec<Timed>
where
    F: Fn(usize) -> Fut,
    Fut: Future<Output = Reply> + Send + 'static,
{
    let mut tasks = JoinSet::new();
    for (i, &at) in trace.arrivals.iter().enumerate() {
        tokio::time::sleep_until(start + Duration::from_nanos(at)).await;
        let request = send(i);
        let progress = progress.clone();
        tasks.spawn(async move {
            let sent = Instant::now();
            let sent_at = u64::try_from((sent - start).as_nanos()).unwrap_or(u64::MAX);
            let reply = match tokio::time::timeout(REQUEST_TIMEOUT, request).await {
                Ok(reply) => reply,
                Err(_) => Reply::Failed(format!("no answer within {REQUEST_TIMEOUT:?}")),
            };
            let latency = sent.elapsed();
            progress.inc(1);
            (
                i,
                Timed {
                    reply,
                    latency,
                    sent_at,
                },
            )
        });
    }
    let not_sent = Timed {
        reply: Reply::Failed("not sent".into()),
        latency: Duration::ZERO,
        sent_at: 0,
    };
    let mut replies = vec![not_sent; trace.arrivals.len()];
    while let Some(joined) = tasks.join_next().await {
        match joined {
            Ok((i, timed)) => replies[i] = timed,
            // A panicking request task leaves its slot as "not sent".
            Err(error) => eprintln!("a request task failed: {error}"),
        }
    }
    replies
}

/// `GET path` over a fresh connection to `addr`, as plain HTTP/1.1.
///
/// A connection per request keeps the burst truly concurrent without a
/// pool; `Connection: close` lets the body end with the connection.
pub async fn http_get(addr: SocketAddr, path: String) -> Reply {
    match http_exchange(addr, &path).await {
        Ok(response) => classify_http(&response),
        Err(error) => Reply::Failed(format!("GET {path}: {error}")),
    }
}

async fn http_exchange(addr: SocketAddr, path: &str) -> std::io::Result<String> {
    let mut stream = TcpStream::connect(addr).await?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response).await?;
    Ok(String::from_utf8_lossy(&response).into_owned())
}

/// Reads the status line and the rate-limit fields of a raw response.
fn classify_http(response: &str) -> Reply {
    let head = response.split("\r\n\r\n").next().unwrap_or_default();
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    // "HTTP/1.1 429 Too Many Requests" -> "429 Too Many Requests"
    let status = status_line.split_once(' ').map_or("", |(_, rest)| rest);
    let mut fields = Vec::new();
    for line in lines {
        if let Some((name, value)) = line.split_once(':') {
            let name = name.trim().to_ascii_lowercase();
            if FIELDS.contains(&name.as_str()) {
                fields.push((name, value.trim().to_owned()));
            }
        }
    }
    sort_fields(&mut fields);
    let seen = Seen {
        status: status.to_owned(),
        fields,
    };
    match status.split(' ').next() {
        Some("200") => Reply::Admitted(seen),
        Some("429") => Reply::Rejected(seen),
        _ => Reply::Failed(format!("unexpected response: {status_line:?}")),
    }
}

/// Connects a gRPC channel to `addr` (HTTP/2: every call of a burst is a
/// stream on this one connection).
pub async fn grpc_channel(addr: SocketAddr) -> Result<Channel, tonic::transport::Error> {
    Endpoint::from_shared(format!("http://{addr}"))?
        .connect_timeout(Duration::from_secs(5))
        .connect()
        .await
}

/// One `grpc.health.v1.Health/Check` call, with the algorithm in its
/// metadata.
pub async fn grpc_check(channel: Channel, algorithm: &'static str) -> Reply {
    let mut request = tonic::Request::new(HealthCheckRequest::default());
    request.metadata_mut().insert(
        ALGORITHM_METADATA,
        tonic::metadata::MetadataValue::from_static(algorithm),
    );
    match HealthClient::new(channel).check(request).await {
        Ok(response) => Reply::Admitted(Seen {
            status: "OK".into(),
            fields: metadata_fields(response.metadata()),
        }),
        Err(status) if status.code() == Code::ResourceExhausted => Reply::Rejected(Seen {
            status: format!("RESOURCE_EXHAUSTED \"{}\"", status.message()),
            fields: metadata_fields(status.metadata()),
        }),
        Err(status) => Reply::Failed(format!("{:?}: {}", status.code(), status.message())),
    }
}

fn metadata_fields(metadata: &tonic::metadata::MetadataMap) -> Vec<(String, String)> {
    let mut fields: Vec<(String, String)> = FIELDS
        .iter()
        .filter_map(|&name| {
            let value = metadata.get(name)?.to_str().ok()?;
            Some((name.to_owned(), value.to_owned()))
        })
        .collect();
    sort_fields(&mut fields);
    fields
}

/// Puts fields in the order of [`FIELDS`].
fn sort_fields(fields: &mut [(String, String)]) {
    fields.sort_by_key(|(name, _)| FIELDS.iter().position(|f| f == name));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_raw_429_is_read_with_its_fields() {
        let response = "HTTP/1.1 429 Too Many Requests\r\nretry-after: 1\r\n\
                        RateLimit-Policy: \"gcra\";q=10;w=1\r\nratelimit: \"gcra\";r=0;t=1\r\n\
                        content-length: 0\r\n\r\n";
        let Reply::Rejected(seen) = classify_http(response) else {
            panic!("a 429 is a rejection");
        };
        assert_eq!(seen.status, "429 Too Many Requests");
        let names: Vec<&str> = seen.fields.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, FIELDS);
        assert!(matches!(
            classify_http("HTTP/1.1 200 OK\r\n\r\nok"),
            Reply::Admitted(_)
        ));
        assert!(matches!(classify_http("garbage"), Reply::Failed(_)));
    }
}
