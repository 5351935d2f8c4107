//! `metapu demo`: everything on embedded defaults — the bundled broker on loopback, a
//! model (trained on Synthetic if none is given), the daemon, and replayed traffic in
//! which some devices come under attack. Alerts are shown as they arrive; Ctrl-C
//! stops everything it started.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Args;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::util::Timeout;

use metapu::broker::{self, LocalBroker};
use metapu::daemon::config::DaemonConfig;
use metapu::daemon::{self, record};
use metapu::data::split::Split;
use metapu::data::synthetic::{generate, SyntheticConfig};
use metapu::data::{Label, TaskSet};
use metapu::model::{default_device, file};
use metapu::train::{train_on_synthetic, TrainConfig};

#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Model file; trained on the Synthetic benchmark (about a minute) if missing.
    #[arg(long, default_value = "runs/demo-synthetic.safetensors")]
    model: PathBuf,
    /// Broker port on 127.0.0.1 (a free one if taken).
    #[arg(long, default_value_t = 9092)]
    port: u16,
    /// Where the daemon serves /metrics.
    #[arg(long, default_value = "127.0.0.1:9898")]
    http: String,
    /// Simulated devices.
    #[arg(long, default_value_t = 12)]
    devices: usize,
    /// Records per second over all devices.
    #[arg(long, default_value_t = 200.0)]
    rate: f64,
    /// Seconds until the attack starts on a third of the devices.
    #[arg(long, default_value_t = 15)]
    attack_after: u64,
    /// Stop after this many seconds (0 = run until Ctrl-C).
    #[arg(long, default_value_t = 0)]
    duration: u64,
}

const TYPES: [&str; 5] = ["doorbell", "thermostat", "camera", "baby-monitor", "webcam"];

fn ensure_model(path: &Path) -> anyhow::Result<()> {
    if path.exists() {
        return Ok(());
    }
    println!("demo: no model at {}; meta-training one on the Synthetic benchmark…", path.display());
    let cfg = TrainConfig {
        seed: 0,
        max_iterations: 3000,
        eval_every: 250,
        meta_batch: 8,
        ..TrainConfig::default()
    };
    let (out, _, _) = train_on_synthetic(0, &cfg, default_device())?;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    file::save(&out.model, path)?;
    println!(
        "demo: model trained ({} iterations, validation accuracy {:.3}) → {}",
        out.iterations,
        out.model.provenance.best_validation_accuracy,
        path.display()
    );
    Ok(())
}

fn broker_binary() -> PathBuf {
    let local = broker::binary_in(Path::new("."));
    if local.exists() {
        local
    } else {
        broker::binary_in(Path::new(env!("CARGO_MANIFEST_DIR")))
    }
}

/// One simulated device: a Synthetic target task's normal and attack rows.
struct Device {
    name: String,
    normal: Vec<Vec<f32>>,
    attack: Vec<Vec<f32>>,
    attacked: bool,
}

fn devices(n: usize) -> Vec<Device> {
    let (data, split): (TaskSet, Split) = generate(&SyntheticConfig::default(), 1);
    let rows = |t: usize, l: Label| {
        let task = &data.tasks[t];
        task.indices_of(l).into_iter().map(|i| task.row(i, 2).to_vec()).collect::<Vec<_>>()
    };
    let targets = Split::resolve(&split.target, &data).unwrap_or_default();
    (0..n)
        .map(|i| {
            let t = targets[i % targets.len()];
            Device {
                name: format!("{}-{:02}", TYPES[i % TYPES.len()], i + 1),
                normal: rows(t, Label::Positive),
                attack: rows(t, Label::Negative),
                attacked: i % 3 == 2,
            }
        })
        .collect()
}

#[derive(Default)]
struct Tally {
    alerts: BTreeMap<String, u64>,
    priors: BTreeMap<String, f64>,
}

fn watch(bootstrap: String, topics: [String; 2], tally: Arc<Mutex<Tally>>, stop: Arc<AtomicBool>) {
    // The output topics may appear only after the daemon starts: refresh metadata often.
    let consumer: Result<BaseConsumer, _> = ClientConfig::new()
        .set("bootstrap.servers", &bootstrap)
        .set("group.id", "metapu-demo-watch")
        .set("topic.metadata.refresh.interval.ms", "1000")
        .create();
    let Ok(consumer) = consumer else { return };
    let mut tpl = rdkafka::TopicPartitionList::new();
    for t in &topics {
        let _ = tpl.add_partition_offset(t, 0, rdkafka::Offset::Beginning);
    }
    if consumer.assign(&tpl).is_err() {
        return;
    }
    let mut shown = 0;
    while !stop.load(Ordering::Relaxed) {
        let Some(Ok(m)) = consumer.poll(Duration::from_millis(200)) else { continue };
        let Ok(v) = serde_json::from_slice::<serde_json::Value>(m.payload().unwrap_or_default()) else {
            continue;
        };
        let device = v["device"].as_str().unwrap_or("?").to_string();
        let Ok(mut t) = tally.lock() else { return };
        if m.topic() == topics[0] {
            *t.alerts.entry(device.clone()).or_default() += 1;
            shown += 1;
            if shown <= 25 || shown % 100 == 0 {
                println!(
                    "ALERT #{shown:<5} {device:<16} posterior(normal) {:.3}  device prior {:.2}  {}[{}]@{}",
                    v["score"].as_f64().unwrap_or(0.0),
                    v["prior"].as_f64().unwrap_or(0.0),
                    v["source"]["topic"].as_str().unwrap_or(""),
                    v["source"]["partition"],
                    v["source"]["offset"]
                );
            }
        } else if let Some(p) = v["prior"].as_f64() {
            t.priors.insert(device, p);
        }
    }
}

