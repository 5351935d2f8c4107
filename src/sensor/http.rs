//! The sensor's `/metrics` and `/healthz`, served as the daemon's are (`crate::endpoints`).

use std::sync::Arc;

use axum::extract::State;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;

use crate::endpoints::{healthz, prometheus_text, serve_router};

use super::metrics::SensorMetrics;

async fn metrics(State(m): State<Arc<SensorMetrics>>) -> impl IntoResponse {
    prometheus_text(m.render())
}

/// Bind `listen` and serve until `shutdown` resolves; the bound address.
pub async fn serve(
    listen: &str,
    sensor_metrics: Arc<SensorMetrics>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<std::net::SocketAddr> {
    let router = Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .with_state(sensor_metrics);
    Ok(serve_router(listen, router, shutdown).await?.0)
}
