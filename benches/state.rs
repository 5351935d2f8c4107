//! `make bench`, the state topic, through the bundled broker (tansu) and the daemon
//! (default windows: 50 known-normal and 200 unlabeled rows of 115 features; the
//! shipped IoT model). Two tables:
//! - bytes written to the state topic per active device-hour: 100 devices each sending
//!   5 records a second, after each was onboarded with 10 known-normal records. The
//!   snapshot intervals are cut 60-fold (1 s and 10 s for the defaults' 60 s and 600 s),
//!   so 60 s of the run writes what an hour writes at the defaults: each write's size
//!   does not depend on the interval, only how many there are;
//! - restore: a state topic of N devices written up front (their records as the daemon
//!   writes them), then a daemon started on it: seconds until every device is restored
//!   (read and adapted) and ready, bytes read, bytes per device, the process's RSS.
//!   10,000 active devices (both windows full) and 100,000 idle ones (known-normal rows
//!   only, as a device silent past `devices.idle_timeout_s` is kept).
//!
//! Prints numbers; asserts nothing.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::{rss_mib, send_until_queued};
use metapu::broker::{self, LocalBroker};
use metapu::daemon::config::DaemonConfig;
use metapu::daemon::{self, kafka, Snapshot};
use metapu::monitor::record;
use metapu::traffic::simulate::{fleet_tasks, FleetConfig};
use rdkafka::config::ClientConfig;
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};

const DIM: usize = 115;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let fleet = fleet_tasks(&FleetConfig {
        devices: 20,
        duration_s: 300.0,
        seed: 3,
        attacked_share: 0.0,
        max_rows_per_class: Some(500),
        ..FleetConfig::default()
    });
    let pool: Vec<&[f32]> =
        fleet.tasks.tasks.iter().flat_map(|t| (0..t.len()).map(move |i| t.row(i, DIM))).collect();

    println!("metapu state-topic benchmark: the bundled broker, the daemon with default windows and models/iot-default.safetensors");
    println!();
    println!("Bytes written to the state topic per active device-hour (100 devices, 5 records/s each; intervals cut 60-fold):");
    println!();
    println!("| unlabeled rows written every | records written per device-hour | bytes per device-hour |");
    println!("|---|---|---|");
    for unlabeled_every in [600u64, 60] {
        println!("{}", bytes_per_device_hour(root, &pool, unlabeled_every).await);
    }
    println!();
    println!("Restore on start-up (one input partition, one state partition):");
    println!();
    println!("| devices | windows | on the state topic (MB) | bytes per device | restored and ready (s) | restore, reading and adapting (s) | process RSS after (MiB) |");
    println!("|---|---|---|---|---|---|---|");
    let sizes: Vec<(usize, bool)> = match std::env::var("STATE_RESTORE").ok().as_deref() {
        Some("small") => vec![(1_000, true)],
        _ => vec![(10_000, true), (100_000, false)],
    };
    for (devices, active) in sizes {
        println!("{}", restore(root, &pool, devices, active).await);
    }
}

fn config(root: &Path, boot: &str, tag: &str) -> DaemonConfig {
    let mut cfg = DaemonConfig::defaults();
    cfg.kafka.brokers = boot.to_string();
    cfg.kafka.group_id = format!("bench-state-{tag}");
    cfg.kafka.input_topics = vec![format!("{tag}.features")];
    cfg.kafka.state_topic = format!("{tag}.state");
    cfg.kafka.options.insert("session.timeout.ms".into(), "6000".into());
    cfg.kafka.options.insert("heartbeat.interval.ms".into(), "500".into());
    cfg.model.path = root.join("models/iot-default.safetensors");
    cfg.http.listen = "127.0.0.1:0".into();
    // The benchmark's first records per device are labeled normal.
    cfg.windows.trust_input_labels = true;
    cfg
}

fn producer(boot: &str) -> ThreadedProducer<DefaultProducerContext> {
    ClientConfig::new()
        .set("bootstrap.servers", boot)
        .set("linger.ms", "20")
        .set("queue.buffering.max.messages", "500000")
        .set("queue.buffering.max.kbytes", "1048576")
        .set("message.max.bytes", "10000000")
        .create()
        .expect("producer")
}

fn send(producer: &ThreadedProducer<DefaultProducerContext>, topic: &str, key: &[u8], value: Option<&[u8]>) {
    let mut rec = BaseRecord::<[u8], [u8]>::to(topic).key(key);
    if let Some(v) = value {
        rec = rec.payload(v);
    }
    send_until_queued(producer, rec);
}

