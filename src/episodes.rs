//! Evaluating a network on protocol episodes (see `data::protocol`): all episodes
//! adapted in one batch, all test rows scored in one forward.

use tch::{Device, Kind, Tensor};

use crate::data::protocol::{accuracy, Episode};
use crate::data::{Label, Task};
use crate::model::{ensemble, MetaPuNet, Support, SupportBatch};

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

/// What adaptation gives before any decision, so that other priors can be tried on
/// the same ratios (`examples/prior_estimators.rs`).
#[derive(Debug, Clone)]
pub struct EpisodeScores {
    /// Ratios of the test rows, episode after episode.
    pub test_ratio: Vec<f64>,
    /// Each episode's prior estimate min(1, 1/max_S r).
    pub estimated_prior: Vec<f64>,
}

/// Per episode, the mean of the members' prior estimates (NaN without members).
pub fn mean_estimated_prior(members: &[EpisodeScores]) -> Vec<f64> {
    let episodes = members.first().map_or(0, |m| m.estimated_prior.len());
    (0..episodes)
        .map(|k| members.iter().map(|m| m.estimated_prior[k]).sum::<f64>() / members.len() as f64)
        .collect()
}

/// The support rows' own ratios, for estimates of the prior other than 1/max_S r.
/// Kept apart from [`EpisodeScores`] so that validation during training does not
/// compute them.
#[derive(Debug, Clone)]
pub struct SupportScores {
    /// Per episode, the ratio of each padded support slot and whether that slot is a
    /// labeled positive / an unlabeled row (1/0; both 0 for padding).
    pub ratio: Vec<Vec<f64>>,
    pub positive: Vec<Vec<f64>>,
    pub unlabeled: Vec<Vec<f64>>,
}

