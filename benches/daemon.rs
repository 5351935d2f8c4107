//! `make bench`: the daemon's monitor without Kafka, driven through its one door —
//! scoring throughput, re-adaptation of whole fleets, memory per device, the incident tracker's cost per record with
//! packet context (`DAEMON_BENCH=incidents` runs that table alone). Prints numbers;
//! asserts nothing.

use std::time::Instant;

use metapu::daemon::adapter::Adapter;
use metapu::model::{MetaPuNet, Model, NetConfig, PreprocessKind, Preprocessor, Provenance};
use metapu::monitor::clock::Clock;
use metapu::monitor::record::Source;
use metapu::monitor::record::{decode, encode, encode_binary, FeatureRecord};
use metapu::monitor::{run_adaptation, AdaptJob, Adapted, Command, Input, Received, TestDriver, WindowSizes};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const DIM: usize = 115;

fn model() -> Model {
    tch::manual_seed(0);
    let mut rng = ChaCha8Rng::seed_from_u64(0);
    let rows: Vec<f32> = (0..1000 * DIM).map(|_| rng.gen_range(0.0f32..1e4)).collect();
    Model {
        net: MetaPuNet::new(NetConfig::paper(DIM as i64, 32), tch::Device::Cpu),
        preprocess: Preprocessor::fit(PreprocessKind::LogStandard, &rows, DIM),
        feature_names: (0..DIM).map(|i| format!("f{i}")).collect(),
        provenance: Provenance::default(),
    }
}

/// The daemon's default devices per batched solve.
fn adaptation_batch() -> usize {
    metapu::daemon::config::DaemonConfig::defaults().adaptation.batch_size
}

fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

fn record(rng: &mut ChaCha8Rng, device: usize, normal: bool) -> FeatureRecord {
    let features = (0..DIM).map(|_| rng.gen_range(0.0f32..1e4)).collect();
    FeatureRecord {
        device: format!("device-{device:05}"),
        ts: 0.0,
        features,
        known_normal: normal,
        context: None,
    }
}

fn source(offset: i64) -> Source {
    Source::new("iot.features", 0, offset)
}

/// FLOPs to score one record: h on [x, z_p, z_u] (4 layers), then w·h.
fn scoring_flops(k: usize) -> f64 {
    let h = [DIM + 2 * k, 100, 100, 100, 100];
    h.windows(2).map(|w| 2.0 * (w[0] * w[1]) as f64).sum::<f64>() + 200.0
}

/// FLOPs to adapt one device with 50 + 200 window rows: f on every row, h on every
/// row, K = mean_u h hᵀ, and the 100×100 solve.
fn adaptation_flops(k: usize) -> f64 {
    let rows = 250.0;
    let f = [DIM, 100, 100, 100];
    let f_row: f64 = f.windows(2).map(|w| 2.0 * (w[0] * w[1]) as f64).sum();
    rows * (f_row + scoring_flops(k)) + 2.0 * 200.0 * 100.0 * 100.0 + 2.0 / 3.0 * 1e6
}

