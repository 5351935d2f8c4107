//! `make bench`: the daemon's engine without Kafka — scoring throughput, re-adaptation
//! of whole fleets, memory per device. Prints numbers; asserts nothing.

use std::time::Instant;

use metapu::daemon::devices::WindowSizes;
use metapu::daemon::engine::{run_adaptation, Engine};
use metapu::daemon::output::Source;
use metapu::daemon::record::{decode, encode, FeatureRecord};
use metapu::model::{MetaPuNet, Model, NetConfig, PreprocessKind, Preprocessor, Provenance};
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
    FeatureRecord { device: format!("device-{device:05}"), ts: 0.0, features, known_normal: normal }
}

fn source(offset: i64) -> Source {
    Source { topic: "iot.features".into(), partition: 0, offset }
}

fn main() {
    println!("metapu daemon-engine benchmarks (D = {DIM}, K = 32, M = 100, windows 50 P + 200 U, CPU, torch threads {})", tch::get_num_threads());
    println!();
    println!("| devices | fill windows | RSS per device | re-adapt all | scoring (records/s, 4096-record batches) | decode JSON (records/s) |");
    println!("|---|---|---|---|---|---|");
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    for devices in [100usize, 1_000, 10_000] {
        let sizes = WindowSizes { positive: 50, unlabeled: 200, bootstrap_positives: 0 };
        let mut engine = Engine::new(model(), sizes, devices, 0.5);
        let rss_before = rss_bytes();
        // Fill every device's windows: 50 known-normal + 150 more records.
        let t = Instant::now();
        let mut offset = 0;
        for round in 0..200 {
            for d in 0..devices {
                let r = record(&mut rng, d, round < 50);
                offset += 1;
                engine.devices.observe(&r.device, &r.features, r.known_normal, &source(offset), 0);
            }
        }
        let fill = t.elapsed().as_secs_f64();
        let per_device = (rss_bytes().saturating_sub(rss_before)) as f64 / devices as f64;

        let t = Instant::now();
        let jobs = engine.adaptation_jobs(1, usize::MAX);
        let states = run_adaptation(&engine.model, &jobs, 1024);
        engine.install(states);
        let adapt = t.elapsed().as_secs_f64();

        let batch: Vec<FeatureRecord> = (0..4096).map(|i| record(&mut rng, i % devices, false)).collect();
        // Fresh offsets each round, so every record enters its windows as in service.
        let rounds = 10;
        let sources: Vec<Vec<Source>> = (0..=rounds)
            .map(|_| {
                (0..batch.len())
                    .map(|_| {
                        offset += 1;
                        source(offset)
                    })
                    .collect()
            })
            .collect();
        let refs =
            |round: usize| -> Vec<(&FeatureRecord, &Source)> { batch.iter().zip(&sources[round]).collect() };
        engine.process(&refs(rounds), 1); // warm-up
        let t = Instant::now();
        for round in 0..rounds {
            engine.process(&refs(round), 1);
        }
        let scoring = (rounds * batch.len()) as f64 / t.elapsed().as_secs_f64();

        let encoded: Vec<Vec<u8>> =
            batch.iter().map(|r| encode(&r.device, r.ts, &r.features, false)).collect();
        let t = Instant::now();
        for e in &encoded {
            decode(None, e, DIM, 1 << 20).unwrap();
        }
        let decoding = encoded.len() as f64 / t.elapsed().as_secs_f64();
        println!(
            "| {devices} | {fill:.1} s | {:.0} KB | {adapt:.2} s ({:.2} ms/device) | {scoring:.0} | {decoding:.0} |",
            per_device / 1024.0,
            1e3 * adapt / devices as f64
        );
    }
}
