//! The console's HTTP side under bad input: thousands of requests with malformed JSON,
//! huge bodies, odd unicode in names, notes and paths, unknown incidents and fields,
//! wrong methods, content types, tokens and host names, sent through the console's own
//! router (the guard, the handlers, the desk). Each gets a clear 4xx or a page; none
//! gets a 5xx, and not one reaches the feedback topic or changes the desk.

use std::sync::{Arc, Mutex, RwLock};

use axum::body::Body;
use axum::http::{Request, StatusCode};
use metapu::console::access::{Access, Role};
use metapu::console::desk::Desk;
use metapu::console::guard::Hosts;
use metapu::console::http::{router, Console, VerdictSink};
use metapu::console::metrics::ConsoleMetrics;
use metapu::monitor::incidents::Feedback;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use tower::ServiceExt;

const ANA: &str = "ana-answers-0123456789abcdef";
const RUI: &str = "rui-reads-0123456789abcdef";
/// Requests per run (each takes about 70 µs through the router).
const CASES: u32 = 10_000;

/// The feedback topic as a list.
#[derive(Default)]
struct Recorded(Mutex<Vec<Feedback>>);

impl VerdictSink for Recorded {
    fn send(
        &self,
        fb: Feedback,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), String>> + Send + '_>> {
        self.0.lock().unwrap().push(fb);
        Box::pin(async { Ok(()) })
    }
}

/// A desk holding one open incident, `i1` on `cam`.
fn desk() -> Desk {
    let mut event: serde_json::Value =
        serde_json::from_str(include_str!("../../benches/console_incident.json")).unwrap();
    event["incident_id"] = "i1".into();
    event["device"] = "cam".into();
    let mut desk = Desk::new(100);
    desk.incident_event(event.to_string().as_bytes()).expect("an incident event");
    desk
}

/// A request as a caller might send it.
#[derive(Debug, Clone)]
struct Sent {
    method: &'static str,
    path: String,
    content_type: Option<String>,
    token: Option<String>,
    cookie: bool,
    host: Option<String>,
    origin: Option<String>,
    /// The caller's address, of a few hundred (wrong tokens are throttled per address).
    peer: u8,
    body: Vec<u8>,
}

fn odd_text() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        "[\\u{0}-\\u{7f}]{0,40}",
        Just("\u{202e}evil\u{200b}\u{feff}".to_string()),
        Just("a".repeat(70_000)),
        Just("<script>alert(1)</script>".to_string()),
        Just("../../etc/passwd".to_string()),
    ]
}

