//! HTTP endpoints: `/metrics` (Prometheus text), `/healthz` (the process answers),
//! `/readyz` (consuming with a model; 503 during broker outages and start-up).

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;

use crate::endpoints::{healthz, prometheus_text, serve_router};

use super::health::Health;
use super::Metrics;

#[derive(Clone)]
pub(crate) struct HttpState {
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) health: Arc<Health>,
}

async fn metrics(State(s): State<HttpState>) -> impl IntoResponse {
    prometheus_text(s.metrics.render())
}

async fn readyz(State(s): State<HttpState>) -> (StatusCode, &'static str) {
    if s.health.is_ready() {
        (StatusCode::OK, "ready\n")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready\n")
    }
}

pub(crate) fn router(state: HttpState) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(state)
}

/// Bind and serve until `shutdown` resolves. Returns the bound address (port 0 → actual).
pub(crate) async fn serve(
    listen: &str,
    state: HttpState,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<(std::net::SocketAddr, tokio::task::JoinHandle<()>)> {
    serve_router(listen, router(state), shutdown).await
}
