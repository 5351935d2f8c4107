//! `make soak`: the real daemon binary under sustained load, 10,000 devices of
//! 115-feature records. First a closed-loop blast measures what the daemon sustains on
//! this machine; then it runs at half that rate for METAPU_SOAK_SECONDS (default 1800)
//! while RSS, consumption and lag are sampled. It fails if the daemon dies, reports an
//! error, lets lag grow without bound or keeps growing its memory.
//!
//! The broker is rdkafka's in-process MockCluster: it keeps only the newest 5 MB of each
//! partition, where the bundled broker keeps every record in memory and could not hold
//! half an hour of this traffic. Lag is counted here (records acknowledged by the broker
//! minus records the daemon consumed), never read from the broker.
//!
//! Ignored in `make test`; `make soak` runs it in release mode.

use std::io::Write;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use metapu::daemon::config::DaemonConfig;
use metapu::model::{file, MetaPuNet, Model, NetConfig, PreprocessKind, Preprocessor, Provenance};
use metapu::monitor::record::encode;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rdkafka::config::ClientConfig;
use rdkafka::mocking::MockCluster;
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};

const DIM: usize = 115;
const PARTITIONS: i32 = 16;

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// An N-BaIoT-shaped model: the paper's architecture, seeded weights, log-standard
/// preprocessing fitted on the generated traffic. Its accuracy is not the point here.
fn write_model(path: &Path, rows: &[f32]) {
    let net = MetaPuNet::new(NetConfig::paper(DIM as i64, 32), tch::Device::Cpu);
    net.init_from_seed(7);
    let model = Model {
        net,
        preprocess: Preprocessor::fit(PreprocessKind::LogStandard, rows, DIM),
        feature_names: (0..DIM).map(|i| format!("f{i}")).collect(),
        provenance: Provenance::default(),
    };
    file::save(&model, path).unwrap();
}

/// Four encoded records per device, features log-uniform over N-BaIoT-like ranges.
fn record_pool(devices: usize) -> (Vec<(String, Vec<u8>)>, Vec<f32>) {
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    let mut pool = Vec::with_capacity(devices * 4);
    let mut sample = Vec::new();
    for d in 0..devices {
        let id = format!("dev-{d:05}");
        for v in 0..4 {
            let row: Vec<f32> = (0..DIM).map(|_| 10f32.powf(rng.gen_range(-2.0..4.0))).collect();
            if d < 500 {
                sample.extend_from_slice(&row);
            }
            pool.push((id.clone(), encode(&id, v as f64, &row, false)));
        }
    }
    (pool, sample)
}

struct Daemon(Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| {
                l.strip_prefix("VmRSS:").and_then(|v| v.trim().trim_end_matches(" kB").parse().ok())
            })
        })
        .unwrap_or(0)
}

fn scrape(addr: &str) -> String {
    use std::io::Read;
    let Ok(mut s) = std::net::TcpStream::connect(addr) else { return String::new() };
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    let _ = write!(s, "GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    let mut text = String::new();
    let _ = s.read_to_string(&mut text);
    text
}

fn metric(body: &str, name: &str) -> f64 {
    body.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| l.split([' ', '{']).next() == Some(name))
        .filter_map(|l| l.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()))
        .sum()
}

/// The load generator: records from the pool, round robin, with the lag counted here.
struct Load<'a> {
    producer: ThreadedProducer<DefaultProducerContext>,
    pool: &'a [(String, Vec<u8>)],
    next: usize,
    sent: u64,
    consumed: Arc<AtomicU64>,
}

