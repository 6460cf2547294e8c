//! The compare-and-swap store over a real PostgreSQL server: the
//! conformance kit for every algorithm on the database's clock; the
//! racing kit (clients racing through three stores over the backend,
//! behind injected faults); four
//! instances (each its own backend and pool) sharing one limit admit
//! exactly what the algorithm allows; the sweeper removes expired rows
//! within its bound; the schema, hostile keys, a missing table, and
//! passwords kept out of errors and `Debug`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tollgate::{Key, MemoryStore, NamedLimit, Policy, Store};
use tollgate_cas::{CasError, CasStore};
use tollgate_conformance::{Kit, Race};
use tollgate_core::{Algorithm, Quota};
use tollgate_postgres::{PostgresBackend, PostgresError, PostgresStore};
use tollgate_tests::checks::admits;
use tollgate_tests::postgres::{PASSWORD, PostgresServer};

async fn backend(server: &PostgresServer) -> PostgresBackend {
    PostgresBackend::builder(server.url())
        .create_schema(true)
        .pool_size(4)
        .connect()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_postgres_store_conforms_for_every_algorithm() {
    let server = PostgresServer::start();
    let store = CasStore::builder(backend(&server).await)
        .prefix("kit")
        .build();
    let report = Kit::real_time(store.clone())
        .traces(6)
        .run()
        .await
        .unwrap_or_else(|failure| panic!("{failure}"));
    assert_eq!(report.algorithms, Algorithm::ALL.to_vec());
    assert!(report.skipped.is_empty(), "{:?}", report.skipped);
    println!(
        "{} traces over {} algorithms; {} lost races",
        report.traces,
        report.algorithms.len(),
        store.conflicts()
    );
}

/// Clients racing for shared keys through three stores over one backend,
/// behind injected latency, late replies, writes held past their
/// deadline and restarts: every key's admissions and count are explained
/// by some order of the calls, and nothing a caller gave up on stays
/// charged. One run per algorithm: each call is a round trip or two.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_postgres_store_races_through_faults() {
    let server = PostgresServer::start();
    let report = Race::cas(backend(&server).await)
        .runs(1)
        .run()
        .await
        .unwrap_or_else(|failure| panic!("{failure}"));
    assert_eq!(report.algorithms, Algorithm::ALL.to_vec());
    assert!(report.skipped.is_empty(), "{:?}", report.skipped);
    assert!(report.kept > 0 && report.refused > 0, "{report:?}");
    println!("{report:?}");
}

/// `tasks` tasks on each store, each sending requests for one key until
/// refused (a call that ran out of attempts is sent again): what was
/// admitted, in all.
async fn admitted_over(stores: &[PostgresStore], policy: &Arc<Policy>, tasks: usize) -> u64 {
    let admitted = Arc::new(AtomicU64::new(0));
    let mut handles = Vec::new();
    for store in stores {
        for _ in 0..tasks {
            let (store, policy, admitted) = (store.clone(), policy.clone(), admitted.clone());
            handles.push(tokio::spawn(async move {
                let key = Key::from("shared");
                loop {
                    match store.check(&policy, &key, 1).resolve().await {
                        Ok(decision) if decision.merged().allowed() => {
                            admitted.fetch_add(1, Ordering::Relaxed);
                        }
                        Ok(_) => return,
                        Err(CasError::Contended { .. }) => {}
                        Err(error) => panic!("{error}"),
                    }
                }
            }));
        }
    }
    for handle in handles {
        handle.await.unwrap();
    }
    admitted.load(Ordering::Relaxed)
}

