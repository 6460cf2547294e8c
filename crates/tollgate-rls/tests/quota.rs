//! RLQS (`StreamRateLimitQuotas`) through a real tonic client and server
//! on loopback, driven by data planes written here that report and
//! enforce as Envoy's `rate_limit_quota` filter does
//! (`tollgate_tests::envoy_quota`): the first answer, blanket rules, the
//! bound with several data planes, shares, a stream that closes, and bad
//! input.

mod common;

use common::Rls;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_service_client::RateLimitQuotaServiceClient;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_usage_reports::BucketQuotaUsage;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::{BucketId, RateLimitQuotaUsageReports};
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::google::protobuf::Duration as ProtoDuration;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::sync::mpsc;
use tollgate_redis::RedisStore;
use tollgate_rls::config::Config;
use tollgate_rls::{OnStoreError, QuotaServer, RateLimitServer};
use tollgate_store::{MemoryStore, Store};
use tollgate_tests::envoy_quota::{
    Assignment, DataPlaneBucket, Replacement, TokenBucket, assignment_of,
};
use tollgate_tests::redis::RedisServer;
use tonic::codegen::tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Server;
use tonic::transport::server::TcpIncoming;

const CONFIG: &str = "
domain: q
descriptors:
  - key: client
    rate_limit: {unit: second, requests_per_unit: 30}
  - key: slow
    rate_limit: {unit: hour, requests_per_unit: 1000}
  - key: free
    rate_limit: {unlimited: true}
  - key: closed
    rate_limit: {unit: minute, requests_per_unit: 0}
  - key: tried
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 10}
";

fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64
}

/// Both services over one store, on a loopback port: its address.
async fn serve<St: Store>(store: St) -> String {
    serve_with(store, OnStoreError::Open).await
}

/// [`serve`], the quota service answering a failed store as told.
async fn serve_with<St: Store>(store: St, on_store_error: OnStoreError) -> String {
    let config = Config::from_yaml("q.yaml", CONFIG).unwrap();
    let rls = RateLimitServer::new(config, store.clone());
    let quota = QuotaServer::new(rls.rules(), store)
        .on_store_error(on_store_error)
        .store_timeout(Duration::from_millis(200));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(
        Server::builder()
            .add_service(rls.into_service())
            .add_service(quota.into_service())
            .serve_with_incoming(TcpIncoming::from(listener)),
    );
    format!("http://{addr}")
}

/// Two servers over one memory store: their addresses.
async fn two_over_memory() -> Vec<String> {
    let store = MemoryStore::new();
    vec![serve(store.clone()).await, serve(store).await]
}

/// Two servers over `redis`, each with its own connection, answering its
/// failures as `on_store_error` says: their addresses.
async fn two_over_redis(redis: &RedisServer, on_store_error: OnStoreError) -> Vec<String> {
    let mut addrs = Vec::new();
    for _ in 0..2 {
        let store = RedisStore::connect(redis.url()).await.unwrap();
        addrs.push(serve_with(store, on_store_error).await);
    }
    addrs
}

fn bucket_id(pairs: &[(&str, &str)]) -> BucketId {
    BucketId {
        bucket: pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
    }
}

/// A bucket's id as the data plane keys it.
type Bucket = Vec<(String, String)>;

fn bucket_of(id: &BucketId) -> Bucket {
    let mut entries: Bucket = id.bucket.clone().into_iter().collect();
    entries.sort();
    entries
}

/// One data plane: a stream to the service, its buckets as the filter
/// keeps them, and what it admitted when.
struct DataPlane {
    domain: String,
    reports: Option<mpsc::Sender<RateLimitQuotaUsageReports>>,
    state: Arc<Mutex<PlaneState>>,
    strict: bool,
}

#[derive(Default)]
struct PlaneState {
    buckets: BTreeMap<Bucket, DataPlaneBucket>,
    /// Every action received, with the time it arrived (µs).
    received: Vec<(u64, Bucket, Assignment)>,
    /// The times (µs) of the requests admitted, by bucket.
    admitted: BTreeMap<Bucket, Vec<u64>>,
    /// How the stream ended, if it did.
    ended: Option<tonic::Status>,
    last_report: u64,
}

impl DataPlane {
    /// A data plane of `domain` connected to `addr`; `strict`: its
    /// buckets deny until assigned (`no_assignment_behavior: DENY_ALL`).
    async fn connect(addr: &str, domain: &str, strict: bool) -> DataPlane {
        let (reports, outgoing) = mpsc::channel(64);
        let mut client = RateLimitQuotaServiceClient::connect(addr.to_owned())
            .await
            .unwrap();
        let response = client
            .stream_rate_limit_quotas(ReceiverStream::new(outgoing))
            .await
            .unwrap();
        let mut inbound = response.into_inner();
        let state = Arc::new(Mutex::new(PlaneState {
            last_report: now_us(),
            ..PlaneState::default()
        }));
        let applied = Arc::clone(&state);
        tokio::spawn(async move {
            loop {
                match inbound.message().await {
                    Ok(Some(response)) => {
                        let now = now_us();
                        let mut state = applied.lock().unwrap();
                        for action in &response.bucket_action {
                            let Some(id) = &action.bucket_id else {
                                continue;
                            };
                            let bucket = bucket_of(id);
                            let Some((assignment, ttl)) = assignment_of(action) else {
                                continue;
                            };
                            state.received.push((now, bucket.clone(), assignment));
                            // The filter skips actions for buckets it does
                            // not have.
                            if let Some(held) = state.buckets.get_mut(&bucket) {
                                held.assign(assignment, ttl, now);
                            }
                        }
                    }
                    Ok(None) => break,
                    Err(status) => {
                        applied.lock().unwrap().ended = Some(status);
                        break;
                    }
                }
            }
        });
        DataPlane {
            domain: domain.to_owned(),
            reports: Some(reports),
            state,
            strict,
        }
    }

