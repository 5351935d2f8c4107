//! The console's HTTP side: pages for analysts, a JSON API for a SOC's tools, and
//! `POST /api/verdicts`, which writes exactly what `metapu feedback` writes.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, RwLock};

use axum::body::Bytes;
use axum::extract::{Extension, FromRequestParts, Path, Query, State};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;

use super::access::{cross_site, Access, Denied, COOKIE};
use super::desk::{verdict_name, Desk, VerdictError};
use super::guard::{Hosts, Peer};
use super::metrics::ConsoleMetrics;
use super::pages::{self, Viewer};
use super::views::{DeviceDetail, Filter, IncidentDetail, IncidentRow};
use crate::monitor::feedback::FeedbackMessage;
use crate::monitor::incidents::{Feedback, Verdict};

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
    /// The names it answers to.
    pub hosts: Hosts,
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
        .route("/login", get(login_page).post(sign_in))
        .route("/logout", post(sign_out))
        .route("/healthz", get(crate::endpoints::healthz))
        .route("/metrics", get(metrics))
        .layer(axum::middleware::from_fn_with_state(console.hosts.clone(), super::guard::guard))
        .with_state(console)
}

fn error(status: StatusCode, message: impl std::fmt::Display) -> Response {
    (status, Json(serde_json::json!({ "error": message.to_string() }))).into_response()
}

fn page(status: StatusCode, markup: maud::Markup) -> Response {
    (status, Html(markup.into_string())).into_response()
}

/// Who reads a page, taken from the request before its handler runs: without a token
/// where reading needs one, the sign-in page instead; a wrong one, the refusal.
pub struct PageReader(Viewer);

impl FromRequestParts<Console> for PageReader {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, c: &Console) -> Result<Self, Response> {
        match c.access.reader(&parts.headers, peer_of(parts).0) {
            Ok(analyst) => Ok(Self(Viewer { analyst, verdicts: !c.access.read_only() })),
            Err(Denied::NoToken) => Err(Redirect::to("/login").into_response()),
            Err(denied) => Err(denial_page(&c.metrics, denied)),
        }
    }
}

/// A reader of the API, taken from the request: refused as JSON.
pub struct ApiReader;

impl FromRequestParts<Console> for ApiReader {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, c: &Console) -> Result<Self, Response> {
        match c.access.reader(&parts.headers, peer_of(parts).0) {
            Ok(_) => Ok(Self),
            Err(denied) => {
                c.metrics.denied.with_label_values(&[denied.reason()]).inc();
                Err(error(denied.status(), denied))
            }
        }
    }
}

/// The caller's address as the guard found it.
fn peer_of(parts: &Parts) -> Peer {
    parts.extensions.get::<Peer>().copied().unwrap_or(Peer::UNKNOWN)
}

/// A refused page or sign-in: counted, and answered with the sign-in page saying why.
fn denial_page(metrics: &ConsoleMetrics, denied: Denied) -> Response {
    metrics.denied.with_label_values(&[denied.reason()]).inc();
    page(denied.status(), pages::login(Some(&denied.to_string())))
}

async fn incidents_page(
    State(c): State<Console>,
    PageReader(v): PageReader,
    Query(filter): Query<Filter>,
) -> Response {
    match filter.checked() {
        Ok(f) => page(StatusCode::OK, pages::incidents(&c.desk(), &f, &v)),
        Err(e) => page(StatusCode::BAD_REQUEST, pages::not_found(&e, &v)),
    }
}

async fn incident_page(
    State(c): State<Console>,
    PageReader(v): PageReader,
    Path(id): Path<String>,
) -> Response {
    let desk = c.desk();
    match desk.case(&id) {
        Some(case) => page(StatusCode::OK, pages::incident(&desk, case, &v)),
        None => page(StatusCode::NOT_FOUND, pages::not_found(&format!("no incident {id}"), &v)),
    }
}

async fn devices_page(State(c): State<Console>, PageReader(v): PageReader) -> Response {
    page(StatusCode::OK, pages::devices(&c.desk(), &v))
}

async fn device_page(
    State(c): State<Console>,
    PageReader(v): PageReader,
    Path(id): Path<String>,
) -> Response {
    let desk = c.desk();
    match desk.device(&id) {
        Some(d) => page(StatusCode::OK, pages::device(&desk, &id, d, &v)),
        None => page(StatusCode::NOT_FOUND, pages::not_found(&format!("no device {id}"), &v)),
    }
}

async fn login_page() -> Response {
    page(StatusCode::OK, pages::login(None))
}

/// How long a browser stays signed in.
const SESSION_S: u64 = 12 * 3_600;

/// `POST /login` (a form: `token=…`): the token is checked and kept in an HttpOnly,
/// SameSite=Strict cookie, which no script reads and no other site's request carries.
async fn sign_in(
    State(c): State<Console>,
    Extension(peer): Extension<Peer>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if cross_site(&headers) {
        return denial_page(&c.metrics, Denied::CrossSite);
    }
    let text = std::str::from_utf8(&body).unwrap_or_default();
    let token = text.split('&').find_map(|kv| kv.strip_prefix("token=")).unwrap_or_default();
    // Tokens are hex (`new_token`): anything else cannot be one, and could not be a cookie.
    if token.is_empty()
        || token.len() > 256
        || !token.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    {
        return page(StatusCode::BAD_REQUEST, pages::login(Some("that is not a token")));
    }
    match c.access.sign_in(token, peer.0) {
        Ok(analyst) => {
            tracing::info!(analyst = %analyst.name, role = analyst.role.as_str(), peer = %peer.0, "console: signed in");
            let cookie = format!("{COOKIE}={token}; Path=/; HttpOnly; SameSite=Strict; Max-Age={SESSION_S}");
            ([(header::SET_COOKIE, cookie)], Redirect::to("/")).into_response()
        }
        Err(denied) => denial_page(&c.metrics, denied),
    }
}