/// What one caller sending until refused gets from a memory store: the
/// algorithm's allowance for the policy.
async fn allowance(policy: &Arc<Policy>) -> u64 {
    let store = MemoryStore::new();
    let key = Key::from("shared");
    let mut admitted = 0;
    while admits(&store, policy, &key, 1).await {
        admitted += 1;
    }
    admitted
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_instances_sharing_a_limit_admit_exactly_the_limit() {
    let server = PostgresServer::start();
    let mut stores = Vec::new();
    for _ in 0..4 {
        // Each its own backend and pool, as four processes would have.
        stores.push(
            CasStore::builder(backend(&server).await)
                .max_attempts(16)
                .build(),
        );
    }
    for algorithm in Algorithm::ALL {
        // A day's quota: nothing refills while the test runs.
        let policy = Arc::new(Policy::new(vec![
            NamedLimit::new("shared", "100/d".parse::<Quota>().unwrap()).with_algorithm(algorithm),
        ]));
        let expected = allowance(&policy).await;
        let started = Instant::now();
        let admitted = admitted_over(&stores, &policy, 4).await;
        let conflicts: u64 = stores.iter().map(|store| store.conflicts()).sum();
        println!(
            "{}: {admitted} admitted over 4 instances × 4 tasks (the algorithm \
             allows {expected}) in {:?}; {conflicts} lost races so far",
            algorithm.name(),
            started.elapsed()
        );
        assert_eq!(admitted, expected, "{}", algorithm.name());
        assert!(expected >= 100, "{}: {expected}", algorithm.name());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_rows_are_swept_within_two_intervals() {
    let server = PostgresServer::start();
    let interval = Duration::from_millis(300);
    let backend = PostgresBackend::builder(server.url())
        .create_schema(true)
        .sweep_interval(interval)
        .sweep_batch(7)
        .connect()
        .await
        .unwrap();
    let store = CasStore::new(backend.clone());
    // 50 keys at 1 a second: each back at rest a second after its request.
    let policy = Arc::new(Policy::new(vec![NamedLimit::new(
        "sweep",
        Quota::per_second(1),
    )]));
    for i in 0..50 {
        let key = Key::from(format!("user-{i}").as_str());
        assert!(admits(&store, &policy, &key, 1).await);
    }
    let written = Instant::now();
    assert_eq!(backend.rows().await.unwrap(), 50);
    let expired_by = written + Duration::from_secs(1);
    loop {
        let rows = backend.rows().await.unwrap();
        if rows == 0 {
            break;
        }
        assert!(
            Instant::now() <= expired_by + 2 * interval,
            "{rows} rows left {:?} after they expired",
            Instant::now() - expired_by
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    println!(
        "the last row was gone {:?} after the rows expired (bound: {:?})",
        Instant::now().saturating_duration_since(expired_by),
        2 * interval
    );
    // The sweeper ends with the last clone of the backend, and with it
    // the pool: the server soon has no session but psql's.
    drop((store, backend));
    let sessions = "SELECT count(*) FROM pg_stat_activity \
                    WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()";
    let deadline = Instant::now() + Duration::from_secs(5);
    while server.sql(sessions) != "0" {
        assert!(
            Instant::now() < deadline,
            "sessions left after the backend was dropped"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_row_not_yet_swept_reads_as_absent_and_is_written_over() {
    let server = PostgresServer::start();
    let backend = PostgresBackend::builder(server.url())
        .create_schema(true)
        .no_sweeper()
        .connect()
        .await
        .unwrap();
    let store = CasStore::new(backend.clone());
    let policy = Arc::new(Policy::new(vec![NamedLimit::new(
        "api",
        Quota::per_second(2),
    )]));
    let key = Key::from("alice");
    for allowed in [true, true, false] {
        let decision = store.check(&policy, &key, 1).resolve().await.unwrap();
        assert_eq!(decision.merged().allowed(), allowed);
    }
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    // Still there (no sweeper), but whole again, and written over.
    assert_eq!(backend.rows().await.unwrap(), 1);
    let peek = store.peek(&policy, &key).resolve().await.unwrap();
    assert_eq!(peek.merged().remaining(), 2);
    for allowed in [true, true, false] {
        let decision = store.check(&policy, &key, 1).resolve().await.unwrap();
        assert_eq!(decision.merged().allowed(), allowed);
    }
    assert_eq!(backend.rows().await.unwrap(), 1);
    // A sweep by hand now finds nothing expired.
    assert_eq!(backend.sweep().await.unwrap(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_keys_are_parameters_and_names_keep_them_apart() {
    let server = PostgresServer::start();
    let backend = backend(&server).await;
    let store = CasStore::new(backend.clone());
    let policy = Arc::new(Policy::new(vec![NamedLimit::new(
        "api",
        Quota::per_minute(1),
    )]));
    let hostile = [
        "'); DROP TABLE tollgate_limits; --",
        "\" OR 1=1 --",
        "$1",
        "%27",
        "\u{0}nul",
        "ünïcödé",
    ];
    for key in hostile {
        let key = Key::from_bytes(key.as_bytes());
        assert!(admits(&store, &policy, &key, 1).await);
        assert!(!admits(&store, &policy, &key, 1).await);
    }
    // A 10 KB key is stored as its hash.
    let long = Key::from_bytes(&[b'x'; 10_000]);
    assert!(admits(&store, &policy, &long, 1).await);
    assert_eq!(
        backend.rows().await.unwrap(),
        u64::try_from(hostile.len()).unwrap() + 1
    );
    let longest = server.sql("SELECT max(length(key)) FROM tollgate_limits");
    assert!(longest.parse::<usize>().unwrap() < 100, "{longest}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_schema_is_created_once_named_and_required() {
    let server = PostgresServer::start();
    // No table, none created: the error says how to make one.
    let missing = PostgresBackend::builder(server.url())
        .connect()
        .await
        .unwrap_err();
    assert!(missing.is_missing_table(), "{missing}");
    assert!(missing.to_string().contains("create_schema"), "{missing}");
    // The migration, run by hand in a schema of its own, is what the
    // backend needs.
    server.sql("CREATE SCHEMA rl");
    server.sql(&tollgate_postgres::migration(Some("rl.limits"), true).unwrap());
    assert_eq!(
        server.sql("SELECT relpersistence FROM pg_class WHERE relname = 'limits'"),
        "u"
    );
    let backend = PostgresBackend::builder(server.url())
        .table("rl.limits")
        .connect()
        .await
        .unwrap();
    let store = CasStore::new(backend.clone());
    let policy = Arc::new(Policy::new(vec![NamedLimit::new(
        "api",
        Quota::per_minute(1),
    )]));
    assert!(
        store
            .check(&policy, &Key::from("k"), 1)
            .resolve()
            .await
            .unwrap()
            .merged()
            .allowed()
    );
    assert_eq!(server.sql("SELECT count(*) FROM rl.limits"), "1");
    // Eight instances creating the same schema at once do not collide.
    let creating: Vec<_> = (0..8)
        .map(|_| {
            let url = server.url();
            tokio::spawn(async move {
                PostgresBackend::builder(url)
                    .table("fresh")
                    .create_schema(true)
                    .connect()
                    .await
                    .map(drop)
            })
        })
        .collect();
    for created in creating {
        created.await.unwrap().unwrap();
    }
    assert_eq!(server.sql("SELECT count(*) FROM fresh"), "0");
    // A table name that is not an identifier is refused before connecting.
    let bad = PostgresBackend::builder(server.url())
        .table("x; DROP TABLE y")
        .connect()
        .await
        .unwrap_err();
    assert!(bad.is_config(), "{bad}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passwords_are_never_shown() {
    let server = PostgresServer::start();
    let backend = backend(&server).await;
    let shown = format!("{backend:?} {:?}", CasStore::new(backend.clone()));
    assert!(!shown.contains(PASSWORD), "{shown}");
    assert!(shown.contains("***@127.0.0.1"), "{shown}");
    // A wrong password: refused, and neither password is in the error.
    let wrong = server.url().replace(PASSWORD, "not-the-pw-4711");
    let error: PostgresError = PostgresBackend::connect(&wrong).await.unwrap_err();
    let text = format!("{error} {error:?}");
    assert!(!text.contains("not-the-pw-4711"), "{text}");
    assert!(!text.contains(PASSWORD), "{text}");
    assert!(text.contains("password authentication failed"), "{text}");
    assert!(!error.is_config());
    // Nothing listening: a connection error, without the password.
    let port = tollgate_tests::redis::free_port();
    let error = PostgresBackend::builder(format!(
        "postgres://postgres:{PASSWORD}@127.0.0.1:{port}/postgres"
    ))
    .timeout(Duration::from_secs(2))
    .connect()
    .await
    .unwrap_err();
    let text = format!("{error} {error:?}");
    assert!(!text.contains(PASSWORD), "{text}");
    println!("{error}");
}
