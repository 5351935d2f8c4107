//! Adaptation of a fleet: the shipped model's closed-form solve for 1 to 10,000 devices
//! with the daemon's windows (50 known-normal + 200 recent records, D = 115), on the CPU
//! and, in a `--features cuda` build on a host with a GPU, on the GPU beside it with the
//! largest difference between the two devices' adapted states. On the CPU it also times
//! the daemon's solver at a device's adaptation point, by batch size: every row
//! embedded, and with the parts of the rows its last adaptation had kept (`RowCache`),
//! on one torch thread as the daemon's solver threads run.
//! Prints numbers; asserts nothing. `METAPU_BENCH_DEVICES=100` runs a smaller fleet.

use std::path::Path;
use std::time::Instant;

use metapu::model::{file, Model, RowCache, Support, SupportBatch, TaskState};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tch::{Device, Kind};

const POSITIVES: usize = 50;
const UNLABELED: usize = 200;

/// Nonnegative traffic-like rows (AfterImage features are counts, sizes and variances).
fn fleet(devices: usize, dim: usize) -> Vec<(Vec<f32>, Vec<f32>)> {
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    (0..devices)
        .map(|_| {
            let scale = rng.gen_range(1.0f32..1000.0);
            let mut draw = |n: usize| (0..n * dim).map(|_| scale * rng.gen::<f32>()).collect::<Vec<f32>>();
            (draw(POSITIVES), draw(UNLABELED))
        })
        .collect()
}

