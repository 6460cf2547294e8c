//! `ClientIp` in an axum app: in process with `oneshot` (connection info
//! inserted by hand), and over real TCP with
//! `into_make_service_with_connect_info::<SocketAddr>()`.

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::routing::get;
use http::{Request, StatusCode};
use std::net::SocketAddr;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tollgate::RateLimitLayer;
use tollgate_axum::{ClientIp, ProxyHeader};
use tower::ServiceExt;

/// An app allowing 3 requests a minute per client, as `client_ip` sees it.
fn app(client_ip: ClientIp) -> Router {
    let layer = RateLimitLayer::builder()
        .quota("api", "3/min".parse().unwrap())
        .key(client_ip)
        .build();
    Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(layer)
}

fn behind_proxy() -> ClientIp {
    ClientIp::trusting(["10.0.0.0/8".parse().unwrap()])
}

async fn status(app: &Router, peer: &str, headers: &[(&str, &[u8])]) -> StatusCode {
    let mut request = Request::builder().uri("/");
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let mut request = request.body(Body::empty()).unwrap();
    let peer: SocketAddr = peer.parse().unwrap();
    request.extensions_mut().insert(ConnectInfo(peer));
    app.clone().oneshot(request).await.unwrap().status()
}

#[tokio::test]
async fn a_new_x_forwarded_for_on_every_request_does_not_reset_the_limit() {
    for client_ip in [ClientIp::default(), behind_proxy()] {
        let app = app(client_ip);
        let mut statuses = Vec::new();
        for i in 0..5 {
            let spoofed = format!("198.51.100.{i}");
            let forwarded = format!("for={spoofed}");
            let headers: [(&str, &[u8]); 3] = [
                ("x-forwarded-for", spoofed.as_bytes()),
                ("forwarded", forwarded.as_bytes()),
                ("x-real-ip", spoofed.as_bytes()),
            ];
            statuses.push(status(&app, "203.0.113.9:5000", &headers).await);
        }
        assert_eq!(statuses[3..], [StatusCode::TOO_MANY_REQUESTS; 2]);
    }
}

#[tokio::test]
async fn from_a_trusted_proxy_the_right_most_untrusted_address_is_the_key() {
    let app = app(behind_proxy());
    let chain: &[(&str, &[u8])] = &[("x-forwarded-for", b"1.2.3.4, 5.6.7.8")];
    for _ in 0..3 {
        assert_eq!(status(&app, "10.0.0.1:80", chain).await, StatusCode::OK);
    }
    // Keyed on 5.6.7.8: whatever stands to its left, it is spent.
    let other_left: &[(&str, &[u8])] = &[("x-forwarded-for", b"9.9.9.9, 5.6.7.8")];
    assert_eq!(
        status(&app, "10.0.0.2:80", other_left).await,
        StatusCode::TOO_MANY_REQUESTS
    );
    // 1.2.3.4 is a client of its own.
    let swapped: &[(&str, &[u8])] = &[("x-forwarded-for", b"5.6.7.8, 1.2.3.4")];
    assert_eq!(status(&app, "10.0.0.1:80", swapped).await, StatusCode::OK);
}

/// The proxy writes X-Forwarded-For; the client adds a `Forwarded` (or
/// `X-Real-IP`) of its own, which the proxy passes through. By default only
/// X-Forwarded-For is read, so the client cannot choose its key.
#[tokio::test]
async fn a_header_the_proxy_does_not_write_cannot_choose_the_key() {
    let app = app(behind_proxy());
    let mut statuses = Vec::new();
    for i in 0..5 {
        let spoofed = format!("for=198.51.100.{i}");
        let real_ip = format!("198.51.100.{i}");
        let headers: [(&str, &[u8]); 3] = [
            ("forwarded", spoofed.as_bytes()),
            ("x-real-ip", real_ip.as_bytes()),
            ("x-forwarded-for", b"203.0.113.50"),
        ];
        statuses.push(status(&app, "10.0.0.1:80", &headers).await);
    }
    assert_eq!(statuses[3..], [StatusCode::TOO_MANY_REQUESTS; 2]);
}