/// The state topic's bytes over a run that stands for an hour at the default intervals.
async fn bytes_per_device_hour(root: &Path, pool: &[&[f32]], unlabeled_every_s: u64) -> String {
    const DEVICES: usize = 100;
    const RATE: usize = 5;
    const SCALE: u64 = 60;
    let bin = broker::binary_in(root);
    let broker = LocalBroker::start(&bin, broker::free_port().expect("port")).expect("bundled broker");
    let boot = broker.bootstrap();
    let tag = format!("hour{unlabeled_every_s}");
    let mut cfg = config(root, &boot, &tag);
    cfg.state.snapshot_interval_s = 60 / SCALE;
    cfg.state.unlabeled_interval_s = unlabeled_every_s / SCALE;
    let input = cfg.kafka.input_topics[0].clone();
    kafka::ensure_topics(&cfg.kafka, &[kafka::TopicSpec::plain(&input, 1)], Duration::from_secs(10))
        .await
        .ok();
    let d = daemon::start(cfg.clone()).await.expect("daemon starts");
    let p = producer(&boot);
    let name = |i: usize| format!("device-{i:03}");
    let row = |i: usize, k: usize| pool[(i * 7919 + k) % pool.len()];
    for k in 0..10 {
        for i in 0..DEVICES {
            send(&p, &input, name(i).as_bytes(), Some(&record::encode(&name(i), k as f64, row(i, k), true)));
        }
    }
    p.flush(Duration::from_secs(30)).expect("flushed");
    let m = &d.metrics;
    let limit = Instant::now() + Duration::from_secs(60);
    while m.records_consumed() < (10 * DEVICES) as u64 && Instant::now() < limit {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The onboarding's first writes settle; then an hour, 60-fold.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (bytes0, records0) = (m.state_bytes(), m.snapshots());
    let started = Instant::now();
    let run = Duration::from_secs(3600 / SCALE);
    let mut k = 10;
    while started.elapsed() < run {
        let tick = Instant::now();
        for i in 0..DEVICES {
            let ts = 10.0 + started.elapsed().as_secs_f64();
            send(&p, &input, name(i).as_bytes(), Some(&record::encode(&name(i), ts, row(i, k), false)));
        }
        k += 1;
        tokio::time::sleep(Duration::from_millis(1000 / RATE as u64).saturating_sub(tick.elapsed())).await;
    }
    let hours = DEVICES as f64 * started.elapsed().as_secs_f64() * SCALE as f64 / 3600.0;
    let bytes = (m.state_bytes() - bytes0) as f64 / hours;
    let records = (m.snapshots() - records0) as f64 / hours;
    d.shutdown().await.ok();
    drop(broker);
    format!("| {} min | {records:.0} | {:.2} MB |", unlabeled_every_s / 60, bytes / 1e6)
}

/// A daemon started on a state topic of `devices` devices: how long until all are back.
async fn restore(root: &Path, pool: &[&[f32]], devices: usize, active: bool) -> String {
    let bin = broker::binary_in(root);
    let broker = LocalBroker::start(&bin, broker::free_port().expect("port")).expect("bundled broker");
    let boot = broker.bootstrap();
    let tag = format!("restore{devices}");
    let cfg = config(root, &boot, &tag);
    let input = cfg.kafka.input_topics[0].clone();
    let state = kafka::TopicSpec {
        name: &cfg.kafka.state_topic,
        partitions: 1,
        replication: 1,
        configs: vec![("cleanup.policy", "compact")],
    };
    kafka::ensure_topics(&cfg.kafka, &[kafka::TopicSpec::plain(&input, 1), state], Duration::from_secs(10))
        .await
        .ok();
    let windows = DaemonConfig::defaults().windows;
    let p = producer(&boot);
    let mut written = 0usize;
    for i in 0..devices {
        let rows = |n: usize, from: usize| -> Vec<f32> {
            (0..n).flat_map(|k| row_of(pool, i, from + k)).copied().collect()
        };
        let snapshot = Snapshot {
            positive: rows(windows.positive, 0),
            unlabeled: if active { rows(windows.unlabeled, 1000) } else { Vec::new() },
            seen: (windows.positive + windows.unlabeled) as u64,
            input_partitions: 1,
            ..Snapshot::empty(DIM)
        };
        let device = format!("device-{i:06}");
        for (key, value) in snapshot.records(&device) {
            written += key.len() + value.as_ref().map_or(0, Vec::len);
            send(&p, &cfg.kafka.state_topic, &key, value.as_deref());
        }
    }
    p.flush(Duration::from_secs(600)).expect("state written");
    drop(p);

    let started = Instant::now();
    let d = daemon::start(cfg.clone()).await.expect("daemon starts");
    let m = &d.metrics;
    let limit = Instant::now() + Duration::from_secs(1800);
    while (m.state_restored_devices() < devices as u64 || m.state_restoring()) && Instant::now() < limit {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let ready = started.elapsed().as_secs_f64();
    let (restored, seconds, rss) =
        (m.state_restored_devices(), m.state_restore_seconds(), rss_mib(std::process::id()));
    d.shutdown().await.ok();
    drop(broker);
    let shortfall = if restored < devices as u64 { format!(" ({restored} restored)") } else { String::new() };
    format!(
        "| {devices} | {} | {:.0} | {:.0} | {ready:.1}{shortfall} | {seconds:.1} | {rss:.0} |",
        if active { "both full" } else { "known-normal only (idle)" },
        written as f64 / 1e6,
        written as f64 / devices as f64,
    )
}

fn row_of<'a>(pool: &[&'a [f32]], device: usize, k: usize) -> &'a [f32] {
    pool[(device * 7919 + k) % pool.len()]
}
