//! Does the way an ensemble is combined, or its threshold, matter, and where is the
//! accuracy lost to the prior estimate? Scores the members of one Synthetic split on
//! fresh validation and target episodes (5 per task, N_p and π) and prints the accuracy
//! of several decision rules computed from the same adapted ratios and estimates, then,
//! per true π, how far the ensemble's π̂ strays and what that costs against the true π:
//!
//! ```sh
//! cargo run --release --example ensemble_rules -- DATA_SEED MODEL.safetensors...
//! ```
//!
//! DATA_SEED is the seed of `metapu datasets synthetic` the models were trained on (S
//! for split S of `scripts/synthetic-ensemble.sh`). Choose among the rules on the
//! validation rows only; the target rows are printed to check that choice.

use std::path::Path;

use anyhow::{Context, Result};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use tch::{Device, Kind};

use metapu::data::protocol::{self, ProtocolConfig};
use metapu::data::split::Split;
use metapu::data::synthetic::{generate, SyntheticConfig};
use metapu::data::{Label, Task};
use metapu::episodes::{EpisodeScores, EpisodeSet, SupportScores};
use metapu::model::ensemble::posterior;
use metapu::model::file;

const PRIORS: [f64; 4] = [0.2, 0.4, 0.6, 0.8];
const REPEATS: usize = 5;

/// One episode as every member saw it.
struct View<'a> {
    prior: f64,
    /// Per member: the test rows' ratios and the member's π̂.
    ratios: Vec<&'a [f64]>,
    estimates: Vec<f64>,
    /// Per member: the ratios of the support's labeled positives and unlabeled rows.
    positives: Vec<Vec<f64>>,
    unlabeled: Vec<Vec<f64>>,
}

impl View<'_> {
    fn rows(&self) -> usize {
        self.ratios[0].len()
    }
    fn mean_estimate(&self) -> f64 {
        mean(&self.estimates)
    }
    /// Each member's posterior min(1, π_m·r_m) of row j, under the members' priors.
    fn posteriors(&self, priors: &[f64], j: usize) -> Vec<f64> {
        priors.iter().zip(&self.ratios).map(|(&p, r)| posterior(p, r[j])).collect()
    }
    /// How much higher the members' ratios are on the labeled positives than on the
    /// unlabeled rows of the support (about 1: the adapted ratio sees no difference).
    fn separation(&self) -> f64 {
        let per_member: Vec<f64> =
            self.positives.iter().zip(&self.unlabeled).map(|(p, u)| mean(p) / mean(u)).collect();
        mean(&per_member)
    }
    fn mean_ratio(&self, j: usize) -> f64 {
        mean(&self.ratios.iter().map(|r| r[j]).collect::<Vec<_>>())
    }
    /// max_S of the members' mean ratio: the ensemble taken as one ratio.
    fn max_support_mean_ratio(&self) -> f64 {
        let slot_means = |rows: &[Vec<f64>]| -> Vec<f64> {
            let slots = rows.first().map_or(0, Vec::len);
            (0..slots).map(|i| mean(&rows.iter().map(|r| r[i]).collect::<Vec<_>>())).collect()
        };
        slot_means(&self.positives).into_iter().chain(slot_means(&self.unlabeled)).fold(0.0, f64::max)
    }
}

