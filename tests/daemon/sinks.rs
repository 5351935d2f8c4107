//! Incident events to real receivers started here — an HTTP server that records every
//! request and fails on demand, and a TCP syslog receiver that is not listening at
//! first: every event of the incidents topic arrives at each once, in order per device,
//! after the receivers' outage too; the sinks retried meanwhile and said so in metrics.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use tokio::io::AsyncReadExt;

use super::mock::mock;
use crate::support::*;
use metapu::daemon;
use metapu::daemon::sinks::SinkFormat;
use metapu::data::Label;

/// What the webhook receiver was sent, and whether it fails.
#[derive(Default)]
struct Hook {
    failing: AtomicBool,
    requests: Mutex<Vec<(HeaderMap, serde_json::Value)>>,
}

async fn receive(State(hook): State<Arc<Hook>>, headers: HeaderMap, body: String) -> StatusCode {
    if hook.failing.load(Ordering::SeqCst) {
        return StatusCode::SERVICE_UNAVAILABLE;
    }
    let value = serde_json::from_str(&body).expect("the webhook sends JSON");
    hook.requests.lock().unwrap().push((headers, value));
    StatusCode::OK
}

/// A syslog receiver on `port`: octet-counted RFC 5424 frames, in arrival order.
async fn syslog_receiver(port: u16, frames: Arc<Mutex<Vec<String>>>) {
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await.unwrap();
    loop {
        let (mut socket, _) = listener.accept().await.unwrap();
        let frames = Arc::clone(&frames);
        tokio::spawn(async move {
            let mut buf = Vec::new();
            let mut chunk = [0u8; 8192];
            while let Ok(n) = socket.read(&mut chunk).await {
                if n == 0 {
                    break;
                }
                buf.extend_from_slice(&chunk[..n]);
                // "LEN SP MSG" frames, as many as are whole.
                while let Some(space) = buf.iter().position(|&b| b == b' ') {
                    let len: usize = std::str::from_utf8(&buf[..space]).unwrap().parse().unwrap();
                    if buf.len() < space + 1 + len {
                        break;
                    }
                    let frame = String::from_utf8(buf[space + 1..space + 1 + len].to_vec()).unwrap();
                    frames.lock().unwrap().push(frame);
                    buf.drain(..space + 1 + len);
                }
            }
        });
    }
}

/// A device's 8 known-normal records, then `attacks` attack records (an incident
/// opens), 50 ms apart.
async fn onboard_then_attack(
    p: &rdkafka::producer::FutureProducer,
    topic: &str,
    device: &str,
    attacks: usize,
    t0: f64,
) {
    let fx = fixture();
    let (normal, attack) = (fx.rows(1, Label::Positive), fx.rows(1, Label::Negative));
    for (i, row) in normal.iter().take(8).enumerate() {
        send_record(p, topic, device, t0 + i as f64, row, true).await;
    }
    for (i, row) in attack.iter().take(attacks).enumerate() {
        send_record(p, topic, device, t0 + 10.0 + 0.05 * i as f64, row, false).await;
    }
}

/// (device, event, incident id, records) of an event, metapu's or under an ECS document.
fn key_of(v: &serde_json::Value) -> (String, String, String, u64) {
    let v = if v.get("metapu").is_some() { &v["metapu"] } else { v };
    (
        v["device"].as_str().unwrap_or_default().to_string(),
        v["event"].as_str().unwrap_or_default().to_string(),
        v["incident_id"].as_str().unwrap_or_default().to_string(),
        v["records"].as_u64().unwrap_or(0),
    )
}

