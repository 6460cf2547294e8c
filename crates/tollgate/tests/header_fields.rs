//! The rate-limit fields never contradict each other (see the `headers`
//! module docs): on every response, for every algorithm, burst, cost and
//! arrival pattern, `r ≤ q`, `q / w` is the quota's rate (`q` is the rate
//! times `w`, rounded down), `q` covers what the limit can hold, the legacy
//! trio reports the same figures, and on a refusal the refusing limits' `t`
//! never exceeds `Retry-After`. Requests go through the layer over a memory
//! store on a manual clock.

use http::{Request, Response, StatusCode};
use proptest::prelude::*;
use std::convert::Infallible;
use std::time::Duration;
use tollgate::{GlobalKey, MemoryStore, NamedLimit, RateLimitLayer, headers::HeaderStyle};
use tollgate_core::{Algorithm, Limiter, ManualClock, Quota, Refill, TokenBucket};
use tower::{Layer, Service, ServiceExt, service_fn};

/// A limit's `RateLimit-Policy` item and `RateLimit` item, as numbers.
#[derive(Clone, Copy, Debug)]
struct Fields {
    q: u64,
    w: u64,
    r: u64,
    t: u64,
}

/// The numbers of a structured-field list like `"a";q=2;w=60, "b";q=5;w=1`:
/// for each item, its parameters in order.
fn items(value: &str) -> Vec<Vec<u64>> {
    value
        .split(", ")
        .map(|item| {
            item.split(';')
                .skip(1)
                .map(|param| {
                    let (_, number) = param.split_once('=').expect("key=value");
                    number.parse().expect("a non-negative integer")
                })
                .collect()
        })
        .collect()
}

fn field<'a>(response: &'a Response<String>, name: &str) -> Option<&'a str> {
    response
        .headers()
        .get(name)
        .map(|v| v.to_str().expect("visible ASCII"))
}

fn fields(response: &Response<String>) -> Vec<Fields> {
    let policy = items(field(response, "ratelimit-policy").expect("RateLimit-Policy"));
    let state = items(field(response, "ratelimit").expect("RateLimit"));
    assert_eq!(policy.len(), state.len());
    policy
        .iter()
        .zip(&state)
        .map(|(p, s)| Fields {
            q: p[0],
            w: p[1],
            r: s[0],
            t: s[1],
        })
        .collect()
}

/// Checks one response's fields against the limits they describe.
fn assert_fields_agree(response: &Response<String>, limiters: &[Limiter], cost: u64) {
    let each = fields(response);
    assert_eq!(each.len(), limiters.len());
    for (f, limiter) in each.iter().zip(limiters) {
        let quota = limiter.quota();
        assert!(f.r <= f.q, "r > q: {f:?} for {limiter:?}");
        assert!(f.w >= 1, "{f:?}");
        assert!(f.q >= limiter.capacity(), "q below the capacity: {f:?}");
        // q = ⌊rate · w⌋: q / w is the rate, within 1 / w below it.
        let offered = u128::from(quota.limit()) * u128::from(f.w) * 1_000_000_000;
        let period = u128::from(quota.period_nanos());
        assert!(
            u128::from(f.q) * period <= offered,
            "q/w above the rate: {f:?}"
        );
        assert!(
            offered < (u128::from(f.q) + 1) * period,
            "q/w below the rate: {f:?}"
        );
    }
    let number = |name| field(response, name).map(|v| v.parse::<u64>().expect("a number"));
    // The legacy trio names the limit with the least left, by its figures.
    let least = each.iter().min_by_key(|f| f.r).expect("a limit");
    assert_eq!(number("x-ratelimit-remaining"), Some(least.r));
    assert_eq!(number("x-ratelimit-limit"), Some(least.q));
    assert_eq!(number("x-ratelimit-reset"), Some(least.t));
    if response.status() == StatusCode::TOO_MANY_REQUESTS {
        // The limits that refused are those without room for the cost.
        let refusing: Vec<&Fields> = each.iter().filter(|f| f.r < cost).collect();
        assert!(
            !refusing.is_empty(),
            "a refusal with room everywhere: {each:?}"
        );
        match number("retry-after") {
            Some(retry_after) => {
                for f in refusing {
                    assert!(f.t <= retry_after, "t {} > Retry-After {retry_after}", f.t);
                }
            }
            None => assert!(
                each.iter().zip(limiters).any(|(_, l)| cost > l.capacity()),
                "no Retry-After, yet the cost fits every limit"
            ),
        }
    } else {
        assert_eq!(response.status(), StatusCode::OK);
        assert!(response.headers().get("retry-after").is_none());
    }
}

