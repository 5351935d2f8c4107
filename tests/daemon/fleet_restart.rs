//! A fleet's known-normal records survive `kill -9`. Through the bundled broker: 10,000
//! devices onboarded (10 known-normal records each) and snapshotted in several rounds,
//! the daemon killed without warning and started again. Every device's known-normal
//! rows on the state topic are the ones sent, bit for bit; the restarted daemon is not
//! ready until all 10,000 are restored, and scores every device's next record.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::support::produce::send_until_queued;
use crate::support::*;
use metapu::data::Label;
use metapu::monitor::record;
use rdkafka::config::ClientConfig;
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};

const DEVICES: usize = 10_000;
const KNOWN_NORMAL: usize = 10;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_devices_come_back_whole_after_kill_9() {
    let fx = fixture();
    let broker = Broker::start();
    let boot = broker.bootstrap();
    let dir = tempfile::tempdir().unwrap();
    let http_port = free_port();
    let mut cfg = daemon_config(&boot, "fleet");
    cfg.http.listen = format!("127.0.0.1:{http_port}");
    // Only the scores of the records after the restart are read.
    cfg.kafka.publish_scores = false;
    let config = write_config(&cfg, dir.path());
    let input = cfg.kafka.input_topics[0].clone();
    let addr: std::net::SocketAddr = format!("127.0.0.1:{http_port}").parse().unwrap();
    let metrics = || std::net::TcpStream::connect(addr).is_ok().then(|| http_get(addr, "/metrics").1);
    let normal: Vec<Vec<f32>> = (0..4).flat_map(|t| fx.rows(t, Label::Positive)).collect();
    let row = |device: usize, k: usize| &normal[(device * 7 + k) % normal.len()];
    let name = |device: usize| format!("device-{device:05}");

    let mut daemon = super::crash::spawn(&config);
    assert!(wait_until(Duration::from_secs(60), || metrics().is_some()).await, "daemon did not come up");
    let producer: ThreadedProducer<DefaultProducerContext> = ClientConfig::new()
        .set("bootstrap.servers", &boot)
        .set("linger.ms", "20")
        .set("queue.buffering.max.messages", "200000")
        .create()
        .expect("producer");
    let send = |device: usize, ts: f64, features: &[f32], normal: bool| {
        let (key, value) = (name(device), record::encode(&name(device), ts, features, normal));
        send_until_queued(&producer, BaseRecord::to(&input).key(key.as_str()).payload(value.as_slice()));
    };
    for k in 0..KNOWN_NORMAL {
        for device in 0..DEVICES {
            send(device, k as f64, row(device, k), true);
        }
    }
    producer.flush(Duration::from_secs(120)).expect("onboarding sent");

    // Every device's known-normal rows on the state topic (rounds every second).
    let complete = |s: &HashMap<String, metapu::daemon::Snapshot>| {
        s.len() >= DEVICES && s.values().all(|s| s.positive.len() == 2 * KNOWN_NORMAL)
    };
    let before = read_state(&boot, &cfg.kafka.state_topic, Duration::from_secs(300), complete);
    assert!(complete(&before), "{} devices snapshotted", before.len());
    for device in 0..DEVICES {
        let sent: Vec<f32> = (0..KNOWN_NORMAL).flat_map(|k| row(device, k).clone()).collect();
        assert_eq!(rows_bits(&before[&name(device)].positive), rows_bits(&sent), "{}", name(device));
    }
    let written = metric(&metrics().unwrap_or_default(), "metapu_state_snapshots_total").unwrap_or(0.0);
    eprintln!("{written} state records written for {DEVICES} devices before the kill");
    daemon.0.kill().unwrap();
    daemon.0.wait().unwrap();

    // Restarted: never ready before every device is restored.
    let _daemon = super::crash::spawn(&config);
    let started = Instant::now();
    let (mut ready_early, mut restored) = (false, 0.0);
    while started.elapsed() < Duration::from_secs(300) {
        if let Some(m) = metrics() {
            restored = metric(&m, "metapu_state_restored_devices_total").unwrap_or(0.0);
            let ready = http_get(addr, "/readyz").0 == 200;
            ready_early |= ready && restored < DEVICES as f64;
            if ready && restored >= DEVICES as f64 {
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(restored, DEVICES as f64, "devices restored");
    assert!(!ready_early, "ready before the restore finished");

    // Each device's next record is scored with its classifier.
    for device in 0..DEVICES {
        send(device, 100.0, row(device, KNOWN_NORMAL), false);
    }
    producer.flush(Duration::from_secs(120)).expect("records sent");
    let m = || metrics().unwrap_or_default();
    let scored = wait_until(Duration::from_secs(120), || {
        metric(&m(), "metapu_records_scored_total").unwrap_or(0.0) >= DEVICES as f64
    })
    .await;
    assert!(scored, "not every record scored: {}", m());
    assert_eq!(
        metric(&m(), "metapu_records_unknown_total"),
        Some(0.0),
        "a device came back without its classifier"
    );
}
