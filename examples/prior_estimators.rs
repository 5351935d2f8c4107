//! How much does the prior estimate matter? Scores a trained model on fresh validation
//! and target episodes of a split (3 per task, N_p and π) and prints the
//! accuracy and prior RMSE of the classifier `sign(π r − ½)` under the true prior and
//! under several estimates computed from the same adapted ratios:
//!
//! ```sh
//! cargo run --release --example prior_estimators -- MODEL.safetensors [DATA_SEED]
//! cargo run --release --example prior_estimators -- MODEL.safetensors DATA.csv SPLIT.json
//! ```
//!
//! DATA_SEED is the seed of `metapu datasets synthetic` the model was trained on (0 for
//! `make train-synthetic`); or the episodes come from a CSV of tasks and its split (the
//! real-traffic streams of `metapu-lab real-traffic`, say). Estimates: the model's own
//! (the paper's 1/max_S r unless the model says otherwise); 1/(mean of the 2 or 3
//! largest r of S); 1/max over the unlabeled rows alone or the positives alone; the
//! share of unlabeled rows classified positive; the share of unlabeled rows whose ratio
//! reaches the lowest labeled one; c·π̂^γ over a grid of (c, γ).

use std::path::Path;

use anyhow::{Context, Result};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use tch::{Device, Kind};

use metapu::data::protocol::{self, ProtocolConfig};
use metapu::data::split::Split;
use metapu::data::synthetic::{generate, SyntheticConfig};
use metapu::data::{csv_tasks, Task};
use metapu::episodes::{EpisodeScores, EpisodeSet, Evaluation, PriorMode, SupportScores};
use metapu::model::file;
use metapu::model::prior_calibration::PriorCalibration;

const PRIORS: [f64; 4] = [0.2, 0.4, 0.6, 0.8];

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let path = args.next().context("usage: prior_estimators MODEL.safetensors [DATA_SEED]")?;
    let model = file::load(Path::new(&path), Device::Cpu)?;
    let (data, split) = match (args.next(), args.next()) {
        (Some(csv), Some(split)) => {
            (csv_tasks::load(Path::new(&csv), false)?, Split::load(Path::new(&split))?)
        }
        (seed, _) => {
            let seed: u64 = seed.map_or(Ok(0), |s| s.parse()).context("DATA_SEED must be a number")?;
            generate(&SyntheticConfig::default(), seed)
        }
    };
    model.check_feature_count(data.dim())?;
    let tasks: Vec<Task> =
        data.tasks.iter().map(|t| Task { x: model.preprocess.transformed(&t.x), ..t.clone() }).collect();
    let mut rng = ChaCha8Rng::seed_from_u64(123);
    for (name, ids) in [("validation", &split.validation), ("target", &split.target)] {
        if ids.is_empty() {
            continue;
        }
        let chosen: Vec<(usize, &Task)> =
            Split::resolve(ids, &data)?.into_iter().map(|i| (i, &tasks[i])).collect();
        let episodes = protocol::episodes(&chosen, &ProtocolConfig::default(), 3, &mut rng);
        let set = EpisodeSet::new(episodes, &tasks, data.dim(), Kind::Float, Device::Cpu)
            .context("no episode could be drawn")?;
        let scores = set.scores(&model.net);
        let support = set.support_scores(&model.net);
        println!(
            "{name} ({} episodes)             accuracy  prior RMSE  accuracy at π = 0.2 0.4 0.6 0.8",
            set.episodes.len()
        );
        for pi in PRIORS {
            let estimates: Vec<f64> = set
                .episodes
                .iter()
                .zip(&scores.estimated_prior)
                .filter(|(e, _)| (e.prior - pi).abs() < 1e-9)
                .map(|(_, &p)| p)
                .collect();
            let n = estimates.len().max(1) as f64;
            let mean = estimates.iter().sum::<f64>() / n;
            let sd = (estimates.iter().map(|p| (p - mean).powi(2)).sum::<f64>() / n).sqrt();
            println!("  π = {pi}: the model's π̂ averages {mean:.3}, standard deviation {sd:.3}");
        }
        let truth = set.evaluate_scores(&scores, PriorMode::True, |p| p);
        print_row("true π", &set, &truth);
        let n = set.episodes.len();
        let per_episode = |estimate: &dyn Fn(usize) -> f64| -> Vec<f64> { (0..n).map(estimate).collect() };
        let estimates = [
            ("the model's own π̂", scores.estimated_prior.clone()),
            ("1/top-2 mean S", per_episode(&|k| inverse_top(&support, k, 2, true, true))),
            ("1/top-3 mean S", per_episode(&|k| inverse_top(&support, k, 3, true, true))),
            ("1/max U r", per_episode(&|k| inverse_top(&support, k, 1, false, true))),
            ("1/max P r", per_episode(&|k| inverse_top(&support, k, 1, true, false))),
            ("share of U positive", per_episode(&|k| positive_share(&support, &scores, k))),
            ("share of U ≥ min P r", per_episode(&|k| share_like_labeled(&support, k, false))),
            ("… ÷ n/(n+1)", per_episode(&|k| share_like_labeled(&support, k, true))),
        ];
        for (label, estimated_prior) in estimates {
            let replaced = EpisodeScores { estimated_prior, ..scores.clone() };
            print_row(label, &set, &set.evaluate_scores(&replaced, PriorMode::Estimated, |p| p));
        }
        for map in PriorCalibration::grid() {
            let e = set.evaluate_scores(&scores, PriorMode::Estimated, |p| map.apply(p));
            print_row(&format!("{}·π̂^{}", map.scale, map.power), &set, &e);
        }
    }
    Ok(())
}

