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
    stop(first).await;
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
    stop(daemon).await;
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
    stop(daemon).await;
}

/// Without an analyst, what the daemon learns by itself never hides an attack's second
/// wave (issue #75): a scan and a password guesser close quietly unanswered, are not
/// learned (their close says what they showed), and each comes back as an incident of
/// its own; an upload is learned, its return suppressed until when the suppression says,
/// and once it stops coming back for longer it is raised again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_the_daemon_learns_by_itself_never_hides_a_second_wave() {
    let fx = fixture();
    let broker = Broker::start();
    let boot = broker.bootstrap();
    let mut cfg = daemon_config(&boot, "second-wave");
    cfg.incidents.open_k = 3;
    cfg.incidents.open_n = 5;
    cfg.incidents.quiet_s = 5;
    cfg.incidents.reopen_s = 0;
    cfg.incidents.learned_for_s = 3_600;
    let daemon = daemon::start(cfg.clone()).await.expect("daemon starts");
    let p = producer(&boot);
    let input = cfg.kafka.input_topics[0].clone();
    let (normal, attack) = (fx.rows(0, Label::Positive), fx.rows(0, Label::Negative));
    // The camera's time: each record a second after the one before.
    let ts = std::cell::Cell::new(1.7e9);
    let tick = |by: f64| {
        ts.set(ts.get() + by);
        ts.get()
    };
    let mut at = 0;
    // `n` anomalous rows, one a second after `gap` seconds, each packet to `to(i)`.
    let mut wave = |n: usize, gap: f64, to: &dyn Fn(usize) -> (String, u16, u8)| {
        tick(gap);
        let values: Vec<Vec<u8>> = (0..n)
            .map(|i| {
                at += 1;
                let (peer, port, flags) = to(i);
                let row = &attack[at % attack.len()];
                outbound_tcp_record(tick(1.0), row, false, ("10.0.0.5", &peer, port), 74, flags)
            })
            .collect();
        // Quiet afterwards, a minute later: normal records to the cloud close it.
        tick(60.0);
        let quiet: Vec<Vec<u8>> =
            normal[30..35].iter().map(|r| record(tick(1.0), r, false, "52.1.2.3", 200)).collect();
        let (p, input) = (&p, &input);
        async move {
            for v in values.iter().chain(&quiet) {
                send(p, input, Some("cam"), v).await;
            }
        }
    };
    let incidents = |done: &dyn Fn(&Messages) -> bool| {
        read_topic(&boot, &cfg.kafka.incidents_topic, Duration::from_secs(30), done)
    };
    let mut onboard = Vec::new();
    for (i, r) in normal[..30].iter().enumerate() {
        onboard.push(record(1.7e9 - 100.0 + i as f64, r, i < 10, "52.1.2.3", 200));
    }
    for v in &onboard {
        send(&p, &input, Some("cam"), v).await;
    }

    let scan = |i: usize| (format!("198.51.100.{}", 10 + i), 23u16, 0x02u8);
    let guesses = |_: usize| ("203.0.113.9".to_string(), 22u16, 0x02u8);
    let upload = |_: usize| ("52.1.2.3".to_string(), 443u16, 0x18u8);
    let closed = |m: &Messages, n: usize| events(m, "closed").len() >= n;
    for (k, (what, to, footprint)) in [
        ("a scan", &scan as &dyn Fn(usize) -> (String, u16, u8), "scan"),
        ("a guesser", &guesses, "repeated_attempts"),
    ]
    .into_iter()
    .enumerate()
    {
        wave(20, 600.0, to).await;
        let got = incidents(&|m| closed(m, 2 * k + 1));
        let close = &events(&got, "closed")[2 * k];
        assert!(close.get("learned").is_none(), "{what} learned: {close}");
        assert_eq!(close["footprint"]["kind"], footprint, "{what}: {close}");
        assert!(close["summary"].as_str().unwrap().contains("never learned without a verdict"), "{close}");
        // Its second wave, nobody having answered: an incident of its own.
        wave(20, 3_000.0, to).await;
        let got = incidents(&|m| closed(m, 2 * k + 2));
        let opened = events(&got, "opened");
        assert_eq!(opened.len(), 2 * k + 2, "{what}'s second wave raised: {opened:#?}");
        assert!(events(&got, "suppressed").is_empty(), "{what}");
    }

    // An upload closes quietly and is learned; its return an hour later is suppressed,
    // saying until when.
    wave(20, 600.0, &upload).await;
    let got = incidents(&|m| closed(m, 5));
    assert_eq!(events(&got, "closed")[4]["learned"], true, "{:#?}", events(&got, "closed")[4]);
    wave(20, 600.0, &upload).await;
    let got = incidents(&|m| !events(m, "suppressed").is_empty());
    let s = &events(&got, "suppressed")[0];
    let until = s["suppressed"]["expires_at"].as_f64().expect("the suppression says until when");
    assert!(s["summary"].as_str().unwrap().contains("learned until"), "{s}");
    // More than an hour (learned_for_s) after that return: lapsed, raised again.
    let back = until - ts.get() + 60.0;
    wave(20, back, &upload).await;
    let got = incidents(&|m| events(m, "opened").len() >= 6);
    let last = events(&got, "opened").last().cloned().unwrap();
    assert!(last.get("suppressed").is_none() && last.get("news").is_none(), "{last}");
    let body = http_get(daemon.http_addr, "/metrics").1;
    assert_eq!(metric(&body, "metapu_incident_events_total{event=\"suppressed\"}"), Some(1.0));
    stop(daemon).await;
}