    /// One request of `bucket` now: whether it was admitted. A bucket's
    /// first request is reported at once, alone, as the filter does.
    async fn request(&self, bucket: &[(&str, &str)]) -> bool {
        let id = bucket_id(bucket);
        let key = bucket_of(&id);
        let now = now_us();
        let (admitted, first) = {
            let mut guard = self.state.lock().unwrap();
            let state = &mut *guard;
            let first = !state.buckets.contains_key(&key);
            let strict = self.strict;
            let held = state.buckets.entry(key.clone()).or_insert_with(|| {
                if strict {
                    DataPlaneBucket::denying_unassigned(Replacement::FullUnlessEmpty)
                } else {
                    DataPlaneBucket::new(Replacement::FullUnlessEmpty)
                }
            });
            let admitted = held.request(now);
            if admitted {
                state.admitted.entry(key.clone()).or_default().push(now);
            }
            let first = first.then(|| held.report());
            (admitted, first)
        };
        if let Some((allowed, denied)) = first {
            self.send(vec![BucketQuotaUsage {
                bucket_id: Some(id),
                time_elapsed: Some(ProtoDuration {
                    seconds: 0,
                    nanos: 0,
                }),
                num_requests_allowed: allowed,
                num_requests_denied: denied,
            }])
            .await;
        }
        admitted
    }

    /// Every bucket's usage since the last report, in one message.
    async fn report(&self) {
        let usages = {
            let mut state = self.state.lock().unwrap();
            let now = now_us();
            let seconds = (now - state.last_report) / 1_000_000;
            state.last_report = now;
            state
                .buckets
                .iter_mut()
                .map(|(bucket, held)| {
                    let (allowed, denied) = held.report();
                    BucketQuotaUsage {
                        bucket_id: Some(BucketId {
                            bucket: bucket.iter().cloned().collect(),
                        }),
                        time_elapsed: Some(ProtoDuration {
                            seconds: seconds as i64,
                            nanos: 0,
                        }),
                        num_requests_allowed: allowed,
                        num_requests_denied: denied,
                    }
                })
                .collect()
        };
        self.send(usages).await;
    }

    async fn send(&self, usages: Vec<BucketQuotaUsage>) {
        let report = RateLimitQuotaUsageReports {
            domain: self.domain.clone(),
            bucket_quota_usages: usages,
        };
        if let Some(reports) = &self.reports {
            let _ = reports.send(report).await;
        }
    }

    /// Closes the stream.
    fn close(&mut self) {
        self.reports = None;
    }

    /// The assignments received for `bucket`, in order, with their times.
    fn received(&self, bucket: &[(&str, &str)]) -> Vec<(u64, Assignment)> {
        let key = bucket_of(&bucket_id(bucket));
        let state = self.state.lock().unwrap();
        state
            .received
            .iter()
            .filter(|(_, b, _)| *b == key)
            .map(|(at, _, a)| (*at, *a))
            .collect()
    }

    /// The times of the requests admitted for `bucket`.
    fn admitted(&self, bucket: &[(&str, &str)]) -> Vec<u64> {
        let key = bucket_of(&bucket_id(bucket));
        self.state
            .lock()
            .unwrap()
            .admitted
            .get(&key)
            .cloned()
            .unwrap_or_default()
    }

