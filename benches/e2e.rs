//! `make bench`, end to end: simulated N-BaIoT records for 100, 1,000 and 10,000
//! devices through the bundled broker (tansu) and the daemon (default config, the
//! shipped IoT model), which consumes, decodes, scores and publishes what it finds.
//! Warm start: each device first sends 20 records (10 labeled normal) and the
//! measurement waits until every device is adapted. Then two measurements:
//! - live: 200,000 records produced as fast as the broker takes them while the daemon
//!   consumes (the producer shares the 2 cores, and may be the slower of the two);
//! - restarted on a backlog: the daemon stops (snapshots, commits), another 200,000
//!   records are produced while it is down, and a new daemon starts on them, restoring
//!   the devices' windows from the state topic. This is the daemon's own rate, with
//!   the cores to itself and the broker.
//!
//! Each device count runs with a JSON record a message, a binary one, and binary records
//! in the sensor's batches (what `metapu sense` sends).
//! Throughput = records consumed ÷ time from the first to the last.
//! In the first two tables records are stamped 100,000 a second of their own time
//! (`ts`): 100 a second per device at 1,000 devices. The second, at 1,000 devices,
//! compares the service clock (the daemon before incidents ran on event time), the event
//! clock (the default), and the event clock with packet context in every record and a
//! webhook sink taking every incident event (E2E_COST=0 skips it). The third has the
//! fleet's usual shape: each device sends one record a second, or one every ten seconds,
//! of its own time, at 1,000 and 10,000 devices, JSON, the two clocks side by side
//! (E2E_SHAPE=0 skips it, E2E_SHAPE=only runs it alone, E2E_SHAPE=1000x1 only its rows
//! of 1,000 devices at a record a second; E2E_MIN_RECORDS=N adds the event clock with
//! adaptation.min_records = N to each of its rows; E2E_DRAWN=1 adds the event clock with
//! windows.drawn): on the event clock a device's adaptation points then follow its records.
//! Prints numbers; asserts nothing.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::{rss_mib, send_until_queued};
use metapu::broker::{self, LocalBroker};
use metapu::daemon::config::DaemonConfig;
use metapu::daemon::{self, kafka};
use metapu::monitor::clock::Clock;
use metapu::monitor::record;
use metapu::sensor::Batching;
use metapu::traffic::context::{Context, Direction};
use metapu::traffic::simulate::{fleet_tasks, FleetConfig};
use rdkafka::config::ClientConfig;
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};

