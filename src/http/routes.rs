//! The exporter's HTTP server: `/metrics`, `/healthz` and a landing page.

use std::net::{IpAddr, Ipv6Addr};
use std::sync::Arc;

use axum::body::Body;
use axum::extract::Request;
use axum::extract::{ConnectInfo, State};
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use futures::StreamExt;

use super::ClientAddr;
use crate::cli::web_config::{Loaded, Verdict, WebConfig};
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

/// Paths answered to anyone: liveness and readiness probes (kubelet,
/// load balancers) carry no credentials, and a probe refused with 401 or
/// 429 would restart or unlist an exporter that works. `/healthz` says
/// only that the process serves; it polls nothing and shows nothing.
pub(crate) const OPEN_PATHS: &[&str] = &["/healthz"];

/// `router` behind the web configuration file's settings: a request
/// without a configured user's credentials (when there are users) gets
/// 401, one over its `rate_limit` 429, and every answer carries the
/// configured headers. Credentials verified before are checked first,
/// without bcrypt, and such a request spends only the verified requests'
/// bucket; any other spends its address's bucket before bcrypt runs
/// (`cli/web_config/rate_limit.rs`), so requests without a password never
/// refuse one with it. The paths of `OPEN_PATHS` are neither rate-limited
/// nor authenticated (TLS still applies). Each request uses the file's
/// current reading. No file: unchanged.
pub fn with_web_config(router: Router, web: Option<WebConfig>) -> Router {
    match web {
        Some(web) => router.layer(middleware::from_fn_with_state(web, web_config)),
        None => router,
    }
}

async fn web_config(State(web): State<WebConfig>, request: Request, next: Next) -> Response {
    let loaded = web.current();
    let mut response = if OPEN_PATHS.contains(&request.uri().path()) {
        next.run(request).await
    } else {
        let address = request
            .extensions()
            .get::<ConnectInfo<ClientAddr>>()
            .map_or(IpAddr::V6(Ipv6Addr::UNSPECIFIED), |c| c.0 .0.ip());
        match admit(&web, &loaded, address, basic(&request)).await {
            Verdict::Verified => next.run(request).await,
            Verdict::Busy => too_many(),
            Verdict::Refused => (
                StatusCode::UNAUTHORIZED,
                [(header::WWW_AUTHENTICATE, "Basic")],
                "Unauthorized\n",
            )
                .into_response(),
        }
    };
    for (name, value) in &loaded.headers {
        // Checked when the file was read: names from a fixed list, values one line of ASCII.
        if let (Ok(name), Ok(value)) = (
            HeaderName::try_from(name.as_str()),
            HeaderValue::try_from(value.as_str()),
        ) {
            response.headers_mut().insert(name, value);
        }
    }
    response
}

fn too_many() -> Response {
    (StatusCode::TOO_MANY_REQUESTS, "Too Many Requests\n").into_response()
}

/// Whether a request may be answered: `Busy` for one over its bucket.
async fn admit(
    web: &WebConfig,
    loaded: &Arc<Loaded>,
    address: IpAddr,
    header: Option<String>,
) -> Verdict {
    let limit = loaded.rate_limit.as_ref();
    let users = &loaded.users;
    let cached = !users.is_empty() && web.auth_cache().cached(users, header.as_deref());
    if !cached {
        if limit.is_some_and(|l| !l.allow_unverified(address)) {
            return Verdict::Busy;
        }
        if users.is_empty() {
            return Verdict::Verified;
        }
        let verdict = verify(web, loaded, header).await;
        if verdict != Verdict::Verified {
            return verdict;
        }
    }
    if limit.is_some_and(|l| !l.allow_verified()) {
        Verdict::Busy
    } else {
        Verdict::Verified
    }
}

fn basic(request: &Request) -> Option<String> {
    request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

async fn verify(web: &WebConfig, loaded: &Arc<Loaded>, header: Option<String>) -> Verdict {
    if header.is_none() {
        return Verdict::Refused;
    }
    let (web, loaded) = (web.clone(), loaded.clone());
    // bcrypt is slow by design: off the async workers.
    tokio::task::spawn_blocking(move || web.auth_cache().verify(&loaded.users, header.as_deref()))
        .await
        .unwrap_or(Verdict::Refused)
}

/// OpenMetrics for scrapers that ask for it, the classic text format otherwise.
pub(crate) fn negotiate(headers: &HeaderMap) -> Format {
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
    // Fused: the gzip encoder polls the body once more after its end. A
    // text cut short (`ScrapeAborted`) is an error of the body: the server
    // breaks the response off, and the scraper records a failed scrape
    // rather than a short text under status 200.
    (
        [(header::CONTENT_TYPE, content_type.to_string())],
        Body::from_stream(text.fuse()),
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
