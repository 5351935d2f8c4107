//! `make bench`, the peer comparison, our side: the labeled stream that the peers
//! also read (runs/bench/stream.csv from `metapu simulate`) goes through the daemon's
//! engine in arrival order — JSON decode, window update, batched scoring, periodic
//! re-adaptation — with each device's first 10 benign records labeled normal. Writes
//! every record's anomaly score (1 − posterior of normal; 0.5 before the device's
//! first adaptation) to runs/bench/scores-ours.csv and the throughput to
//! runs/bench/ours.json; benches/peers.py computes the metrics for everyone alike.

use std::io::Write;
use std::path::Path;
use std::time::Instant;

use metapu::data::{csv_tasks, Label};
use metapu::model::{default_device, file};
use metapu::monitor::clock::Now;
use metapu::monitor::engine::{Engine, Source, Verdict, WindowSizes};
use metapu::monitor::record::{decode, encode, encode_binary};

const LABELED: usize = 10;
const BATCH: usize = 1024;
/// Re-adapt changed devices every this many records (the daemon does it by time).
const ADAPT_EVERY: usize = 4096;

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = root.join("runs/bench");
    let stream = dir.join("stream.csv");
    let set = csv_tasks::load(&stream, false).expect("runs/bench/stream.csv (make bench writes it)");
    let dim = set.dim();
    let model_path = root.join("models/iot-default.safetensors");

    // Arrival order: devices interleaved, each in its own time order.
    let longest = set.tasks.iter().map(|t| t.len()).max().unwrap_or(0);
    let mut order = Vec::new();
    for i in 0..longest {
        for (d, t) in set.tasks.iter().enumerate() {
            if i < t.len() {
                order.push((d, i));
            }
        }
    }
    let encoded = |binary: bool| -> Vec<Vec<u8>> {
        let mut benign_seen = vec![0usize; set.tasks.len()];
        order
            .iter()
            .map(|&(d, i)| {
                let t = &set.tasks[d];
                let normal = t.labels[i] == Label::Positive;
                let labeled = normal && benign_seen[d] < LABELED;
                benign_seen[d] += usize::from(normal);
                let row = t.row(i, dim);
                if binary {
                    encode_binary(&t.id, i as f64, row, labeled, None)
                } else {
                    encode(&t.id, i as f64, row, labeled)
                }
            })
            .collect()
    };
    let (scores, json_rate) = run(&model_path, &encoded(false), dim);
    let (_, binary_rate) = run(&model_path, &encoded(true), dim);

    let mut out =
        std::io::BufWriter::new(std::fs::File::create(dir.join("scores-ours.csv")).expect("scores file"));
    writeln!(out, "device,label,score").ok();
    for (&(d, i), s) in order.iter().zip(&scores) {
        let t = &set.tasks[d];
        writeln!(out, "{},{},{}", t.id, u8::from(t.labels[i] == Label::Negative), s).ok();
    }
    let json = serde_json::json!({ "records": order.len(), "json_records_per_s": json_rate, "binary_records_per_s": binary_rate });
    std::fs::write(dir.join("ours.json"), json.to_string()).expect("ours.json");
    println!(
        "ours on the labeled stream: {} records, {} devices: {json_rate:.0} records/s from JSON, {binary_rate:.0} from binary",
        order.len(),
        set.tasks.len()
    );
}

/// The stream through a fresh engine: (anomaly score per record, records/s).
fn run(model_path: &Path, payloads: &[Vec<u8>], dim: usize) -> (Vec<f32>, f64) {
    let model = file::load(model_path, default_device()).expect("default model");
    let sizes = WindowSizes { positive: 50, unlabeled: 200, bootstrap_positives: 0 };
    let mut engine = Engine::new(model, sizes, 100_000, 0.5);
    engine.adaptation_batch = 1024;
    let mut scores = vec![0.5f32; payloads.len()];
    let started = Instant::now();
    let mut since_adapt = 0;
    for (chunk_no, chunk) in payloads.chunks(BATCH).enumerate() {
        let records: Vec<_> =
            chunk.iter().map(|p| decode(None, p, dim, 1 << 20).expect("valid record")).collect();
        let sources: Vec<Source> = (0..records.len())
            .map(|k| Source { topic: "bench".into(), partition: 0, offset: (chunk_no * BATCH + k) as i64 })
            .collect();
        let refs: Vec<_> = records.iter().zip(&sources).collect();
        let out = engine.process(&refs, Now::service(0));
        for (k, v) in out.verdicts.iter().enumerate() {
            if let Verdict::Scored { posterior, .. } = v {
                scores[chunk_no * BATCH + k] = 1.0 - posterior;
            }
        }
        since_adapt += records.len();
        if since_adapt >= ADAPT_EVERY {
            since_adapt = 0;
            engine.adapt_changed();
        }
    }
    (scores, payloads.len() as f64 / started.elapsed().as_secs_f64())
}