/// Measured f32 matmul throughput (FLOP/s) for [m, k] × [k, n].
fn matmul_flops_per_s(m: i64, k: i64, n: i64) -> f64 {
    let a = tch::Tensor::randn([m, k], (tch::Kind::Float, tch::Device::Cpu));
    let b = tch::Tensor::randn([k, n], (tch::Kind::Float, tch::Device::Cpu));
    let _ = a.mm(&b);
    let reps = (2e10 / (2.0 * (m * k * n) as f64)).clamp(3.0, 2000.0) as usize;
    let t = Instant::now();
    for _ in 0..reps {
        let _ = a.mm(&b);
    }
    reps as f64 * 2.0 * (m * k * n) as f64 / t.elapsed().as_secs_f64()
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn main() {
    // DAEMON_BENCH=incidents: the incident tracker's table alone.
    if std::env::var("DAEMON_BENCH").as_deref() == Ok("incidents") {
        incident_looks();
        return;
    }
    let peak = matmul_flops_per_s(1024, 1024, 1024);
    let shaped = matmul_flops_per_s(4096, (DIM + 64) as i64, 100);
    println!("Compute bound (this machine, torch threads {}):", tch::get_num_threads());
    println!();
    println!("| quantity | value |");
    println!("|---|---|");
    println!("| f32 matmul, 1024×1024×1024 | {:.1} GFLOP/s |", peak / 1e9);
    println!("| f32 matmul, scoring's first layer (4096×179 · 179×100) | {:.1} GFLOP/s |", shaped / 1e9);
    println!("| FLOPs to score one record (h, K = 32) | {:.0} k |", scoring_flops(32) / 1e3);
    println!(
        "| scoring bound = matmul peak ÷ FLOPs per record | {:.0} records/s |",
        peak / scoring_flops(32)
    );
    println!("| FLOPs to adapt one device (50 + 200 rows) | {:.1} M |", adaptation_flops(32) / 1e6);
    println!("| adaptation bound for 10,000 devices | {:.1} s |", 1e4 * adaptation_flops(32) / peak);
    println!();
    println!("metapu monitor benchmarks (D = {DIM}, K = 32, M = 100, windows 50 P + 200 U, CPU, torch threads {}): everything through the Monitor, records as binary messages", tch::get_num_threads());
    println!();
    println!("| devices | fill windows (records scored, first classifiers) | RSS per device | devices per GiB | re-adapt all | scoring (records/s, 4096-record batches) | share of the scoring bound | decode JSON (records/s) | 256-record batch latency p50 / p99 during a full re-adaptation |");
    println!("|---|---|---|---|---|---|---|---|---|");
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    for devices in [100usize, 1_000, 10_000] {
        let mut bench = Bench::new(devices);
        let rss_before = rss_bytes();
        // Fill every device's windows: 50 known-normal + 150 more records.
        let t = Instant::now();
        for round in 0..200 {
            let records: Vec<FeatureRecord> = (0..devices).map(|d| record(&mut rng, d, round < 50)).collect();
            bench.run(&records);
        }
        let fill = t.elapsed().as_secs_f64();
        let per_device = (rss_bytes().saturating_sub(rss_before)) as f64 / devices as f64;

        // Every device changed since its first classifier: the next round takes them all.
        let t = Instant::now();
        let jobs = bench.adaptation_round();
        let states = run_adaptation(&bench.adapting, &jobs.1, adaptation_batch());
        bench.installed(jobs.0, states);
        let adapt = t.elapsed().as_secs_f64();

        let batch: Vec<FeatureRecord> = (0..4096).map(|i| record(&mut rng, i % devices, false)).collect();
        bench.run(&batch); // warm-up
        let rounds = 10;
        let t = Instant::now();
        for _ in 0..rounds {
            bench.run(&batch);
        }
        let scoring = (rounds * batch.len()) as f64 / t.elapsed().as_secs_f64();

        // Scoring latency while the adapter thread re-adapts every device (as the
        // daemon does): 256-record micro-batches until the adaptation finishes.
        let mut adapter = Adapter::spawn(model(), 0, adaptation_batch());
        let small: Vec<FeatureRecord> =
            (0..256).map(|i| record(&mut rng, (i * 37) % devices, false)).collect();
        let mut latencies = Vec::new();
        let t_adapt = Instant::now();
        let (generation, jobs) = bench.adaptation_round();
        adapter.submit(generation, jobs);
        let mut adapted = false;
        while !adapted && t_adapt.elapsed().as_secs() < 300 {
            let t = Instant::now();
            bench.run(&small);
            latencies.push(t.elapsed().as_secs_f64() * 1e3);
            adapted = adapter.results.try_recv().is_ok();
        }
        let during = t_adapt.elapsed().as_secs_f64();
        latencies.sort_by(f64::total_cmp);
        drop(adapter);

        let encoded: Vec<Vec<u8>> =
            batch.iter().map(|r| encode(&r.device, r.ts, &r.features, false)).collect();
        let t = Instant::now();
        for e in &encoded {
            decode(None, e, DIM, 1 << 20).unwrap();
        }
        let decoding = encoded.len() as f64 / t.elapsed().as_secs_f64();
        println!(
            "| {devices} | {fill:.1} s | {:.0} KB | {:.0} | {adapt:.2} s ({:.2} ms/device) | {scoring:.0} | {:.0} % | {decoding:.0} | {:.1} / {:.1} ms ({} batches in {during:.1} s) |",
            per_device / 1024.0,
            f64::from(1u32 << 30) / per_device.max(1.0),
            1e3 * adapt / devices as f64,
            100.0 * scoring * scoring_flops(32) / peak,
            percentile(&latencies, 0.5),
            percentile(&latencies, 0.99),
            latencies.len()
        );
    }
    incident_looks();
}

/// The monitor as the benchmark drives it: the daemon's settings on the service clock
/// (adaptation runs when the benchmark says), windows 50 + 200, no per-device cap, no
/// per-record outputs; time moves an hour at each adaptation round.
struct Bench {
    /// The monitor, with no adapting model of its own: adaptation runs where the
    /// benchmark says.
    driver: TestDriver,
    /// The adapter's copy of the model.
    adapting: Model,
    offset: i64,
}

impl Bench {
    fn new(devices: usize) -> Self {
        let mut s = metapu::daemon::config::DaemonConfig::defaults().core_settings();
        s.clock = Clock::Service;
        s.sizes =
            WindowSizes { positive: 50, unlabeled: 200, bootstrap_positives: 0, ..WindowSizes::default() };
        (s.max_tracked, s.threshold, s.max_per_device, s.max_batch) = (devices, 0.5, 0, 1 << 20);
        (s.trust_input_labels, s.state, s.unmonitored_after_ms, s.idle_timeout_ms) = (true, None, 0, 0);
        s.adaptation_batch = adaptation_batch();
        Self {
            driver: TestDriver::new(&s, model(), None, "bench", Some(1.7e9)),
            adapting: model(),
            offset: 0,
        }
    }

    /// Records as one micro-batch, fresh offsets each (every record enters its windows
    /// as in service).
    fn run(&mut self, records: &[FeatureRecord]) {
        for r in records {
            self.offset += 1;
            let source = Source::new("iot.features", 0, self.offset);
            let payload = encode_binary(&r.device, r.ts, &r.features, r.known_normal, None);
            self.driver.pipe(Received { source, key: None, payload });
        }
        self.driver.run();
    }

    /// The next adaptation round the monitor schedules, an hour on: its generation and
    /// jobs.
    fn adaptation_round(&mut self) -> (u64, Vec<AdaptJob>) {
        let out = self.driver.advance_time(3_600_000);
        let mut round = (0, Vec::new());
        for command in out.commands {
            if let Command::Adapt { generation, jobs } = command {
                round = (generation, jobs);
            }
        }
        round
    }

    fn installed(&mut self, generation: u64, states: Vec<Adapted>) {
        self.driver.tell(Input::Adapted { generation, states, seconds_per_batch: 0.0 });
    }
}

/// What the incident tracker costs per record with packet context, the fan-out look off
/// and on (the daemon's defaults), side by side: 1,000 devices, each talking to a few
/// cloud peers (TCP with ACK, both ways, and DNS), and the same with one device in 50
/// sweeping an address range (a fan-out of distinct hosts in every window).
fn incident_looks() {
    use metapu::daemon::config::DaemonConfig;
    use metapu::monitor::incidents::fanout::FanOutRules;
    use metapu::monitor::incidents::{Decision, IncidentTracker};
    use metapu::traffic::context::{Context, Direction};
    use std::net::{IpAddr, Ipv4Addr};

    let defaults = DaemonConfig::defaults().incident_rules();
    // The cloud's addresses come named, as the sensor names what the device looked up.
    let cloud = metapu::traffic::peer_names::PeerName::new("cloud.example.com").expect("a name");
    let packet = |device: usize, i: usize, sweeping: bool| -> Context {
        let me = IpAddr::V4(Ipv4Addr::new(10, 0, (device / 250) as u8, (device % 250) as u8));
        let (peer, port, proto, flags) = if sweeping && i % 2 == 0 {
            (IpAddr::V4(Ipv4Addr::new(192, 168, (i / 250 % 250) as u8, (i % 250) as u8)), 23, 6, 0x02)
        } else if i % 10 == 9 {
            (IpAddr::V4(Ipv4Addr::new(8, 8, 8, 8)), 53, 17, 0)
        } else {
            (IpAddr::V4(Ipv4Addr::new(52, 1, 2, (i % 3) as u8)), 443, 6, 0x18)
        };
        let outbound = i % 2 == 0;
        let (src_ip, dst_ip, src_port, dst_port) =
            if outbound { (me, peer, 40_000, port) } else { (peer, me, port, 40_000) };
        Context {
            src_ip: Some(src_ip),
            dst_ip: Some(dst_ip),
            src_port,
            dst_port,
            proto,
            tcp_flags: flags,
            bytes: 200,
            direction: Some(if outbound { Direction::Outbound } else { Direction::Inbound }),
            device_mac: None,
            arp: None,
            peer_name: (port == 443).then(|| cloud.clone()),
        }
    };
    println!();
    println!("The incident tracker per record with packet context (1,000 devices, 200 records each, a record a second of device time):");
    println!();
    println!(
        "| traffic | look off | look on (defaults) | incident state per device, look on (JSON bytes, mean) |"
    );
    println!("|---|---|---|---|");
    for (name, sweepers) in [("a few cloud peers each", 0usize), ("one device in 50 sweeping addresses", 50)]
    {
        let mut cells = Vec::new();
        let mut state = 0.0;
        for rules in [FanOutRules::OFF, defaults.fan_out] {
            let rules = metapu::monitor::incidents::IncidentRules { fan_out: rules, ..defaults };
            let mut trackers: Vec<IncidentTracker> = (0..1000).map(|_| IncidentTracker::default()).collect();
            let features = [0.0f32; DIM];
            let started = Instant::now();
            let mut n = 0u64;
            for i in 0..200usize {
                for (d, t) in trackers.iter_mut().enumerate() {
                    let sweeping = sweepers > 0 && d % sweepers == 0;
                    let c = packet(d, i, sweeping);
                    let s = source(n as i64);
                    let decision = Decision {
                        anomalous: false,
                        posterior: 0.9,
                        prior: 0.9,
                        ts: i as f64,
                        source: &s,
                        features: &features,
                        context: Some(&c),
                        judged: true,
                    };
                    std::hint::black_box(t.observe(
                        "d",
                        decision,
                        &rules,
                        None,
                        &[],
                        i as u64 * 1000,
                        i as f64,
                    ));
                    n += 1;
                }
            }
            cells.push(format!("{:.0} ns/record", started.elapsed().as_nanos() as f64 / n as f64));
            // What a device's incident state (its history, its remote peers) takes in its
            // snapshot.
            let bytes: usize =
                trackers.iter().map(|t| serde_json::to_vec(t).expect("a tracker serialises").len()).sum();
            state = bytes as f64 / trackers.len() as f64;
        }
        println!("| {name} | {} | {} | {state:.0} |", cells[0], cells[1]);
    }
}
