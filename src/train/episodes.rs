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
    /// Share of batches drawn as deployment meets a device: a support of
    /// [`DEPLOYMENT_POSITIVES`] known-normal rows taken from one stretch of the task's
    /// time (an onboarding), beside [`DEPLOYMENT_UNLABELED`] unlabeled rows from all of
    /// it, mostly normal (a prior drawn from [`DEPLOYMENT_PRIORS`]); the query is drawn
    /// at that prior, at least one attack in it. A whole batch is of one shape, so that
    /// short supports are not padded to the long ones. 0 = none (and the draws are
    /// skipped: the other episodes stay as they were).
    pub deployment_share: f64,
}

/// Known-normal rows of a deployment-shaped episode (`metapu onboard` keeps up to 50;
/// the lab onboards with 10).
pub const DEPLOYMENT_POSITIVES: (usize, usize) = (5, 50);
/// Unlabeled rows of a deployment-shaped episode (`windows.unlabeled`).
pub const DEPLOYMENT_UNLABELED: usize = 200;
/// The prior of a deployment-shaped episode's unlabeled rows: a device watched is
/// mostly normal.
pub const DEPLOYMENT_PRIORS: (f64, f64) = (0.9, 1.0);

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
            deployment_share: 0.0,
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
        let deployment = cfg.deployment_share > 0.0 && rng.gen_bool(cfg.deployment_share.min(1.0));
        for b in 0..batch {
            let src = &sources[rng.gen_range(0..sources.len())];
            let task = &tasks[src.task];
            let (support_pos, rest_pos, episode_prior, n_unl, onset) = if deployment {
                let (lo, hi) = DEPLOYMENT_POSITIVES;
                let n_pos = rng.gen_range(lo..=hi).min(src.positives.len() - 1);
                // One stretch of the task's time: its positives in row order.
                let mut ordered = src.positives.clone();
                ordered.sort_unstable();
                let start = rng.gen_range(0..=ordered.len() - n_pos);
                let support: Vec<usize> = ordered.drain(start..start + n_pos).collect();
                let prior = rng.gen_range(DEPLOYMENT_PRIORS.0..=DEPLOYMENT_PRIORS.1);
                (support, ordered, Some(prior), DEPLOYMENT_UNLABELED, false)
            } else {
                let lowest = cfg.min_positives.clamp(1, cfg.max_positives.max(1));
                let n_pos =
                    rng.gen_range(lowest..=cfg.max_positives.max(lowest)).min(src.positives.len() - 1);
                let mut shuffled = src.positives.clone();
                shuffled.shuffle(rng);
                let rest = shuffled.split_off(n_pos);
                let episode_prior = cfg.episode_priors.choose(rng).copied();
                // The draw is skipped when off, so that the paper's episodes stay the same.
                let onset = cfg.onset_share > 0.0 && rng.gen_bool(cfg.onset_share.min(1.0));
                (shuffled, rest, episode_prior, cfg.support_size.saturating_sub(n_pos), onset)
            };
            let (support_pos, rest_pos) = (&support_pos[..], &rest_pos[..]);
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

#[cfg(test)]
mod tests {
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    use super::*;

    /// One feature, the row's index, so that a support's rows say where they came from;
    /// 300 normal rows, then 300 attacks.
    fn task() -> Task {
        let mut t = Task::new("t");
        for i in 0..600 {
            t.x.push(i as f32);
            t.labels.push(if i < 300 { Label::Positive } else { Label::Negative });
        }
        t
    }

    #[test]
    fn deployment_batches_give_one_stretch_of_normal_and_a_mostly_normal_window() {
        let tasks = vec![task()];
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let sources = vec![SourceTask::partition(0, &tasks[0], 0.5, &mut rng).expect("a source")];
        let cfg = SamplerConfig { deployment_share: 1.0, ..SamplerConfig::default() };
        let sampler = EpisodeSampler {
            sources: &sources,
            tasks: &tasks,
            dim: 1,
            cfg: &cfg,
            kind: Kind::Float,
            device: Device::Cpu,
        };
        for _ in 0..20 {
            let batch = sampler.sample(4, &mut rng);
            let (x, mask_p, mask_u) = (&batch.support.x, &batch.support.pos, &batch.support.unl);
            for b in 0..4 {
                let rows = Vec::<f32>::try_from(x.get(b).flatten(0, -1)).unwrap();
                let p = Vec::<f32>::try_from(mask_p.get(b)).unwrap();
                let u = Vec::<f32>::try_from(mask_u.get(b)).unwrap();
                let pos: Vec<f32> = rows.iter().zip(&p).filter(|(_, m)| **m > 0.0).map(|(r, _)| *r).collect();
                let unl: Vec<f32> = rows.iter().zip(&u).filter(|(_, m)| **m > 0.0).map(|(r, _)| *r).collect();
                assert!(
                    (DEPLOYMENT_POSITIVES.0..=DEPLOYMENT_POSITIVES.1).contains(&pos.len()),
                    "{}",
                    pos.len()
                );
                assert!(pos.iter().all(|r| *r < 300.0), "known-normal rows are normal");
                let labeled_between = sources[0].positives.iter().filter(|&&i| {
                    (i as f32) >= pos.iter().copied().fold(f32::MAX, f32::min)
                        && (i as f32) <= pos.iter().copied().fold(f32::MIN, f32::max)
                });
                assert_eq!(labeled_between.count(), pos.len(), "one stretch of the task's normal rows");
                // 150 normal rows are hidden: the window shrinks to what the task has.
                assert!(unl.len() >= 100 && unl.len() <= DEPLOYMENT_UNLABELED, "{}", unl.len());
                let attacks = unl.iter().filter(|r| **r >= 300.0).count();
                assert!(attacks as f64 <= 0.1 * unl.len() as f64 + 1.0, "{attacks} attacks of {}", unl.len());
            }
            let q = Vec::<f32>::try_from(batch.query_y.flatten(0, -1)).unwrap();
            let qm = Vec::<f32>::try_from(batch.query_mask.flatten(0, -1)).unwrap();
            assert!(q.iter().zip(&qm).any(|(y, m)| *m > 0.0 && *y == 0.0), "attacks in the queries");
        }
    }
}
