//! The sensor's `/metrics` and `/healthz`.

use std::sync::Arc;

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;

use super::metrics::SensorMetrics;

async fn metrics(State(m): State<Arc<SensorMetrics>>) -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], m.render())
}

/// Bind `listen` and serve until `shutdown` resolves; the bound address.
pub async fn serve(
    listen: &str,
    metrics_: Arc<SensorMetrics>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<std::net::SocketAddr> {
    let router = Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok\n" }))
        .with_state(metrics_);
    let listener = tokio::net::TcpListener::bind(listen).await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, router).with_graceful_shutdown(shutdown).await {
            tracing::error!(error = %e, "sensor http server");
        }
    });
    Ok(addr)
}
