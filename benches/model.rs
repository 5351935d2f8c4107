//! `make bench`: meta-training speed and adaptation latency. Prints numbers; asserts nothing.

use std::sync::atomic::AtomicBool;
use std::time::Instant;

use metapu::data::split::Split;
use metapu::data::synthetic::{generate, SyntheticConfig};
use metapu::model::{MetaPuNet, Model, NetConfig, PreprocessKind, Preprocessor, Provenance, Support};
use metapu::train::{train, TrainConfig};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tch::Device;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn training_ms_per_iteration(meta_batch: usize, iterations: u64) -> f64 {
    let (set, split) = generate(&SyntheticConfig::default(), 0);
    let (src, val) =
        (Split::resolve(&split.source, &set).unwrap(), Split::resolve(&split.validation, &set).unwrap());
    // One validation at the very end only, so the figure is the training step.
    let cfg = TrainConfig {
        max_iterations: iterations,
        eval_every: u64::MAX,
        meta_batch,
        ..TrainConfig::default()
    };
    let started = Instant::now();
    train(&set, &src, &val, &cfg, Device::Cpu, &AtomicBool::new(false), &mut ()).unwrap();
    let total = started.elapsed().as_secs_f64();
    1e3 * total / iterations as f64
}

/// Records when each validation improved on the best so far.
#[derive(Default)]
struct Plateau {
    best: Option<(u64, f64, f64)>,
    last: Option<(u64, f64)>,
}

impl metapu::train::Progress for Plateau {
    fn checkpoint(&mut self, c: &metapu::train::Checkpoint, _best: f64) {
        if self.best.is_none_or(|(_, acc, _)| c.validation_accuracy > acc) {
            self.best = Some((c.iteration, c.validation_accuracy, c.seconds));
        }
        self.last = Some((c.iteration, c.seconds));
    }
}

/// Synthetic, the `make train-synthetic` settings with early stopping: the iteration
/// and time of the best validation, and when patience ended the run.
fn time_to_plateau() -> Plateau {
    let (set, split) = generate(&SyntheticConfig::default(), 0);
    let (src, val) =
        (Split::resolve(&split.source, &set).unwrap(), Split::resolve(&split.validation, &set).unwrap());
    let cfg = TrainConfig {
        max_iterations: 10_000,
        eval_every: 250,
        patience: 10,
        meta_batch: 8,
        ..TrainConfig::default()
    };
    let mut plateau = Plateau::default();
    train(&set, &src, &val, &cfg, Device::Cpu, &AtomicBool::new(false), &mut plateau).unwrap();
    plateau
}

fn random_model(dim: usize) -> Model {
    tch::manual_seed(0);
    Model {
        net: MetaPuNet::new(NetConfig::paper(dim as i64, 32), Device::Cpu),
        preprocess: Preprocessor::identity(PreprocessKind::None, dim),
        feature_names: (0..dim).map(|i| format!("f{i}")).collect(),
        provenance: Provenance::default(),
    }
}

fn adaptation_ms(model: &Model, tasks: usize, n_pos: usize, n_unl: usize, repeats: usize) -> f64 {
    let dim = model.dim();
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    let data: Vec<(Vec<f32>, Vec<f32>)> = (0..tasks)
        .map(|_| {
            let mut draw = |n: usize| (0..n * dim).map(|_| rng.gen_range(-2.0f32..2.0)).collect::<Vec<f32>>();
            (draw(n_pos), draw(n_unl))
        })
        .collect();
    let supports: Vec<Support<'_>> =
        data.iter().map(|(p, u)| Support { positives: p, unlabeled: u }).collect();
    model.adapt_batch(&supports).unwrap(); // warm-up
    median(
        (0..repeats)
            .map(|_| {
                let t = Instant::now();
                model.adapt_batch(&supports).unwrap();
                1e3 * t.elapsed().as_secs_f64()
            })
            .collect(),
    )
}

fn main() {
    // `cargo bench` passes --bench; nothing else to parse.
    let threads = tch::get_num_threads();
    println!(
        "metapu model benchmarks (torch intra-op threads: {threads}; {} logical CPUs)",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    println!();
    println!("| measurement | value |");
    println!("|---|---|");
    for (mb, iters) in [(1usize, 2000u64), (8, 500)] {
        let ms = training_ms_per_iteration(mb, iters);
        println!("| meta-training, Synthetic, {mb} task(s)/iteration | {ms:.2} ms/iteration ({iters} iterations + 1 validation) |");
    }
    let p = time_to_plateau();
    if let (Some((it, acc, secs)), Some((last, total))) = (p.best, p.last) {
        println!("| time to the validation plateau, Synthetic, 8 tasks/iteration, validation every 250, patience 10 | best {acc:.4} at iteration {it} after {secs:.1} s; stopped at {last} ({total:.1} s) |");
    }
    let model = random_model(115);
    for (label, np, nu) in [("paper support: 5 P + 25 U", 5, 25), ("daemon windows: 50 P + 200 U", 50, 200)] {
        let one = adaptation_ms(&model, 1, np, nu, 50);
        let thousand = adaptation_ms(&model, 1000, np, nu, 3);
        println!("| adaptation, D=115, {label}, 1 task | {one:.3} ms |");
        println!(
            "| adaptation, D=115, {label}, 1,000 tasks in one batch | {thousand:.1} ms ({:.3} ms/task) |",
            thousand / 1000.0
        );
    }
}