    /// Waits up to `within` for an assignment of `bucket`: when it came.
    async fn first_assignment(
        &self,
        bucket: &[(&str, &str)],
        within: Duration,
    ) -> Option<Assignment> {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if let Some((_, assignment)) = self.received(bucket).first() {
                return Some(*assignment);
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        None
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_buckets_first_report_is_answered_at_once_with_what_its_rule_says() {
    let addr = serve(MemoryStore::new()).await;
    let plane = DataPlane::connect(&addr, "q", false).await;
    type Expected = fn(&Assignment) -> bool;
    let cases: [(&[(&str, &str)], Expected); 5] = [
        (&[("client", "c1")], |a| {
            matches!(a, Assignment::TokenBucket(_))
        }),
        (&[("free", "x")], |a| *a == Assignment::AllowAll),
        (&[("nothing", "x")], |a| *a == Assignment::AllowAll),
        (&[("closed", "x")], |a| *a == Assignment::DenyAll),
        (&[("tried", "x")], |a| *a == Assignment::AllowAll),
    ];
    for (bucket, expected) in cases {
        let asked = Instant::now();
        assert!(
            plane.request(bucket).await,
            "{bucket:?}: the first request passes"
        );
        let assignment = plane
            .first_assignment(bucket, Duration::from_millis(200))
            .await
            .unwrap_or_else(|| panic!("{bucket:?}: no assignment within 200 ms"));
        assert!(expected(&assignment), "{bucket:?}: {assignment:?}");
        println!("{bucket:?}: {assignment:?} after {:?}", asked.elapsed());
    }
    // A token bucket refills over the rule's window, a second, and
    // lives longer than a reporting interval.
    let (_, assignment) = plane.received(&[("client", "c1")])[0];
    let Assignment::TokenBucket(bucket) = assignment else {
        unreachable!()
    };
    assert_eq!(bucket.fill_interval_us, 1_000_000);
    assert!(
        bucket.max_tokens >= 1 && bucket.tokens_per_fill >= 1,
        "{bucket:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shadow_buckets_usage_is_counted_where_should_rate_limit_reads_it() {
    let addr = serve(MemoryStore::new()).await;
    shadow_usage_is_counted(&addr).await;
}

/// Seven requests of a shadow bucket reported: `ShouldRateLimit` on the
/// same entries finds them counted.
async fn shadow_usage_is_counted(addr: &str) {
    let plane = DataPlane::connect(addr, "q", false).await;
    let bucket = [("tried", "x")];
    for _ in 0..7 {
        assert!(plane.request(&bucket).await);
    }
    // The first request was reported alone, at once; its answer.
    plane
        .first_assignment(&bucket, Duration::from_secs(2))
        .await
        .expect("an assignment");
    // The other six, reported; the service answers once it counted them.
    plane.report().await;
    let deadline = Instant::now() + Duration::from_secs(2);
    while plane.received(&bucket).len() < 2 {
        assert!(Instant::now() < deadline, "no answer to the report");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let mut rls = RateLimitServiceClient::connect(addr.to_owned())
        .await
        .unwrap();
    let answer = rls
        .should_rate_limit(RateLimitRequest {
            domain: "q".to_owned(),
            descriptors: vec![RateLimitDescriptor {
                entries: vec![Entry {
                    key: "tried".to_owned(),
                    value: "x".to_owned(),
                }],
                ..RateLimitDescriptor::default()
            }],
            hits_addend: 0,
        })
        .await
        .unwrap()
        .into_inner();
    // 10 an hour: 7 reported, this call's 1.
    assert_eq!(answer.statuses[0].limit_remaining, 2);
}

/// Waits until the next second has just begun.
async fn at_a_seconds_start() {
    let into = now_us() % 1_000_000;
    tokio::time::sleep(Duration::from_micros(1_000_000 - into + 1_000)).await;
}

/// `planes` strict data planes on one bucket of 30 a second, each
/// asking every 2 ms (500 a second) and reporting every second, for
/// `seconds`, data plane `i` on server `i` modulo their number: what
/// each admitted, by window.
async fn flood_across(addrs: &[String], planes: usize, seconds: u64) -> Vec<BTreeMap<u64, u64>> {
    let bucket: &[(&str, &str)] = &[("client", "flood")];
    let mut connected = Vec::new();
    for index in 0..planes {
        let addr = &addrs[index % addrs.len()];
        connected.push(Arc::new(DataPlane::connect(addr, "q", true).await));
    }
    at_a_seconds_start().await;
    let started = Instant::now();
    let tasks: Vec<_> = connected
        .iter()
        .map(|plane| {
            let plane = Arc::clone(plane);
            tokio::spawn(async move {
                let mut next_report = Instant::now() + Duration::from_secs(1);
                while started.elapsed() < Duration::from_secs(seconds) {
                    plane.request(bucket).await;
                    if Instant::now() >= next_report {
                        plane.report().await;
                        next_report += Duration::from_secs(1);
                    }
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    for (index, plane) in connected.iter().enumerate() {
        let received: Vec<String> = plane
            .received(bucket)
            .iter()
            .map(|(at, a)| match a {
                Assignment::TokenBucket(b) => {
                    format!(
                        "{}.{:03} ({},{})",
                        at / 1_000_000 % 100,
                        at / 1_000 % 1_000,
                        b.max_tokens,
                        b.tokens_per_fill
                    )
                }
                other => format!(
                    "{}.{:03} {other:?}",
                    at / 1_000_000 % 100,
                    at / 1_000 % 1_000
                ),
            })
            .collect();
        println!("plane {index} received: {received:?}");
    }
    connected
        .iter()
        .map(|plane| {
            let mut by_window = BTreeMap::new();
            for at in plane.admitted(bucket) {
                *by_window.entry(at / 1_000_000).or_insert(0) += 1;
            }
            by_window
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_data_planes_admit_at_most_n_plus_k_in_every_window_and_each_a_share() {
    let addr = serve(MemoryStore::new()).await;
    bound_and_shares(&addr).await;
}

/// Over Redis: the same bound and shares, the usage counted in Redis where
/// `ShouldRateLimit` reads it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_redis_the_bound_holds_and_the_usage_is_shared_with_should_rate_limit() {
    let redis = RedisServer::start();
    let store = RedisStore::connect(redis.url()).await.unwrap();
    let addr = serve(store).await;
    bound_and_shares(&addr).await;
    shadow_usage_is_counted(&addr).await;
}

/// Three data planes flooding one bucket of 30 a second for seven
/// seconds: at most 33 in every window, and at least 5 each once the
/// shares have settled.
async fn bound_and_shares(addr: &str) {
    bound_and_shares_across(&[addr.to_owned()], 3).await;
}

/// Two servers over one memory store, two data planes on each, flooding
/// one bucket: N + K a window across both, and N / (2K) each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_servers_over_one_store_keep_one_bound_and_each_plane_a_share() {
    let addrs = two_over_memory().await;
    bound_and_shares_across(&addrs, 4).await;
}

/// The same over Redis, each server with its own connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_servers_over_one_redis_keep_one_bound_and_each_plane_a_share() {
    let redis = RedisServer::start();
    let addrs = two_over_redis(&redis, OnStoreError::Open).await;
    bound_and_shares_across(&addrs, 4).await;
}

/// `planes` data planes spread over the servers at `addrs`, flooding one
/// bucket of 30 a second for eight seconds: at most 30 + `planes` in
/// every window, and at least N / (2K) each once the shares have settled.
async fn bound_and_shares_across(addrs: &[String], planes: usize) {
    let admitted = flood_across(addrs, planes, 8).await;
    let mut windows: BTreeMap<u64, u64> = BTreeMap::new();
    for plane in &admitted {
        for (window, count) in plane {
            *windows.entry(*window).or_insert(0) += count;
        }
    }
    println!("admitted by window: {windows:?}; by plane: {admitted:?}");
    for (window, count) in &windows {
        assert!(
            *count <= 30 + planes as u64,
            "window {window}: {count} admitted"
        );
    }
    // Once the shares have settled (a change costs a full bucket in the
    // window it is made in, so a data plane that came in short may rise
    // in steps: three reporting intervals here), every window: each plane
    // at least N / (2K).
    let floor = 30u64.div_ceil(2 * planes as u64);
    let whole: Vec<u64> = windows.keys().copied().skip(1).collect();
    let settled = &whole[3.min(whole.len())..whole.len().saturating_sub(1)];
    assert!(settled.len() >= 2, "{whole:?}");
    for window in settled {
        for (index, plane) in admitted.iter().enumerate() {
            let count = plane.get(window).copied().unwrap_or(0);
            assert!(
                count >= floor,
                "plane {index} admitted {count} in window {window}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_reports_end_the_stream_or_skip_the_bucket_and_others_are_served() {
    let addr = serve(MemoryStore::new()).await;
    // No domain: the stream ends with INVALID_ARGUMENT.
    let bad = DataPlane::connect(&addr, "", false).await;
    bad.request(&[("client", "c1")]).await;
    let deadline = Instant::now() + Duration::from_secs(2);
    let status = loop {
        if let Some(status) = bad.state.lock().unwrap().ended.clone() {
            break status;
        }
        assert!(Instant::now() < deadline, "the stream did not end");
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
    assert!(status.message().contains("domain"), "{status:?}");
    // A bucket without entries is skipped; the report's other bucket, and
    // the other streams, are answered.
    let plane = DataPlane::connect(&addr, "q", false).await;
    plane
        .send(vec![
            BucketQuotaUsage {
                bucket_id: Some(BucketId::default()),
                ..BucketQuotaUsage::default()
            },
            BucketQuotaUsage {
                bucket_id: Some(bucket_id(&[("client", "c2")])),
                num_requests_allowed: 1,
                ..BucketQuotaUsage::default()
            },
        ])
        .await;
    let deadline = Instant::now() + Duration::from_secs(2);
    while plane.received(&[("client", "c2")]).is_empty() {
        assert!(Instant::now() < deadline, "no answer for the good bucket");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(plane.state.lock().unwrap().ended.is_none());
    let other = DataPlane::connect(&addr, "q", false).await;
    other.request(&[("client", "c3")]).await;
    assert!(
        other
            .first_assignment(&[("client", "c3")], Duration::from_millis(500))
            .await
            .is_some()
    );
}

/// The token bucket `plane` was last told to enforce for `bucket`, if its
/// last assignment is one.
fn last_bucket(plane: &DataPlane, bucket: &[(&str, &str)]) -> Option<TokenBucket> {
    match plane.received(bucket).last() {
        Some((_, Assignment::TokenBucket(held))) => Some(*held),
        _ => None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_data_plane_that_closes_its_stream_gives_its_share_to_the_others() {
    let addr = serve(MemoryStore::new()).await;
    share_given_on_close(&addr, &addr).await;
}

/// Two servers over one store: a data plane that closes its stream on
/// one gives its share to a data plane of the other, within two
/// reporting intervals (its server gives its claims back, the other
/// claims them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_data_plane_that_closes_on_one_server_gives_its_share_to_another() {
    let addrs = two_over_memory().await;
    share_given_on_close(&addrs[0], &addrs[1]).await;
}

/// Two data planes flooding a bucket of 1,000 an hour, one on the server
/// at `stays_on`, one on `goes_from`; the second closes its stream: within
/// two reporting intervals (a second each here) the first is given a
/// larger refill.
async fn share_given_on_close(stays_on: &str, goes_from: &str) {
    let bucket: &[(&str, &str)] = &[("slow", "shared")];
    let stay = Arc::new(DataPlane::connect(stays_on, "q", true).await);
    let mut go = DataPlane::connect(goes_from, "q", true).await;
    // Both ask far more than 1,000 an hour: 600 a second each, reported
    // every second, until the one that stays holds the same bucket a
    // whole round (the shares have settled).
    let mut settled = None;
    for round in 0..8 {
        for _ in 0..600 {
            stay.request(bucket).await;
            go.request(bucket).await;
        }
        if round > 0 {
            stay.report().await;
            go.report().await;
        }
        tokio::time::sleep(Duration::from_millis(1_000)).await;
        let held = last_bucket(&stay, bucket);
        if round >= 2 && held.is_some() && held == settled {
            break;
        }
        settled = held;
    }
    let shared = settled.expect("a token bucket");
    assert!(
        last_bucket(&go, bucket).is_some(),
        "{:?}",
        go.received(bucket)
    );
    go.close();
    // Within two reporting intervals (a second each here), the one that
    // stays is given a larger refill, and more than half the limit: more
    // than its share while the other was there.
    let closed = Instant::now();
    loop {
        for _ in 0..600 {
            stay.request(bucket).await;
        }
        stay.report().await;
        tokio::time::sleep(Duration::from_millis(100)).await;
        if let Some(held) = last_bucket(&stay, bucket)
            && held.tokens_per_fill > shared.tokens_per_fill.max(501)
        {
            println!("{shared:?} → {held:?} after {:?}", closed.elapsed());
            break;
        }
        assert!(
            closed.elapsed() < Duration::from_secs(2),
            "still {:?}",
            stay.received(bucket).last()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spent_window_is_denied_until_it_ends_then_admits_again() {
    let addr = serve(MemoryStore::new()).await;
    spent_window(&addr, &addr).await;
}

/// Two servers over one store: a window spent through one is denied by
/// the other, and admits again after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_window_spent_through_one_server_is_denied_by_another() {
    let addrs = two_over_memory().await;
    spent_window(&addrs[0], &addrs[1]).await;
}

/// A second of bucket `client` spent through `ShouldRateLimit` on the
/// server at `spent_on`, then a data plane's first report to the server
/// at `asked`: `DENY_ALL` until the second ends, then a token bucket.
async fn spent_window(spent_on: &str, asked: &str) {
    let mut rls = RateLimitServiceClient::connect(spent_on.to_owned())
        .await
        .unwrap();
    // The second's 30 spent, then a data plane's first report, all in one
    // second: on a loaded machine that may take longer, and the attempt
    // is made again (on a bucket of its own).
    for attempt in 0..5 {
        let value = format!("spent-{attempt}");
        let bucket: &[(&str, &str)] = &[("client", &value)];
        at_a_seconds_start().await;
        let window = now_us() / 1_000_000;
        // Spent through ShouldRateLimit, on the same count.
        for _ in 0..30 {
            rls.should_rate_limit(RateLimitRequest {
                domain: "q".to_owned(),
                descriptors: vec![RateLimitDescriptor {
                    entries: vec![Entry {
                        key: "client".to_owned(),
                        value: value.clone(),
                    }],
                    ..RateLimitDescriptor::default()
                }],
                hits_addend: 0,
            })
            .await
            .unwrap();
        }
        let plane = DataPlane::connect(asked, "q", true).await;
        plane.request(bucket).await;
        let first = plane
            .first_assignment(bucket, Duration::from_millis(500))
            .await
            .expect("an assignment");
        if now_us() / 1_000_000 != window {
            println!("attempt {attempt} ran past its second; again");
            continue;
        }
        assert_eq!(first, Assignment::DenyAll);
        // Nothing passes until the window ends; within a reporting
        // interval (a second) after it, a token bucket.
        let deadline = Instant::now() + Duration::from_secs(3);
        loop {
            let admitted = plane.request(bucket).await;
            let now = now_us();
            if admitted {
                assert!(now / 1_000_000 > window, "admitted in the spent window");
                let after = now - (window + 1) * 1_000_000;
                assert!(
                    after < 1_000_000,
                    "admitted again only {after} µs after the window"
                );
                return;
            }
            assert!(Instant::now() < deadline, "{:?}", plane.received(bucket));
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    panic!("no attempt fit in a second");
}

/// Redis killed: a report whose usage the store cannot count is answered
/// with a token bucket (open: the ledger still bounds the data planes) or
/// `DENY_ALL` (closed); back, a bucket again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_store_is_answered_as_on_store_error_says() {
    for on_store_error in [OnStoreError::Open, OnStoreError::Closed] {
        let mut redis = RedisServer::start();
        let store = RedisStore::connect(redis.url()).await.unwrap();
        let addr = serve_with(store, on_store_error).await;
        let plane = DataPlane::connect(&addr, "q", true).await;
        let bucket: &[(&str, &str)] = &[("slow", "outage")];
        plane.request(bucket).await;
        let first = plane
            .first_assignment(bucket, Duration::from_secs(2))
            .await
            .expect("an assignment");
        assert!(matches!(first, Assignment::TokenBucket(_)), "{first:?}");
        redis.kill();
        plane.report().await;
        let during = wait_for_answer(&plane, bucket, 2).await;
        match on_store_error {
            OnStoreError::Open => {
                assert!(matches!(during, Assignment::TokenBucket(_)), "{during:?}")
            }
            OnStoreError::Closed => assert_eq!(during, Assignment::DenyAll),
        }
        redis.restart();
        // Back: within a few reports, a bucket again.
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut answers = 2;
        loop {
            plane.report().await;
            answers += 1;
            let after = wait_for_answer(&plane, bucket, answers).await;
            if matches!(after, Assignment::TokenBucket(_)) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{on_store_error:?}: still {after:?}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

/// Waits for `plane`'s `n`th answer for `bucket` (from 1): that answer.
async fn wait_for_answer(plane: &DataPlane, bucket: &[(&str, &str)], n: usize) -> Assignment {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        if let Some((_, assignment)) = plane.received(bucket).get(n - 1) {
            return *assignment;
        }
        assert!(Instant::now() < deadline, "no answer {n}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Usage reported while Redis is down is counted once it is back: the
/// report is answered within the store timeout, and the charge goes on
/// until it lands.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_reported_during_an_outage_is_counted_once_the_store_is_back() {
    let mut redis = RedisServer::start();
    let store = RedisStore::connect(redis.url()).await.unwrap();
    let addr = serve(store).await;
    let plane = DataPlane::connect(&addr, "q", false).await;
    let bucket: &[(&str, &str)] = &[("slow", "carried")];
    plane.request(bucket).await;
    wait_for_answer(&plane, bucket, 1).await;
    // Restarted empty: what counts from here is what the plane reports.
    redis.restart();
    redis.kill();
    for _ in 0..5 {
        plane.request(bucket).await;
    }
    plane.report().await;
    wait_for_answer(&plane, bucket, 2).await;
    redis.restart();
    let mut rls = RateLimitServiceClient::connect(addr.clone()).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut answers = 2;
    loop {
        plane.report().await;
        answers += 1;
        wait_for_answer(&plane, bucket, answers).await;
        let peeked = rls
            .should_rate_limit(RateLimitRequest {
                domain: "q".to_owned(),
                descriptors: vec![RateLimitDescriptor {
                    entries: vec![Entry {
                        key: "slow".to_owned(),
                        value: "carried".to_owned(),
                    }],
                    ..RateLimitDescriptor::default()
                }],
                hits_addend: 0,
            })
            .await;
        if let Ok(answer) = peeked {
            let remaining = answer.into_inner().statuses[0].limit_remaining;
            // 1,000 an hour: the 5 of the outage, and each call of ours 1.
            if remaining < 1_000 - 5 {
                assert!(remaining >= 1_000 - 5 - 10, "counted twice? {remaining}");
                break;
            }
        }
        assert!(
            Instant::now() < deadline,
            "the outage's usage was never counted"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A stream reports at most `MAX_BUCKETS_PER_STREAM` buckets: a report of
/// one more is answered for that many, the rest skipped; the stream goes
/// on, and a bucket it already has is still answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_reports_at_most_the_cap_of_buckets() {
    let cap = tollgate_rls::quota::MAX_BUCKETS_PER_STREAM;
    let addr = serve(MemoryStore::new()).await;
    let mut client = RateLimitQuotaServiceClient::connect(addr).await.unwrap();
    let (reports, outgoing) = mpsc::channel(4);
    let mut answers = client
        .stream_rate_limit_quotas(ReceiverStream::new(outgoing))
        .await
        .unwrap()
        .into_inner();
    let usage = |value: String| BucketQuotaUsage {
        bucket_id: Some(bucket_id(&[("free", &value)])),
        num_requests_allowed: 1,
        ..BucketQuotaUsage::default()
    };
    let report = |usages| RateLimitQuotaUsageReports {
        domain: "q".to_owned(),
        bucket_quota_usages: usages,
    };
    reports
        .send(report((0..=cap).map(|i| usage(format!("b{i}"))).collect()))
        .await
        .unwrap();
    let answer = answers.message().await.unwrap().unwrap();
    assert_eq!(answer.bucket_action.len(), cap);
    // A new bucket: skipped; a known one with it: answered.
    reports
        .send(report(vec![
            usage("new".to_owned()),
            usage("b0".to_owned()),
        ]))
        .await
        .unwrap();
    let answer = answers.message().await.unwrap().unwrap();
    assert_eq!(answer.bucket_action.len(), 1);
    assert_eq!(
        answer.bucket_action[0].bucket_id,
        Some(bucket_id(&[("free", "b0")]))
    );
}

/// The `tollgate-rls` binary serving [`CONFIG`] with `args`: the quota
/// service as an operator runs it, over any store; `http://ADDR` of its
/// gRPC listener.
fn binary(args: &[&str]) -> (Rls, String) {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "tollgate-rlqs-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("q.yaml");
    std::fs::write(&config, CONFIG).unwrap();
    let mut all = vec!["--config", config.to_str().unwrap()];
    all.extend_from_slice(args);
    let rls = Rls::start(&all);
    let addr = format!("http://{}", rls.addr);
    (rls, addr)
}

/// The bound and the shares through the binary over PostgreSQL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_postgres_the_bound_holds_and_each_gets_a_share() {
    let postgres = tollgate_tests::postgres::PostgresServer::start();
    let (_rls, addr) = binary(&["--store", &postgres.url()]);
    bound_and_shares(&addr).await;
}

/// The bound and the shares through the binary over local-first exact in
/// front of Redis.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_local_first_the_bound_holds_and_each_gets_a_share() {
    let redis = RedisServer::start();
    let (_rls, addr) = binary(&["--store", &redis.url(), "--local", "exact"]);
    bound_and_shares(&addr).await;
}

/// A server restarted over Redis keeps the window's usage: a bucket whose
/// hour was spent through the first server is denied by the second, to a
/// data plane that connects to it afresh (as Envoy reopens its stream).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_restarted_over_redis_keeps_the_windows_usage() {
    let redis = RedisServer::start();
    // The hour may turn during an attempt (a fresh window): then again.
    for attempt in 0..3 {
        let hour = now_us() / 3_600_000_000;
        let after = spent_then_restarted(&redis, &format!("restarted-{attempt}")).await;
        if now_us() / 3_600_000_000 != hour {
            continue;
        }
        assert_eq!(after, Assignment::DenyAll);
        return;
    }
    panic!("every attempt ran across an hour's edge");
}

/// Spends the hour of bucket `slow=value` through one server over
/// `redis`, restarts it, and returns the new server's first assignment of
/// the bucket to a data plane that connects to it afresh.
async fn spent_then_restarted(redis: &RedisServer, value: &str) -> Assignment {
    let bucket: &[(&str, &str)] = &[("slow", value)];
    let (first, addr) = binary(&["--store", &redis.url()]);
    let plane = DataPlane::connect(&addr, "q", false).await;
    // The bucket's first request: reported at once, a bucket assigned.
    plane.request(bucket).await;
    let assigned = plane
        .first_assignment(bucket, Duration::from_secs(2))
        .await
        .expect("an assignment");
    assert!(
        matches!(assigned, Assignment::TokenBucket(_)),
        "{assigned:?}"
    );
    // The hour's other 999 through ShouldRateLimit on the same count.
    let mut rls = first.client().await;
    let spend = RateLimitRequest {
        domain: "q".to_owned(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: "slow".to_owned(),
                value: value.to_owned(),
            }],
            ..RateLimitDescriptor::default()
        }],
        hits_addend: 999,
    };
    rls.should_rate_limit(spend).await.unwrap();
    drop(plane);
    drop(first);

    // The second server, over the same Redis: the data plane's new
    // stream's first report finds the hour spent.
    let (_second, addr) = binary(&["--store", &redis.url()]);
    let plane = DataPlane::connect(&addr, "q", true).await;
    plane.request(bucket).await;
    let after = plane
        .first_assignment(bucket, Duration::from_secs(2))
        .await
        .expect("an assignment");
    assert!(plane.admitted(bucket).is_empty());
    after
}

/// What all of `planes` admitted of `bucket`, by one-second window.
fn admitted_by_window(planes: &[Arc<DataPlane>], bucket: &[(&str, &str)]) -> BTreeMap<u64, u64> {
    let mut windows = BTreeMap::new();
    for plane in planes {
        for at in plane.admitted(bucket) {
            *windows.entry(at / 1_000_000).or_insert(0) += 1;
        }
    }
    windows
}

/// Drives `plane` as [`flood_across`] does (a request every 2 ms, a report
/// every second) on `bucket` until `until`.
fn drive(
    plane: &Arc<DataPlane>,
    bucket: &'static [(&'static str, &'static str)],
    until: Instant,
) -> tokio::task::JoinHandle<()> {
    let plane = Arc::clone(plane);
    tokio::spawn(async move {
        let mut next_report = Instant::now() + Duration::from_secs(1);
        while Instant::now() < until {
            plane.request(bucket).await;
            if Instant::now() >= next_report {
                plane.report().await;
                next_report += Duration::from_secs(1);
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    })
}

/// Two `tollgate-rls` processes over one Redis serve one limit: four
/// data planes, two on each, flood a bucket of 30 a second; one process
/// is killed, its data planes go on enforcing their last assignments
/// until they lapse while two new streams take their place on the other.
/// In every window all of them together admit at most N + K (K the
/// streams that report the bucket in it: 4, then 6 while the dead
/// server's grants may still be in force); the dead server's claims stay
/// counted until its horizon has passed, after which the survivor's data
/// planes take the whole limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_over_redis_one_killed_keep_the_bound_and_its_data_planes_move() {
    const BUCKET: &[(&str, &str)] = &[("client", "moved")];
    let redis = RedisServer::start();
    let (first, first_addr) = binary(&["--store", &redis.url()]);
    let (_second, second_addr) = binary(&["--store", &redis.url()]);
    let mut planes = Vec::new();
    for addr in [&first_addr, &second_addr, &first_addr, &second_addr] {
        planes.push(Arc::new(DataPlane::connect(addr, "q", true).await));
    }
    at_a_seconds_start().await;
    let start = Instant::now();
    // The kill (4.5 s), the assignments' time to live (15 s), the windows
    // claimed ahead (2) and a margin for a loaded machine: the dead
    // server's claims are all behind by then.
    let end = start + Duration::from_secs(28);
    let mut tasks: Vec<_> = planes
        .iter()
        .map(|plane| drive(plane, BUCKET, end))
        .collect();
    tokio::time::sleep(Duration::from_millis(4_500)).await;
    let killed = now_us() / 1_000_000;
    drop(first);
    for _ in 0..2 {
        let moved = Arc::new(DataPlane::connect(&second_addr, "q", true).await);
        tasks.push(drive(&moved, BUCKET, end));
        planes.push(moved);
    }
    for task in tasks {
        task.await.unwrap();
    }
    let windows = admitted_by_window(&planes, BUCKET);
    println!("killed in {killed}; admitted by window: {windows:?}");
    for (window, count) in &windows {
        let streams = if *window < killed { 4 } else { 6 };
        assert!(
            *count <= 30 + streams,
            "window {window}: {count} admitted, over 30 + {streams}"
        );
    }
    // Once the dead server's horizon has passed, the survivor's four data
    // planes take most of the limit.
    let last = windows.keys().copied().max().unwrap();
    let late = windows.get(&(last - 1)).copied().unwrap_or(0);
    assert!(late >= 20, "window {}: {late} admitted", last - 1);
}

/// Three data planes asking 4 a second each of a bucket of 30 a second,
/// reporting every second, on the servers at `addrs`: after the first two
/// reporting intervals, none is refused at all (the bucket as a whole is
/// under its limit). Returns how many each asked after them.
async fn under_the_limit(addrs: &[String]) -> Vec<u64> {
    const BUCKET: &[(&str, &str)] = &[("client", "modest")];
    let mut planes = Vec::new();
    for index in 0..3 {
        let addr = &addrs[index % addrs.len()];
        planes.push(Arc::new(DataPlane::connect(addr, "q", true).await));
    }
    let start = Instant::now();
    let tasks: Vec<_> = planes
        .iter()
        .map(|plane| {
            let plane = Arc::clone(plane);
            tokio::spawn(async move {
                let (mut asked, mut refused) = (0u64, Vec::new());
                let mut next_report = Instant::now() + Duration::from_secs(1);
                while start.elapsed() < Duration::from_secs(7) {
                    let admitted = plane.request(BUCKET).await;
                    if start.elapsed() >= Duration::from_secs(2) {
                        asked += 1;
                        if !admitted {
                            refused.push(start.elapsed());
                        }
                    }
                    if Instant::now() >= next_report {
                        plane.report().await;
                        next_report += Duration::from_secs(1);
                    }
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
                (asked, refused)
            })
        })
        .collect();
    let mut asked = Vec::new();
    for (index, task) in tasks.into_iter().enumerate() {
        let (count, refused) = task.await.unwrap();
        assert!(
            refused.is_empty(),
            "plane {index} refused at {refused:?}: {:?}",
            planes[index].received(BUCKET)
        );
        asked.push(count);
    }
    asked
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_the_limit_no_data_plane_is_refused_after_two_intervals() {
    let addr = serve(MemoryStore::new()).await;
    let asked = under_the_limit(&[addr]).await;
    assert!(asked.iter().all(|n| *n >= 15), "{asked:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_the_limit_on_two_servers_no_data_plane_is_refused_after_two_intervals() {
    let addrs = two_over_memory().await;
    let asked = under_the_limit(&addrs).await;
    assert!(asked.iter().all(|n| *n >= 15), "{asked:?}");
}

/// Two servers over one Redis, answering its failures open, four data
/// planes flooding a bucket of 30 a second, two on each: while Redis is
/// down each server bounds its own data planes (N + 2 each, as
/// documented), and once it is back (restarted without its data: the
/// servers find their claims gone and make them again) the two keep one
/// bound, N + K, again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_servers_over_redis_keep_each_their_bound_while_it_is_down_and_one_after() {
    const BUCKET: &[(&str, &str)] = &[("client", "outage-two")];
    let mut redis = RedisServer::start();
    let addrs = two_over_redis(&redis, OnStoreError::Open).await;
    let mut planes = Vec::new();
    for index in 0..4 {
        let addr = &addrs[index % 2];
        planes.push(Arc::new(DataPlane::connect(addr, "q", true).await));
    }
    at_a_seconds_start().await;
    let end = Instant::now() + Duration::from_secs(13);
    let tasks: Vec<_> = planes
        .iter()
        .map(|plane| drive(plane, BUCKET, end))
        .collect();
    tokio::time::sleep(Duration::from_millis(3_500)).await;
    let down = now_us() / 1_000_000;
    redis.kill();
    tokio::time::sleep(Duration::from_secs(3)).await;
    redis.restart();
    let back = now_us() / 1_000_000;
    for task in tasks {
        task.await.unwrap();
    }
    let windows = admitted_by_window(&planes, BUCKET);
    println!("down in {down}, back in {back}; admitted by window: {windows:?}");
    for (window, count) in &windows {
        let bound = if (down..back + 4).contains(window) {
            2 * 30 + 4
        } else {
            30 + 4
        };
        assert!(
            *count <= bound,
            "window {window}: {count} admitted, over {bound}"
        );
    }
    // The data planes went on admitting while Redis was down, and after.
    assert!(
        windows.range(down + 1..back).all(|(_, n)| *n > 0),
        "{windows:?}"
    );
    assert!(
        windows.range(back + 4..).any(|(_, n)| *n > 0),
        "{windows:?}"
    );
}

/// The close of a stream on one server gives its share to a data plane
/// of the other, over Redis.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_redis_a_data_plane_that_closes_on_one_server_gives_its_share_to_another() {
    let redis = RedisServer::start();
    let addrs = two_over_redis(&redis, OnStoreError::Open).await;
    share_given_on_close(&addrs[0], &addrs[1]).await;
}

/// A window spent through one server is denied by the other, over Redis;
/// and data planes under the limit are not refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_redis_a_spent_window_and_a_limit_not_reached_across_two_servers() {
    let redis = RedisServer::start();
    let addrs = two_over_redis(&redis, OnStoreError::Open).await;
    spent_window(&addrs[0], &addrs[1]).await;
    let asked = under_the_limit(&addrs).await;
    assert!(asked.iter().all(|n| *n >= 15), "{asked:?}");
}