const RECORDS: usize = 200_000;
const LABELED: usize = 10;
const WARM_UP: usize = 20;
/// Records a second of the fleet's own time (`ts`) in the first two tables, and the
/// time of the first.
const FLEET_RATE: f64 = 100_000.0;
const T0: f64 = 1.7e9;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    // As the daemon's binary runs it.
    daemon::use_one_torch_thread();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    // A pool of simulated rows (benign and attack) to deal out to the devices.
    let fleet = fleet_tasks(&FleetConfig {
        devices: 50,
        duration_s: 300.0,
        seed: 9,
        attacked_share: 1.0,
        max_rows_per_class: Some(500),
        ..FleetConfig::default()
    });
    let pool: Vec<(&[f32], bool)> = fleet
        .tasks
        .tasks
        .iter()
        .flat_map(|t| {
            (0..t.len()).map(move |i| (t.row(i, 115), t.labels[i] == metapu::data::Label::Positive))
        })
        .collect();
    println!("metapu end-to-end benchmark: {RECORDS} records per row of the table, the bundled broker, the daemon with default settings and models/iot-default.safetensors");
    println!();
    println!("| devices | records, setup | producer (records/s) | end to end, producer running (records/s) | end to end, daemon restarted on a backlog (records/s) | incidents opened (live) | process RSS (daemon, producer, records) |");
    println!("|---|---|---|---|---|---|---|");
    // E2E_ROWS=1000:binary,100:json,1000:batched runs only those rows (default: all nine).
    let only = std::env::var("E2E_ROWS").unwrap_or_default();
    let wanted = |devices: usize, wire: Wire| {
        let row = format!("{devices}:{}", wire.key());
        only.is_empty() || only.split(',').any(|r| r.trim() == row)
    };
    let shape = std::env::var("E2E_SHAPE").unwrap_or_default();
    // E2E_SHAPE=DEVICESxRATE: that row of the third table alone (and nothing else).
    let shape_row =
        shape.split_once('x').and_then(|(d, r)| Some((d.parse::<usize>().ok()?, r.parse::<f64>().ok()?)));
    let shape = if shape_row.is_some() { "only".to_string() } else { shape };
    let rows = [100usize, 1_000, 10_000]
        .into_iter()
        .flat_map(|d| [(d, Wire::Json), (d, Wire::Binary), (d, Wire::SensorBatches)]);
    for (devices, wire) in rows.filter(|&(d, w)| wanted(d, w) && shape != "only") {
        println!("{}", row(root, &pool, devices, wire, Setup::DEFAULT).await);
    }
    if std::env::var("E2E_COST").as_deref() != Ok("0") && shape != "only" {
        println!();
        println!(
            "What incidents on event time, packet context and a sink cost, 1,000 devices (E2E_COST=0 skips):"
        );
        println!();
        println!("| devices | setup | producer (records/s) | end to end, producer running (records/s) | end to end, daemon restarted on a backlog (records/s) | incidents opened (live) | process RSS (daemon, producer, records) |");
        println!("|---|---|---|---|---|---|---|");
        let service = Setup { clock: Clock::Service, every_second: true, ..Setup::DEFAULT };
        let full = Setup { context: true, webhook: true, ..Setup::DEFAULT };
        for wire in [Wire::Json, Wire::Binary] {
            for setup in [service, Setup::DEFAULT, full] {
                println!("{}", row(root, &pool, 1_000, wire, setup).await);
            }
        }
    }
    // E2E_MIN_RECORDS=N: each row of the third table also on the event clock with
    // adaptation.min_records = N (an A/B of the setting in one run).
    let other_min_records = std::env::var("E2E_MIN_RECORDS").ok().and_then(|v| v.parse::<usize>().ok());
    if shape != "0" {
        println!();
        println!("The fleet's shape: each device one record a second, or one every ten seconds, of its own time; JSON; the two clocks side by side (E2E_SHAPE=0 skips):");
        println!();
        println!("| devices | setup | producer (records/s) | end to end, producer running (records/s) | end to end, daemon restarted on a backlog (records/s) | incidents opened (live) | process RSS (daemon, producer, records) |");
        println!("|---|---|---|---|---|---|---|");
        for devices in [1_000usize, 10_000] {
            for per_device in [1.0, 0.1] {
                if shape_row.is_some_and(|(d, r)| (d, r) != (devices, per_device)) {
                    continue;
                }
                let shaped = Setup { per_device: Some(per_device), ..Setup::DEFAULT };
                // The service clock as it was (adapting every second of its own time,
                // the reference of the goal), the default event clock, and the event
                // clock with the service clock's cadence on the records' time.
                let mut setups = vec![
                    Setup { clock: Clock::Service, every_second: true, ..shaped },
                    shaped,
                    Setup { every_second: true, ..shaped },
                ];
                if let Some(m) = other_min_records {
                    setups.push(Setup { min_records: Some(m), ..shaped });
                }
                if std::env::var("E2E_DRAWN").as_deref() == Ok("1") {
                    setups.push(Setup { drawn: true, ..shaped });
                }
                for setup in setups {
                    println!("{}", row(root, &pool, devices, Wire::Json, setup).await);
                }
            }
        }
    }
}