fn print_row(label: &str, set: &EpisodeSet, e: &Evaluation) {
    let by_prior: Vec<String> = PRIORS
        .iter()
        .map(|&pi| {
            let v: Vec<f64> = set
                .episodes
                .iter()
                .zip(&e.results)
                .filter(|(ep, _)| (ep.prior - pi).abs() < 1e-9)
                .map(|(_, r)| r.accuracy)
                .collect();
            format!("{:.2}", 100.0 * v.iter().sum::<f64>() / v.len().max(1) as f64)
        })
        .collect();
    println!("  {label:24} {:8.2}  {:10.3}  {}", 100.0 * e.mean_accuracy, e.prior_rmse, by_prior.join(" "));
}

/// 1 / (mean of the k largest support ratios among the chosen rows), at most 1.
fn inverse_top(s: &SupportScores, episode: usize, k: usize, positives: bool, unlabeled: bool) -> f64 {
    let mut r = s.ratios_of(episode, positives, unlabeled);
    r.sort_by(|a, b| b.total_cmp(a));
    let k = k.min(r.len()).max(1);
    let mean = r.iter().take(k).sum::<f64>() / k as f64;
    1.0 / mean.max(1.0)
}

/// Share of the unlabeled support that the paper's classifier calls positive.
fn positive_share(support: &SupportScores, s: &EpisodeScores, episode: usize) -> f64 {
    let prior = s.estimated_prior[episode];
    let (mut all, mut positive) = (0.0_f64, 0.0_f64);
    for (&r, &u) in support.ratio[episode].iter().zip(&support.unlabeled[episode]) {
        if u > 0.5 {
            all += 1.0;
            positive += f64::from(prior * r >= 0.5);
        }
    }
    (positive / all.max(1.0)).clamp(0.05, 1.0)
}

/// Share of the unlabeled support whose ratio reaches the lowest ratio of a labeled
/// positive: a rank estimate, blind to how far the ratio's scale is compressed. With
/// `corrected`, divided by n/(n+1), the chance that a positive row reaches the lowest of
/// n labeled ones (n exchangeable draws and one more).
fn share_like_labeled(support: &SupportScores, episode: usize, corrected: bool) -> f64 {
    let labeled = support.ratios_of(episode, true, false);
    let lowest = labeled.iter().copied().fold(f64::INFINITY, f64::min);
    let unlabeled = support.ratios_of(episode, false, true);
    let like = unlabeled.iter().filter(|&&r| r >= lowest).count() as f64 / unlabeled.len().max(1) as f64;
    let n = labeled.len() as f64;
    let share = if corrected { like * (n + 1.0) / n.max(1.0) } else { like };
    share.clamp(0.05, 1.0)
}
