//! Known-normal records are let go only on purpose. A device that falls silent past
//! `devices.idle_timeout_s` (a weekend off) keeps them: across a restart they come back
//! bit for bit, and its first record afterwards is scored, not `unknown`. `metapu
//! forget` lets a device go, and says so on the incidents topic.

use std::time::Duration;

use crate::support::*;
use metapu::daemon;
use metapu::data::Label;
use rdkafka::producer::FutureProducer;

/// `n` of device cam's normal rows, the first 10 labeled normal, waited for on the
/// scores topic; the producer that sent them.
async fn onboard_cam(
    boot: &str,
    cfg: &daemon::DaemonConfig,
    normal: &[Vec<f32>],
    n: usize,
) -> FutureProducer {
    let p = producer(boot);
    for (i, row) in normal.iter().take(n).enumerate() {
        send_record(&p, &cfg.kafka.input_topics[0], "cam", i as f64, row, i < 10).await;
    }
    read_topic(boot, &cfg.kafka.scores_topic, Duration::from_secs(20), |m| m.len() >= n);
    p
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_device_keeps_its_known_normal_records_across_a_restart() {
    let fx = fixture();
    let tag = "idle";
    let cluster = super::mock::mock(tag, 1);
    let boot = cluster.bootstrap_servers();
    let mut cfg = daemon_config(&boot, tag);
    cfg.devices.idle_timeout_s = 1;
    let input = cfg.kafka.input_topics[0].clone();
    let normal = fx.rows(0, Label::Positive);
    let daemon = daemon::start(cfg.clone()).await.expect("daemon starts");
    let p = onboard_cam(&boot, &cfg, &normal, 20).await;
    let idle = wait_until(Duration::from_secs(20), || {
        let body = http_get(daemon.http_addr, "/metrics").1;
        metric(&body, "metapu_devices_evicted_total{reason=\"idle\"}") == Some(1.0)
    })
    .await;
    assert!(idle, "cam did not go idle");
    stop(daemon).await;

    // Its latest snapshot: the known-normal records as sent, no unlabeled window (not
    // deleted: a deleted device has no main record).
    let mut state = read_state(&boot, &cfg.kafka.state_topic, Duration::from_secs(20), |s| {
        s.get("cam").is_some_and(|s| s.unlabeled.is_empty())
    });
    let snap = state.remove("cam").expect("cam's snapshot kept, not deleted");
    let sent: Vec<f32> = normal.iter().take(10).flatten().copied().collect();
    assert_eq!(rows_bits(&snap.positive), rows_bits(&sent), "the known-normal records, bit for bit");
    assert!(snap.unlabeled.is_empty());

    // After a restart, its next record is scored with a classifier adapted on them.
    let daemon = daemon::start(cfg.clone()).await.expect("daemon restarts");
    send_record(&p, &input, "cam", 100.0, &normal[30], false).await;
    let scores = json_values(&read_topic(&boot, &cfg.kafka.scores_topic, Duration::from_secs(30), |m| {
        json_values(m).iter().any(|s| s["ts"] == 100.0)
    }));
    let after = scores.iter().find(|s| s["ts"] == 100.0).expect("the record after the restart is scored");
    assert_ne!(after["decision"], "unknown", "{after}");
    stop(daemon).await;
}

/// `metapu forget` is how an onboarded device is let go: it is recorded on the
/// incidents topic (who, why, how many known-normal records), its snapshot is deleted,
/// and its next records are not scored. Forgetting a device nobody tracks is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metapu_forget_lets_a_device_go_and_says_so() {
    let fx = fixture();
    let tag = "forget";
    let cluster = super::mock::mock(tag, 1);
    let boot = cluster.bootstrap_servers();
    let cfg = daemon_config(&boot, tag);
    let input = cfg.kafka.input_topics[0].clone();
    let normal = fx.rows(0, Label::Positive);
    let daemon = daemon::start(cfg.clone()).await.expect("daemon starts");
    let p = onboard_cam(&boot, &cfg, &normal, 12).await;
    let topic_args = ["--brokers", boot.as_str(), "--topic", cfg.kafka.feedback_topic.as_str()];
    let out = metapu(
        &[&["forget", "--device", "cam", "--by", "ops", "--note", "returned to vendor"][..], &topic_args]
            .concat(),
    );
    assert!(out.contains("forget cam sent"), "{out}");
    metapu(&[&["forget", "--device", "nobody"][..], &topic_args].concat());

    let events = json_values(&read_topic(&boot, &cfg.kafka.incidents_topic, Duration::from_secs(20), |m| {
        json_values(m).iter().any(|e| e["event"] == "forgotten")
    }));
    let forgotten = events.iter().find(|e| e["event"] == "forgotten").expect("a forgotten event");
    assert_eq!(
        (&forgotten["device"], &forgotten["known_normal"], &forgotten["by"], &forgotten["note"]),
        (&"cam".into(), &10.into(), &"ops".into(), &"returned to vendor".into())
    );
    let dead = json_values(&read_topic(&boot, &cfg.kafka.deadletter_topic, Duration::from_secs(20), |m| {
        !m.is_empty()
    }));
    assert!(dead[0]["reason"].as_str().unwrap().contains("unknown device nobody"), "{dead:?}");

    // Its snapshot is deleted (tombstones for its main record and both rows' records),
    // and its next record is not scored.
    let deleted = |m: &[(Option<String>, Vec<u8>)]| -> Vec<String> {
        let cam = |k: &String| k == "cam" || k.starts_with("cam\u{FFFD}");
        m.iter()
            .filter(|(k, v)| v.is_empty() && k.as_ref().is_some_and(cam))
            .filter_map(|(k, _)| k.clone())
            .collect()
    };
    let state = read_topic(&boot, &cfg.kafka.state_topic, Duration::from_secs(20), |m| deleted(m).len() >= 3);
    assert_eq!(deleted(&state).len(), 3, "cam's records not all deleted: {:?}", deleted(&state));
    send_record(&p, &input, "cam", 100.0, &normal[20], false).await;
    let scores = json_values(&read_topic(&boot, &cfg.kafka.scores_topic, Duration::from_secs(20), |m| {
        json_values(m).iter().any(|s| s["ts"] == 100.0)
    }));
    let after = scores.iter().find(|s| s["ts"] == 100.0).expect("the next record");
    assert_eq!(after["decision"], "unknown", "{after}");
    stop(daemon).await;
}