/// What a row runs with: the clock, packet context in every record, a webhook sink (a
/// local HTTP server that takes every event).
#[derive(Debug, Clone, Copy)]
struct Setup {
    clock: Clock,
    context: bool,
    webhook: bool,
    /// Records a second per device of their own time; `None`: FLEET_RATE for the fleet.
    per_device: Option<f64>,
    /// `adaptation.min_records` other than the default (the daemon before it existed: 1).
    min_records: Option<usize>,
    /// Adaptation points as before 2026-11-29: every second of a device's time
    /// (`interval_ms` 1,000, `after_records` 0).
    every_second: bool,
    /// `windows.drawn`: each device adapted on draws at the model's trained shape.
    drawn: bool,
}

impl Setup {
    /// The daemon's defaults, records without context, no sink.
    const DEFAULT: Setup = Setup {
        clock: Clock::Event,
        context: false,
        webhook: false,
        per_device: None,
        min_records: None,
        every_second: false,
        drawn: false,
    };

    fn name(&self, wire: Wire) -> String {
        let mut parts = vec![wire.name().to_string()];
        if let Some(rate) = self.per_device {
            parts.push(format!("{rate} record/s per device"));
        }
        parts.push(format!("{:?} clock", self.clock).to_lowercase());
        if let Some(m) = self.min_records {
            parts.push(format!("min_records {m}"));
        }
        if self.every_second {
            parts.push("adapted every 1 s".into());
        }
        if self.drawn {
            parts.push("drawn".into());
        }
        if self.context {
            parts.push("context".into());
        }
        if self.webhook {
            parts.push("webhook".into());
        }
        parts.join(", ")
    }
}

/// How records travel: a JSON or binary record a message, or binary records in the
/// sensor's batches (`sensor.batch_records`, `batch_wait_ms`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wire {
    Json,
    Binary,
    SensorBatches,
}

impl Wire {
    /// Its name in E2E_ROWS.
    fn key(self) -> &'static str {
        match self {
            Wire::Json => "json",
            Wire::Binary => "binary",
            Wire::SensorBatches => "batched",
        }
    }

    fn name(self) -> &'static str {
        match self {
            Wire::Json => "JSON",
            Wire::Binary => "binary",
            Wire::SensorBatches => "binary in the sensor's batches",
        }
    }
}

/// Records (device, ts, message) as the sensor sends them: within each `wait` of the
/// fleet's time a device's records go together, a message as soon as `records` are
/// gathered, the rest at the window's end; a lone record as itself.
fn sensor_batches(records: &[(String, f64, Vec<u8>)], batching: Batching) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut pending: Vec<(String, record::Batch)> = Vec::new();
    let flush = |pending: &mut Vec<(String, record::Batch)>, out: &mut Vec<(String, Vec<u8>)>| {
        for (device, mut batch) in pending.drain(..) {
            out.extend(batch.take_message().map(|message| (device, message)));
        }
    };
    let wait = batching.wait.as_secs_f64();
    let mut window_end = records.first().map_or(0.0, |r| r.1) + wait;
    for (device, ts, message) in records {
        if *ts >= window_end {
            flush(&mut pending, &mut out);
            window_end = ts + wait;
        }
        let i = match pending.iter().position(|(d, _)| d == device) {
            Some(i) => i,
            None => {
                pending.push((device.clone(), record::Batch::default()));
                pending.len() - 1
            }
        };
        let batch = &mut pending[i].1;
        batch.push(message);
        if batch.records() >= batching.records {
            out.push((device.clone(), batch.take()));
        }
    }
    flush(&mut pending, &mut out);
    out
}

