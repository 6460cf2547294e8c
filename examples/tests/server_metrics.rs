//! The playground's `--metrics-listen`: the library's metrics as
//! Prometheus text over real HTTP, after real traffic; each figure checked
//! against what the traffic must have caused, the exposition run through
//! a real parser (`promtool check metrics`, or the Python client's), and
//! every query of the Grafana dashboard (`docs/grafana/tollgate.json`)
//! resolved against real scrapes.

mod playground;

use playground::{Server, request};
use std::collections::BTreeMap;
use tollgate_tests::exposition::{Sample, has_labels, passes_a_real_parser, samples};

/// A scrape of `/metrics`: the text, and its samples.
struct Scrape {
    text: String,
    samples: Vec<Sample>,
}

impl Scrape {
    /// `GET http://ADDR/metrics`.
    fn of(addr: &str) -> Scrape {
        let response = request(addr, "/metrics", &[]);
        assert_eq!(response.status, 200, "{}", response.body);
        assert!(
            response
                .header("content-type")
                .is_some_and(|t| t.starts_with("text/plain; version=0.0.4")),
            "{:?}",
            response.headers
        );
        let samples = samples(&response.body);
        Scrape {
            text: response.body,
            samples,
        }
    }

    /// The value of the sample `name` with these labels (and maybe more),
    /// 0 when there is none (a counter never incremented is not written).
    fn value(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        let found: Vec<&Sample> = self
            .samples
            .iter()
            .filter(|s| s.name == name && has_labels(s, labels))
            .collect();
        assert!(found.len() <= 1, "several samples match: {found:?}");
        found.first().map_or(0.0, |s| s.value)
    }

    /// Whether the scrape has a sample `name` with these labels (a series
    /// registered at 0 has one).
    fn has(&self, name: &str, labels: &[(&str, &str)]) -> bool {
        self.samples
            .iter()
            .any(|s| s.name == name && has_labels(s, labels))
    }

    /// `tollgate_decisions_total` of limit `limit`: allowed, limited,
    /// shadow_limited.
    fn decisions(&self, limit: &str) -> [f64; 3] {
        ["allowed", "limited", "shadow_limited"].map(|decision| {
            self.value(
                "tollgate_decisions_total",
                &[("limit", limit), ("decision", decision)],
            )
        })
    }
}

/// `n` requests to `server`; how many got each status.
fn send(server: &Server, n: usize) -> BTreeMap<u16, usize> {
    let mut statuses = BTreeMap::new();
    for _ in 0..n {
        *statuses
            .entry(request(&server.addr, "/", &[]).status)
            .or_default() += 1;
    }
    statuses
}

/// A port nothing listens on (bound, then let go).
fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// `server --limit api=5/min --key global --metrics-listen 127.0.0.1:0
/// EXTRA...` and its metrics address.
fn five_per_minute(extra: &[&str]) -> (Server, String) {
    let mut args = vec![
        "--limit",
        "api=5/min",
        "--key",
        "global",
        "--metrics-listen",
        "127.0.0.1:0",
    ];
    args.extend_from_slice(extra);
    let server = Server::start(&args);
    let metrics = server.metrics_addr();
    (server, metrics)
}

/// After `n` requests on a 5/min limit: 5 allowed, `n - 5` limited, and
/// near-limit the admissions that left 1 or 0 of 5 (20 % or less): the
/// 4th and the 5th.
fn assert_five_per_minute_figures(scrape: &Scrape, n: usize) {
    assert_eq!(scrape.decisions("api"), [5.0, (n - 5) as f64, 0.0]);
    assert_eq!(
        scrape.value("tollgate_near_limit_total", &[("limit", "api")]),
        2.0
    );
}

