//! The paper's Synthetic benchmark (section 5.1): 140 two-dimensional tasks, each a
//! Gaussian mixture (positive N((−1.5,0), I), negative N((1.5,0), I)) or half moons
//! with Gaussian noise of variance 0.4, rotated by 2π(t−1)/180 around the origin.
//!
//! Source tasks have 300 rows with a positive prior drawn from {0.2, 0.4, 0.6, 0.8}
//! (the training sampler treats half of them as unlabeled). Validation and target
//! tasks hold balanced pools (default 200 + 200) from which the evaluation protocol
//! draws supports and test sets at each prior — the paper does not state their size.
//! Half moons are centred on the origin before rotation so that rotation turns the
//! problem rather than moving it away.

use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::split::Split;
use super::{Label, Task, TaskSet};

#[derive(Debug, Clone)]
pub struct SyntheticConfig {
    pub tasks: usize,
    pub source: usize,
    pub validation: usize,
    pub source_rows: usize,
    pub pool_per_class: usize,
    pub priors: Vec<f64>,
    pub moon_noise_variance: f64,
}

impl Default for SyntheticConfig {
    fn default() -> Self {
        Self {
            tasks: 140,
            source: 100,
            validation: 20,
            source_rows: 300,
            pool_per_class: 200,
            priors: vec![0.2, 0.4, 0.6, 0.8],
            moon_noise_variance: 0.4,
        }
    }
}

fn normal(rng: &mut impl Rng) -> f64 {
    // Box–Muller; 1 - u keeps the log argument in (0, 1].
    let u: f64 = rng.gen();
    let v: f64 = rng.gen();
    (-2.0 * (1.0 - u).ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    Gaussians,
    Moons,
}

fn point(shape: Shape, positive: bool, noise_sd: f64, rng: &mut impl Rng) -> (f64, f64) {
    match shape {
        Shape::Gaussians => {
            let cx = if positive { -1.5 } else { 1.5 };
            (cx + normal(rng), normal(rng))
        }
        Shape::Moons => {
            let a = rng.gen::<f64>() * std::f64::consts::PI;
            let (x, y) = if positive { (a.cos(), a.sin()) } else { (1.0 - a.cos(), 0.5 - a.sin()) };
            (x - 0.5 + noise_sd * normal(rng), y - 0.25 + noise_sd * normal(rng))
        }
    }
}

/// Generate the tasks and a random source/validation/target split.
pub fn generate(cfg: &SyntheticConfig, seed: u64) -> (TaskSet, Split) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let width = cfg.tasks.to_string().len();
    let ids: Vec<String> = (1..=cfg.tasks).map(|t| format!("t{t:0width$}")).collect();
    let mut order = ids.clone();
    order.shuffle(&mut rng);
    let split = Split {
        source: order[..cfg.source].to_vec(),
        validation: order[cfg.source..cfg.source + cfg.validation].to_vec(),
        target: order[cfg.source + cfg.validation..].to_vec(),
    };
    let noise_sd = cfg.moon_noise_variance.sqrt();
    let tasks = ids
        .iter()
        .enumerate()
        .map(|(i, id)| {
            let shape = if rng.gen::<bool>() { Shape::Gaussians } else { Shape::Moons };
            let angle = 2.0 * std::f64::consts::PI * i as f64 / 180.0;
            let (n_pos, n_neg) = if split.source.contains(id) {
                let prior = cfg.priors[rng.gen_range(0..cfg.priors.len())];
                let n_pos = (prior * cfg.source_rows as f64).round() as usize;
                (n_pos, cfg.source_rows - n_pos)
            } else {
                (cfg.pool_per_class, cfg.pool_per_class)
            };
            let mut labels: Vec<Label> = std::iter::repeat_n(Label::Positive, n_pos)
                .chain(std::iter::repeat_n(Label::Negative, n_neg))
                .collect();
            labels.shuffle(&mut rng);
            let mut task = Task::new(id.clone());
            let (sin, cos) = angle.sin_cos();
            for &label in &labels {
                let (x, y) = point(shape, label == Label::Positive, noise_sd, &mut rng);
                task.x.push((cos * x - sin * y) as f32);
                task.x.push((sin * x + cos * y) as f32);
            }
            task.labels = labels;
            task
        })
        .collect();
    (TaskSet { feature_names: vec!["x1".into(), "x2".into()], tasks, skipped_rows: 0 }, split)
}