#[tokio::test]
async fn a_forwarded_ipv6_client_is_keyed_by_its_slash_64() {
    let app = app(behind_proxy().headers([ProxyHeader::Forwarded]));
    let client: &[(&str, &[u8])] = &[("forwarded", b"for=\"[2001:db8::17]:4711\"")];
    for _ in 0..3 {
        assert_eq!(status(&app, "10.0.0.1:80", client).await, StatusCode::OK);
    }
    let same_64: &[(&str, &[u8])] = &[("forwarded", b"for=\"[2001:db8::ffff:1]\"")];
    assert_eq!(
        status(&app, "10.0.0.1:80", same_64).await,
        StatusCode::TOO_MANY_REQUESTS
    );
    let next_64: &[(&str, &[u8])] = &[("forwarded", b"for=\"[2001:db8:0:1::17]\"")];
    assert_eq!(status(&app, "10.0.0.1:80", next_64).await, StatusCode::OK);
}

#[tokio::test]
async fn garbage_in_any_header_is_never_a_panic_or_a_500() {
    let long = vec![b'a'; 8 * 1024];
    let commas = vec![b','; 4 * 1024];
    let mixed = b"1.2.3.4,,,, ,\"[::1]\",unknown,_x,300.1.1.1,[::1,::ffff:1.2.3.4:1:2".to_vec();
    let garbage: Vec<&[u8]> = vec![
        b"",
        b" ",
        &long,
        &commas,
        &[0xff, 0xfe, 0x80],
        b"not-an-ip",
        b"999.999.999.999",
        b"for=",
        b"for=\"",
        b"\"\"\"",
        &mixed,
    ];
    let readers: [(&str, ProxyHeader, &[u8]); 3] = [
        (
            "x-forwarded-for",
            ProxyHeader::XForwardedFor,
            b"198.51.100.7",
        ),
        ("forwarded", ProxyHeader::Forwarded, b"for=198.51.100.7"),
        ("x-real-ip", ProxyHeader::XRealIp, b"198.51.100.7"),
    ];
    for (name, header, readable) in readers {
        // A layer that reads this header, so its parser sees the garbage.
        let reader = app(behind_proxy().headers([header]));
        for value in &garbage {
            for peer in ["10.0.0.1:80", "203.0.113.5:80"] {
                let got = status(&reader, peer, &[(name, value)]).await;
                assert!(
                    got == StatusCode::OK || got == StatusCode::TOO_MANY_REQUESTS,
                    "{name}: {got}"
                );
            }
        }
        // The documented fallback: a trusted proxy's unreadable hop is keyed
        // on the proxy, so the proxy's own key runs out after 3, while a
        // client it reports readably keeps its own.
        let fresh = app(behind_proxy().headers([header]));
        let junk: &[(&str, &[u8])] = &[(name, b"junk")];
        for _ in 0..3 {
            assert_eq!(
                status(&fresh, "10.0.0.1:80", junk).await,
                StatusCode::OK,
                "{name}"
            );
        }
        assert_eq!(
            status(&fresh, "10.0.0.1:80", junk).await,
            StatusCode::TOO_MANY_REQUESTS,
            "{name}"
        );
        let client: &[(&str, &[u8])] = &[(name, readable)];
        assert_eq!(
            status(&fresh, "10.0.0.1:80", client).await,
            StatusCode::OK,
            "{name}"
        );
    }
}

/// Sends `GET /` with `headers` over a fresh TCP connection; returns the
/// status code.
async fn get_over_tcp(addr: SocketAddr, headers: &str) -> String {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = format!("GET / HTTP/1.1\r\nhost: x\r\n{headers}connection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut reply = String::new();
    stream.read_to_string(&mut reply).await.unwrap();
    reply.split(' ').nth(1).unwrap_or_default().to_owned()
}

#[tokio::test]
async fn over_tcp_the_peer_address_and_trusted_headers_give_the_key() {
    for (client_ip, trusted) in [
        (ClientIp::default(), false),
        (ClientIp::trusting(["127.0.0.1/32".parse().unwrap()]), true),
    ] {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let service = app(client_ip).into_make_service_with_connect_info::<SocketAddr>();
        let server = tokio::spawn(async move { axum::serve(listener, service).await });
        let mut statuses = Vec::new();
        for i in 0..5 {
            statuses
                .push(get_over_tcp(addr, &format!("x-forwarded-for: 198.51.100.{i}\r\n")).await);
        }
        server.abort();
        // Untrusted loopback peer: one client, limited after 3. Trusted:
        // five clients of one request each.
        let expected = if trusted {
            vec!["200"; 5]
        } else {
            vec!["200", "200", "200", "429", "429"]
        };
        assert_eq!(statuses, expected, "trusted: {trusted}");
    }
}

#[tokio::test]
async fn handlers_get_the_same_client_address() {
    use axum::Extension;
    use tollgate_axum::ClientAddr;
    let handler = get(|ClientAddr(ip): ClientAddr| async move { ip.to_string() });
    let trusted = Router::new()
        .route("/", handler.clone())
        .layer(Extension(behind_proxy()));
    let default = Router::new().route("/", handler);
    let body = |app: Router, peer: &'static str| async move {
        let mut request = Request::builder()
            .uri("/")
            .header("x-forwarded-for", "1.2.3.4, 5.6.7.8")
            .body(Body::empty())
            .unwrap();
        request
            .extensions_mut()
            .insert(ConnectInfo(peer.parse::<SocketAddr>().unwrap()));
        let response = app.oneshot(request).await.unwrap();
        let bytes = axum::body::to_bytes(response.into_body(), 1024)
            .await
            .unwrap();
        String::from_utf8(bytes.to_vec()).unwrap()
    };
    assert_eq!(body(trusted.clone(), "10.0.0.1:80").await, "5.6.7.8");
    assert_eq!(body(trusted, "203.0.113.3:80").await, "203.0.113.3");
    assert_eq!(body(default, "10.0.0.1:80").await, "10.0.0.1");
}

