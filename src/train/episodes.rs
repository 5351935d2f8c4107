//! Meta-training episodes (Algorithm 1, lines 2–5): per source task a support of
//! N_p ~ U{min..max} labeled positives plus unlabeled rows, and a query of labeled
//! positives (not in the support) and negatives that keeps the task's positive ratio.

use rand::seq::{index, SliceRandom};
use rand::Rng;
use tch::{Device, Kind, Tensor};

use crate::data::{Label, Task};
use crate::model::{Support, SupportBatch};

#[derive(Debug, Clone)]
pub struct SamplerConfig {
    /// N_p is drawn uniformly from `min_positives..=max_positives` (the paper's
    /// Algorithm 1 takes one fixed N_p: min = max).
    pub min_positives: usize,
    pub max_positives: usize,
    pub support_size: usize,
    pub query_size: usize,
    /// Share of a fully labeled task kept labeled; the rest is its unlabeled part.
    pub labeled_fraction: f64,
    /// Priors to draw each episode's class prior from, as the evaluation protocol does
    /// for target tasks: the unlabeled support and the query are then drawn at that
    /// prior (from rows whose hidden labels are known). Empty: the paper's sampling, at
    /// each task's own positive ratio.
    pub episode_priors: Vec<f64>,
    /// Share of episodes drawn as an attack's onset: the unlabeled support holds only
    /// normal rows (the task's hidden positives) while the query keeps the task's
    /// attacks. A live device's first attack records are scored by a model adapted
    /// before any of them arrived; the paper's episodes never ask for that, since their
    /// queries come from the support's own mixture. 0 = the paper's sampling.
    pub onset_share: f64,
}

impl Default for SamplerConfig {
    fn default() -> Self {
        Self {
            min_positives: 1,
            max_positives: 5,
            support_size: 30,
            query_size: 100,
            labeled_fraction: 0.5,
            episode_priors: Vec::new(),
            onset_share: 0.0,
        }
    }
}

/// A source task divided into labeled positives, labeled negatives and unlabeled rows.
#[derive(Debug, Clone)]
pub struct SourceTask {
    pub task: usize,
    pub positives: Vec<usize>,
    pub negatives: Vec<usize>,
    pub unlabeled: Vec<usize>,
    /// The unlabeled part split by hidden label (positives, negatives), when it was
    /// hidden from labeled rows; None when the task's unlabeled rows are truly unlabeled.
    pub hidden: Option<(Vec<usize>, Vec<usize>)>,
}

impl SourceTask {
    /// Rows marked unlabeled are the unlabeled part; if there are none, a random
    /// `1 − labeled_fraction` of the labeled rows is hidden instead (paper: "half").
    /// None if the task cannot give a support and a two-class query.
    pub fn partition(
        task_index: usize,
        task: &Task,
        labeled_fraction: f64,
        rng: &mut impl Rng,
    ) -> Option<Self> {
        let mut labeled: Vec<usize> =
            (0..task.len()).filter(|&i| task.labels[i] != Label::Unlabeled).collect();
        let mut unlabeled = task.indices_of(Label::Unlabeled);
        let mut hidden = None;
        if unlabeled.is_empty() {
            labeled.shuffle(rng);
            let keep = ((labeled.len() as f64) * labeled_fraction).round() as usize;
            unlabeled = labeled.split_off(keep.min(labeled.len()));
            hidden = Some(unlabeled.iter().partition(|&&i| task.labels[i] == Label::Positive));
        }
        let (positives, negatives): (Vec<usize>, Vec<usize>) =
            labeled.into_iter().partition(|&i| task.labels[i] == Label::Positive);
        // One positive for the support and one for the query at least.
        (positives.len() >= 2 && !negatives.is_empty() && !unlabeled.is_empty()).then_some(Self {
            task: task_index,
            positives,
            negatives,
            unlabeled,
            hidden,
        })
    }
}

/// B episodes as tensors: a support batch and padded queries `[B, Q, D]`.
#[derive(Debug)]
pub struct TrainBatch {
    pub support: SupportBatch,
    pub query_x: Tensor,
    pub query_y: Tensor,
    pub query_mask: Tensor,
    /// Share of positives in each unlabeled support, where every row's hidden label is
    /// known (`[B]`), and whether it is known (`[B]`, 0/1).
    pub support_prior: Tensor,
    pub support_prior_known: Tensor,
}

fn pick(from: &[usize], n: usize, rng: &mut impl Rng) -> Vec<usize> {
    let n = n.min(from.len());
    index::sample(rng, from.len(), n).into_iter().map(|i| from[i]).collect()
}

/// `n` rows in all, a share `prior` of them from `positives`, the rest from
/// `negatives`; both counts shrink together (keeping the ratio) when a class runs
/// short, and each is at least `min_each` where that many exist.
fn pick_at_prior(
    positives: &[usize],
    negatives: &[usize],
    n: usize,
    prior: f64,
    min_each: usize,
    rng: &mut impl Rng,
) -> (Vec<usize>, Vec<usize>) {
    let want_pos = ((n as f64) * prior).round().clamp(min_each as f64, (n - min_each.min(n)) as f64) as usize;
    let want_neg = n - want_pos;
    let shrink = (positives.len() as f64 / want_pos.max(1) as f64)
        .min(negatives.len() as f64 / want_neg.max(1) as f64)
        .min(1.0);
    let n_pos = ((want_pos as f64 * shrink).floor() as usize).max(min_each.min(want_pos));
    let n_neg = ((want_neg as f64 * shrink).floor() as usize).max(min_each.min(want_neg));
    (pick(positives, n_pos, rng), pick(negatives, n_neg, rng))
}