fn summary(devs: &[Device], tally: &Tally, attack_on: bool) {
    println!("{:<16} {:>9} {:>7} {:>8}", "device", "attacked", "prior", "alerts");
    for d in devs {
        let under = d.attacked && attack_on;
        println!(
            "{:<16} {:>9} {:>7} {:>8}",
            d.name,
            if under { "yes" } else { "no" },
            tally.priors.get(&d.name).map_or("-".into(), |p| format!("{p:.2}")),
            tally.alerts.get(&d.name).copied().unwrap_or(0)
        );
    }
}

pub fn run(a: DemoArgs) -> anyhow::Result<()> {
    ensure_model(&a.model)?;
    let port = if std::net::TcpListener::bind(("127.0.0.1", a.port)).is_ok() {
        a.port
    } else {
        broker::free_port()?
    };
    let broker = LocalBroker::start(&broker_binary(), port)?;
    println!("demo: broker (bundled tansu) on {}", broker.bootstrap());
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let result = runtime.block_on(demo(a, broker.bootstrap()));
    drop(broker);
    result
}

async fn demo(a: DemoArgs, bootstrap: String) -> anyhow::Result<()> {
    let mut cfg = DaemonConfig::defaults();
    cfg.kafka.brokers = bootstrap.clone();
    cfg.model.path = a.model.clone();
    cfg.model.features = 0; // whatever model the demo is given
    cfg.http.listen = a.http.clone();
    cfg.adaptation.interval_ms = 500;
    cfg.state.snapshot_interval_s = 5;
    // This demo still prints per-record alerts (showing incidents is the demo's rework).
    cfg.kafka.publish_alerts = true;
    // The bundled broker completes a group join only after about a heartbeat-scaled
    // delay: short session settings make the demo start scoring within seconds.
    cfg.kafka.options.insert("session.timeout.ms".into(), "6000".into());
    cfg.kafka.options.insert("heartbeat.interval.ms".into(), "500".into());
    let daemon = daemon::start(cfg.clone()).await.context("starting the daemon")?;
    println!("demo: daemon running; metrics at http://{}/metrics (also /healthz, /readyz)", daemon.http_addr);
    println!(
        "demo: {} devices, {:.0} records/s; a third come under attack after {} s; Ctrl-C stops everything",
        a.devices, a.rate, a.attack_after
    );

    let stop = Arc::new(AtomicBool::new(false));
    let tally = Arc::new(Mutex::new(Tally::default()));
    let watcher = {
        let (b, t, s) = (bootstrap.clone(), Arc::clone(&tally), Arc::clone(&stop));
        let topics = [cfg.kafka.alerts_topic.clone(), cfg.kafka.priors_topic.clone()];
        std::thread::spawn(move || watch(b, topics, t, s))
    };

    let producer: FutureProducer = ClientConfig::new().set("bootstrap.servers", &bootstrap).create()?;
    let devs = devices(a.devices.max(1));
    let input = cfg.kafka.input_topics[0].clone();
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let started = Instant::now();
    let period = Duration::from_secs_f64(1.0 / a.rate.max(1.0));
    let mut ticker = tokio::time::interval(period);
    let mut ctrl_c = std::pin::pin!(tokio::signal::ctrl_c());
    let mut last_summary = Instant::now();
    let mut n: u64 = 0;
    let mut announced = false;
    loop {
        tokio::select! {
            _ = &mut ctrl_c => break,
            _ = ticker.tick() => {}
        }
        let elapsed = started.elapsed();
        if a.duration > 0 && elapsed >= Duration::from_secs(a.duration) {
            break;
        }
        let attack_on = elapsed >= Duration::from_secs(a.attack_after);
        if attack_on && !announced {
            announced = true;
            let names: Vec<&str> = devs.iter().filter(|d| d.attacked).map(|d| d.name.as_str()).collect();
            println!("demo: attack starts on {}", names.join(", "));
        }
        let d = &devs[(n as usize) % devs.len()];
        let round = n / devs.len() as u64;
        // Onboarding: each device's first 10 records are confirmed normal.
        let known_normal = round < 10;
        let hostile = attack_on && d.attacked && rng.gen_bool(0.5);
        let pool = if hostile { &d.attack } else { &d.normal };
        let row = &pool[rng.gen_range(0..pool.len())];
        let value = record::encode(&d.name, elapsed.as_secs_f64(), row, known_normal);
        let rec = FutureRecord::to(&input).key(&d.name).payload(&value);
        if let Err((e, _)) = producer.send(rec, Timeout::After(Duration::from_secs(5))).await {
            eprintln!("demo: produce failed: {e}");
        }
        n += 1;
        if last_summary.elapsed() >= Duration::from_secs(20) {
            last_summary = Instant::now();
            println!("demo: {n} records sent after {:.0} s", elapsed.as_secs_f64());
            if let Ok(t) = tally.lock() {
                summary(&devs, &t, attack_on);
            }
        }
    }
    println!("demo: stopping (sent {n} records)");
    tokio::time::sleep(Duration::from_secs(1)).await;
    stop.store(true, Ordering::Relaxed);
    let _ = watcher.join();
    if let Ok(t) = tally.lock() {
        summary(&devs, &t, started.elapsed() >= Duration::from_secs(a.attack_after));
    }
    daemon.shutdown().await?;
    println!("demo: daemon stopped, broker stopped");
    Ok(())
}