#[tokio::test]
async fn without_connection_info_a_handler_gets_a_500_that_says_how_to_serve() {
    use tollgate_axum::ClientAddr;
    let app = Router::new().route(
        "/",
        get(|ClientAddr(ip): ClientAddr| async move { ip.to_string() }),
    );
    let request = Request::builder().uri("/").body(Body::empty()).unwrap();
    let response = app.oneshot(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
    let bytes = axum::body::to_bytes(response.into_body(), 1024)
        .await
        .unwrap();
    let body = String::from_utf8(bytes.to_vec()).unwrap();
    assert!(
        body.contains("into_make_service_with_connect_info::<SocketAddr>()"),
        "{body}"
    );
}

#[tokio::test]
async fn the_rejection_is_a_named_type_with_its_status_and_fix() {
    use axum::response::IntoResponse;
    use tollgate_axum::NoConnectInfo;
    assert_eq!(NoConnectInfo::STATUS, StatusCode::INTERNAL_SERVER_ERROR);
    assert!(NoConnectInfo.to_string().contains("MockConnectInfo"));
    let error: Box<dyn std::error::Error> = Box::new(NoConnectInfo);
    assert!(error.to_string().starts_with("no connection info"));
    assert_eq!(
        NoConnectInfo.into_response().status(),
        StatusCode::INTERNAL_SERVER_ERROR
    );
}

/// axum's `MockConnectInfo`, as an app's tests give the peer address: the
/// default key (`PeerIp`), `ClientIp` and `ClientAddr` read it, so each
/// mocked client has its own bucket rather than all sharing the
/// missing-key one.
#[tokio::test]
async fn mock_connect_info_gives_each_mocked_client_its_own_bucket() {
    use axum::extract::connect_info::MockConnectInfo;
    use tollgate_axum::ClientAddr;
    for keyed_by_client_ip in [false, true] {
        let builder = RateLimitLayer::builder().quota("api", "1/min".parse().unwrap());
        let routes = Router::new().route(
            "/",
            get(|ClientAddr(ip): ClientAddr| async move { ip.to_string() }),
        );
        let routes = if keyed_by_client_ip {
            routes.layer(builder.key(ClientIp::default()).build())
        } else {
            routes.layer(builder.build()) // PeerIp, the default key
        };
        let as_client = |addr: [u8; 4]| {
            routes
                .clone()
                .layer(MockConnectInfo(SocketAddr::from((addr, 1234))))
        };
        let (first, second) = (as_client([192, 0, 2, 1]), as_client([192, 0, 2, 2]));
        let call = |app: Router| async move {
            let request = Request::builder().uri("/").body(Body::empty()).unwrap();
            let response = app.oneshot(request).await.unwrap();
            let status = response.status();
            let bytes = axum::body::to_bytes(response.into_body(), 1024)
                .await
                .unwrap();
            (status, String::from_utf8(bytes.to_vec()).unwrap())
        };
        assert_eq!(
            call(first.clone()).await,
            (StatusCode::OK, "192.0.2.1".into())
        );
        assert_eq!(call(first).await.0, StatusCode::TOO_MANY_REQUESTS);
        // Another mocked client: a bucket of its own.
        assert_eq!(call(second).await, (StatusCode::OK, "192.0.2.2".into()));
    }
}
