//! The console's HTTP side: pages for analysts, a JSON API for a SOC's tools, and
//! `POST /api/verdicts`, which writes exactly what `metapu feedback` writes.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, RwLock};

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;

use super::access::Access;
use super::desk::{verdict_name, Desk, VerdictError};
use super::metrics::ConsoleMetrics;
use super::pages;
use super::views::{DeviceDetail, Filter, IncidentDetail, IncidentRow};
use crate::monitor::feedback::{Feedback, FeedbackMessage, Verdict};

/// Where verdicts go: the feedback topic (`feed.rs`), or a test's list.
pub trait VerdictSink: Send + Sync {
    /// Deliver `fb` as a feedback-topic message keyed by its device.
    fn send(&self, fb: Feedback) -> Pin<Box<dyn Future<Output = Result<(), String>> + Send + '_>>;
}

/// What every handler shares.
#[derive(Clone)]
pub struct Console {
    pub desk: Arc<RwLock<Desk>>,
    pub access: Arc<Access>,
    pub sink: Arc<dyn VerdictSink>,
    pub metrics: Arc<ConsoleMetrics>,
}

impl Console {
    fn desk(&self) -> std::sync::RwLockReadGuard<'_, Desk> {
        self.desk.read().expect("the desk's lock is never poisoned: no handler panics holding it")
    }
}

/// Rows the API lists at most.
const API_ROWS: usize = 1_000;

pub fn router(console: Console) -> Router {
    Router::new()
        .route("/", get(incidents_page))
        .route("/incidents/{id}", get(incident_page))
        .route("/devices", get(devices_page))
        .route("/devices/{id}", get(device_page))
        .route("/assets/console.css", get(css))
        .route("/assets/console.js", get(js))
        .route("/api", get(api_index))
        .route("/api/incidents", get(api_incidents))
        .route("/api/incidents/{id}", get(api_incident))
        .route("/api/devices/{id}", get(api_device))
        .route("/api/verdicts", post(api_verdict))
        .route("/healthz", get(crate::endpoints::healthz))
        .route("/metrics", get(metrics))
        .with_state(console)
}

fn error(status: StatusCode, message: impl std::fmt::Display) -> Response {
    (status, Json(serde_json::json!({ "error": message.to_string() }))).into_response()
}

fn page(status: StatusCode, markup: maud::Markup) -> Response {
    (status, Html(markup.into_string())).into_response()
}

async fn incidents_page(State(c): State<Console>, Query(filter): Query<Filter>) -> Response {
    let read_only = c.access.read_only();
    match filter.checked() {
        Ok(f) => page(StatusCode::OK, pages::incidents(&c.desk(), &f, read_only)),
        Err(e) => page(StatusCode::BAD_REQUEST, pages::not_found(&e, read_only)),
    }
}

async fn incident_page(State(c): State<Console>, Path(id): Path<String>) -> Response {
    let desk = c.desk();
    let read_only = c.access.read_only();
    match desk.case(&id) {
        Some(case) => page(StatusCode::OK, pages::incident(&desk, case, read_only)),
        None => page(StatusCode::NOT_FOUND, pages::not_found(&format!("no incident {id}"), read_only)),
    }
}

async fn devices_page(State(c): State<Console>) -> Response {
    page(StatusCode::OK, pages::devices(&c.desk(), c.access.read_only()))
}

async fn device_page(State(c): State<Console>, Path(id): Path<String>) -> Response {
    let desk = c.desk();
    let read_only = c.access.read_only();
    match desk.device(&id) {
        Some(d) => page(StatusCode::OK, pages::device(&desk, &id, d, read_only)),
        None => page(StatusCode::NOT_FOUND, pages::not_found(&format!("no device {id}"), read_only)),
    }
}

async fn css() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "text/css; charset=utf-8")], include_str!("assets/console.css"))
}

async fn js() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "text/javascript; charset=utf-8")], include_str!("assets/console.js"))
}

async fn metrics(State(c): State<Console>) -> impl IntoResponse {
    c.metrics.incidents.set(c.desk().incident_count() as i64);
    crate::endpoints::prometheus_text(c.metrics.render())
}