async fn sign_out(State(c): State<Console>, headers: HeaderMap) -> Response {
    if cross_site(&headers) {
        return denial_page(&c.metrics, Denied::CrossSite);
    }
    let cookie = format!("{COOKIE}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0");
    ([(header::SET_COOKIE, cookie)], Redirect::to("/login")).into_response()
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
        "POST /api/verdicts": "{\"incident_id\", \"verdict\": \"false_positive\"|\"confirmed\", \"note\", \"id\"} with Authorization: Bearer <token> (role answer); signed with the token's name",
        "auth": "every GET above needs Authorization: Bearer <token> (role read or answer), unless console.anonymous_reads on loopback",
        "docs": "docs/analysts.md, \"The console\"",
    }))
}

async fn api_incidents(State(c): State<Console>, _: ApiReader, Query(filter): Query<Filter>) -> Response {
    match filter.checked() {
        Ok(f) => Json(serde_json::json!({ "incidents": IncidentRow::list(&c.desk(), &f, API_ROWS) }))
            .into_response(),
        Err(e) => error(StatusCode::BAD_REQUEST, e),
    }
}

async fn api_incident(State(c): State<Console>, _: ApiReader, Path(id): Path<String>) -> Response {
    let desk = c.desk();
    match desk.case(&id) {
        Some(case) => Json(IncidentDetail::of(case)).into_response(),
        None => error(StatusCode::NOT_FOUND, format!("no incident {id}")),
    }
}

async fn api_device(State(c): State<Console>, _: ApiReader, Path(id): Path<String>) -> Response {
    let desk = c.desk();
    match desk.device(&id) {
        Some(d) => Json(DeviceDetail::of(&desk, &id, d)).into_response(),
        None => error(StatusCode::NOT_FOUND, format!("no device {id}")),
    }
}

/// `POST /api/verdicts`'s body. Who gives it is the token's name, never the body's.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VerdictRequest {
    pub incident_id: String,
    pub verdict: Verdict,
    #[serde(default)]
    pub note: String,
    /// If given, the incident's device: a mismatch is refused.
    #[serde(default)]
    pub device: Option<String>,
    /// The verdict's id (a tool's retry sends the same id: a replay changes nothing);
    /// one is made when none is given.
    #[serde(default)]
    pub id: Option<String>,
}

/// A verdict id a caller may give: 1-64 of letters, digits, `-` and `_`.
fn valid_id(id: &str) -> bool {
    (1..=64).contains(&id.len()) && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

async fn api_verdict(
    State(c): State<Console>,
    Extension(peer): Extension<Peer>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let refused = |status: StatusCode, why: String, result: &str| {
        c.metrics.verdicts.with_label_values(&[result]).inc();
        tracing::info!(result, reason = %why, peer = %peer.0, "verdict refused");
        error(status, why)
    };
    let analyst = match c.access.answerer(&headers, peer.0) {
        Ok(a) => a,
        Err(denied) => {
            c.metrics.denied.with_label_values(&[denied.reason()]).inc();
            return refused(denied.status(), denied.to_string(), "denied");
        }
    };
    if body.len() > FeedbackMessage::MAX_BYTES {
        let why = format!("a verdict is at most {} bytes", FeedbackMessage::MAX_BYTES);
        return refused(StatusCode::PAYLOAD_TOO_LARGE, why, "malformed");
    }
    let request: VerdictRequest = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => return refused(StatusCode::BAD_REQUEST, format!("malformed verdict: {e}"), "malformed"),
    };
    let id = request.id.unwrap_or_else(super::access::new_id);
    if !valid_id(&id) {
        return refused(
            StatusCode::BAD_REQUEST,
            "a verdict id is 1-64 of letters, digits, - and _".into(),
            "malformed",
        );
    }
    let checked = c.desk().check_verdict(
        &request.incident_id,
        request.device.as_deref(),
        request.verdict,
        &analyst.name,
        &request.note,
        &id,
    );
    let fb = match checked {
        Ok(fb) => Feedback { at: crate::wall_clock::unix_now(), from: format!("console {}", peer.0), ..fb },
        Err(e) => {
            let status = match e {
                VerdictError::UnknownIncident(_) => StatusCode::NOT_FOUND,
                VerdictError::Replayed { .. } | VerdictError::ReplayedId(_) => StatusCode::CONFLICT,
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
    tracing::info!(incident = %fb.incident_id, device = %fb.device, verdict = verdict_name(fb.verdict), by = %fb.by, id = %fb.id, from = %fb.from, "verdict sent");
    let body = serde_json::json!({
        "sent": true,
        "id": fb.id,
        "incident_id": fb.incident_id,
        "device": fb.device,
        "verdict": verdict_name(fb.verdict),
        "by": fb.by,
        "at": fb.at,
        "from": fb.from,
        "result": format!("/api/incidents/{}", fb.incident_id),
    });
    (StatusCode::ACCEPTED, Json(body)).into_response()
}
