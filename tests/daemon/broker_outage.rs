//! The broker goes away while the daemon runs and comes back: the daemon stays up,
//! /readyz reports the outage, and it resumes on its own with nothing lost.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use crate::support::*;
use metapu::daemon;
use metapu::data::Label;

fn source_of(v: &serde_json::Value) -> (i64, i64) {
    (v["source"]["partition"].as_i64().unwrap(), v["source"]["offset"].as_i64().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_outage_is_reported_and_survived_without_loss() {
    let fx = fixture();
    let (broker, proxy) = Broker::behind_proxy();
    let boot = format!("127.0.0.1:{}", proxy.port);
    let mut cfg = daemon_config(&boot, "outage");
    cfg.model.threshold = 1.0; // alerts whatever the model's quality: this is about delivery
    let input = cfg.kafka.input_topics[0].clone();
    let daemon = daemon::start(cfg.clone()).await.expect("daemon starts");
    let p = producer(&boot);
    let (normal, attack) = (fx.rows(0, Label::Positive), fx.rows(0, Label::Negative));
    let row = |i: usize| if i % 2 == 1 { attack[i].clone() } else { normal[i].clone() };

    for i in 0..30 {
        send_record(&p, &input, "cam", i as f64, &row(i), i < 10).await;
    }
    let scored_before =
        read_topic(&boot, &cfg.kafka.scores_topic, Duration::from_secs(30), |m| m.len() >= 30);
    assert!(scored_before.len() >= 30, "records before the outage scored");
    assert_eq!(http_get(daemon.http_addr, "/readyz").0, 200);

    // Outage: connections cut, port refused. Records produced meanwhile wait in the
    // producer's queue, as they would at a real site.
    proxy.down();
    let during = {
        let (p, input, rows) = (p.clone(), input.clone(), (30..60).map(row).collect::<Vec<_>>());
        tokio::spawn(async move {
            for (i, r) in rows.iter().enumerate() {
                send_record(&p, &input, "cam", 30.0 + i as f64, r, false).await;
            }
        })
    };
    let went_down = Instant::now();
    let not_ready =
        wait_until(Duration::from_secs(30), || http_get(daemon.http_addr, "/readyz").0 == 503).await;
    assert!(not_ready, "/readyz still 200 during the outage");
    eprintln!("readyz 503 after {:.1} s", went_down.elapsed().as_secs_f64());
    assert_eq!(http_get(daemon.http_addr, "/healthz").0, 200, "alive through the outage");
    // Longer than the group session (6 s): the group forgets the daemon, as it would
    // across a real broker restart.
    tokio::time::sleep(Duration::from_secs(8)).await;
    let body = http_get(daemon.http_addr, "/metrics").1;
    assert_eq!(metric(&body, "metapu_ready"), Some(0.0));

    proxy.up();
    let came_back = Instant::now();
    let ready = wait_until(Duration::from_secs(60), || http_get(daemon.http_addr, "/readyz").0 == 200).await;
    assert!(ready, "/readyz not 200 after the broker came back");
    eprintln!("readyz 200 {:.1} s after the broker came back", came_back.elapsed().as_secs_f64());
    during.await.unwrap();

    // Nothing lost: every one of the 60 input records scored, every anomalous one alerted.
    let scores = json_values(&read_topic(&boot, &cfg.kafka.scores_topic, Duration::from_secs(60), |m| {
        json_values(m).iter().map(source_of).collect::<HashSet<_>>().len() >= 60
    }));
    let scored: HashSet<(i64, i64)> = scores.iter().map(source_of).collect();
    assert_eq!(scored.len(), 60, "every input record scored at least once");
    let anomalous: HashSet<(i64, i64)> =
        scores.iter().filter(|s| s["decision"] == "anomalous").map(source_of).collect();
    assert!(
        anomalous.iter().any(|(_, o)| *o >= 30),
        "records sent during the outage were scored and alerted"
    );
    let alerts = json_values(&read_topic(&boot, &cfg.kafka.alerts_topic, Duration::from_secs(30), |m| {
        json_values(m).iter().map(source_of).collect::<HashSet<_>>().is_superset(&anomalous)
    }));
    let alerted: HashSet<(i64, i64)> = alerts.iter().map(source_of).collect();
    assert!(alerted.is_superset(&anomalous), "an alert was lost");
    stop(daemon).await;
    drop(broker);
}