/// A webhook receiver answering 200 to everything; its address.
async fn webhook_receiver() -> std::net::SocketAddr {
    let app = axum::Router::new().route("/hook", axum::routing::post(|| async { "ok" }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("a local port");
    let addr = listener.local_addr().expect("an address");
    tokio::spawn(async move { axum::serve(listener, app).await.ok() });
    addr
}

/// One row of the table: the live and the restarted measurement.
async fn row(root: &Path, pool: &[(&[f32], bool)], devices: usize, wire: Wire, setup: Setup) -> String {
    let binary = wire != Wire::Json;
    let port = broker::free_port().expect("a free port");
    let bin = broker::binary_in(root);
    let broker = LocalBroker::start(&bin, port).expect("bundled broker (make bench runs scripts/setup.sh)");
    let boot = broker.bootstrap();
    let mut cfg = DaemonConfig::defaults();
    cfg.kafka.brokers = boot.clone();
    cfg.kafka.group_id = format!("bench-{devices}-{binary}");
    cfg.kafka.options.insert("session.timeout.ms".into(), "6000".into());
    cfg.kafka.options.insert("heartbeat.interval.ms".into(), "500".into());
    for (k, v) in
        std::env::var("E2E_KAFKA").unwrap_or_default().split(',').filter_map(|kv| kv.split_once('='))
    {
        cfg.kafka.options.insert(k.into(), v.into());
    }
    cfg.model.path = root.join("models/iot-default.safetensors");
    cfg.http.listen = "127.0.0.1:0".into();
    cfg.windows.bootstrap_positives = 0;
    // The benchmark's records label each device's first ones normal.
    cfg.windows.trust_input_labels = true;
    cfg.time.clock = setup.clock;
    if let Some(m) = setup.min_records {
        cfg.adaptation.min_records = m;
    }
    if setup.every_second {
        (cfg.adaptation.interval_ms, cfg.adaptation.after_records) = (1_000, 0);
    }
    cfg.windows.drawn = setup.drawn;
    if setup.webhook {
        cfg.sinks.webhook.url = format!("http://{}/hook", webhook_receiver().await);
    }
    let input = cfg.kafka.input_topics[0].clone();
    kafka::ensure_topics(&cfg.kafka, &[kafka::TopicSpec::plain(&input, 1)], Duration::from_secs(10))
        .await
        .ok();

    // Warm-up: each device's first records, some labeled normal; then the stream.
    let warm = WARM_UP * devices;
    // Devices with a labeled record in the warm-up: the ones that get adapted.
    let labeled_devices =
        (0..devices).filter(|d| (0..LABELED).any(|round| pool[(d * 7919 + round) % pool.len()].1)).count();
    let payload = |i: usize| {
        let d = i % devices;
        let round = i / devices;
        let (row, normal) = pool[(d * 7919 + round) % pool.len()];
        let name = format!("device-{d:05}");
        let labeled = round < LABELED && normal;
        // The fleet's records FLEET_RATE a second of their own time (or each device's
        // `per_device` a second), one device after the other.
        let fleet_rate = setup.per_device.map_or(FLEET_RATE, |r| r * devices as f64);
        let ts = T0 + i as f64 / fleet_rate;
        let context = setup.context.then(|| Context {
            src_ip: Some(std::net::IpAddr::from([10, 0, (d >> 8) as u8, d as u8])),
            dst_ip: Some(std::net::IpAddr::from([192, 0, 2, (round % 250) as u8])),
            src_port: 40_000 + (round % 1000) as u16,
            dst_port: 443,
            proto: 6,
            tcp_flags: 0x18,
            bytes: 120,
            direction: Some(Direction::Outbound),
            device_mac: None,
            arp: None,
            // Named, as the sensor names a peer the device looked up.
            peer_name: metapu::traffic::peer_names::PeerName::new("cloud.example.com").ok(),
        });
        let p = if binary {
            record::encode_binary(&name, ts, row, labeled, context.as_ref())
        } else {
            record::encode_with_context(&name, ts, row, labeled, context.as_ref())
        };
        (name, ts, p)
    };
    // The messages of records `range`.
    let messages = |range: std::ops::Range<usize>| -> Vec<(String, Vec<u8>)> {
        let records: Vec<(String, f64, Vec<u8>)> = range.map(payload).collect();
        match wire {
            Wire::SensorBatches => sensor_batches(&records, cfg.sensor.batching()),
            _ => records.into_iter().map(|(d, _, p)| (d, p)).collect(),
        }
    };
    let warm_up: Vec<(String, Vec<u8>)> = (0..warm).map(payload).map(|(d, _, p)| (d, p)).collect();
    let live = messages(warm..warm + RECORDS);
    let per_message = RECORDS as f64 / live.len() as f64;
    let producer: ThreadedProducer<DefaultProducerContext> = ClientConfig::new()
        .set("bootstrap.servers", &boot)
        .set("linger.ms", "20")
        .set("batch.num.messages", "10000")
        .set("queue.buffering.max.messages", "500000")
        .create()
        .expect("producer");
    let send_all = |part: &[(String, Vec<u8>)]| {
        for (key, value) in part {
            send_until_queued(&producer, BaseRecord::to(&input).key(key.as_str()).payload(value.as_slice()));
        }
        producer.flush(Duration::from_secs(120)).expect("records delivered");
    };
    send_all(&warm_up);
    drop(warm_up);

    let daemon = daemon::start(cfg.clone()).await.expect("daemon starts");
    let m = &daemon.metrics;
    let limit = Instant::now() + Duration::from_secs(120);
    while (m.records_consumed() < warm as u64 || m.adaptations() < labeled_devices as u64)
        && Instant::now() < limit
    {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (consumed0, incidents0) = (m.records_consumed(), m.incidents_opened());
    let (produced, first, last, peak_rss) = std::thread::scope(|s| {
        let producing = s.spawn(|| {
            let t = Instant::now();
            send_all(&live);
            RECORDS as f64 / t.elapsed().as_secs_f64()
        });
        let mut first: Option<Instant> = None;
        let mut peak_rss: f64 = 0.0;
        let limit = Instant::now() + Duration::from_secs(600);
        while m.records_consumed() < consumed0 + RECORDS as u64 && Instant::now() < limit {
            if first.is_none() && m.records_consumed() > consumed0 {
                first = Some(Instant::now());
            }
            peak_rss = peak_rss.max(rss_mib(std::process::id()));
            std::thread::sleep(Duration::from_millis(10));
        }
        (producing.join().ok(), first, Instant::now(), peak_rss)
    });
    let consumed = m.records_consumed() - consumed0;
    let overall = first.map_or(f64::NAN, |f| consumed as f64 / (last - f).as_secs_f64());
    let produce = produced.unwrap_or(f64::NAN);
    let incidents = m.incidents_opened() - incidents0;
    drop(live);

    // Restarted on a backlog: stop, produce while the daemon is down, start again.
    daemon.shutdown().await.ok();
    let backlog = messages(warm + RECORDS..warm + 2 * RECORDS);
    send_all(&backlog);
    drop(backlog);
    let daemon = daemon::start(cfg.clone()).await.expect("daemon restarts");
    let m = &daemon.metrics;
    // The rate counts from the first micro-batch seen, without its records.
    let (mut first_again, limit) = (None, Instant::now() + Duration::from_secs(600));
    while m.records_consumed() < RECORDS as u64 && Instant::now() < limit {
        if first_again.is_none() && m.records_consumed() > 0 {
            first_again = Some((Instant::now(), m.records_consumed()));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let (again, last_again) = (m.records_consumed(), Instant::now());
    let restarted =
        first_again.map_or(f64::NAN, |(t, n)| (again - n) as f64 / (last_again - t).as_secs_f64());
    let shortfall = |n: u64| {
        if n < RECORDS as u64 {
            format!(" ({n} of {RECORDS} in 600 s)")
        } else {
            String::new()
        }
    };
    daemon.shutdown().await.ok();
    drop(broker);
    format!(
        "| {devices} | {} | {produce:.0} | {overall:.0}{} | {restarted:.0}{} | {incidents} | {peak_rss:.0} MiB |",
        match wire {
            Wire::SensorBatches => format!("{} ({per_message:.1} records a message)", setup.name(wire)),
            _ => setup.name(wire),
        },
        shortfall(consumed),
        shortfall(again),
    )
}
