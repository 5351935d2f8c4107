//! What the daemon's and the sensor's HTTP endpoints share: serving a router until
//! shutdown, `/healthz`, and Prometheus' registry and text exposition.

use axum::http::header;
use axum::response::IntoResponse;
use axum::Router;
use prometheus::{Encoder, Registry, TextEncoder};

/// A `/metrics` body with Prometheus' content type.
pub(crate) fn prometheus_text(body: String) -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], body)
}

/// `/healthz`: the process answers.
pub(crate) async fn healthz() -> &'static str {
    "ok\n"
}

/// Bind `listen` and serve `router` until `shutdown` resolves. Returns the bound
/// address (port 0 → actual).
pub(crate) async fn serve_router(
    listen: &str,
    router: Router,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<(std::net::SocketAddr, tokio::task::JoinHandle<()>)> {
    let listener = tokio::net::TcpListener::bind(listen).await?;
    let addr = listener.local_addr()?;
    let handle = tokio::spawn(async move {
        // The peer's address goes with each request (the console logs and throttles by it).
        let service = router.into_make_service_with_connect_info::<std::net::SocketAddr>();
        if let Err(e) = axum::serve(listener, service).with_graceful_shutdown(shutdown).await {
            tracing::error!(error = %e, "http server");
        }
    });
    Ok((addr, handle))
}

/// Register `m` in `r` and hand it back.
pub(crate) fn register<T: prometheus::core::Collector + Clone + 'static>(r: &Registry, m: T) -> T {
    r.register(Box::new(m.clone())).expect("metric names are unique");
    m
}

/// A registry in the Prometheus text exposition.
pub(crate) fn render(registry: &Registry) -> String {
    let mut buf = Vec::new();
    TextEncoder::new().encode(&registry.gather(), &mut buf).expect("text encoding cannot fail");
    String::from_utf8(buf).unwrap_or_default()
}