#[test]
fn after_n_requests_on_five_per_minute_the_scrape_says_five_allowed_and_the_rest_limited() {
    let (server, metrics) = five_per_minute(&[]);
    // Before any traffic the limit's series are there, at 0: a dashboard
    // shows the limit, and a rate does not lose the first increment. Only
    // those it can count in: an enforced limit has no shadow_limited.
    let before = Scrape::of(&metrics);
    for decision in ["allowed", "limited"] {
        assert!(
            before
                .samples
                .iter()
                .any(|s| s.name == "tollgate_decisions_total"
                    && has_labels(s, &[("limit", "api"), ("decision", decision)])
                    && s.value == 0.0),
            "{decision}: {}",
            before.text
        );
    }
    assert!(
        !before.has(
            "tollgate_decisions_total",
            &[("limit", "api"), ("decision", "shadow_limited")]
        ),
        "{}",
        before.text
    );
    assert_eq!(before.decisions("api"), [0.0; 3]);
    let n = 12;
    let statuses = send(&server, n);
    assert_eq!(statuses, BTreeMap::from([(200, 5), (429, n - 5)]));
    let scrape = Scrape::of(&metrics);
    assert_five_per_minute_figures(&scrape, n);
    passes_a_real_parser(&scrape.text);
}

#[test]
fn the_metrics_line_names_the_bound_address_and_only_metrics_is_served() {
    let (server, metrics) = five_per_minute(&[]);
    assert!(
        !metrics.ends_with(":0"),
        "the real port, not the one asked for: {metrics}"
    );
    assert_ne!(metrics, server.addr, "a listener of its own");
    assert_eq!(request(&metrics, "/other", &[]).status, 404);
    // The metrics listener is not rate limited, and scraping it counts no
    // decision.
    for _ in 0..3 {
        Scrape::of(&metrics);
    }
    assert_eq!(Scrape::of(&metrics).decisions("api"), [0.0; 3]);
}

#[test]
fn in_shadow_mode_the_would_be_refusals_are_shadow_limited() {
    let (server, metrics) = five_per_minute(&["--shadow"]);
    let n = 20;
    assert_eq!(send(&server, n), BTreeMap::from([(200, n)]));
    let scrape = Scrape::of(&metrics);
    assert_eq!(scrape.decisions("api"), [5.0, 0.0, (n - 5) as f64]);
    assert_eq!(
        scrape.value("tollgate_near_limit_total", &[("limit", "api")]),
        2.0
    );
    passes_a_real_parser(&scrape.text);
}

/// A shadow limit beside an enforced one (`--shadow-limit`): the enforced
/// one refuses, the shadow one only counts, over the requests the enforced
/// one admitted.
#[test]
fn a_shadow_limit_counts_beside_the_enforced_one() {
    let server = Server::start(&[
        "--limit",
        "api=10/min",
        "--shadow-limit",
        "next=3/min",
        "--key",
        "global",
        "--metrics-listen",
        "127.0.0.1:0",
    ]);
    let metrics = server.metrics_addr();
    assert_eq!(send(&server, 12), BTreeMap::from([(200, 10), (429, 2)]));
    let scrape = Scrape::of(&metrics);
    assert_eq!(scrape.decisions("api"), [10.0, 2.0, 0.0]);
    assert_eq!(scrape.decisions("next"), [3.0, 0.0, 7.0]);
    passes_a_real_parser(&scrape.text);
}

#[test]
fn store_errors_and_the_breaker_are_counted_while_redis_is_away() {
    // Redis absent from the start (`--connect lazy`): every request is a
    // store error, let through (`--on-store-error open`); 5 in a row open
    // the breaker.
    let url = format!("redis://127.0.0.1:{}", closed_port());
    let (server, metrics) = five_per_minute(&["--store", &url, "--connect", "lazy"]);
    // The breaker is there, closed, before any request.
    let before = Scrape::of(&metrics);
    let breaker = [("store", "Timeout<RedisStore>")];
    assert_eq!(before.value("tollgate_breaker_state", &breaker), 0.0);
    // And how often it opened, at 0: a rate over the first opening is
    // not lost (`increase(...)` of the shipped dashboard).
    assert!(before.has("tollgate_breaker_opened_total", &breaker));
    assert_eq!(before.value("tollgate_breaker_opened_total", &breaker), 0.0);
    let n = 8;
    assert_eq!(send(&server, n), BTreeMap::from([(200, n)]));
    let scrape = Scrape::of(&metrics);
    assert_eq!(
        scrape.value("tollgate_store_errors_total", &[("limits", "api")]),
        n as f64
    );
    // Open (2), or half-open (1) if a cool-down (1 s, doubling) ended
    // meanwhile on a slow machine; it opened once, or again after a
    // probe that failed.
    let state = scrape.value("tollgate_breaker_state", &breaker);
    assert!(state == 2.0 || state == 1.0, "{state}");
    let opened = scrape.value("tollgate_breaker_opened_total", &breaker);
    assert!((1.0..=n as f64).contains(&opened), "{opened}");
    // No limit decided anything.
    assert_eq!(scrape.decisions("api"), [0.0; 3]);
    passes_a_real_parser(&scrape.text);
}