impl Load<'_> {
    /// Records the broker holds that the daemon has not consumed yet.
    fn lag(&self) -> u64 {
        let acked = self.sent.saturating_sub(self.producer.in_flight_count().max(0) as u64);
        acked.saturating_sub(self.consumed.load(Ordering::Relaxed))
    }

    fn send_one(&mut self) {
        let (key, value) = &self.pool[self.next % self.pool.len()];
        self.next += 1;
        let mut record = BaseRecord::<String, Vec<u8>>::to("soak.features").key(key).payload(value);
        loop {
            match self.producer.send(record) {
                Ok(()) => break,
                Err((_, r)) => {
                    record = r; // local queue full: wait for deliveries
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
        }
        self.sent += 1;
    }

    /// Send `count` records (or until `duration`), at `rate` records/s (None: as fast
    /// as the lag allows), never letting the lag pass `max_lag`.
    fn run(&mut self, rate: Option<f64>, count: u64, duration: Duration, max_lag: u64) {
        let started = Instant::now();
        let mut sent = 0u64;
        while sent < count && started.elapsed() < duration {
            if self.lag() > max_lag {
                std::thread::sleep(Duration::from_millis(2));
                continue;
            }
            if let Some(rate) = rate {
                if sent as f64 >= started.elapsed().as_secs_f64() * rate {
                    std::thread::sleep(Duration::from_millis(1));
                    continue;
                }
            }
            self.send_one();
            sent += 1;
        }
    }

    fn drain(&self, limit: Duration) -> bool {
        let started = Instant::now();
        while started.elapsed() < limit {
            if self.producer.in_flight_count() == 0 && self.lag() < 100 {
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    }
}

#[test]
#[ignore = "half an hour of load: run by `make soak`"]
fn half_an_hour_at_half_the_sustained_rate() {
    let devices = env_or("METAPU_SOAK_DEVICES", 10_000) as usize;
    let seconds = env_or("METAPU_SOAK_SECONDS", 1800);
    let blast_seconds = env_or("METAPU_SOAK_BLAST_SECONDS", 60).max(20);
    let dir = tempfile::tempdir().unwrap();
    let (pool, sample) = record_pool(devices);
    let model_path = dir.path().join("soak.safetensors");
    write_model(&model_path, &sample);

    let cluster = MockCluster::new(1).unwrap();
    cluster.create_topic("soak.features", PARTITIONS, 1).unwrap();
    cluster.create_topic("soak.state", PARTITIONS, 1).unwrap();
    for t in ["alerts", "priors", "deadletter", "scores"] {
        cluster.create_topic(&format!("soak.{t}"), 4, 1).unwrap();
    }
    let boot = cluster.bootstrap_servers();
    let http = format!("127.0.0.1:{}", crate::support::free_port());
    let mut cfg = DaemonConfig::defaults();
    cfg.kafka.brokers = boot.clone();
    cfg.kafka.group_id = "soak".into();
    cfg.kafka.input_topics = vec!["soak.features".into()];
    cfg.kafka.alerts_topic = "soak.alerts".into();
    cfg.kafka.priors_topic = "soak.priors".into();
    cfg.kafka.deadletter_topic = "soak.deadletter".into();
    cfg.kafka.state_topic = "soak.state".into();
    cfg.kafka.scores_topic = "soak.scores".into();
    cfg.model.path = model_path;
    cfg.http.listen = http.clone();
    // Every device's first 5 records are its known-normal onboarding.
    cfg.windows.bootstrap_positives = 5;
    let config = dir.path().join("soak.toml");
    std::fs::write(&config, cfg.to_toml()).unwrap();
    let mut daemon = Daemon(
        Command::new(env!("CARGO_BIN_EXE_metapu"))
            .args(["run", "--config"])
            .arg(&config)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap(),
    );
    let pid = daemon.0.id();

    // The daemon's consumed count, scraped in the background.
    let consumed = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let scraper = {
        let (consumed, stop, http) = (Arc::clone(&consumed), Arc::clone(&stop), http.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let n = metric(&scrape(&http), "metapu_records_consumed_total") as u64;
                consumed.fetch_max(n, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(100));
            }
        })
    };
    let started = Instant::now();
    while scrape(&http).is_empty() {
        assert!(started.elapsed() < Duration::from_secs(60), "daemon did not come up");
        std::thread::sleep(Duration::from_millis(200));
    }
    let producer: ThreadedProducer<DefaultProducerContext> = ClientConfig::new()
        .set("bootstrap.servers", &boot)
        .set("linger.ms", "5")
        .set("queue.buffering.max.messages", "200000")
        .create()
        .unwrap();
    let mut load = Load { producer, pool: &pool, next: 0, sent: 0, consumed: Arc::clone(&consumed) };
    // The mock keeps 5 MB a partition (~60,000 of these records over 16 partitions):
    // the lag must stay well below, or records would be dropped before consumption.
    let max_lag = 20_000;

    // Onboarding: every device's records once.
    load.run(None, pool.len() as u64, Duration::from_secs(600), max_lag);
    assert!(load.drain(Duration::from_secs(300)), "onboarding not consumed (lag {})", load.lag());
    println!(
        "onboarded {devices} devices ({} records) in {:.1} s",
        load.sent,
        started.elapsed().as_secs_f64()
    );

    // Blast: as fast as the daemon consumes; its rate over the last part is the capacity.
    load.run(None, u64::MAX, Duration::from_secs(10), max_lag);
    let (c0, t0) = (consumed.load(Ordering::Relaxed), Instant::now());
    load.run(None, u64::MAX, Duration::from_secs(blast_seconds - 10), max_lag);
    let capacity = (consumed.load(Ordering::Relaxed) - c0) as f64 / t0.elapsed().as_secs_f64();
    assert!(load.drain(Duration::from_secs(300)), "blast backlog not consumed");
    let rate = capacity / 2.0;
    println!("sustained {capacity:.0} records/s with {devices} devices; soaking at {rate:.0} records/s for {seconds} s");

    // Soak at half that rate, sampling every 10 s (the first minute is warm-up).
    println!("| t (s) | RSS (MiB) | consumed records/s | lag (records) |");
    println!("|---|---|---|---|");
    let soak_started = Instant::now();
    let mut samples: Vec<(u64, u64, f64, u64)> = Vec::new();
    let mut max_lag_seen = 0;
    let mut last = (consumed.load(Ordering::Relaxed), Instant::now());
    while soak_started.elapsed() < Duration::from_secs(seconds) {
        let until = (samples.len() as u64 + 1) * 10;
        let remaining = Duration::from_secs(until).saturating_sub(soak_started.elapsed());
        // In short slices, so the lag is watched while sending.
        let slice_started = Instant::now();
        while slice_started.elapsed() < remaining {
            let slice = Duration::from_millis(500).min(remaining - slice_started.elapsed());
            load.run(Some(rate), (rate * slice.as_secs_f64()).ceil() as u64, slice, u64::MAX);
            max_lag_seen = max_lag_seen.max(load.lag());
        }
        assert!(daemon.0.try_wait().unwrap().is_none(), "the daemon exited during the soak");
        let now = (consumed.load(Ordering::Relaxed), Instant::now());
        let throughput = (now.0 - last.0) as f64 / now.1.duration_since(last.1).as_secs_f64();
        last = now;
        let rss = rss_kib(pid);
        samples.push((until, rss, throughput, load.lag()));
        println!("| {until} | {:.0} | {throughput:.0} | {} |", rss as f64 / 1024.0, load.lag());
        let _ = std::io::stdout().flush();
    }
    load.drain(Duration::from_secs(120));
    let body = scrape(&http);
    stop.store(true, Ordering::Relaxed);
    let _ = scraper.join();

    let errors = metric(&body, "metapu_produce_errors_total");
    let invalid = metric(&body, "metapu_records_invalid_total");
    let deferred = metric(&body, "metapu_records_deferred_total");
    // RSS swings with adaptation batches and snapshot rounds: compare the peaks of the
    // first five minutes after warm-up (the first minute) with those of the last five.
    let peak = |from: u64, to: u64| {
        samples.iter().filter(|s| s.0 > from && s.0 <= to).map(|s| s.1).max().unwrap_or(0)
    };
    let end_t = samples.last().map_or(0, |s| s.0);
    let window = (end_t / 6).clamp(10, 300);
    let early = peak(60.min(end_t / 2), 60.min(end_t / 2) + window);
    let late = peak(end_t.saturating_sub(window), end_t);
    let growth = late as f64 / early.max(1) as f64 - 1.0;
    println!(
        "summary: {devices} devices, {rate:.0} records/s for {seconds} s; peak RSS {:.0} MiB in the first {window} s \
         after warm-up, {:.0} MiB in the last {window} s ({:+.1} %); max lag {max_lag_seen} records ({:.2} s of \
         traffic); produce errors {errors}, invalid {invalid}, deferred {deferred}; records consumed {}",
        early as f64 / 1024.0,
        late as f64 / 1024.0,
        100.0 * growth,
        max_lag_seen as f64 / rate,
        consumed.load(Ordering::Relaxed),
    );
    assert_eq!(errors, 0.0, "produce errors");
    assert_eq!(invalid, 0.0, "records refused");
    assert!(growth < 0.10, "RSS grew {:.1} % during the soak", 100.0 * growth);
    assert!(max_lag_seen as f64 <= 5.0 * rate, "lag reached {max_lag_seen} records");
    assert!(load.lag() < 1000, "lag did not drain at the end: {}", load.lag());
}