fn bodies() -> impl Strategy<Value = Vec<u8>> {
    let verdict = (
        prop_oneof![odd_text(), Just("nope".to_string())].prop_filter("another incident", |i| i != "i1"),
        prop_oneof![Just("false_positive"), Just("confirmed"), Just("maybe"), Just("")],
        odd_text(),
        proptest::option::of(odd_text()),
        proptest::option::of(odd_text()),
        proptest::bool::ANY,
    )
        .prop_map(|(incident, verdict, note, by, id, extra)| {
            let mut v = serde_json::json!({ "incident_id": incident, "verdict": verdict, "note": note });
            if let Some(by) = by {
                v["by"] = by.into(); // never the caller's to say
            }
            if let Some(id) = id {
                v["id"] = id.into();
            }
            if extra {
                v["unknown"] = 1.into();
            }
            v.to_string().into_bytes()
        });
    // The known incident, right in every way but one: its id is no id.
    let bad_id = odd_text()
        .prop_filter("not a valid id", |id| {
            id.is_empty()
                || id.len() > 64
                || !id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
        .prop_map(|id| {
            serde_json::json!({ "incident_id": "i1", "verdict": "confirmed", "id": id })
                .to_string()
                .into_bytes()
        });
    prop_oneof![
        verdict,
        bad_id,
        proptest::collection::vec(any::<u8>(), 0..512),
        odd_text().prop_map(String::into_bytes),
        Just(b"{\"incident_id\":".to_vec()),
        Just(vec![b'{'; 200_000]),
        Just(b"token=not-a-token-of-anyone".to_vec()),
        Just(b"token=%00%ff".to_vec()),
    ]
}

fn requests() -> impl Strategy<Value = Sent> {
    let method = prop_oneof![
        Just("GET"),
        Just("POST"),
        Just("POST"),
        Just("POST"),
        Just("PUT"),
        Just("DELETE"),
        Just("PATCH"),
        Just("OPTIONS"),
        Just("HEAD")
    ];
    let path = prop_oneof![
        1 => Just("/".to_string()),
        4 => Just("/api/verdicts".to_string()),
        1 => Just("/incidents/i1".to_string()),
        1 => Just("/devices/cam".to_string()),
        1 => Just("/api/incidents?state=all&limit=5".to_string()),
        1 => Just("/api/incidents?limit=-1&since=x".to_string()),
        1 => Just("/login".to_string()),
        1 => Just("/logout".to_string()),
        1 => "[a-zA-Z0-9/_%.-]{0,30}".prop_map(|p| format!("/incidents/{p}")),
        1 => "[a-zA-Z0-9/_%.?&=-]{0,30}".prop_map(|p| format!("/{p}")),
        1 => "[a-z%0-9]{0,20}".prop_map(|p| format!("/api/devices/{p}")),
    ];
    let content_type = proptest::option::of(prop_oneof![
        Just("application/json".to_string()),
        Just("application/x-www-form-urlencoded".to_string()),
        Just("text/plain".to_string()),
        Just("multipart/form-data; boundary=x".to_string()),
        "[ -~]{0,30}",
    ]);
    let token = proptest::option::of(prop_oneof![
        Just(ANA.to_string()),
        Just(ANA.to_string()),
        Just(RUI.to_string()),
        Just("guess".to_string()),
        "[ -~]{0,80}",
    ]);
    // Mostly the console's own name, so that most requests reach the handlers.
    let host = prop_oneof![
        8 => Just(Some("127.0.0.1:9899".to_string())),
        1 => Just(Some("localhost:9899".to_string())),
        1 => Just(Some("rebound.evil.example".to_string())),
        1 => "[a-z0-9.:\\[\\]]{0,30}".prop_map(Some),
        1 => Just(None),
    ];
    let origin = proptest::option::of(prop_oneof![
        Just("http://127.0.0.1:9899".to_string()),
        Just("https://evil.example".to_string()),
        Just("null".to_string()),
    ]);
    (method, path, content_type, token, any::<bool>(), host, origin, any::<u8>(), bodies()).prop_map(
        |(method, path, content_type, token, cookie, host, origin, peer, body)| Sent {
            method,
            path,
            content_type,
            token,
            cookie,
            host,
            origin,
            peer,
            body,
        },
    )
}

fn request(s: &Sent) -> Option<Request<Body>> {
    let mut r = Request::builder().method(s.method).uri(&s.path);
    if let Some(c) = &s.content_type {
        r = r.header("content-type", c);
    }
    if let Some(t) = &s.token {
        r = if s.cookie {
            r.header("cookie", format!("metapu_token={t}"))
        } else {
            r.header("authorization", format!("Bearer {t}"))
        };
    }
    if let Some(h) = &s.host {
        r = r.header("host", h);
    }
    if let Some(o) = &s.origin {
        r = r.header("origin", o);
    }
    // A header value the HTTP layer itself refuses never reaches the console.
    let mut request = r.body(Body::from(s.body.clone())).ok()?;
    let peer = std::net::SocketAddr::from(([10, 9, 0, s.peer], 40_000));
    request.extensions_mut().insert(axum::extract::ConnectInfo(peer));
    Some(request)
}

#[test]
fn bad_requests_get_a_clear_4xx_and_change_nothing() {
    let sink = Arc::new(Recorded::default());
    let desk = Arc::new(RwLock::new(desk()));
    let console = Console {
        desk: desk.clone(),
        access: Arc::new(Access::with_analysts(
            &[("ana", Role::Answer, ANA), ("rui", Role::Read, RUI)],
            false,
        )),
        sink: sink.clone(),
        metrics: Arc::new(ConsoleMetrics::default()),
        hosts: Hosts::new(&[]),
    };
    let app = router(console);
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let before = serde_json::to_string(&desk.read().unwrap().case("i1").unwrap().report).unwrap();
    let statuses = std::cell::RefCell::new(std::collections::BTreeMap::<u16, u32>::new());
    let test = |s: Sent| -> Result<(), TestCaseError> {
        let Some(req) = request(&s) else { return Ok(()) };
        let response = runtime.block_on(app.clone().oneshot(req)).unwrap();
        let status = response.status();
        *statuses.borrow_mut().entry(status.as_u16()).or_default() += 1;
        prop_assert!(!status.is_server_error(), "{status} for {s:?}");
        if s.method != "GET" && s.method != "HEAD" {
            // Nothing but a page, a sign-in's redirect or a refusal: no verdict was sent.
            prop_assert!(
                status.is_client_error() || status == StatusCode::SEE_OTHER || status == StatusCode::OK,
                "{status} for {s:?}"
            );
        }
        if s.path == "/api/verdicts" && s.method == "POST" && status != StatusCode::MISDIRECTED_REQUEST {
            let body = runtime.block_on(axum::body::to_bytes(response.into_body(), 1 << 20)).unwrap();
            let answer: serde_json::Value = serde_json::from_slice(&body)
                .map_err(|e| TestCaseError::fail(format!("{status}: not JSON ({e}) for {s:?}")))?;
            prop_assert!(answer["error"].as_str().is_some_and(|e| !e.is_empty()), "{answer}");
        }
        prop_assert!(sink.0.lock().unwrap().is_empty(), "a verdict went out for {s:?}");
        Ok(())
    };
    let mut runner = TestRunner::new(Config { cases: CASES, failure_persistence: None, ..Config::default() });
    if let Err(e) = runner.run(&requests(), test) {
        panic!("{e}");
    }
    let desk = desk.read().unwrap();
    let case = desk.case("i1").unwrap();
    assert_eq!(serde_json::to_string(&case.report).unwrap(), before, "the incident is as it was");
    assert!(case.sent.is_empty() && case.refused.is_empty());
    eprintln!("console API: {CASES} requests, statuses {:?}", statuses.borrow());
}