async fn api_index() -> impl IntoResponse {
    Json(serde_json::json!({
        "GET /api/incidents": "incidents, open first then newest: ?state=open|all&since=UNIX&device=&kind=&severity=&limit=",
        "GET /api/incidents/{id}": "one incident: its row, events and newest report",
        "GET /api/devices/{id}": "one device: its prior, alerts by day, adaptation points, remembered behaviours",
        "POST /api/verdicts": "{\"incident_id\", \"verdict\": \"false_positive\"|\"confirmed\", \"by\", \"note\"} with Authorization: Bearer <token>",
        "docs": "docs/analysts.md, \"The console\"",
    }))
}

async fn api_incidents(State(c): State<Console>, Query(filter): Query<Filter>) -> Response {
    match filter.checked() {
        Ok(f) => Json(serde_json::json!({ "incidents": IncidentRow::list(&c.desk(), &f, API_ROWS) }))
            .into_response(),
        Err(e) => error(StatusCode::BAD_REQUEST, e),
    }
}

async fn api_incident(State(c): State<Console>, Path(id): Path<String>) -> Response {
    let desk = c.desk();
    match desk.case(&id) {
        Some(case) => Json(IncidentDetail::of(case)).into_response(),
        None => error(StatusCode::NOT_FOUND, format!("no incident {id}")),
    }
}

async fn api_device(State(c): State<Console>, Path(id): Path<String>) -> Response {
    let desk = c.desk();
    match desk.device(&id) {
        Some(d) => Json(DeviceDetail::of(&desk, &id, d)).into_response(),
        None => error(StatusCode::NOT_FOUND, format!("no device {id}")),
    }
}

/// `POST /api/verdicts`'s body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VerdictRequest {
    pub incident_id: String,
    pub verdict: Verdict,
    pub by: String,
    #[serde(default)]
    pub note: String,
    /// If given, the incident's device: a mismatch is refused.
    #[serde(default)]
    pub device: Option<String>,
}

async fn api_verdict(State(c): State<Console>, headers: HeaderMap, body: Bytes) -> Response {
    let refused = |status: StatusCode, why: String, result: &str| {
        c.metrics.verdicts.with_label_values(&[result]).inc();
        tracing::info!(result, reason = %why, "verdict refused");
        error(status, why)
    };
    if let Err(denied) = c.access.check(&headers) {
        return refused(denied.status(), denied.to_string(), "denied");
    }
    if body.len() > FeedbackMessage::MAX_BYTES {
        let why = format!("a verdict is at most {} bytes", FeedbackMessage::MAX_BYTES);
        return refused(StatusCode::PAYLOAD_TOO_LARGE, why, "malformed");
    }
    let request: VerdictRequest = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => return refused(StatusCode::BAD_REQUEST, format!("malformed verdict: {e}"), "malformed"),
    };
    let checked = c.desk().check_verdict(
        &request.incident_id,
        request.device.as_deref(),
        request.verdict,
        &request.by,
        &request.note,
    );
    let fb = match checked {
        Ok(fb) => fb,
        Err(e) => {
            let status = match e {
                VerdictError::UnknownIncident(_) => StatusCode::NOT_FOUND,
                VerdictError::Replayed { .. } => StatusCode::CONFLICT,
                VerdictError::WrongDevice { .. } | VerdictError::Anonymous => StatusCode::BAD_REQUEST,
            };
            return refused(status, e.to_string(), "refused");
        }
    };
    if let Err(e) = c.sink.send(fb.clone()).await {
        return refused(StatusCode::SERVICE_UNAVAILABLE, format!("not sent: {e}"), "undelivered");
    }
    c.desk.write().expect("the desk's lock is never poisoned").sent(&fb, crate::wall_clock::unix_now());
    c.metrics.verdicts.with_label_values(&["sent"]).inc();
    tracing::info!(incident = %fb.incident_id, device = %fb.device, verdict = verdict_name(fb.verdict), by = %fb.by, "verdict sent");
    let body = serde_json::json!({
        "sent": true,
        "incident_id": fb.incident_id,
        "device": fb.device,
        "verdict": verdict_name(fb.verdict),
        "by": fb.by,
        "result": format!("/api/incidents/{}", fb.incident_id),
    });
    (StatusCode::ACCEPTED, Json(body)).into_response()
}
