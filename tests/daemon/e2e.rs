//! End to end against the real broker binary (tansu): topics, alerts, priors, dead
//! letters, a metrics scrape, and state restore across a restart.

use std::time::Duration;

use crate::support::*;
use metapu::daemon;
use metapu::data::Label;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_flow_to_alerts_priors_and_dead_letters_and_state_survives_a_restart() {
    let fx = fixture();
    let broker = Broker::start();
    let boot = broker.bootstrap();
    let cfg = daemon_config(&boot, "e2e");
    let input = cfg.kafka.input_topics[0].clone();
    let daemon = daemon::start(cfg.clone()).await.expect("daemon starts");

    let p = producer(&boot);
    let normal = fx.rows(0, Label::Positive);
    let attack = fx.rows(0, Label::Negative);
    // Onboarding: known-normal records, then unlabeled normal traffic.
    for (i, row) in normal.iter().take(10).enumerate() {
        send_record(&p, &input, "dev-a", i as f64, row, true).await;
    }
    // Recent unlabeled traffic, half of it already hostile: a PU learner needs the
    // attack in its unlabeled window to tell it from normal traffic.
    for i in 0..20 {
        let row = if i % 2 == 0 { &normal[10 + i] } else { &attack[100 + i] };
        send_record(&p, &input, "dev-a", 10.0 + i as f64, row, false).await;
    }
    // A device that never gets a known-normal record stays unknown.
    send_record(&p, &input, "dev-unlabeled", 0.0, &normal[50], false).await;
    // Bad input of several kinds, between good records.
    send(&p, &input, Some("dev-a"), b"{not json").await;
    send(&p, &input, Some("dev-a"), br#"{"ts": 1, "features": [1, 2, 3]}"#).await;
    send(&p, &input, Some("dev-a"), br#"{"ts": 1, "features": [1e300, 2]}"#).await;
    send(&p, &input, None, br#"{"ts": 1, "features": [1, 2]}"#).await;
    send(&p, &input, Some("dev-a"), br#"{"ts": 1, "features": [1, 2], "extra": true}"#).await;

    // Wait for dev-a's first adaptation (its prior is published).
    let priors = read_topic(&boot, &cfg.kafka.priors_topic, Duration::from_secs(30), |m| {
        json_values(m).iter().any(|v| v["device"] == "dev-a")
    });
    let prior = json_values(&priors).into_iter().find(|v| v["device"] == "dev-a").expect("a prior for dev-a");
    let pi = prior["prior"].as_f64().unwrap();
    assert!((0.0..=1.0).contains(&pi), "prior {pi}");
    assert!((prior["attack_share"].as_f64().unwrap() - (1.0 - pi)).abs() < 1e-6);
    assert_eq!(prior["positive_window"], 10);

    // More attack traffic: alerts expected.
    for (i, row) in attack.iter().take(40).enumerate() {
        send_record(&p, &input, "dev-a", 100.0 + i as f64, row, false).await;
    }
    // Alerts of the mixed traffic above come first (dev-a is adapted before its first
    // records are scored): wait for those of the attack records.
    let alerts = read_topic(&boot, &cfg.kafka.alerts_topic, Duration::from_secs(30), |m| {
        json_values(m).iter().filter(|a| a["ts"].as_f64().is_some_and(|ts| ts >= 100.0)).count() >= 20
    });
    let alerts = json_values(&alerts);
    assert!(alerts.len() >= 20, "only {} alerts for 40 attack records", alerts.len());
    for a in &alerts {
        assert_eq!(a["device"], "dev-a");
        assert_eq!(a["source"]["topic"], input.as_str());
        assert_eq!(a["alert_id"].as_str().unwrap().len(), 32);
        assert!(a["score"].as_f64().unwrap() < 0.5);
    }
    let attack_alerts = alerts.iter().filter(|a| a["ts"].as_f64().unwrap() >= 100.0).count();
    assert!(attack_alerts >= 20, "{attack_alerts} of the alerts are for attack records");
    let dead = read_topic(&boot, &cfg.kafka.deadletter_topic, Duration::from_secs(20), |m| m.len() >= 5);
    let kinds: Vec<String> =
        json_values(&dead).iter().map(|v| v["kind"].as_str().unwrap().to_string()).collect();
    for kind in ["malformed", "wrong_dimension", "non_finite", "no_device"] {
        assert!(kinds.iter().any(|k| k == kind), "no dead letter of kind {kind}: {kinds:?}");
    }
    assert_eq!(
        kinds.iter().filter(|k| *k == "malformed").count(),
        2,
        "unknown field is malformed too: {kinds:?}"
    );

    // Scores of every valid record, including the unknown device.
    let scores = read_topic(&boot, &cfg.kafka.scores_topic, Duration::from_secs(20), |m| m.len() >= 71);
    let scores = json_values(&scores);
    assert!(scores.iter().any(|s| s["device"] == "dev-unlabeled" && s["decision"] == "unknown"));

    // A real scrape of /metrics.
    let (status, body) = http_get(daemon.http_addr, "/metrics");
    assert_eq!(status, 200);
    assert!(metric(&body, "metapu_records_consumed_total").unwrap() >= 76.0, "{body}");
    assert_eq!(metric(&body, "metapu_records_invalid_total{reason=\"malformed\"}"), Some(2.0));
    assert!(metric(&body, "metapu_alerts_total").unwrap() >= 20.0);
    assert!(metric(&body, "metapu_adaptations_total").unwrap() >= 1.0);
    assert!(metric(&body, "metapu_records_unknown_total").unwrap() >= 1.0);
    assert_eq!(http_get(daemon.http_addr, "/healthz").0, 200);
    dashboard_metrics_exist_in(&body);
    assert_eq!(http_get(daemon.http_addr, "/readyz").0, 200);
    stop(daemon).await;

    // Restart: dev-a's windows come back from the state topic, so it is adapted again
    // without any new known-normal record.
    let daemon = daemon::start(cfg.clone()).await.expect("daemon restarts");
    send_record(&p, &input, "dev-a", 500.0, &normal[60], false).await;
    let restored = wait_until(Duration::from_secs(30), || {
        let body = http_get(daemon.http_addr, "/metrics").1;
        metric(&body, "metapu_state_restored_devices_total").unwrap_or(0.0) >= 1.0
            && metric(&body, "metapu_adaptations_total").unwrap_or(0.0) >= 1.0
    })
    .await;
    assert!(restored, "windows not restored: {}", http_get(daemon.http_addr, "/metrics").1);
    let priors = read_topic(&boot, &cfg.kafka.priors_topic, Duration::from_secs(20), |m| {
        json_values(m).iter().filter(|v| v["device"] == "dev-a").count() >= 2
    });
    let last = json_values(&priors).into_iter().rfind(|v| v["device"] == "dev-a").unwrap();
    assert_eq!(last["positive_window"], 10, "the restored positive window");
    stop(daemon).await;
}

/// Every metric the Grafana dashboard queries is present in a real scrape.
fn dashboard_metrics_exist_in(scrape: &str) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("dashboards/metapu.json");
    let dashboard: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut names = std::collections::BTreeSet::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().unwrap() {
            let expr = target["expr"].as_str().unwrap();
            let mut rest = expr;
            while let Some(i) = rest.find("metapu_") {
                let name: String =
                    rest[i..].chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
                rest = &rest[i + name.len()..];
                names.insert(name);
            }
        }
    }
    assert!(names.len() >= 15, "dashboard queries: {names:?}");
    let exported: std::collections::BTreeSet<&str> = scrape
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| l.split(['{', ' ']).next())
        .collect();
    let missing: Vec<&String> = names.iter().filter(|n| !exported.contains(n.as_str())).collect();
    assert!(missing.is_empty(), "dashboard uses metrics the daemon does not export: {missing:?}");
}
