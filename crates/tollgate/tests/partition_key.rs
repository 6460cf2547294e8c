//! The draft's `pk` parameter ([`HeaderStyle::partition_key`]): absent by
//! default and for a global key, the key's digest or the key itself on each
//! item of both fields when asked for, on allowed and limited responses.

use base64::Engine as _;
use http::{Request, Response, StatusCode};
use std::convert::Infallible;
use tollgate::{
    GlobalKey, HeaderKey, Key, RateLimitLayer, headers::HeaderStyle, headers::PartitionKey,
};
use tollgate_core::Quota;
use tower::{Layer, Service, ServiceExt, service_fn};

/// The responses of three requests with `x-api-key: key` through a layer
/// of two limits (the second refuses the third request), in `style`.
async fn three_responses(style: HeaderStyle, global: bool) -> Vec<Response<String>> {
    let builder = RateLimitLayer::builder()
        .limit(tollgate::NamedLimit::new("api", Quota::per_minute(100)))
        .limit(tollgate::NamedLimit::new("burst", Quota::per_minute(2)))
        .headers(style);
    let inner =
        service_fn(|_: Request<()>| async { Ok::<_, Infallible>(Response::new(String::new())) });
    let mut service = if global {
        tower::util::BoxCloneService::new(builder.key(GlobalKey).build().layer(inner))
    } else {
        tower::util::BoxCloneService::new(
            builder
                .key(HeaderKey::new("x-api-key"))
                .build()
                .layer(inner),
        )
    };
    let mut out = Vec::new();
    for _ in 0..3 {
        let request = Request::builder()
            .header("x-api-key", "tenant-42")
            .body(())
            .unwrap();
        let response = service.ready().await.unwrap().call(request).await.unwrap();
        out.push(response);
    }
    assert_eq!(out[2].status(), StatusCode::TOO_MANY_REQUESTS);
    out
}

fn field(response: &Response<String>, name: &str) -> String {
    response.headers()[name].to_str().unwrap().to_owned()
}

/// The `pk` of each item of a list field, `None` where an item has none.
fn pks(value: &str) -> Vec<Option<String>> {
    value
        .split(", ")
        .map(|item| {
            item.split(';')
                .find_map(|param| param.strip_prefix("pk="))
                .map(str::to_owned)
        })
        .collect()
}

fn byte_sequence(bytes: &[u8]) -> String {
    format!(
        ":{}:",
        base64::engine::general_purpose::STANDARD.encode(bytes)
    )
}

#[tokio::test]
async fn no_pk_unless_asked_for() {
    for response in three_responses(HeaderStyle::DRAFT, false).await {
        assert_eq!(pks(&field(&response, "ratelimit")), [None, None]);
        assert_eq!(pks(&field(&response, "ratelimit-policy")), [None, None]);
    }
}

#[tokio::test]
async fn the_key_itself_on_every_item_of_both_fields() {
    let style = HeaderStyle::DRAFT.with_partition_key(PartitionKey::Verbatim);
    let expected = Some(byte_sequence(b"tenant-42"));
    for response in three_responses(style, false).await {
        let state = field(&response, "ratelimit");
        assert_eq!(pks(&state), [expected.clone(), expected.clone()], "{state}");
        let policy = field(&response, "ratelimit-policy");
        assert_eq!(pks(&policy), [expected.clone(), expected.clone()]);
        // The other parameters are untouched: `"api";r=…;t=…;pk=…`.
        assert!(state.starts_with("\"api\";r="), "{state}");
        assert!(policy.starts_with("\"api\";q=100;w=60;pk="), "{policy}");
    }
}

#[tokio::test]
async fn a_digest_that_hides_the_key() {
    let style = HeaderStyle::DRAFT.with_partition_key(PartitionKey::Digest);
    let digest = PartitionKey::digest(&Key::from("tenant-42"));
    assert_ne!(digest, PartitionKey::digest(&Key::from("tenant-43")));
    let expected = Some(byte_sequence(&digest));
    for response in three_responses(style, false).await {
        assert_eq!(
            pks(&field(&response, "ratelimit")),
            [expected.clone(), expected.clone()]
        );
        assert!(!field(&response, "ratelimit").contains(&byte_sequence(b"tenant-42")));
    }
}

#[tokio::test]
async fn a_global_key_has_no_partition_to_name() {
    let style = HeaderStyle::DRAFT.with_partition_key(PartitionKey::Verbatim);
    for response in three_responses(style, true).await {
        assert_eq!(pks(&field(&response, "ratelimit")), [None, None]);
    }
}

#[test]
fn an_address_is_named_by_its_text() {
    let key = Key::from("203.0.113.7".parse::<std::net::IpAddr>().unwrap());
    assert_eq!(
        PartitionKey::Verbatim.bytes(&key).as_deref(),
        Some(&b"203.0.113.7"[..])
    );
    assert_eq!(PartitionKey::Omit.bytes(&key), None);
    assert_eq!(
        PartitionKey::Digest.bytes(&key).as_deref(),
        Some(&PartitionKey::digest(&key)[..])
    );
}
