//! Device kinds through the real broker: two cameras of one model, onboarded with
//! `metapu onboard --kind`, share what was accepted on them on the kinds topic. The
//! nightly upload an analyst dismissed on one is recorded as `suppressed` on the other
//! (saying on which sibling it was dismissed), never raised; a worm that reaches both
//! (a new peer and port) is raised on each.

use std::time::Duration;

use crate::support::*;
use metapu::daemon;
use metapu::data::Label;

type Messages = [(Option<String>, Vec<u8>)];

fn events(m: &Messages, kind: &str, device: &str) -> Vec<serde_json::Value> {
    json_values(m).into_iter().filter(|v| v["event"] == kind && v["device"] == device).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sibling_is_spared_what_its_kind_dismissed_and_a_worm_raises_on_each() {
    let fx = fixture();
    let broker = Broker::start();
    let boot = broker.bootstrap();
    let tag = "kinds";
    let mut cfg = daemon_config(&boot, tag);
    cfg.windows.trust_input_labels = false; // onboarded by the operator only
    cfg.incidents.open_k = 3;
    cfg.incidents.open_n = 5;
    let daemon = daemon::start(cfg.clone()).await.expect("daemon starts");
    let p = producer(&boot);
    let input = cfg.kafka.input_topics[0].clone();
    let (normal, upload) = (fx.rows(0, Label::Positive), fx.rows(0, Label::Negative));
    let cameras = [("cam-a", "10.0.0.5"), ("cam-b", "10.0.0.6")];
    let cloud = "52.1.2.3";
    let mut ts = 1.7e9;
    // Each camera sends the same rows a second apart.
    let mut send_both = |rows: &[Vec<f32>], peer: &'static str, port: u16, bytes: u32, only: Option<&str>| {
        let mut values = Vec::new();
        for r in rows {
            ts += 1.0;
            for (device, ip) in cameras {
                if only.is_none_or(|o| o == device) {
                    values.push((device, outbound_record(ts, r, false, (ip, peer, port), bytes)));
                }
            }
        }
        let (p, input) = (&p, &input);
        async move {
            for (device, v) in values {
                send(p, input, Some(device), &v).await;
            }
        }
    };
    let incidents = |done: &dyn Fn(&Messages) -> bool| {
        read_topic(&boot, &cfg.kafka.incidents_topic, Duration::from_secs(30), done)
    };
    let topic_args = ["--brokers", boot.as_str(), "--topic", cfg.kafka.feedback_topic.as_str()];

    // Both cameras are seen, then onboarded as one kind for 10 s of their traffic.
    send_both(&normal[..1], cloud, 443, 200, None).await;
    read_topic(&boot, &cfg.kafka.scores_topic, Duration::from_secs(20), |m| m.len() >= 2);
    for (device, _) in cameras {
        metapu(
            &[&["onboard", "--device", device, "--kind", "edimax-cam", "--for", "10s"][..], &topic_args]
                .concat(),
        );
    }
    let got = incidents(&|m| json_values(m).iter().filter(|e| e["event"] == "onboarding").count() >= 2);
    assert!(json_values(&got)
        .iter()
        .filter(|e| e["event"] == "onboarding")
        .all(|e| e["kind"] == "edimax-cam"));
    send_both(&normal[1..31], cloud, 443, 200, None).await;
    let got = incidents(&|m| json_values(m).iter().filter(|e| e["event"] == "onboarded").count() >= 2);
    assert!(json_values(&got).iter().all(|e| e["event"] != "opened"), "normal traffic opens nothing");
    // What each was onboarded on is on the kinds topic, one key per member.
    let shares =
        json_values(&read_topic(&boot, &cfg.kafka.kinds_topic, Duration::from_secs(20), |m| m.len() >= 2));
    for (device, _) in cameras {
        let s = shares.iter().find(|s| s["device"] == device).expect("a share per camera");
        assert_eq!(s["kind"], "edimax-cam");
        assert!(s["normal"].as_array().is_some_and(|rows| !rows.is_empty()), "{s}");
    }

    // The nightly upload on cam-a: an incident, dismissed by the analyst.
    send_both(&upload[..15], cloud, 443, 1_000, Some("cam-a")).await;
    let got = incidents(&|m| !events(m, "opened", "cam-a").is_empty());
    let id = events(&got, "opened", "cam-a")[0]["incident_id"].as_str().expect("an incident").to_string();
    metapu_verdict(
        (&boot, &cfg.kafka.feedback_topic),
        "cam-a",
        &id,
        "--false-positive",
        "ana",
        "nightly upload",
    );
    incidents(&|m| events(m, "closed", "cam-a").iter().any(|e| e["resolution"] == "dismissed"));
    // Its share now carries the behaviour; the daemon has read it back.
    let applied =
        || metric(&http_get(daemon.http_addr, "/metrics").1, "metapu_kind_shares_total{result=\"applied\"}");
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while applied() < Some(3.0) {
        assert!(
            std::time::Instant::now() < deadline,
            "the dismissal's share was not read back: {:?}",
            applied()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // The same upload on cam-b: recorded as suppressed, dismissed on its sibling.
    send_both(&normal[31..41], cloud, 443, 200, Some("cam-b")).await;
    send_both(&upload[15..30], cloud, 443, 1_000, Some("cam-b")).await;
    let got = incidents(&|m| !events(m, "suppressed", "cam-b").is_empty());
    let suppressed = events(&got, "suppressed", "cam-b");
    let opened_b = events(&got, "opened", "cam-b");
    let Some(s) = suppressed.first() else {
        panic!("cam-b's upload was not suppressed; opened: {opened_b:?}")
    };
    assert_eq!(s["suppressed"]["incident_id"], id.as_str(), "{s}");
    assert_eq!(
        (s["suppressed"]["on"].as_str(), s["suppressed"]["by"].as_str()),
        (Some("cam-a"), Some("ana"))
    );
    assert!(opened_b.is_empty(), "the sibling is spared: {opened_b:?}");

    // A worm reaches both: a new peer on telnet's port. Raised on each camera.
    send_both(&upload[30..45], "198.51.100.7", 23, 300, None).await;
    let got =
        incidents(&|m| events(m, "opened", "cam-a").len() >= 2 && !events(m, "opened", "cam-b").is_empty());
    let on_b = &events(&got, "opened", "cam-b")[0];
    assert!(on_b.get("suppressed").is_none(), "{on_b}");
    let why = on_b["news"]["why"].as_str().unwrap_or("");
    assert!(why.is_empty() || why.contains("198.51.100.7") || why.contains("23/tcp"), "{why}");

    let body = http_get(daemon.http_addr, "/metrics").1;
    assert_eq!(metric(&body, "metapu_kinds"), Some(1.0));
    assert_eq!(metric(&body, "metapu_kind_members"), Some(2.0));
    daemon.shutdown().await.unwrap();
}
