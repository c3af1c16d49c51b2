//! The HTTP surface: /metrics in both formats (the classic one checked by
//! promtool), /healthz and the landing page, served by the router without a socket.
use crate::common;

use std::sync::Arc;

use axum::body::Body;
use axum::http::{header, Request, StatusCode};
use http_body_util::BodyExt;
use nats_test_server::NatsServer;
use tower::ServiceExt;

async fn get(app: axum::Router, path: &str, accept: Option<&str>) -> (StatusCode, String, String) {
    let mut req = Request::builder().uri(path);
    if let Some(a) = accept {
        req = req.header(header::ACCEPT, a);
    }
    let resp = app.oneshot(req.body(Body::empty()).unwrap()).await.unwrap();
    let status = resp.status();
    let ctype = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    (status, ctype, String::from_utf8(body.to_vec()).unwrap())
}

#[tokio::test]
async fn metrics_in_both_formats_and_the_small_pages() {
    let server = NatsServer::builder().jetstream().start();
    let client = async_nats::connect(server.client_url()).await.unwrap();
    let js = async_nats::jetstream::new(client);
    js.create_stream(async_nats::jetstream::stream::Config {
        name: "S".into(),
        subjects: vec!["s.>".into()],
        ..Default::default()
    })
    .await
    .unwrap()
    .create_consumer(async_nats::jetstream::consumer::pull::Config {
        durable_name: Some("c".into()),
        ..Default::default()
    })
    .await
    .unwrap();
    let app =
        nats_delivery_exporter::router(Arc::new(common::exporter(&[server.monitor_url()], &[])));

    let (status, ctype, classic) = get(app.clone(), "/metrics", Some("text/plain")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(ctype, "text/plain; version=0.0.4; charset=utf-8");
    assert!(classic.contains(
        "nats_delivery_consumer_pending_messages{account=\"$G\",stream=\"S\",consumer=\"c\"} 0"
    ));
    nats_test_server::promtool::assert_metrics_clean(&classic);
    // A stream without limits: its limit metrics are absent, not 0.
    let s = [("stream", "S")];
    assert_eq!(
        nats_test_server::sample::value(&classic, "nats_delivery_stream_max_bytes", &s),
        None
    );
    assert_eq!(
        nats_test_server::sample::value(&classic, "nats_delivery_stream_max_age_seconds", &s),
        None
    );
    assert_eq!(
        nats_test_server::sample::value(&classic, "nats_delivery_stream_max_messages", &s),
        None
    );

    let (_, ctype, om) = get(
        app.clone(),
        "/metrics",
        Some("application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5"),
    )
    .await;
    assert!(ctype.starts_with("application/openmetrics-text"), "{ctype}");
    assert!(om.ends_with("# EOF\n"));
    assert!(om.contains("# TYPE nats_delivery_server_slow_consumers counter"));

    let (status, _, body) = get(app.clone(), "/healthz", None).await;
    assert_eq!((status, body.as_str()), (StatusCode::OK, "ok\n"));
    let (status, _, body) = get(app.clone(), "/", None).await;
    assert_eq!(status, StatusCode::OK);
    assert!(body.contains("href=\"metrics\"") && body.contains("href=\"healthz\""));
    let (status, _, _) = get(app, "/nope", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

/// The series of a scrape without their values (which move between
/// scrapes), sorted: a server may list its accounts in another order.
fn series(text: &str) -> Vec<&str> {
    let mut series: Vec<_> = text
        .lines()
        .map(|l| l.rsplit_once(' ').map_or(l, |(s, _)| s))
        .collect();
    series.sort_unstable();
    series
}

#[tokio::test]
async fn metrics_are_gzipped_when_asked_as_prometheus_asks() {
    use std::io::Read;
    let server = NatsServer::builder().jetstream().start();
    let app =
        nats_delivery_exporter::router(Arc::new(common::exporter(&[server.monitor_url()], &[])));
    let request = |encoding: Option<&str>| {
        let mut req = Request::builder().uri("/metrics");
        if let Some(e) = encoding {
            req = req.header(header::ACCEPT_ENCODING, e);
        }
        req.body(Body::empty()).unwrap()
    };
    let plain = app.clone().oneshot(request(None)).await.unwrap();
    assert_eq!(plain.headers().get(header::CONTENT_ENCODING), None);
    let plain = plain.into_body().collect().await.unwrap().to_bytes();
    let plain = String::from_utf8(plain.to_vec()).unwrap();

    // Prometheus' own header.
    let resp = app.oneshot(request(Some("gzip"))).await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(
        resp.headers().get(header::CONTENT_ENCODING).unwrap(),
        "gzip"
    );
    let compressed = resp.into_body().collect().await.unwrap().to_bytes();
    let mut text = String::new();
    flate2::read::GzDecoder::new(&compressed[..])
        .read_to_string(&mut text)
        .unwrap();
    assert!(
        compressed.len() * 3 < text.len(),
        "{} of {}",
        compressed.len(),
        text.len()
    );
    assert_eq!(series(&text), series(&plain));
    nats_test_server::promtool::assert_metrics_clean(&text);
}