fn gather(task: &Task, rows: &[usize], dim: usize, out: &mut Vec<f32>) {
    for &i in rows {
        out.extend_from_slice(task.row(i, dim));
    }
}

/// Draws meta-training batches from preprocessed source tasks.
#[derive(Clone, Copy)]
pub struct EpisodeSampler<'a> {
    pub sources: &'a [SourceTask],
    pub tasks: &'a [Task],
    pub dim: usize,
    pub cfg: &'a SamplerConfig,
    pub kind: Kind,
    pub device: Device,
}

impl EpisodeSampler<'_> {
    /// Sample B episodes from uniformly chosen source tasks.
    pub fn sample(&self, batch: usize, rng: &mut impl Rng) -> TrainBatch {
        let Self { sources, tasks, dim, cfg, kind, device } = *self;
        let q = cfg.query_size;
        let mut supports: Vec<(Vec<f32>, Vec<f32>)> = Vec::with_capacity(batch);
        let mut qx = vec![0f32; batch * q * dim];
        let mut qy = vec![0f32; batch * q];
        let mut qm = vec![0f32; batch * q];
        let mut support_prior = vec![0f32; batch];
        let mut support_prior_known = vec![0f32; batch];
        for b in 0..batch {
            let src = &sources[rng.gen_range(0..sources.len())];
            let task = &tasks[src.task];
            let lowest = cfg.min_positives.clamp(1, cfg.max_positives.max(1));
            let n_pos = rng.gen_range(lowest..=cfg.max_positives.max(lowest)).min(src.positives.len() - 1);
            let mut shuffled = src.positives.clone();
            shuffled.shuffle(rng);
            let (support_pos, rest_pos) = shuffled.split_at(n_pos);
            let episode_prior = cfg.episode_priors.choose(rng).copied();
            let n_unl = cfg.support_size.saturating_sub(n_pos);
            // The draw is skipped when off, so that the paper's episodes stay the same.
            let onset = cfg.onset_share > 0.0 && rng.gen_bool(cfg.onset_share.min(1.0));
            let support_unl = match (episode_prior, &src.hidden) {
                (_, Some((hidden_pos, _))) if onset && !hidden_pos.is_empty() => pick(hidden_pos, n_unl, rng),
                (Some(prior), Some((hidden_pos, hidden_neg))) => {
                    let (mut p, n) = pick_at_prior(hidden_pos, hidden_neg, n_unl, prior, 0, rng);
                    p.extend(n);
                    p
                }
                _ => pick(&src.unlabeled, n_unl, rng),
            };
            let (mut p, mut u) = (Vec::new(), Vec::new());
            gather(task, support_pos, dim, &mut p);
            gather(task, &support_unl, dim, &mut u);
            supports.push((p, u));
            let hidden: Vec<Label> = support_unl.iter().map(|&i| task.labels[i]).collect();
            if !hidden.is_empty() && !hidden.contains(&Label::Unlabeled) {
                let pos = hidden.iter().filter(|&&l| l == Label::Positive).count();
                support_prior[b] = pos as f32 / hidden.len() as f32;
                support_prior_known[b] = 1.0;
            }

            // The query keeps the labeled part's positive ratio (or the episode's prior),
            // shrunk if a class runs short.
            let ratio = episode_prior
                .unwrap_or(src.positives.len() as f64 / (src.positives.len() + src.negatives.len()) as f64);
            let (query_pos, query_neg) = pick_at_prior(rest_pos, &src.negatives, q, ratio, 1, rng);
            let mut rows = Vec::with_capacity(q * dim);
            gather(task, &query_pos, dim, &mut rows);
            gather(task, &query_neg, dim, &mut rows);
            let n = query_pos.len() + query_neg.len();
            qx[b * q * dim..b * q * dim + rows.len()].copy_from_slice(&rows);
            qy[b * q..b * q + query_pos.len()].fill(1.0);
            qm[b * q..b * q + n].fill(1.0);
        }
        let views: Vec<Support<'_>> =
            supports.iter().map(|(p, u)| Support { positives: p, unlabeled: u }).collect();
        let support =
            SupportBatch::pack(&views, dim, kind, device).expect("sampled supports are well-formed");
        let to =
            |v: &[f32], shape: &[i64]| Tensor::from_slice(v).reshape(shape).to_kind(kind).to_device(device);
        let (b, q, d) = (batch as i64, q as i64, dim as i64);
        TrainBatch {
            support,
            query_x: to(&qx, &[b, q, d]),
            query_y: to(&qy, &[b, q]),
            query_mask: to(&qm, &[b, q]),
            support_prior: to(&support_prior, &[b]),
            support_prior_known: to(&support_prior_known, &[b]),
        }
    }
}
