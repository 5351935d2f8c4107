//! kill -9 mid-stream against the real broker: after a restart every input record has
//! been scored at least once, no alert is lost, and device windows come back from the
//! state topic.

use std::collections::HashSet;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::support::*;
use metapu::data::Label;

pub(super) fn spawn(config: &std::path::Path) -> KillOnDrop {
    KillOnDrop(
        Command::new(env!("CARGO_BIN_EXE_metapu"))
            .args(["run", "--config"])
            .arg(config)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    )
}

fn source_of(v: &serde_json::Value) -> (i64, i64) {
    (v["source"]["partition"].as_i64().unwrap(), v["source"]["offset"].as_i64().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_mid_stream_loses_nothing() {
    let fx = fixture();
    let broker = Broker::start();
    let boot = broker.bootstrap();
    let dir = tempfile::tempdir().unwrap();
    let http_port = free_port();
    let mut cfg = daemon_config(&boot, "crash");
    cfg.http.listen = format!("127.0.0.1:{http_port}");
    // Every record short of certain normality alerts: plenty of alerts whatever the
    // model's quality, which is not what this test is about.
    cfg.model.threshold = 1.0;
    let config = write_config(&cfg, dir.path());
    let input = cfg.kafka.input_topics[0].clone();
    let addr: std::net::SocketAddr = format!("127.0.0.1:{http_port}").parse().unwrap();
    let metrics = || std::net::TcpStream::connect(addr).is_ok().then(|| http_get(addr, "/metrics").1);

    let mut daemon = spawn(&config);
    assert!(wait_until(Duration::from_secs(30), || metrics().is_some()).await, "daemon did not come up");
    let p = producer(&boot);
    let (normal, attack) = (fx.rows(0, Label::Positive), fx.rows(0, Label::Negative));
    let mut sent = 0usize;
    // Records 0–4 are known-normal; odd records are attacks.
    let row = |i: usize| if i % 2 == 1 { &attack[i % attack.len()] } else { &normal[i % normal.len()] };
    macro_rules! send_range {
        ($range:expr) => {
            for i in $range {
                send_record(&p, &input, "cam", i as f64, row(i), i < 5).await;
                sent += 1;
            }
        };
    }
    // Onboarding, then wait for the first classifier before the stream goes on.
    send_range!(0..15);
    read_topic(&boot, &cfg.kafka.priors_topic, Duration::from_secs(20), |m| !m.is_empty());
    send_range!(15..60);
    // Let it adapt, score and snapshot part of the stream, then kill it without warning.
    assert!(
        wait_until(Duration::from_secs(20), || {
            metrics().is_some_and(|m| metric(&m, "metapu_state_snapshots_total").unwrap_or(0.0) >= 1.0)
        })
        .await
    );
    daemon.0.kill().unwrap();
    daemon.0.wait().unwrap();
    send_range!(60..120);

    let _daemon = spawn(&config);
    let scores = json_values(&read_topic(&boot, &cfg.kafka.scores_topic, Duration::from_secs(60), |m| {
        json_values(m).iter().map(source_of).collect::<HashSet<_>>().len() >= sent
    }));
    let scored: HashSet<(i64, i64)> = scores.iter().map(source_of).collect();
    assert_eq!(scored.len(), sent, "every input record scored at least once");

    let anomalous: HashSet<(i64, i64)> =
        scores.iter().filter(|s| s["decision"] == "anomalous").map(source_of).collect();
    let alerts = json_values(&read_topic(&boot, &cfg.kafka.alerts_topic, Duration::from_secs(20), |m| {
        json_values(m).iter().map(source_of).collect::<HashSet<_>>().is_superset(&anomalous)
    }));
    let alerted: HashSet<(i64, i64)> = alerts.iter().map(source_of).collect();
    let decisions: Vec<&str> = scores.iter().map(|s| s["decision"].as_str().unwrap()).collect();
    assert!(!anomalous.is_empty(), "no record was anomalous at threshold 1: {decisions:?}");
    assert!(alerted.is_superset(&anomalous), "an alert was lost");

    let m = metrics().unwrap_or_default();
    assert!(metric(&m, "metapu_state_restored_devices_total").unwrap_or(0.0) >= 1.0, "windows not restored");
    // No record entered the windows twice: redeliveries after the restart are scored
    // but not re-added, so the device has counted at most every record once.
    let redelivered = metric(&m, "metapu_records_redelivered_total").unwrap_or(0.0);
    let state = read_state(&boot, &cfg.kafka.state_topic, Duration::from_secs(10), |_| false);
    let seen = state.get("cam").expect("a snapshot of cam").seen;
    eprintln!("redelivered {redelivered}, windows counted {seen} of {sent} records");
    assert!(seen <= sent as u64, "windows counted {seen} records of {sent}: some entered twice");
}