impl SupportScores {
    /// Episode `episode`'s ratios of its labeled positives (with `positives`) and of
    /// its unlabeled rows (with `unlabeled`), in slot order; padding slots never.
    pub fn ratios_of(&self, episode: usize, positives: bool, unlabeled: bool) -> Vec<f64> {
        let slots = self.ratio[episode].iter().zip(&self.positive[episode]).zip(&self.unlabeled[episode]);
        slots
            .filter(|((_, &p), &u)| (positives && p > 0.5) || (unlabeled && u > 0.5))
            .map(|((&r, _), _)| r)
            .collect()
    }
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
        self.evaluate_scores(&self.scores(net), mode, |p| p)
    }

    /// Adapt to every support and score every test row (no decisions yet).
    pub fn scores(&self, net: &MetaPuNet) -> EpisodeScores {
        let (ratio, estimated) = tch::no_grad(|| {
            let adapted = net.adapt(&self.support, 0.0);
            (net.ratio_flat(&adapted, &self.test_task, &self.test_x), adapted.prior)
        });
        EpisodeScores { test_ratio: to_f64s(&ratio), estimated_prior: to_f64s(&estimated) }
    }

    /// Adapt to every support and score the support's own rows.
    pub fn support_scores(&self, net: &MetaPuNet) -> SupportScores {
        let ratio = tch::no_grad(|| net.ratio_grouped(&net.adapt(&self.support, 0.0), &self.support.x));
        let b = self.episodes.len().max(1);
        let per_episode = |t: &Tensor| -> Vec<Vec<f64>> {
            let v = to_f64s(&t.reshape([-1]));
            let width = (v.len() / b).max(1);
            v.chunks(width).map(<[f64]>::to_vec).collect()
        };
        SupportScores {
            ratio: per_episode(&ratio),
            positive: per_episode(&self.support.pos),
            unlabeled: per_episode(&self.support.unl),
        }
    }

    /// Decide and score under `mode`, with each estimated prior mapped by `calibrate`
    /// (the identity for the method itself).
    pub fn evaluate_scores(
        &self,
        scores: &EpisodeScores,
        mode: PriorMode,
        calibrate: impl Fn(f64) -> f64,
    ) -> Evaluation {
        self.decide(std::slice::from_ref(scores), mode, calibrate)
    }

    /// Decide and score as an ensemble of the members whose scores these are (each
    /// adapted on its own): a row is positive when the mean of the members'
    /// posteriors min(1, π_m·r_m) is ≥ 0.5; the estimated prior is the mean of theirs.
    /// Each member's estimate is mapped by `calibrate` first (the identity for the
    /// method itself).
    pub fn evaluate_ensemble(
        &self,
        members: &[EpisodeScores],
        mode: PriorMode,
        calibrate: impl Fn(f64) -> f64,
    ) -> Evaluation {
        self.decide(members, mode, calibrate)
    }

    fn decide(
        &self,
        members: &[EpisodeScores],
        mode: PriorMode,
        calibrate: impl Fn(f64) -> f64,
    ) -> Evaluation {
        let mut results = Vec::with_capacity(self.episodes.len());
        let mut start = 0;
        let n_members = members.len().max(1) as f64;
        for (k, e) in self.episodes.iter().enumerate() {
            let estimates: Vec<f64> = members.iter().map(|m| calibrate(m.estimated_prior[k])).collect();
            let priors: Vec<f64> = match mode {
                PriorMode::Estimated => estimates.clone(),
                PriorMode::True => vec![e.prior; members.len()],
                PriorMode::Ignored => vec![1.0; members.len()],
            };
            let end = start + e.test.len();
            let predicted: Vec<bool> = (start..end)
                .map(|j| {
                    ensemble::mean_posterior(priors.iter().zip(members).map(|(&p, m)| (p, m.test_ratio[j])))
                        >= 0.5
                })
                .collect();
            results.push(EpisodeResult {
                accuracy: accuracy(e.prior, &self.test_labels[start..end], &predicted),
                estimated_prior: estimates.iter().sum::<f64>() / n_members,
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

fn to_f64s(t: &Tensor) -> Vec<f64> {
    Vec::<f64>::try_from(t.to_kind(Kind::Double).to_device(Device::Cpu)).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    use super::*;
    use crate::data::protocol::{self, ProtocolConfig};
    use crate::data::synthetic::{generate, SyntheticConfig};
    use crate::model::NetConfig;

    #[test]
    fn scores_line_up_with_episodes_and_reproduce_the_evaluation() {
        let (data, _) = generate(&SyntheticConfig::default(), 4);
        let chosen: Vec<(usize, &Task)> = data.tasks.iter().enumerate().skip(120).take(2).collect();
        let episodes =
            protocol::episodes(&chosen, &ProtocolConfig::default(), 1, &mut ChaCha8Rng::seed_from_u64(5));
        let set = EpisodeSet::new(episodes, &data.tasks, 2, Kind::Float, Device::Cpu).expect("episodes");
        let net = MetaPuNet::new(NetConfig::paper(2, 4), Device::Cpu);
        net.init_from_seed(6);
        let scores = set.scores(&net);
        let support = set.support_scores(&net);
        assert_eq!(support.ratio.len(), set.episodes.len());
        for (k, e) in set.episodes.iter().enumerate() {
            let (pos, unl) = (&support.positive[k], &support.unlabeled[k]);
            assert_eq!(pos.iter().sum::<f64>() as usize, e.support_pos.len());
            assert_eq!(unl.iter().sum::<f64>() as usize, e.support_unl.len());
            assert_eq!(support.ratios_of(k, true, false).len(), e.support_pos.len());
            assert_eq!(support.ratios_of(k, false, true).len(), e.support_unl.len());
            // The estimate is 1/max of this episode's own support ratios.
            let whole = support.ratios_of(k, true, true);
            assert_eq!(whole.len(), e.support_pos.len() + e.support_unl.len());
            let max = whole.into_iter().fold(f64::NEG_INFINITY, f64::max);
            assert!((scores.estimated_prior[k] - 1.0 / max.max(1.0)).abs() < 1e-5, "episode {k}");
        }
        for mode in [PriorMode::Estimated, PriorMode::True, PriorMode::Ignored] {
            assert_eq!(set.evaluate_scores(&scores, mode, |p| p), set.evaluate(&net, mode));
        }
        // A calibration reaches the decisions: every estimate at 1 is "w/o π".
        let at_one = set.evaluate_scores(&scores, PriorMode::Estimated, |_| 1.0);
        let ignored = set.evaluate(&net, PriorMode::Ignored);
        let accuracies = |e: &Evaluation| e.results.iter().map(|r| r.accuracy).collect::<Vec<_>>();
        assert_eq!(accuracies(&at_one), accuracies(&ignored));
        // An ensemble of one, or of two copies of one, decides as the model alone; a
        // second, different member changes the decisions.
        for mode in [PriorMode::Estimated, PriorMode::True, PriorMode::Ignored] {
            let alone = set.evaluate(&net, mode);
            assert_eq!(set.evaluate_ensemble(std::slice::from_ref(&scores), mode, |p| p), alone);
            assert_eq!(set.evaluate_ensemble(&[scores.clone(), scores.clone()], mode, |p| p), alone);
        }
        let other = MetaPuNet::new(NetConfig::paper(2, 4), Device::Cpu);
        other.init_from_seed(7);
        let pair = set.evaluate_ensemble(&[scores.clone(), set.scores(&other)], PriorMode::Estimated, |p| p);
        assert_ne!(pair, set.evaluate(&net, PriorMode::Estimated));
    }
}