#[test]
fn requests_decided_by_the_fallback_are_counted() {
    let url = format!("redis://127.0.0.1:{}", closed_port());
    let (server, metrics) = five_per_minute(&[
        "--store",
        &url,
        "--connect",
        "lazy",
        "--on-store-error",
        "fallback",
    ]);
    let n = 8;
    let statuses = send(&server, n);
    let scrape = Scrape::of(&metrics);
    let fallback = scrape.value("tollgate_fallback_decisions_total", &[("limits", "api")]);
    // Each admission was the fallback's (the block cache answers only
    // after a refusal); the refusals were the fallback's or the block
    // cache's.
    let admitted = statuses.get(&200).copied().unwrap_or(0) as f64;
    assert!(admitted >= 1.0, "{statuses:?}");
    assert!(
        fallback >= admitted && fallback <= n as f64,
        "{fallback} fallback decisions, {statuses:?}"
    );
    let [allowed, limited, _] = scrape.decisions("api");
    assert_eq!(allowed, admitted);
    assert_eq!(allowed + limited, n as f64);
    assert_eq!(
        scrape.value("tollgate_store_errors_total", &[("limits", "api")]),
        0.0,
        "the fallback answered: the layer saw no error"
    );
    passes_a_real_parser(&scrape.text);
}

#[test]
fn over_redis_the_scrape_says_the_same() {
    let redis = tollgate_tests::redis::RedisServer::start();
    let (server, metrics) = five_per_minute(&["--store", &redis.url()]);
    let n = 9;
    assert_eq!(send(&server, n), BTreeMap::from([(200, 5), (429, n - 5)]));
    let scrape = Scrape::of(&metrics);
    assert_five_per_minute_figures(&scrape, n);
    // The first refusal reached Redis; the block cache answered the rest.
    assert_eq!(
        scrape.value("tollgate_block_cache_hits_total", &[("limits", "api")]),
        (n - 6) as f64
    );
    assert_eq!(
        scrape.value("tollgate_redis_calls_total", &[("call", "check")]),
        6.0
    );
    assert_eq!(
        scrape.value(
            "tollgate_breaker_state",
            &[("store", "Timeout<RedisStore>")]
        ),
        0.0
    );
    passes_a_real_parser(&scrape.text);
}

