//! Hostile keys: braces, colons, newlines, invalid UTF-8, 10 KB of data.
//! Each stays its own limit, cannot reach another key's state, and costs
//! Redis a bounded key name inside one hash tag. And what every key's
//! script needs of the server: functions loaded again after a flush, or
//! `EVALSHA` where functions are refused.

use std::sync::Arc;
use tollgate::{Key, NamedLimit, Policy, Store, StoreReply};
use tollgate_core::Quota;
use tollgate_redis::{MAX_KEY_LEN, RedisStore};
use tollgate_tests::checks::admits;
use tollgate_tests::redis::RedisServer;

fn hostile_keys() -> Vec<Vec<u8>> {
    let mut keys: Vec<Vec<u8>> = [
        "alice",
        "alice}",
        "{alice}",
        "alice}:api:gcra",
        "}{",
        "a:b:c",
        "line\nbreak",
        "line\r\nbreak",
        "%7D",
        "~",
        "#",
        "",
        " ",
        "\u{0}",
    ]
    .iter()
    .map(|k| k.as_bytes().to_vec())
    .collect();
    keys.push(vec![0xff, 0xfe, b'{']);
    keys.push(vec![0xc3]);
    keys.push(vec![b'x'; 10 * 1024]);
    keys.push([vec![b'x'; 10 * 1024 - 1], vec![b'y']].concat());
    keys.push(vec![b'{'; 10 * 1024]);
    keys
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_keys_stay_isolated_and_bounded() {
    let server = RedisServer::start();
    let store = RedisStore::builder(server.url())
        .prefix("app")
        .connect()
        .await
        .unwrap();
    let policy = Arc::new(Policy::new(vec![NamedLimit::new(
        "api",
        "1/min".parse::<Quota>().unwrap(),
    )]));
    let keys = hostile_keys();
    // Each key gets its one request, and only one: no key shares state with
    // another, whatever its bytes.
    for bytes in &keys {
        assert!(
            admits(&store, &policy, &Key::from_bytes(bytes), 1).await,
            "{bytes:?}"
        );
    }
    for bytes in &keys {
        assert!(
            !admits(&store, &policy, &Key::from_bytes(bytes), 1).await,
            "{bytes:?}"
        );
    }
    // The global key and an IP are apart from the byte keys that spell them.
    for key in [
        Key::GLOBAL,
        Key::from("10.0.0.1".parse::<std::net::IpAddr>().unwrap()),
    ] {
        assert!(admits(&store, &policy, &key, 1).await);
    }
    assert!(admits(&store, &policy, &Key::from_bytes(b"10.0.0.1"), 1).await);

    // One Redis key per user key, each with one hash tag that closes before
    // the limit's name, each bounded in length.
    // (Beside the store's presence beat, `app:instances`.)
    let listed = server.command(&["KEYS", "*"]);
    let names: Vec<&str> = listed
        .lines()
        .filter(|l| l.starts_with("app:") && *l != "app:instances")
        .collect();
    assert_eq!(names.len(), keys.len() + 3);
    for name in &names {
        assert!(
            name.len() <= "app:{".len() + MAX_KEY_LEN + "}:api:gcra".len(),
            "{name}"
        );
        let tag_start = name.find('{').unwrap();
        let tag_end = name.find('}').unwrap();
        assert_eq!(tag_start, "app:".len());
        assert!(name[tag_end..].starts_with("}:api:gcra"), "{name}");
        assert_eq!(name.matches('{').count(), 1, "{name}");
        assert!(!name.contains('\n') && !name.contains('\r'), "{name}");
        // Every key expires.
        let ttl = server.command(&["PTTL", name]);
        let ttl: i64 = ttl.trim().trim_start_matches(':').parse().unwrap();
        assert!(ttl > 0 && ttl <= 60_001, "{name}: ttl {ttl}");
    }
    // The policy's script is loaded on the server as a function library
    // (after the first FCALL found none) and is the one every key above
    // ran.
    let library = format!("tollgate_{}", store.script_hash(&policy));
    assert!(server.has_library(&library), "{library}");
    assert_eq!(
        server.command(&["SCRIPT", "EXISTS", &store.script_hash(&policy)]),
        "*1\r\n:1\r\n",
        "and as a script, by the EVAL that answered that first call"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_algorithm_writes_its_keys_with_a_ttl_and_survives_a_script_flush() {
    for functions in [true, false] {
        every_algorithm_survives_a_flush(functions).await;
    }
}

/// Each algorithm's keys expire, and its decisions go on after the server
/// forgot its functions (`functions`) or scripts, as after a restart or a
/// failover: the next call finds none, loads it and succeeds.
async fn every_algorithm_survives_a_flush(functions: bool) {
    let server = RedisServer::start();
    let store = RedisStore::builder(server.url())
        .functions(functions)
        .connect()
        .await
        .unwrap();
    for algorithm in tollgate_core::Algorithm::ALL {
        let policy = Arc::new(Policy::new(vec![
            NamedLimit::new("api", "10/min".parse::<Quota>().unwrap()).with_algorithm(algorithm),
        ]));
        let key = Key::from_bytes(b"carol");
        assert!(admits(&store, &policy, &key, 1).await);
        for name in store.redis_keys(&policy, &key) {
            let ttl = server.command(&["PTTL", &name]);
            let ttl: i64 = ttl.trim().trim_start_matches(':').parse().unwrap();
            // At most until the state is at rest again: two windows for the
            // sliding window, one period for the others.
            assert!(ttl > 0 && ttl <= 120_001, "{algorithm}: {name} ttl {ttl}");
        }
        let hash = store.script_hash(&policy);
        let library = format!("tollgate_{hash}");
        if functions {
            assert!(server.has_library(&library), "{algorithm}");
            assert_eq!(server.command(&["FUNCTION", "FLUSH"]), "+OK\r\n");
        } else {
            assert!(!server.has_library(&library), "{algorithm}");
            assert_eq!(server.command(&["SCRIPT", "FLUSH"]), "+OK\r\n");
        }
        // The key's second request: charged once, though the first call
        // of it failed, as a key's second request without a flush is.
        let verdict = store.check(&policy, &key, 1).resolve().await.unwrap();
        let control = Key::from_bytes(b"dave");
        assert!(admits(&store, &policy, &control, 1).await);
        let expected = store.check(&policy, &control, 1).resolve().await.unwrap();
        assert_eq!(
            verdict.merged().remaining(),
            expected.merged().remaining(),
            "{algorithm}"
        );
        if functions {
            assert!(server.has_library(&library), "{algorithm}");
        } else {
            assert_eq!(server.command(&["SCRIPT", "EXISTS", &hash]), "*1\r\n:1\r\n");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_without_limits_is_allowed_and_writes_nothing() {
    let server = RedisServer::start();
    let store = RedisStore::connect(server.url()).await.unwrap();
    let empty = Arc::new(Policy::new(Vec::new()));
    for _ in 0..3 {
        let StoreReply::Ready(Ok(verdict)) = store.check(&empty, &Key::GLOBAL, 1) else {
            panic!("an empty policy is answered at once");
        };
        assert!(verdict.merged().allowed() && verdict.each().is_empty());
    }
    // Nothing but the store's presence beat, `tollgate:instances`.
    let keys = server.command(&["KEYS", "*"]);
    assert!(
        keys == "*0\r\n" || keys == "*1\r\n$18\r\ntollgate:instances\r\n",
        "{keys:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configuration_mistakes_are_errors_that_say_what_to_do() {
    let server = RedisServer::start();
    let braces = RedisStore::builder(server.url())
        .prefix("app{1}")
        .connect()
        .await
        .unwrap_err();
    assert!(braces.is_config());
    assert!(
        braces.to_string().contains("without `{` or `}`"),
        "{braces}"
    );
    let not_a_url = RedisStore::connect("localhost:6379").await.unwrap_err();
    assert!(not_a_url.is_config(), "{not_a_url}");
    let no_nodes = RedisStore::connect("redis+cluster://").await.unwrap_err();
    assert!(no_nodes.is_config(), "{no_nodes}");

    // Nobody listening: a run-time error of the client, not a config one.
    let port = server.port();
    drop(server);
    let refused = RedisStore::connect(format!("redis://127.0.0.1:{port}"))
        .await
        .unwrap_err();
    assert!(!refused.is_config());
    assert!(refused.redis_error().is_some());
    assert!(
        refused.to_string().contains("is the server up"),
        "{refused}"
    );
}

/// Every way of making a key of the same bytes makes one key, at and
/// around the inline boundary (22 bytes), in the memory store and in
/// Redis alike: a limit of 3 admits 3 requests in all across the forms.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_form_of_the_same_bytes_is_one_key_in_memory_and_in_redis() {
    let server = RedisServer::start();
    let redis = RedisStore::builder(server.url())
        .prefix("forms")
        .connect()
        .await
        .unwrap();
    let memory = tollgate::MemoryStore::new();
    let policy = Arc::new(Policy::new(vec![NamedLimit::new(
        "api",
        "3/hour".parse::<Quota>().unwrap(),
    )]));
    for len in [0, 1, 21, 22, 23, 64] {
        let text: String = "k".repeat(len);
        let forms = |n: usize| -> Key {
            match n % 6 {
                0 => Key::from_bytes(text.as_bytes()),
                1 => Key::from(text.as_str()),
                2 => Key::from(text.clone()),
                3 => Key::from(Arc::<str>::from(text.as_str())),
                4 => Key::from(Box::<str>::from(text.as_str())),
                _ => Key::from(std::borrow::Cow::<str>::Owned(text.clone())),
            }
        };
        let mut admitted = (0, 0);
        for n in 0..12 {
            let key = forms(n);
            if admits(&memory, &policy, &key, 1).await {
                admitted.0 += 1;
            }
            if admits(&redis, &policy, &key, 1).await {
                admitted.1 += 1;
            }
        }
        assert_eq!(admitted, (3, 3), "{len} bytes: (memory, redis)");
    }
}

/// A server whose ACL refuses `FCALL` (as one without functions refuses
/// it as unknown), or refuses `FUNCTION LOAD`: the store calls its scripts
/// with `EVALSHA` from the first call on, and every decision is the one
/// it would have been, the first included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_refuses_functions_is_called_with_evalsha() {
    for refused in ["-fcall", "-function"] {
        let server = RedisServer::start();
        assert_eq!(
            server.command(&["ACL", "SETUSER", "default", refused]),
            "+OK\r\n"
        );
        let store = RedisStore::connect(server.url()).await.unwrap();
        let policy = Arc::new(Policy::new(vec![NamedLimit::new(
            "api",
            "2/min".parse::<Quota>().unwrap(),
        )]));
        let key = Key::from_bytes(b"erin");
        let admitted = one_after_another(&store, &policy, &key, 4).await;
        assert_eq!(admitted, [true, true, false, false], "{refused}");
        let calls: std::collections::HashMap<String, u64> =
            server.command_calls().into_iter().collect();
        // One FCALL at most, the first (refused before it runs, under
        // `-fcall`); the same request answered by an EVAL (loading the
        // script); then EVALSHA, for the second and third (the fourth is
        // the block cache's).
        assert!(
            calls.get("fcall").copied().unwrap_or(0) <= 1,
            "{refused}: {calls:?}"
        );
        assert_eq!(calls.get("eval"), Some(&1), "{refused}: {calls:?}");
        assert_eq!(calls.get("evalsha"), Some(&2), "{refused}: {calls:?}");
        let library = format!("tollgate_{}", store.script_hash(&policy));
        assert!(!server.has_library(&library), "{refused}");
    }
}

/// `n` requests of one unit for `key`, one after another: which passed.
async fn one_after_another(
    store: &RedisStore,
    policy: &Arc<Policy>,
    key: &Key,
    n: usize,
) -> Vec<bool> {
    let mut admitted = Vec::with_capacity(n);
    for _ in 0..n {
        admitted.push(admits(store, policy, key, 1).await);
    }
    admitted
}
