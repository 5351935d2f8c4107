//! `make bench`, the peer comparison, our side: the labeled stream that the peers
//! also read (runs/bench/stream.csv from `metapu simulate`) goes through the daemon's
//! driver in arrival order, with the daemon's default settings — micro-batches, JSON
//! decode, window update, batched scoring, re-adaptation at the event clock's points
//! (each device a record a second of its own time) — with each device's first 10
//! benign records labeled normal. Writes
//! every record's anomaly score (1 − posterior of normal; 0.5 before the device's
//! first adaptation) to runs/bench/scores-ours.csv and the throughput to
//! runs/bench/ours.json; benches/peers.py computes the metrics for everyone alike.

use std::io::Write;
use std::path::Path;
use std::time::Instant;

use metapu::daemon::DaemonConfig;
use metapu::data::{csv_tasks, Label};
use metapu::model::{default_device, file};
use metapu::monitor::record::{encode, encode_binary, Source};
use metapu::monitor::{Emitted, Received, RecordOutputs, TestDriver};

const LABELED: usize = 10;

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
    let (scores, json_rate) = run(&model_path, encoded(false));
    let (_, binary_rate) = run(&model_path, encoded(true));

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

/// The stream through a fresh monitor, every record arriving at once (a
/// backlog): (anomaly score per record, records/s).
fn run(model_path: &Path, payloads: Vec<Vec<u8>>) -> (Vec<f32>, f64) {
    let model = file::load(model_path, default_device()).expect("default model");
    let mut settings = DaemonConfig::defaults().core_settings();
    settings.max_tracked = 100_000;
    settings.outputs = RecordOutputs { scores: true, alerts: false };
    settings.trust_input_labels = true;
    settings.state = None;
    let mut driver = TestDriver::new(&settings, model, None, "bench", Some(metapu::wall_clock::unix_now()));
    let mut scores = vec![0.5f32; payloads.len()];
    let mut take = |emitted: Vec<Emitted>| {
        for e in emitted {
            if let Emitted::Score(s) = e {
                if let Some(posterior) = s.score {
                    scores[s.source.offset as usize] = 1.0 - posterior;
                }
            }
        }
    };
    let n = payloads.len();
    let started = Instant::now();
    for (k, payload) in payloads.into_iter().enumerate() {
        let source = Source::new("bench", 0, k as i64);
        driver.pipe(Received { source, key: None, payload });
        // A full batch runs, and what it defers after it; the last record runs the rest.
        if driver.monitor().batch_full() || k + 1 == n {
            take(driver.run());
        }
    }
    (scores, n as f64 / started.elapsed().as_secs_f64())
}
