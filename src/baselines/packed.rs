//! Protocol episodes packed as padded tensors for the baselines: support positives,
//! support unlabeled rows and test rows, each `[E, N, D]` with a `[E, N]` mask.

use tch::{Device, Kind, Tensor};

use crate::data::protocol::{accuracy, Episode};
use crate::data::{Label, Task};

pub struct PackedEpisodes {
    pub count: i64,
    pub dim: i64,
    pub pos: Tensor,
    pub pos_mask: Tensor,
    pub unl: Tensor,
    pub unl_mask: Tensor,
    pub test: Tensor,
    pub test_mask: Tensor,
    /// The priors `[E]` the baselines are given: the true ones (as in the paper) unless
    /// [`PackedEpisodes::given_priors`] replaced them.
    pub prior: Tensor,
    /// True priors, which the accuracies are weighted by.
    pub priors: Vec<f64>,
    pub test_labels: Vec<Vec<Label>>,
    /// Support rows in plain vectors (kernel methods work per episode).
    pub support_rows: Vec<(Vec<f32>, Vec<f32>)>,
}

fn pad(groups: &[Vec<f32>], dim: usize, device: Device) -> (Tensor, Tensor) {
    let e = groups.len();
    let longest = groups.iter().map(|g| g.len() / dim).max().unwrap_or(0).max(1);
    let mut x = vec![0f32; e * longest * dim];
    let mut m = vec![0f32; e * longest];
    for (i, g) in groups.iter().enumerate() {
        let n = g.len() / dim;
        x[i * longest * dim..i * longest * dim + g.len()].copy_from_slice(g);
        m[i * longest..i * longest + n].fill(1.0);
    }
    let (e, n, d) = (e as i64, longest as i64, dim as i64);
    (
        Tensor::from_slice(&x).reshape([e, n, d]).to_device(device),
        Tensor::from_slice(&m).reshape([e, n]).to_device(device),
    )
}

impl PackedEpisodes {
    /// `tasks` are preprocessed; episode task indices point into it.
    pub fn new(episodes: &[Episode], tasks: &[Task], dim: usize, device: Device) -> Self {
        let rows =
            |t: &Task, idx: &[usize]| idx.iter().flat_map(|&i| t.row(i, dim).to_vec()).collect::<Vec<f32>>();
        let (mut pos, mut unl, mut test, mut labels, mut support_rows) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for e in episodes {
            let t = &tasks[e.task];
            pos.push(rows(t, &e.support_pos));
            unl.push(rows(t, &e.support_unl));
            test.push(rows(t, &e.test));
            labels.push(e.test.iter().map(|&i| t.labels[i]).collect());
            support_rows.push((rows(t, &e.support_pos), rows(t, &e.support_unl)));
        }
        let (pos, pos_mask) = pad(&pos, dim, device);
        let (unl, unl_mask) = pad(&unl, dim, device);
        let (test, test_mask) = pad(&test, dim, device);
        let priors: Vec<f64> = episodes.iter().map(|e| e.prior).collect();
        let prior = Tensor::from_slice(&priors).to_kind(Kind::Float).to_device(device);
        Self {
            count: episodes.len() as i64,
            dim: dim as i64,
            pos,
            pos_mask,
            unl,
            unl_mask,
            test,
            test_mask,
            prior,
            priors,
            test_labels: labels,
            support_rows,
        }
    }

    /// The same episodes with the baselines given these priors (an estimate) instead of
    /// the true ones; the accuracies stay weighted by the true priors.
    pub fn given_priors(mut self, priors: &[f64]) -> Self {
        assert_eq!(priors.len(), self.priors.len(), "one prior per episode");
        self.prior = Tensor::from_slice(priors).to_kind(Kind::Float).to_device(self.prior.device());
        self
    }

    /// Accuracy (1 − PN risk) per episode of decisions `score ≥ 0` on the test rows,
    /// `scores` `[E, T]`.
    pub fn accuracies(&self, scores: &Tensor) -> Vec<f64> {
        let scores: Vec<f32> = Vec::try_from(
            scores.detach().to_kind(Kind::Float).to_device(Device::Cpu).contiguous().flatten(0, -1),
        )
        .unwrap_or_default();
        let t = scores.len() / self.count.max(1) as usize;
        self.test_labels
            .iter()
            .enumerate()
            .map(|(i, labels)| {
                let predicted: Vec<bool> =
                    scores[i * t..i * t + labels.len()].iter().map(|&s| s >= 0.0).collect();
                accuracy(self.priors[i], labels, &predicted)
            })
            .collect()
    }
}
