//! Evaluating a network on protocol episodes (see `data::protocol`): all episodes
//! adapted in one batch, all test rows scored in one forward.

use tch::{Device, Kind, Tensor};

use crate::data::protocol::{accuracy, Episode};
use crate::data::{Label, Task};
use crate::model::{MetaPuNet, Support, SupportBatch};

/// Which prior the classifier `sign(π·r − 0.5)` uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PriorMode {
    /// The model's own estimate min(1, 1/max_S r) (the method).
    Estimated,
    /// The true prior of the episode (ablation "w/ true π").
    True,
    /// No prior: sign(r − 0.5) (ablation "w/o π").
    Ignored,
}

/// Episodes packed as tensors, ready to evaluate any number of times.
#[derive(Debug)]
pub struct EpisodeSet {
    pub episodes: Vec<Episode>,
    support: SupportBatch,
    test_x: Tensor,
    test_task: Tensor,
    test_labels: Vec<Label>,
}

/// Per-episode outcome.
#[derive(Debug, Clone, PartialEq)]
pub struct EpisodeResult {
    pub accuracy: f64,
    pub estimated_prior: f64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Evaluation {
    pub results: Vec<EpisodeResult>,
    pub mean_accuracy: f64,
    pub prior_rmse: f64,
}

impl EpisodeSet {
    /// `tasks` are preprocessed; episode task indices point into it.
    pub fn new(
        episodes: Vec<Episode>,
        tasks: &[Task],
        dim: usize,
        kind: Kind,
        device: Device,
    ) -> Option<Self> {
        if episodes.is_empty() {
            return None;
        }
        let mut owned = Vec::with_capacity(episodes.len());
        let (mut test_x, mut test_task, mut test_labels) = (Vec::new(), Vec::new(), Vec::new());
        for (e_index, e) in episodes.iter().enumerate() {
            let task = &tasks[e.task];
            let rows = |idx: &[usize]| {
                idx.iter().flat_map(|&i| task.row(i, dim).iter().copied()).collect::<Vec<f32>>()
            };
            owned.push((rows(&e.support_pos), rows(&e.support_unl)));
            test_x.extend(rows(&e.test));
            test_task.extend(std::iter::repeat_n(e_index as i64, e.test.len()));
            test_labels.extend(e.test.iter().map(|&i| task.labels[i]));
        }
        let views: Vec<Support<'_>> =
            owned.iter().map(|(p, u)| Support { positives: p, unlabeled: u }).collect();
        let support = SupportBatch::pack(&views, dim, kind, device).ok()?;
        let n = test_task.len() as i64;
        Some(Self {
            episodes,
            support,
            test_x: Tensor::from_slice(&test_x).reshape([n, dim as i64]).to_kind(kind).to_device(device),
            test_task: Tensor::from_slice(&test_task).to_device(device),
            test_labels,
        })
    }

    pub fn evaluate(&self, net: &MetaPuNet, mode: PriorMode) -> Evaluation {
        let (ratio, estimated) = tch::no_grad(|| {
            let adapted = net.adapt(&self.support, 0.0);
            let ratio = net.ratio_flat(&adapted, &self.test_task, &self.test_x);
            (ratio, adapted.prior)
        });
        let to_vec = |t: &Tensor| {
            Vec::<f64>::try_from(t.to_kind(Kind::Double).to_device(Device::Cpu)).unwrap_or_default()
        };
        let ratio = to_vec(&ratio);
        let estimated = to_vec(&estimated);
        let mut results = Vec::with_capacity(self.episodes.len());
        let mut start = 0;
        for (e, &est) in self.episodes.iter().zip(&estimated) {
            let end = start + e.test.len();
            let prior = match mode {
                PriorMode::Estimated => est,
                PriorMode::True => e.prior,
                PriorMode::Ignored => 1.0,
            };
            let predicted: Vec<bool> = ratio[start..end].iter().map(|&r| prior * r - 0.5 >= 0.0).collect();
            results.push(EpisodeResult {
                accuracy: accuracy(e.prior, &self.test_labels[start..end], &predicted),
                estimated_prior: est,
            });
            start = end;
        }
        let n = results.len().max(1) as f64;
        let mean_accuracy = results.iter().map(|r| r.accuracy).sum::<f64>() / n;
        let prior_rmse = (self
            .episodes
            .iter()
            .zip(&results)
            .map(|(e, r)| (r.estimated_prior - e.prior).powi(2))
            .sum::<f64>()
            / n)
            .sqrt();
        Evaluation { results, mean_accuracy, prior_rmse }
    }
}