fn by_device(keys: Vec<(String, String, String, u64)>) -> BTreeMap<String, Vec<(String, String, u64)>> {
    let mut out: BTreeMap<String, Vec<_>> = BTreeMap::new();
    for (device, event, id, records) in keys {
        out.entry(device).or_default().push((event, id, records));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_incident_event_reaches_a_webhook_and_syslog_once_in_order_after_their_outage() {
    let cluster = mock("sk", 1);
    let boot = cluster.bootstrap_servers();
    let hook = Arc::new(Hook { failing: AtomicBool::new(true), ..Hook::default() });
    let app = axum::Router::new().route("/hook", axum::routing::post(receive)).with_state(Arc::clone(&hook));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let hook_addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let syslog_port = free_port(); // nothing listens on it yet

    let mut cfg = daemon_config(&boot, "sk");
    cfg.incidents.quiet_s = 2;
    cfg.incidents.update_interval_s = 1;
    cfg.sinks.webhook.url = format!("http://{hook_addr}/hook");
    cfg.sinks.webhook.headers.insert("X-Source".into(), "metapu-test".into());
    cfg.sinks.syslog.address = format!("127.0.0.1:{syslog_port}");
    cfg.sinks.syslog.format = SinkFormat::Metapu;
    let daemon = daemon::start(cfg.clone()).await.unwrap();
    let p = producer(&boot);

    // Two devices, each: known-normal records, then an attack (an incident opens), then
    // silence (it closes after 2 s). The second's records come after the first's on
    // their partition's time, as records on one partition do.
    for (device, t0) in [("cam-1", 0.0), ("cam-2", 20.0)] {
        onboard_then_attack(&p, "sk.features", device, 40, t0).await;
    }
    let closed = |m: &[(Option<String>, Vec<u8>)]| {
        json_values(m).iter().filter(|e| e["event"] == "closed").count() >= 2
    };
    let messages = read_topic(&boot, "sk.incidents", Duration::from_secs(40), closed);
    assert!(closed(&messages), "both incidents close: {:?}", json_values(&messages));
    let topic = json_values(&messages);
    let expected = by_device(topic.iter().map(key_of).collect());

    // The receivers have been down meanwhile: the sinks retried.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let body = http_get(daemon.http_addr, "/metrics").1;
    for sink in ["webhook", "syslog"] {
        let retried =
            metric(&body, &format!("metapu_sink_events_total{{result=\"retried\",sink=\"{sink}\"}}"));
        assert!(retried.unwrap_or(0.0) >= 1.0, "{sink} retried: {body}");
    }
    hook.failing.store(false, Ordering::SeqCst);
    let frames = Arc::new(Mutex::new(Vec::new()));
    tokio::spawn(syslog_receiver(syslog_port, Arc::clone(&frames)));

    let total = topic.len();
    let arrived = wait_until(Duration::from_secs(60), || {
        hook.requests.lock().unwrap().len() >= total && frames.lock().unwrap().len() >= total
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await; // nothing more should come
    let requests = hook.requests.lock().unwrap().clone();
    let frames = frames.lock().unwrap().clone();
    assert!(arrived, "{} webhook requests and {} syslog frames of {total}", requests.len(), frames.len());

    // The webhook: ECS documents (checked against their schema), our header, each event once.
    assert!(requests.iter().all(|(h, _)| h.get("x-source").is_some_and(|v| v == "metapu-test")));
    for (_, doc) in &requests {
        assert_eq!(doc["event"]["dataset"], "metapu.incidents", "{doc}");
        schema::check_incident_event(&serde_json::to_vec(&doc["metapu"]).unwrap());
    }
    assert_eq!(by_device(requests.iter().map(|(_, d)| key_of(d)).collect()), expected, "webhook");

    // Syslog: RFC 5424 frames whose MSG is the event as on the incidents topic.
    let parsed: Vec<serde_json::Value> = frames
        .iter()
        .map(|f| {
            assert!(f.starts_with('<') && f.contains(">1 "), "{f}");
            assert!(f.contains(" metapu ") && f.contains("[metapu@32473 device=\"cam-"), "{f}");
            serde_json::from_str(&f[f.find("] {").expect("structured data, then JSON") + 2..]).unwrap()
        })
        .collect();
    assert_eq!(by_device(parsed.iter().map(key_of).collect()), expected, "syslog");

    let body = http_get(daemon.http_addr, "/metrics").1;
    for sink in ["webhook", "syslog"] {
        let delivered =
            metric(&body, &format!("metapu_sink_events_total{{result=\"delivered\",sink=\"{sink}\"}}"));
        assert_eq!(delivered, Some(total as f64), "{sink}");
    }
    stop(daemon).await;
}

/// A receiver that refuses an event for good (HTTP 400) does not hold up the rest: the
/// event goes to the dead-letter topic, with the reason, and is counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_the_webhook_refuses_is_dead_lettered() {
    let cluster = mock("sr", 1);
    let boot = cluster.bootstrap_servers();
    let app = axum::Router::new()
        .route("/hook", axum::routing::post(|| async { (StatusCode::BAD_REQUEST, "no thanks") }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let mut cfg = daemon_config(&boot, "sr");
    cfg.sinks.webhook.url = format!("http://{addr}/hook");
    let daemon = daemon::start(cfg.clone()).await.unwrap();
    let p = producer(&boot);
    onboard_then_attack(&p, "sr.features", "cam", 30, 0.0).await;
    let dead = json_values(&read_topic(&boot, "sr.deadletter", Duration::from_secs(30), |m| {
        json_values(m).iter().any(|d| d["kind"] == "sink_rejected")
    }));
    let letter = dead.iter().find(|d| d["kind"] == "sink_rejected").expect("a sink_rejected dead letter");
    assert!(letter["reason"].as_str().unwrap().contains("HTTP 400"), "{letter}");
    assert!(letter["payload"].as_str().unwrap().contains("\"event\":\"opened\""), "{letter}");
    let body = http_get(daemon.http_addr, "/metrics").1;
    assert!(
        metric(&body, "metapu_sink_events_total{result=\"rejected\",sink=\"webhook\"}").unwrap_or(0.0) >= 1.0
    );
    stop(daemon).await;
}

/// Syslog over TLS (RFC 5425) to a receiver with a certificate the daemon is told to
/// trust (`ca_file`): the incident's events arrive, octet-counted, inside the TLS session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn syslog_over_tls_reaches_a_receiver_with_its_own_ca() {
    use tokio_rustls::rustls;
    let cluster = mock("st", 1);
    let boot = cluster.bootstrap_servers();
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let ca_file = dir.path().join("ca.pem");
    std::fs::write(&ca_file, cert.cert.pem()).unwrap();
    let server =
        rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(
                vec![cert.cert.der().clone()],
                rustls_pki_types::PrivateKeyDer::Pkcs8(cert.signing_key.serialize_der().into()),
            )
            .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(server));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let received = Arc::new(Mutex::new(Vec::<u8>::new()));
    let sink = Arc::clone(&received);
    tokio::spawn(async move {
        loop {
            let (tcp, _) = listener.accept().await.unwrap();
            let (acceptor, sink) = (acceptor.clone(), Arc::clone(&sink));
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else { return };
                let mut chunk = [0u8; 8192];
                while let Ok(n) = tls.read(&mut chunk).await {
                    if n == 0 {
                        break;
                    }
                    sink.lock().unwrap().extend_from_slice(&chunk[..n]);
                }
            });
        }
    });
    let mut cfg = daemon_config(&boot, "st");
    cfg.sinks.syslog.address = format!("localhost:{port}");
    cfg.sinks.syslog.tls = true;
    cfg.sinks.syslog.ca_file = ca_file.to_string_lossy().into_owned();
    let daemon = daemon::start(cfg.clone()).await.unwrap();
    let p = producer(&boot);
    onboard_then_attack(&p, "st.features", "cam", 30, 0.0).await;
    let arrived = wait_until(Duration::from_secs(30), || {
        String::from_utf8_lossy(&received.lock().unwrap()).contains("incident-opened")
    })
    .await;
    let text = String::from_utf8_lossy(&received.lock().unwrap()).into_owned();
    assert!(arrived, "{text}");
    let (len, rest) = text.split_once(' ').unwrap();
    let frame = &rest[..len.parse::<usize>().unwrap()];
    assert!(
        frame.starts_with('<') && frame.contains(" incident-opened [metapu@32473 device=\"cam\"] {"),
        "{frame}"
    );
    let doc: serde_json::Value = serde_json::from_str(&frame[frame.find("] {").unwrap() + 2..]).unwrap();
    assert_eq!(doc["event"]["kind"], "alert", "the ECS form by default: {doc}");
    stop(daemon).await;
}
