//! What the allowed path allocates, counted by a global allocator: nothing
//! with `HeaderStyle::NONE` and the memory store (the response future is
//! not boxed); header values when a style asks for them.

use http::{Request, Response};
use std::convert::Infallible;
use tollgate::{GlobalKey, RateLimitLayer, headers::HeaderStyle};
use tollgate_core::Quota;
use tollgate_tests::alloc::{CountingAllocator, allocations_here};
use tower::{Service, ServiceBuilder};

#[global_allocator]
static GLOBAL: CountingAllocator = CountingAllocator;

/// Allocations per allowed request through a layer with `headers`, after
/// the key's first request (which adds it to the store).
fn allocations_per_request(headers: HeaderStyle) -> usize {
    let layer = RateLimitLayer::builder()
        .quota("api", Quota::per_second(1_000_000_000))
        .key(GlobalKey)
        .headers(headers)
        .build();
    let mut service = ServiceBuilder::new()
        .layer(layer)
        .service_fn(|_: Request<()>| async { Ok::<_, Infallible>(Response::new(())) });
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    runtime.block_on(async {
        let first = service.call(Request::new(())).await.unwrap();
        assert!(first.status().is_success());
        let before = allocations_here();
        for _ in 0..100 {
            let response = service.call(Request::new(())).await.unwrap();
            assert!(response.status().is_success());
        }
        (allocations_here() - before) / 100
    })
}

#[test]
fn the_bare_allowed_path_allocates_nothing_and_headers_allocate_their_values() {
    assert_eq!(allocations_per_request(HeaderStyle::NONE), 0);
    // The counter counts: the draft's `RateLimit` value is allocated.
    assert!(allocations_per_request(HeaderStyle::DRAFT) > 0);
}
