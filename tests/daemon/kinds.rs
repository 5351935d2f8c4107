//! Device kinds through the real broker: two cameras of one model, one onboarded with
//! `metapu onboard --kind`, the other named its kind after (`metapu kind`), share what
//! was accepted on them on the kinds topic. The
//! nightly upload an analyst dismissed on one is recorded as `suppressed` on the other
//! (saying on which sibling it was dismissed), never raised; a new host both reach
//! within the same seconds is one fleet incident, answered for both by one verdict.

use std::time::Duration;

use crate::support::*;
use metapu::daemon;
use metapu::data::Label;

type Messages = [(Option<String>, Vec<u8>)];

fn events(m: &Messages, kind: &str, device: &str) -> Vec<serde_json::Value> {
    json_values(m).into_iter().filter(|v| v["event"] == kind && v["device"] == device).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sibling_is_spared_what_its_kind_dismissed_and_siblings_raising_together_get_one_verdict() {
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

    // Both cameras are seen, then onboarded for 10 s of their traffic: cam-a as of the
    // kind, cam-b without one, its kind named after (`metapu kind`).
    send_both(&normal[..1], cloud, 443, 200, None).await;
    read_topic(&boot, &cfg.kafka.scores_topic, Duration::from_secs(20), |m| m.len() >= 2);
    let onboard = |extra: &[&str]| {
        metapu(&[&["onboard", "--for", "10s"][..], extra, &topic_args].concat());
    };
    onboard(&["--device", "cam-a", "--kind", "edimax-cam"]);
    onboard(&["--device", "cam-b"]);
    metapu(
        &[&["kind", "--device", "cam-b", "--kind", "edimax-cam", "--by", "ops"][..], &topic_args].concat(),
    );
    let got = incidents(&|m| !events(m, "kind_joined", "cam-b").is_empty());
    let kinds: Vec<_> = ["cam-a", "cam-b"].map(|d| events(&got, "onboarding", d)[0]["kind"].clone()).into();
    assert_eq!(kinds, [serde_json::json!("edimax-cam"), serde_json::Value::Null]);
    let joined = &events(&got, "kind_joined", "cam-b")[0];
    assert_eq!(
        (joined["kind"].as_str(), joined["by"].as_str()),
        (Some("edimax-cam"), Some("ops")),
        "{joined}"
    );
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

    // Both fetch from a new host within the same seconds (the vendor's schedule): one
    // fleet incident. Whichever raised first is raised and names the other; the
    // other's joins it, and the analyst's one verdict on it answers both.
    send_both(&upload[30..45], "198.51.100.7", 8443, 300, None).await;
    let fresh = |m: &Messages, event: &str, device: &str| {
        events(m, event, device).into_iter().filter(|e| e["incident_id"] != id.as_str()).collect::<Vec<_>>()
    };
    let both = |m: &Messages| {
        cameras.iter().any(|(d, _)| !fresh(m, "opened", d).is_empty())
            && cameras.iter().any(|(d, _)| !fresh(m, "joined", d).is_empty())
    };
    let got = incidents(&|m| both(m));
    let (raised_on, joined_on) =
        if fresh(&got, "opened", "cam-a").is_empty() { ("cam-b", "cam-a") } else { ("cam-a", "cam-b") };
    let fleet = &fresh(&got, "opened", raised_on)[0];
    let joined = &fresh(&got, "joined", joined_on)[0];
    assert_eq!(
        (&joined["fleet"]["incident_id"], joined["fleet"]["device"].as_str()),
        (&fleet["incident_id"], Some(raised_on)),
        "{joined}"
    );
    assert!(fresh(&got, "opened", joined_on).is_empty(), "one notification for the fleet: {got:?}");
    let fleet_id = fleet["incident_id"].as_str().expect("an id").to_string();
    let named = incidents(&|m| {
        events(m, "updated", raised_on)
            .iter()
            .any(|e| e["incident_id"] == fleet_id.as_str() && e["members"] == serde_json::json!([joined_on]))
    });
    assert!(!named.is_empty());
    metapu_verdict(
        (&boot, &cfg.kafka.feedback_topic),
        raised_on,
        &fleet_id,
        "--false-positive",
        "ana",
        "vendor update",
    );
    let joined_id = joined["incident_id"].clone();
    let got = incidents(&|m| {
        events(m, "closed", joined_on)
            .iter()
            .chain(&events(m, "reviewed", joined_on))
            .any(|e| e["incident_id"] == joined_id)
    });
    let answered = events(&got, "closed", joined_on)
        .into_iter()
        .chain(events(&got, "reviewed", joined_on))
        .rfind(|e| e["incident_id"] == joined_id && !e["feedback"].is_null())
        .unwrap_or_else(|| panic!("the joined incident was not answered: {got:?}"));
    assert_eq!(answered["feedback"][0]["by"], "ana", "{answered}");
    assert!(answered["feedback"][0]["note"].as_str().is_some_and(|n| n.contains(&fleet_id)), "{answered}");

    let body = http_get(daemon.http_addr, "/metrics").1;
    assert_eq!(metric(&body, "metapu_kinds"), Some(1.0));
    assert_eq!(metric(&body, "metapu_kind_members"), Some(2.0));
    stop(daemon).await;
}
