//! The question a model builder asks at the end of `metapu train`: is the meta-trained
//! model worth shipping, that is, better than a PU classifier trained on each device's
//! few examples alone? nnPU (Kiryo et al. 2017) is fitted on each of the run's
//! validation episodes, given the model's own prior estimate (what a site would have
//! without labels), and both are scored on the same episodes.

use tch::{Device, Kind};

use crate::baselines::single::{self, NeuralBaseline};
use crate::baselines::PackedEpisodes;
use crate::data::TaskSet;
use crate::episodes::{EpisodeSet, PriorMode};
use crate::model::Model;
use crate::train::{validation_episodes, TrainConfig, TrainError};

/// Ours and nnPU on the same validation episodes.
#[derive(Debug, Clone, PartialEq)]
pub struct BaselineComparison {
    pub episodes: usize,
    /// Ours' mean accuracy at its own prior estimate.
    pub ours: f64,
    /// nnPU's mean accuracy at each of the paper's step counts ([`single::ITERATIONS`]).
    pub nnpu: Vec<(usize, f64)>,
}

impl BaselineComparison {
    /// nnPU at its best step count on these episodes (chosen on the very episodes it is
    /// scored on: a bar set high for ours).
    pub fn best_nnpu(&self) -> (usize, f64) {
        self.nnpu.iter().copied().fold((0, f64::NEG_INFINITY), |b, c| if c.1 > b.1 { c } else { b })
    }

    /// One line for the user.
    pub fn summary(&self) -> String {
        let (steps, nnpu) = self.best_nnpu();
        let gap = 100.0 * (self.ours - nnpu);
        let verdict = if gap > 0.0 {
            "the model beats the single-task baseline"
        } else {
            "the model does NOT beat a classifier trained on each device alone: more source \
             tasks or a longer budget may help; think twice before shipping it"
        };
        format!(
            "on {} validation episodes: ours {:.2} %, nnPU given ours' prior estimate {:.2} % \
             (best of {:?} steps: {steps}); {gap:+.2} points: {verdict}",
            self.episodes,
            100.0 * self.ours,
            100.0 * nnpu,
            single::ITERATIONS,
        )
    }
}

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len().max(1) as f64
}

/// Score `model` and nnPU on the validation episodes a run with `cfg` on this data and
/// split drew.
pub fn compare_with_nnpu(
    model: &Model,
    data: &TaskSet,
    source: &[usize],
    validation: &[usize],
    cfg: &TrainConfig,
    device: Device,
) -> Result<BaselineComparison, TrainError> {
    let tasks = super::preprocessed(data, &model.preprocess);
    let episodes = validation_episodes(&tasks, source, validation, cfg);
    let dim = data.dim();
    let packed = PackedEpisodes::new(&episodes, &tasks, dim, device);
    let set = EpisodeSet::new(episodes, &tasks, dim, Kind::Float, device)
        .ok_or(TrainError::NoValidationEpisodes)?;
    let ours = set.evaluate(&model.net, PriorMode::Estimated);
    let estimates: Vec<f64> = ours.results.iter().map(|r| r.estimated_prior).collect();
    let nnpu = single::neural(NeuralBaseline::NnPu, &packed.given_priors(&estimates), cfg.seed, device)?;
    Ok(BaselineComparison {
        episodes: estimates.len(),
        ours: ours.mean_accuracy,
        nnpu: single::ITERATIONS.iter().zip(&nnpu).map(|(&steps, acc)| (steps, mean(acc))).collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn comparison(ours: f64) -> BaselineComparison {
        BaselineComparison { episodes: 240, ours, nnpu: vec![(100, 0.79), (500, 0.80), (1000, 0.78)] }
    }

    #[test]
    fn the_summary_measures_ours_against_nnpu_at_its_best_step_count() {
        assert_eq!(comparison(0.82).best_nnpu(), (500, 0.80));
        let better = comparison(0.82).summary();
        assert!(better.contains("ours 82.00 %, nnPU given ours' prior estimate 80.00 %"), "{better}");
        assert!(better.contains("+2.00 points: the model beats"), "{better}");
        let worse = comparison(0.77).summary();
        assert!(worse.contains("-3.00 points: the model does NOT beat"), "{worse}");
    }
}