#[test]
fn an_in_flight_limit_is_counted_under_its_name() {
    let (server, metrics) = five_per_minute(&["--in-flight", "1"]);
    let addr = server.addr.clone();
    // One request held (for longer than the test: the server is killed
    // first), taking the key's only slot.
    let held =
        std::thread::spawn(move || playground::try_request(&addr, "/", &[("x-hold-ms", "60000")]));
    let inflight = |scrape: &Scrape, decision: &str| {
        scrape.value(
            "tollgate_decisions_total",
            &[("limit", "inflight"), ("decision", decision)],
        )
    };
    let mut admitted = false;
    for _ in 0..3000 {
        if inflight(&Scrape::of(&metrics), "allowed") == 1.0 {
            admitted = true;
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert!(admitted, "the held request got its slot");
    assert_eq!(request(&server.addr, "/", &[]).status, 429);
    let scrape = Scrape::of(&metrics);
    assert_eq!(inflight(&scrape, "limited"), 1.0);
    // Its admission left 0 of 1 slot free: near the limit.
    assert_eq!(
        scrape.value("tollgate_near_limit_total", &[("limit", "inflight")]),
        1.0
    );
    // The refused request never reached the rate limit.
    assert_eq!(scrape.decisions("api"), [1.0, 0.0, 0.0]);
    passes_a_real_parser(&scrape.text);
    drop(server);
    let _ = held.join();
}

/// Every query of the dashboard (`expr`, and the template variables'
/// queries): its `tollgate_…` selectors, as (metric, equality matchers).
fn dashboard_selectors() -> Vec<(String, Vec<(String, String)>)> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/grafana/tollgate.json");
    let text = std::fs::read_to_string(path).expect("the dashboard");
    let dashboard: serde_json::Value = serde_json::from_str(&text).expect("valid JSON");
    let mut queries = Vec::new();
    collect_queries(&dashboard, &mut queries);
    assert!(queries.len() >= 8, "{queries:?}");
    let mut selectors = Vec::new();
    for query in &queries {
        let before = selectors.len();
        let mut rest = query.as_str();
        while let Some(at) = rest.find("tollgate_") {
            let after = &rest[at..];
            let end = after
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(after.len());
            let name = after[..end].to_owned();
            let mut matchers = Vec::new();
            rest = &after[end..];
            if let Some(inside) = rest.strip_prefix('{') {
                let close = inside.find('}').expect("a closed selector");
                for matcher in inside[..close].split(',') {
                    // Equality matchers only: a regex (`=~"$limit"`) or a
                    // negation names no one series.
                    if let Some((label, value)) = matcher.split_once("=\"")
                        && !label.ends_with(['!', '~'])
                        && !matcher.contains("=~")
                    {
                        matchers.push((
                            label.trim().to_owned(),
                            value.trim_end_matches('"').to_owned(),
                        ));
                    }
                }
                rest = &inside[close..];
            }
            selectors.push((name, matchers));
        }
        assert!(
            selectors.len() > before,
            "a query of no tollgate metric: {query}"
        );
    }
    selectors
}

/// The strings under every `expr`, `query` and `definition` key.
fn collect_queries(value: &serde_json::Value, out: &mut Vec<String>) {
    match value {
        serde_json::Value::Object(map) => {
            for (key, value) in map {
                match (key.as_str(), value) {
                    ("expr" | "query" | "definition", serde_json::Value::String(text))
                        if text.contains("tollgate_") =>
                    {
                        out.push(text.clone())
                    }
                    _ => collect_queries(value, out),
                }
            }
        }
        serde_json::Value::Array(items) => items.iter().for_each(|v| collect_queries(v, out)),
        _ => {}
    }
}

#[test]
fn every_dashboard_query_names_series_a_real_scrape_contains() {
    // Real servers after real traffic: refusals, shadow refusals, store
    // errors with a breaker that opened, fallback decisions, and a block
    // cache's hits (Redis).
    let redis = tollgate_tests::redis::RedisServer::start();
    let away = format!("redis://127.0.0.1:{}", closed_port());
    let setups: [&[&str]; 4] = [
        &["--store", &redis.url()],
        &["--shadow"],
        &["--store", &away, "--connect", "lazy"],
        &[
            "--store",
            &away,
            "--connect",
            "lazy",
            "--on-store-error",
            "fallback",
        ],
    ];
    let mut scrapes = Vec::new();
    for extra in setups {
        let (server, metrics) = five_per_minute(extra);
        send(&server, 8);
        let scrape = Scrape::of(&metrics);
        passes_a_real_parser(&scrape.text);
        scrapes.push(scrape);
    }
    let selectors = dashboard_selectors();
    for (name, matchers) in &selectors {
        // A counter's series must have counted something in the traffic
        // (series are registered at 0 when a layer is built, so being
        // there is not enough); a gauge's, be there.
        let found = scrapes.iter().flat_map(|s| &s.samples).any(|sample| {
            sample.name == *name
                && matchers
                    .iter()
                    .all(|(k, v)| sample.labels.get(k).is_some_and(|value| value == v))
                && (sample.value > 0.0 || !name.ends_with("_total"))
        });
        assert!(
            found,
            "the dashboard asks for {name}{matchers:?}, which no scrape after traffic has \
             counted"
        );
    }
    // Each panel's grouping labels are the series' own.
    for label in ["limit", "limits", "store", "decision"] {
        assert!(
            scrapes
                .iter()
                .flat_map(|s| &s.samples)
                .any(|s| s.labels.contains_key(label)),
            "{label}"
        );
    }
}

/// A scripted outage (Redis up, killed, back) seen through the shipped
/// dashboard's outage panels, as Prometheus would compute them from
/// scrapes: every series those panels ask for is in the scrape before the
/// outage (at 0: `rate` and `increase` need a first sample, or they lose
/// the outage's first counts), moves during it, and the breaker panel
/// comes back to closed after it.
#[test]
fn a_scripted_outage_shows_in_every_outage_panel_of_the_dashboard() {
    let mut redis = tollgate_tests::redis::RedisServer::start();
    let url = redis.url();
    // A limit no traffic here reaches: every request is admitted, by the
    // store or in the outage (fail open, or the fallback's).
    let start = |on_store_error: &str| {
        let server = Server::start(&[
            "--limit",
            "api=1000/min",
            "--key",
            "global",
            "--metrics-listen",
            "127.0.0.1:0",
            "--store",
            &url,
            "--on-store-error",
            on_store_error,
        ]);
        let metrics = server.metrics_addr();
        (server, metrics)
    };
    // Fail open: store errors; fallback: the fallback's decisions.
    let servers = [start("open"), start("fallback")];
    let outage_series = [
        "tollgate_store_errors_total",
        "tollgate_fallback_decisions_total",
        "tollgate_breaker_state",
        "tollgate_breaker_opened_total",
    ];
    let panels: Vec<_> = dashboard_selectors()
        .into_iter()
        .filter(|(name, _)| outage_series.contains(&name.as_str()))
        .collect();
    assert_eq!(panels.len(), outage_series.len(), "{panels:?}");
    // The sum over both servers of the samples a selector names.
    let total = |scrapes: &[Scrape], name: &str| -> f64 {
        scrapes
            .iter()
            .flat_map(|s| &s.samples)
            .filter(|s| s.name == name)
            .map(|s| s.value)
            .sum()
    };
    // In every server's scrape.
    let present = |scrapes: &[Scrape], name: &str| {
        scrapes
            .iter()
            .all(|scrape| scrape.samples.iter().any(|s| s.name == name))
    };
    let scrape_all = || -> Vec<Scrape> {
        servers
            .iter()
            .map(|(_, metrics)| Scrape::of(metrics))
            .collect()
    };

    // Before: traffic on a healthy store; every outage series at 0.
    for (server, _) in &servers {
        assert_eq!(send(server, 3), BTreeMap::from([(200, 3)]));
    }
    let before = scrape_all();
    for (name, _) in &panels {
        assert!(
            present(&before, name),
            "{name} is not in the scrape before the outage"
        );
        assert_eq!(total(&before, name), 0.0, "{name} before the outage");
    }
    for scrape in &before {
        passes_a_real_parser(&scrape.text);
        // How late checks ended, at 0 too (an outage's late answers).
        for outcome in ["given_back", "not_charged", "kept", "abandoned"] {
            assert!(
                scrape.has("tollgate_late_checks_total", &[("outcome", outcome)]),
                "{outcome}: {}",
                scrape.text
            );
        }
    }

    // During: Redis gone; 8 requests to each server.
    redis.kill();
    let n = 8;
    for (server, _) in &servers {
        assert_eq!(send(server, n), BTreeMap::from([(200, n)]));
    }
    let during = scrape_all();
    for scrape in &during {
        passes_a_real_parser(&scrape.text);
    }
    // increase(...) over the outage, as the panels compute it.
    let increase = |name: &str| total(&during, name) - total(&before, name);
    assert_eq!(increase("tollgate_store_errors_total"), n as f64);
    assert_eq!(increase("tollgate_fallback_decisions_total"), n as f64);
    assert!(
        increase("tollgate_breaker_opened_total") >= 2.0,
        "both breakers opened"
    );
    // max by (store) (tollgate_breaker_state): open, or half-open if a
    // cool-down ended meanwhile on a slow machine.
    let state = during
        .iter()
        .flat_map(|s| &s.samples)
        .filter(|s| s.name == "tollgate_breaker_state")
        .map(|s| s.value)
        .fold(0.0, f64::max);
    assert!(state >= 1.0, "{state}");

    // After: Redis back; each breaker closes at its next probe (its
    // cool-down doubled at most a few times: a bounded wait).
    redis.restart();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let closed = loop {
        for (server, _) in &servers {
            send(server, 1);
        }
        let after = scrape_all();
        let open = after
            .iter()
            .flat_map(|s| &s.samples)
            .any(|s| s.name == "tollgate_breaker_state" && s.value != 0.0);
        if !open || std::time::Instant::now() > deadline {
            break !open;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    assert!(closed, "the breakers closed once Redis was back");
}
