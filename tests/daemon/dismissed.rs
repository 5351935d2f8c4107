//! What an analyst dismissed, through the real broker: the behaviour (a camera's upload
//! to its cloud) is remembered from one `metapu feedback --false-positive`; when it
//! comes back it is recorded as `suppressed` on the incidents topic and counted, not
//! raised; ten times the volume to the same peer is raised as news, under the same
//! incident, saying why. The memory is the device's state: it holds across a restart
//! of the daemon.

use std::time::Duration;

use crate::support::*;
use metapu::daemon;
use metapu::data::Label;

/// A record of `row` whose packet went from the camera to `peer`:443 with `bytes`.
fn record(ts: f64, row: &[f32], normal: bool, peer: &str, bytes: u32) -> Vec<u8> {
    outbound_record(ts, row, normal, ("10.0.0.5", peer, 443), bytes)
}

/// A topic's messages as `read_topic` returns them: (key, value).
type Messages = [(Option<String>, Vec<u8>)];

fn events(m: &Messages, kind: &str) -> Vec<serde_json::Value> {
    json_values(m).into_iter().filter(|v| v["event"] == kind).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dismissed_behaviour_returns_suppressed_and_ten_times_its_volume_is_raised() {
    let fx = fixture();
    let broker = Broker::start();
    let boot = broker.bootstrap();
    let tag = "dismissed";
    let mut cfg = daemon_config(&boot, tag);
    cfg.incidents.open_k = 3;
    cfg.incidents.open_n = 5;
    let first = daemon::start(cfg.clone()).await.expect("daemon starts");
    let p = producer(&boot);
    let input = cfg.kafka.input_topics[0].clone();
    let (normal, upload) = (fx.rows(0, Label::Positive), fx.rows(0, Label::Negative));
    let cloud = "52.1.2.3";
    let mut ts = 1.7e9;
    let mut send_rows = |rows: &[Vec<f32>], known: bool, bytes: u32| {
        let values: Vec<Vec<u8>> = rows
            .iter()
            .map(|r| {
                ts += 1.0;
                record(ts, r, known, cloud, bytes)
            })
            .collect();
        let (p, input) = (&p, &input);
        async move {
            for v in values {
                send(p, input, Some("cam"), &v).await;
            }
        }
    };
    let incidents = |done: &dyn Fn(&Messages) -> bool| {
        read_topic(&boot, &cfg.kafka.incidents_topic, Duration::from_secs(30), done)
    };

    // Onboarded, normal traffic, then the nightly upload: an incident.
    send_rows(&normal[..10], true, 200).await;
    send_rows(&normal[10..30], false, 200).await;
    send_rows(&upload[..15], false, 1_000).await;
    let got = incidents(&|m| !events(m, "opened").is_empty());
    let id = events(&got, "opened")[0]["incident_id"].as_str().expect("an incident").to_string();

    // The analyst dismisses it.
    metapu_verdict(
        (&boot, &cfg.kafka.feedback_topic),
        "cam",
        &id,
        "--false-positive",
        "ana",
        "nightly upload",
    );
    let got = incidents(&|m| !events(m, "closed").is_empty());
    assert_eq!(events(&got, "closed")[0]["resolution"], "dismissed");
    // A restart: the device's state, the memory with it, comes back from the state topic.
    first.shutdown().await.unwrap();
    let daemon = daemon::start(cfg.clone()).await.expect("daemon starts again");

    // The next night: the same upload. Recorded as suppressed, with whose verdict.
    send_rows(&normal[30..50], false, 200).await;
    send_rows(&upload[15..30], false, 1_000).await;
    let got = incidents(&|m| !events(m, "suppressed").is_empty());
    let suppressed = events(&got, "suppressed");
    let names: Vec<String> =
        json_values(&got).iter().map(|e| format!("{} {}", e["event"], e["summary"])).collect();
    let Some(s) = suppressed.first() else { panic!("no suppressed event: {names:#?}") };
    assert_eq!(s["suppressed"]["incident_id"], id.as_str(), "{s}");
    assert_eq!(
        (s["suppressed"]["by"].as_str(), s["suppressed"]["note"].as_str()),
        (Some("ana"), Some("nightly upload"))
    );
    assert_eq!(events(&got, "opened").len(), 1, "nothing raised but the first upload");

    // Ten times the volume to the same peer: raised, under the suppressed incident's id.
    send_rows(&upload[30..60], false, 10_000).await;
    let got = incidents(&|m| events(m, "opened").len() >= 2);
    let opened = events(&got, "opened");
    let [_, news] = &opened[..] else { panic!("one more incident raised: {opened:?}") };
    assert_eq!(news["incident_id"], s["incident_id"]);
    let why = news["news"]["why"].as_str().expect("why it is news");
    assert!(why.contains("bytes") && why.contains(&id), "{why}");
    assert!(news.get("suppressed").is_none(), "{news}");

    let body = http_get(daemon.http_addr, "/metrics").1;
    assert_eq!(metric(&body, "metapu_incident_events_total{event=\"suppressed\"}"), Some(1.0));
    assert_eq!(metric(&body, "metapu_incident_events_total{event=\"opened\"}"), Some(1.0), "the news");
    daemon.shutdown().await.unwrap();
}

/// Without an analyst: an incident that closes quietly, unanswered, is learned (its close
/// says so), and a `confirmed` verdict on it undoes that: its return is raised. Learned
/// again, the next return is recorded as suppressed by "metapu".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unanswered_behaviour_is_learned_said_so_and_undone_by_a_confirmed_verdict() {
    let fx = fixture();
    let broker = Broker::start();
    let boot = broker.bootstrap();
    let tag = "learned";
    let mut cfg = daemon_config(&boot, tag);
    cfg.incidents.open_k = 3;
    cfg.incidents.open_n = 5;
    cfg.incidents.quiet_s = 5;
    cfg.incidents.reopen_s = 0;
    let daemon = daemon::start(cfg.clone()).await.expect("daemon starts");
    let p = producer(&boot);
    let input = cfg.kafka.input_topics[0].clone();
    let (normal, upload) = (fx.rows(0, Label::Positive), fx.rows(0, Label::Negative));
    let mut ts = 1.7e9;
    let mut send_rows = |rows: &[Vec<f32>], known: bool, bytes: u32, gap: f64| {
        ts += gap;
        let values: Vec<Vec<u8>> = rows
            .iter()
            .map(|r| {
                ts += 1.0;
                record(ts, r, known, "52.1.2.3", bytes)
            })
            .collect();
        let (p, input) = (&p, &input);
        async move {
            for v in values {
                send(p, input, Some("cam"), &v).await;
            }
        }
    };
    let incidents = |done: &dyn Fn(&Messages) -> bool| {
        read_topic(&boot, &cfg.kafka.incidents_topic, Duration::from_secs(30), done)
    };
    send_rows(&normal[..10], true, 200, 0.0).await;
    send_rows(&normal[10..30], false, 200, 0.0).await;
    send_rows(&upload[..15], false, 1_000, 0.0).await;
    // Quiet afterwards (its time moves on with normal records): it closes, learned.
    send_rows(&normal[30..35], false, 200, 60.0).await;
    let got = incidents(&|m| !events(m, "closed").is_empty());
    let closed = &events(&got, "closed")[0];
    assert_eq!(
        (closed["resolution"].as_str(), closed["learned"].as_bool()),
        (Some("quiet"), Some(true)),
        "{closed}"
    );
    let first = closed["incident_id"].as_str().unwrap().to_string();

    // An analyst says it was an attack: what was learned goes, and its return is raised.
    metapu_verdict((&boot, &cfg.kafka.feedback_topic), "cam", &first, "--confirmed", "ana", "");
    let got = incidents(&|m| !events(m, "reviewed").is_empty());
    assert!(events(&got, "reviewed")[0].get("learned").is_none(), "undone");
    send_rows(&upload[15..30], false, 1_000, 600.0).await;
    let got = incidents(&|m| events(m, "opened").len() >= 2);
    assert!(events(&got, "suppressed").is_empty());
    // Unanswered this time: learned, and the next return is recorded, not raised.
    send_rows(&normal[35..40], false, 200, 60.0).await;
    let got = incidents(&|m| events(m, "closed").len() >= 2);
    let second = events(&got, "closed")[1]["incident_id"].as_str().unwrap().to_string();
    send_rows(&upload[30..45], false, 1_000, 600.0).await;
    let got = incidents(&|m| !events(m, "suppressed").is_empty());
    let s = &events(&got, "suppressed")[0];
    assert_eq!(s["suppressed"]["incident_id"], second.as_str(), "{s}");
    assert_eq!(
        (s["suppressed"]["by"].as_str(), s["suppressed"]["learned"].as_bool()),
        (Some("metapu"), Some(true))
    );
    assert_eq!(events(&got, "opened").len(), 2, "nothing else raised");
    // Days later, after the suppressed one closed too: confirmed, what was learned goes.
    send_rows(&normal[40..45], false, 200, 60.0).await;
    incidents(&|m| events(m, "closed").len() >= 3);
    metapu_verdict((&boot, &cfg.kafka.feedback_topic), "cam", &second, "--confirmed", "ana", "");
    let got = incidents(&|m| !events(m, "unlearned").is_empty());
    let u = &events(&got, "unlearned")[0];
    assert_eq!((u["incident_id"].as_str(), u["by"].as_str()), (Some(second.as_str()), Some("ana")), "{u}");
    send_rows(&upload[45..60], false, 1_000, 600.0).await;
    let got = incidents(&|m| events(m, "opened").len() >= 3);
    assert!(events(&got, "opened")[2].get("suppressed").is_none());
    daemon.shutdown().await.unwrap();
}
