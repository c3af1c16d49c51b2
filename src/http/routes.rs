//! The exporter's HTTP server: `/metrics`, `/healthz` and a landing page.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::Request;
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use futures::StreamExt;

use crate::scrape::exporter::Exporter;
use crate::text::Format;

const OPENMETRICS_CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The exporter's routes, the metrics at `/metrics`.
pub fn router(exporter: Arc<Exporter>) -> Router {
    router_at(exporter, "/metrics")
}

/// The exporter's routes, the metrics at `telemetry_path` (checked by
/// `--web.telemetry-path`: starts with `/`, not `/` or `/healthz`).
pub fn router_at(exporter: Arc<Exporter>, telemetry_path: &str) -> Router {
    let page = Arc::new(landing_page(telemetry_path));
    Router::new()
        .route("/", get(move || std::future::ready(Html(page.to_string()))))
        .route(telemetry_path, get(metrics).layer(compression()))
        .route("/healthz", get(|| async { "ok\n" }))
        .with_state(exporter)
}

/// gzip when the scraper asks for it, as promhttp answers (Prometheus
/// always asks). The text is compressed as it is written, so the memory
/// bound of the streamed exposition holds; the fastest level, since the
/// text is large and scrapes are frequent.
fn compression() -> tower_http::compression::CompressionLayer {
    tower_http::compression::CompressionLayer::new()
        .gzip(true)
        .quality(tower_http::CompressionLevel::Fastest)
}

/// `router` behind HTTP basic authentication: every request needs one of
/// `users` (name to bcrypt hash), else 401. No users: unchanged.
pub fn with_basic_auth(router: Router, users: Arc<BTreeMap<String, String>>) -> Router {
    if users.is_empty() {
        return router;
    }
    router.layer(middleware::from_fn_with_state(users, basic_auth))
}

async fn basic_auth(
    State(users): State<Arc<BTreeMap<String, String>>>,
    request: Request,
    next: Next,
) -> Response {
    let header = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    // bcrypt is slow by design: off the async workers.
    let ok = tokio::task::spawn_blocking(move || {
        crate::cli::web_config::authorized(&users, header.as_deref())
    })
    .await
    .unwrap_or(false);
    if ok {
        next.run(request).await
    } else {
        (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, "Basic")],
            "Unauthorized\n",
        )
            .into_response()
    }
}

/// OpenMetrics for scrapers that ask for it, the classic text format otherwise.
pub fn negotiate(headers: &HeaderMap) -> Format {
    let accept = headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect::<Vec<_>>()
        .join(",");
    if accept.contains("application/openmetrics-text") {
        Format::OpenMetrics
    } else {
        Format::Classic
    }
}

async fn metrics(State(exporter): State<Arc<Exporter>>, headers: HeaderMap) -> impl IntoResponse {
    let format = negotiate(&headers);
    let text = exporter.scrape_stream(format).await;
    let content_type = match format {
        Format::Classic => prometheus_client::encoding::prometheus_text::CONTENT_TYPE,
        Format::OpenMetrics => OPENMETRICS_CONTENT_TYPE,
    };
    // Sent while it is written, so its length is not known beforehand.
    // Fused: the gzip encoder polls the body once more after its end.
    (
        [(header::CONTENT_TYPE, content_type.to_string())],
        Body::from_stream(text.fuse().map(Ok::<_, std::convert::Infallible>)),
    )
}

/// The landing page, linking to the metrics wherever they are served;
/// relative links, so that they also work behind a proxy's path prefix.
fn landing_page(telemetry_path: &str) -> String {
    let href = telemetry_path
        .trim_start_matches('/')
        .replace('&', "&amp;")
        .replace('"', "&quot;")
        .replace('<', "&lt;");
    format!(
        concat!(
            "<!doctype html><html><head><title>nats-delivery-exporter</title></head><body>",
            "<h1>nats-delivery-exporter {version}</h1><p>Counts where NATS loses messages.</p><ul>",
            "<li><a href=\"{href}\">metrics</a></li>",
            "<li><a href=\"healthz\">healthz</a></li>",
            "</ul></body></html>\n"
        ),
        version = env!("CARGO_PKG_VERSION"),
        href = href,
    )
}