/// A limiter: every algorithm (`kind` below `Algorithm::ALL.len()`), and
/// the interval token bucket built by hand (`kind` past them).
fn limiter(kind: usize, quota: Quota) -> Limiter {
    match Algorithm::ALL.get(kind) {
        Some(&algorithm) => Limiter::new(algorithm, quota),
        None => Limiter::TokenBucket(TokenBucket::new(quota).with_refill(Refill::Interval)),
    }
}

fn quota() -> impl Strategy<Value = Quota> {
    let periods_ms = [100u64, 500, 1_000, 1_500, 7_000, 60_000, 3_600_000];
    (
        1u64..=20,
        prop::sample::select(periods_ms.to_vec()),
        1u64..=60,
    )
        .prop_map(|(limit, period_ms, burst)| {
            Quota::new(limit, Duration::from_millis(period_ms))
                .and_then(|q| q.with_burst(burst))
                .expect("valid by construction")
        })
}

/// Runs `trace` (gaps in per-mille of the first quota's period, costs)
/// through a layer of `limiters` and checks every response.
fn run(limiters: &[Limiter], trace: &[(u32, u32)]) {
    let clock = ManualClock::new(1_700_000_000_000_000_000);
    let mut builder = RateLimitLayer::builder()
        .key(GlobalKey)
        .headers(HeaderStyle::BOTH)
        .store(MemoryStore::builder().clock(clock.clone()).build())
        .cost(|info| {
            info.headers
                .get("x-cost")
                .and_then(|v| v.to_str().ok()?.parse().ok())
                .unwrap_or(1)
        });
    for (i, limiter) in limiters.iter().enumerate() {
        let limit =
            NamedLimit::new(format!("l{i}").as_str(), limiter.quota()).with_limiter(*limiter);
        builder = builder.limit(limit);
    }
    let mut service = builder.build().layer(service_fn(|_: Request<()>| async {
        Ok::<_, Infallible>(Response::new(String::new()))
    }));
    let period = limiters[0].quota().period_nanos();
    // Paused tokio time: the leaky bucket's holds pass at once.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        for &(gap_permille, cost) in trace {
            clock.advance(Duration::from_nanos(
                period * u64::from(gap_permille) / 1000,
            ));
            let request = Request::builder()
                .header("x-cost", cost)
                .body(())
                .expect("a request");
            let response = service.ready().await.unwrap().call(request).await.unwrap();
            assert_fields_agree(&response, limiters, u64::from(cost));
        }
    });
}

/// The last `kind`: the hand-built interval token bucket.
const KINDS: usize = Algorithm::ALL.len();

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn the_fields_agree_for_one_limit(
        kind in 0usize..=KINDS,
        quota in quota(),
        trace in prop::collection::vec((0u32..=400, prop_oneof![8 => Just(1u32), 2 => 0u32..=25]), 1..80),
    ) {
        run(&[limiter(kind, quota)], &trace);
    }

    #[test]
    fn the_fields_agree_for_two_limits(
        kinds in (0usize..=KINDS, 0usize..=KINDS),
        quotas in (quota(), quota()),
        trace in prop::collection::vec((0u32..=400, prop_oneof![8 => Just(1u32), 2 => 0u32..=25]), 1..80),
    ) {
        run(&[limiter(kinds.0, quotas.0), limiter(kinds.1, quotas.1)], &trace);
    }
}

/// The case from the field: `Quota::per_second(10).with_burst(20)` (the
/// `axum_per_ip` example), 14 requests within 15 ms.
#[test]
fn a_burst_of_twenty_at_ten_a_second_reads_as_twenty_per_two_seconds() {
    let clock = ManualClock::new(1_700_000_000_000_000_000);
    let quota = Quota::per_second(10).with_burst(20).unwrap();
    let layer = RateLimitLayer::builder()
        .quota("per-ip", quota)
        .key(GlobalKey)
        .store(MemoryStore::builder().clock(clock.clone()).build())
        .build();
    let mut service = layer.layer(service_fn(|_: Request<()>| async {
        Ok::<_, Infallible>(Response::new(String::new()))
    }));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime");
    let responses: Vec<Response<String>> = runtime.block_on(async {
        let mut responses = Vec::new();
        for _ in 0..14 {
            clock.advance(Duration::from_micros(1_000));
            let request = Request::new(());
            responses.push(service.ready().await.unwrap().call(request).await.unwrap());
        }
        responses
    });
    for response in &responses {
        assert_eq!(
            field(response, "ratelimit-policy"),
            Some("\"per-ip\";q=20;w=2")
        );
    }
    // One unit back every 100 ms: t is 1 s rounded up, not the 2 s until
    // the whole burst is back.
    assert_eq!(
        field(&responses[0], "ratelimit"),
        Some("\"per-ip\";r=19;t=1")
    );
    assert_eq!(
        field(&responses[10], "ratelimit"),
        Some("\"per-ip\";r=9;t=1")
    );
}