type Rule = fn(&View<'_>) -> Vec<bool>;

/// The method: the mean of the members' posteriors ≥ ½.
fn mean_posterior(v: &View<'_>) -> Vec<bool> {
    posterior_at(v, &v.estimates, 0.5)
}

/// Not a method: the members' posteriors under the episode's true prior.
fn true_prior(v: &View<'_>) -> Vec<bool> {
    posterior_at(v, &vec![v.prior; v.estimates.len()], 0.5)
}

fn posterior_at(v: &View<'_>, priors: &[f64], threshold: f64) -> Vec<bool> {
    (0..v.rows()).map(|j| mean(&v.posteriors(priors, j)) >= threshold).collect()
}

const RULES: [(&str, Rule); 9] = [
    ("mean posterior (method)", mean_posterior),
    ("mean posterior ≥ 0.45", |v| posterior_at(v, &v.estimates, 0.45)),
    ("mean posterior ≥ 0.55", |v| posterior_at(v, &v.estimates, 0.55)),
    ("median posterior", |v| (0..v.rows()).map(|j| median(v.posteriors(&v.estimates, j)) >= 0.5).collect()),
    ("majority of members", |v| {
        let votes = |j| v.posteriors(&v.estimates, j).iter().filter(|&&p| p >= 0.5).count();
        (0..v.rows()).map(|j| 2 * votes(j) >= v.ratios.len()).collect()
    }),
    ("mean π̂ · mean r", |v| (0..v.rows()).map(|j| v.mean_estimate() * v.mean_ratio(j) >= 0.5).collect()),
    ("1/max S of mean r · mean r", |v| {
        let prior = 1.0 / v.max_support_mean_ratio().max(1.0);
        (0..v.rows()).map(|j| prior * v.mean_ratio(j) >= 0.5).collect()
    }),
    ("median π̂ for every member", |v| {
        posterior_at(v, &vec![median(v.estimates.clone()); v.estimates.len()], 0.5)
    }),
    ("true π (not a method)", true_prior),
];

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let usage = "usage: ensemble_rules DATA_SEED MODEL.safetensors...";
    let seed: u64 = args.next().context(usage)?.parse().context("DATA_SEED must be a number")?;
    let models = args.map(|p| file::load(Path::new(&p), Device::Cpu)).collect::<Result<Vec<_>, _>>()?;
    let first = models.first().context(usage)?;
    let (data, split) = generate(&SyntheticConfig::default(), seed);
    for m in &models {
        m.check_feature_count(data.dim())?;
        anyhow::ensure!(m.preprocess == first.preprocess, "the members preprocess features differently");
    }
    let tasks: Vec<Task> =
        data.tasks.iter().map(|t| Task { x: first.preprocess.transformed(&t.x), ..t.clone() }).collect();
    let mut rng = ChaCha8Rng::seed_from_u64(777 + seed);
    for (name, ids) in [("validation", &split.validation), ("target", &split.target)] {
        let chosen: Vec<(usize, &Task)> =
            Split::resolve(ids, &data)?.into_iter().map(|i| (i, &tasks[i])).collect();
        let episodes = protocol::episodes(&chosen, &ProtocolConfig::default(), REPEATS, &mut rng);
        let set = EpisodeSet::new(episodes, &tasks, data.dim(), Kind::Float, Device::Cpu)
            .context("no episode could be drawn")?;
        let scores: Vec<EpisodeScores> = models.iter().map(|m| set.scores(&m.net)).collect();
        let support: Vec<SupportScores> = models.iter().map(|m| set.support_scores(&m.net)).collect();
        let (views, labels) = views(&set, &tasks, &scores, &support);
        println!("{name}: {} episodes, {} members", views.len(), models.len());
        let accuracy_of = |calls: &[Vec<bool>]| -> Vec<f64> {
            views
                .iter()
                .zip(&labels)
                .zip(calls)
                .map(|((v, l), c)| protocol::accuracy(v.prior, l, c))
                .collect()
        };
        let accuracies = |rule: Rule| accuracy_of(&views.iter().map(rule).collect::<Vec<_>>());
        let method_calls: Vec<Vec<bool>> = views.iter().map(mean_posterior).collect();
        let method = accuracy_of(&method_calls);
        for (label, rule) in RULES {
            let a = accuracies(rule);
            println!("  {label:30} {:6.2}  {:+.2}", 100.0 * mean(&a), 100.0 * (mean(&a) - mean(&method)));
        }
        let truth = accuracies(true_prior);
        println!("  per true π: mean π̂ (sd); share of episodes with π̂ > π + 0.15; there / elsewhere:");
        println!("    accuracy lost to the true π (points), test rows called positive, mean r on labeled / unlabeled support");
        for pi in PRIORS {
            let at: Vec<usize> = (0..views.len()).filter(|&k| (views[k].prior - pi).abs() < 1e-9).collect();
            let estimates: Vec<f64> = at.iter().map(|&k| views[k].mean_estimate()).collect();
            let m = mean(&estimates);
            let sd = mean(&estimates.iter().map(|p| (p - m).powi(2)).collect::<Vec<_>>()).sqrt();
            let (high, rest): (Vec<usize>, Vec<usize>) =
                at.iter().partition(|&&k| views[k].mean_estimate() > pi + 0.15);
            let over =
                |ks: &[usize], f: &dyn Fn(usize) -> f64| mean(&ks.iter().map(|&k| f(k)).collect::<Vec<_>>());
            let lost = |k: usize| 100.0 * (truth[k] - method[k]);
            let called =
                |k: usize| mean(&method_calls[k].iter().map(|&p| f64::from(u8::from(p))).collect::<Vec<_>>());
            let separation = |k: usize| views[k].separation();
            println!(
                "    π = {pi}: π̂ {m:.3} ({sd:.3}); {:.2}; {:5.1} / {:4.1}, {:.2} / {:.2}, {:5.2} / {:5.2}",
                high.len() as f64 / at.len().max(1) as f64,
                over(&high, &lost),
                over(&rest, &lost),
                over(&high, &called),
                over(&rest, &called),
                over(&high, &separation),
                over(&rest, &separation),
            );
        }
    }
    Ok(())
}

/// The episodes of `set` as each member saw them, with their test rows' labels.
fn views<'a>(
    set: &EpisodeSet,
    tasks: &[Task],
    scores: &'a [EpisodeScores],
    support: &[SupportScores],
) -> (Vec<View<'a>>, Vec<Vec<Label>>) {
    let (mut views, mut labels, mut start) = (Vec::new(), Vec::new(), 0);
    for (k, e) in set.episodes.iter().enumerate() {
        let end = start + e.test.len();
        views.push(View {
            prior: e.prior,
            ratios: scores.iter().map(|s| &s.test_ratio[start..end]).collect(),
            estimates: scores.iter().map(|s| s.estimated_prior[k]).collect(),
            positives: support.iter().map(|s| s.ratios_of(k, true, false)).collect(),
            unlabeled: support.iter().map(|s| s.ratios_of(k, false, true)).collect(),
        });
        labels.push(e.test.iter().map(|&i| tasks[e.task].labels[i]).collect());
        start = end;
    }
    (views, labels)
}

/// NaN for none (printed as such where no episode qualifies).
fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len() as f64
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n == 0 {
        f64::NAN
    } else if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}