/// Seconds to adapt every device, `batch` devices per solve (the daemon's
/// `adaptation.batch_size`), best of `repeats` after one warm-up.
fn adapt_all(model: &Model, supports: &[Support<'_>], batch: usize, repeats: usize) -> (f64, Vec<TaskState>) {
    let run = || -> Vec<TaskState> {
        let states: Vec<TaskState> =
            supports.chunks(batch).flat_map(|chunk| model.adapt_batch(chunk).expect("adaptation")).collect();
        if let Device::Cuda(i) = model.net.device() {
            tch::Cuda::synchronize(i as i64);
        }
        states
    };
    let mut states = run();
    let mut best = f64::INFINITY;
    for _ in 0..repeats {
        let t = Instant::now();
        states = run();
        best = best.min(t.elapsed().as_secs_f64());
    }
    (best, states)
}

fn largest_difference(a: &[TaskState], b: &[TaskState]) -> f32 {
    let diff = |x: &[f32], y: &[f32]| x.iter().zip(y).map(|(p, q)| (p - q).abs()).fold(0.0f32, f32::max);
    a.iter().zip(b).map(|(s, t)| diff(&s.w, &t.w).max((s.prior - t.prior).abs())).fold(0.0, f32::max)
}

/// Decisions on the first devices' recent records (scored on the CPU) that differ between
/// two sets of adapted states, and how many were scored.
fn decisions_differing(
    model: &Model,
    data: &[(Vec<f32>, Vec<f32>)],
    a: &[TaskState],
    b: &[TaskState],
) -> (usize, usize) {
    let devices = data.len().min(1000);
    let records: Vec<f32> = data[..devices].iter().flat_map(|(_, u)| u.iter().copied()).collect();
    let task: Vec<usize> = (0..devices).flat_map(|i| std::iter::repeat_n(i, UNLABELED)).collect();
    let decide = |states: &[TaskState]| {
        let refs: Vec<&TaskState> = states[..devices].iter().collect();
        model.score(&refs, &task, &records, 0.5).expect("scoring").normal
    };
    let (x, y) = (decide(a), decide(b));
    (x.iter().zip(&y).filter(|(p, q)| p != q).count(), x.len())
}

/// Seconds to re-adapt every device once its recent window has moved on by `moved` rows,
/// with the parts of its last adaptation's rows kept (the daemon's solver at a device's
/// adaptation point: 30 new rows for a device sending a record a second, points every 30 s).
fn readapt_cached(model: &Model, data: &[(Vec<f32>, Vec<f32>)], batch: usize, moved: usize) -> f64 {
    let dim = model.dim();
    let ids: Vec<String> = (0..data.len()).map(|i| format!("d{i}")).collect();
    let adapt = |windows: &[(Vec<f32>, Vec<f32>)], cache: &mut RowCache| {
        for (i, chunk) in windows.chunks(batch).enumerate() {
            let supports: Vec<(&str, Support<'_>)> = chunk
                .iter()
                .enumerate()
                .map(|(k, (p, u))| (ids[i * batch + k].as_str(), Support { positives: p, unlabeled: u }))
                .collect();
            model.adapt_batch_cached(&supports, cache).expect("adaptation");
        }
    };
    let mut cache = RowCache::default();
    adapt(data, &mut cache);
    // Each window drops its oldest `moved` rows and takes `moved` new ones.
    let mut rng = ChaCha8Rng::seed_from_u64(8);
    let moved_on: Vec<(Vec<f32>, Vec<f32>)> = data
        .iter()
        .map(|(p, u)| {
            let mut u = u[moved * dim..].to_vec();
            u.extend((0..moved * dim).map(|_| 1000.0 * rng.gen::<f32>()));
            (p.clone(), u)
        })
        .collect();
    let t = Instant::now();
    adapt(&moved_on, &mut cache);
    t.elapsed().as_secs_f64()
}

/// Seconds to pack every device's windows into one batch on the host (the part of an
/// adaptation that no GPU takes over).
fn packing_seconds(supports: &[Support<'_>], dim: usize) -> f64 {
    let t = Instant::now();
    let batch = SupportBatch::pack(supports, dim, Kind::Float, Device::Cpu).expect("packing");
    let secs = t.elapsed().as_secs_f64();
    drop(batch);
    secs
}

fn main() {
    // `cargo bench` runs in the package root; so does a copied bench binary.
    let path = Path::new("models/iot-default.safetensors");
    let devices: usize =
        std::env::var("METAPU_BENCH_DEVICES").ok().and_then(|v| v.parse().ok()).unwrap_or(10_000);
    let gpu = metapu::model::default_device();
    println!(
        "metapu adaptation benchmark: {devices} devices, {POSITIVES} known-normal + {UNLABELED} recent records each; \
         torch intra-op threads {}, {} logical CPUs; GPU: {}",
        tch::get_num_threads(),
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        match gpu {
            Device::Cuda(_) => format!("{} CUDA device(s)", tch::Cuda::device_count()),
            _ if cfg!(feature = "cuda") => "none found (CUDA build)".to_string(),
            _ => "not built with --features cuda".to_string(),
        }
    );
    println!();
    println!("| device | devices per solve | seconds for {devices} devices | ms per device |");
    println!("|---|---|---|---|");
    let cpu_model = file::load(path, Device::Cpu).expect("the shipped model");
    let data = fleet(devices, cpu_model.dim());
    let supports: Vec<Support<'_>> =
        data.iter().map(|(p, u)| Support { positives: p, unlabeled: u }).collect();
    let row = |name: &str, batch: usize, secs: f64| {
        println!("| {name} | {batch} | {secs:.3} | {:.4} |", 1e3 * secs / devices as f64);
    };
    let (secs, cpu_states) = adapt_all(&cpu_model, &supports, 32, 1);
    row("CPU", 32, secs);
    // The daemon's solver at a device's adaptation point, by batch size: the plain solve,
    // and with the parts of the rows the device's last adaptation had kept. On one torch
    // thread, as the daemon runs its solver threads.
    let moved = 30;
    let threads = tch::get_num_threads();
    metapu::daemon::use_one_torch_thread();
    for batch in [1, 4, 8, 32] {
        let (plain, _) = adapt_all(&cpu_model, &supports, batch, 1);
        row("CPU, one thread, every row embedded", batch, plain);
        let cached = readapt_cached(&cpu_model, &data, batch, moved);
        row(
            &format!(
                "CPU, one thread, {moved} of {UNLABELED} recent records new, the other rows' parts kept"
            ),
            batch,
            cached,
        );
    }
    tch::set_num_threads(threads);
    let packing = packing_seconds(&supports, cpu_model.dim());
    println!(
        "| host only: packing the windows into one batch, no solve | {devices} | {packing:.3} | {:.4} |",
        1e3 * packing / devices as f64
    );
    if gpu == Device::Cpu {
        return;
    }
    let gpu_model = file::load(path, gpu).expect("the shipped model on the GPU");
    let mut gpu_states = Vec::new();
    for batch in [32, 1024, devices] {
        let (secs, states) = adapt_all(&gpu_model, &supports, batch, 3);
        row("GPU", batch, secs);
        gpu_states = states;
    }
    println!();
    let (differing, scored) = decisions_differing(&cpu_model, &data, &cpu_states, &gpu_states);
    println!(
        "CPU and GPU adaptation: largest difference of the adapted weights and priors {:.2e}; \
         {differing} of {scored} decisions on the first devices' recent records differ",
        largest_difference(&cpu_states, &gpu_states)
    );
}
