//! The meta-training knobs the experiments vary, beyond the product's `metapu train`
//! options: the lab's `train` and `eval` share them, so that a flag means the same in
//! both and a model trained by one can be reproduced by the other.

use anyhow::bail;
use clap::Args;

use metapu::model::{NetConfig, PriorEstimate};
use metapu::train::{LrSchedule, TrainConfig};

#[derive(Debug, Args)]
pub struct ModelOptions {
    /// Weight of the prior-estimation term β·(π̂ − π)² in the meta-training loss
    /// (0 = the paper's loss).
    #[arg(long, default_value_t = 1.0)]
    prior_loss_weight: f64,
    /// Weight α of a second meta-training risk that scores the adapted ratio at each
    /// query's true prior, α·R(π·r), beside the paper's risk at the estimate
    /// (0 = the paper's loss).
    #[arg(long, default_value_t = 0.0)]
    true_prior_risk_weight: f64,
    /// Draw each meta-training episode's class prior from these (e.g.
    /// 0.2,0.4,0.6,0.8, the evaluation protocol's) and sample its unlabeled support and
    /// query at it. Default: each source task's own ratio (the paper's sampling).
    #[arg(long, value_delimiter = ',')]
    episode_priors: Vec<f64>,
    /// Share of meta-training episodes drawn as an attack's onset: no attack in the
    /// unlabeled support, the task's attacks in the query (0 = the paper's episodes).
    #[arg(long, default_value_t = 0.0)]
    onset_share: f64,
    /// Scale of the initial weight bounds (1 = Kaiming-uniform; 0.408 = PyTorch's
    /// nn.Linear default).
    #[arg(long, default_value_t = 1.0)]
    init_scale: f64,
    /// Learn a correction of the prior estimate 1/max r from the support's statistics
    /// (trained by the prior term). Default: the paper's estimate alone.
    #[arg(long)]
    prior_head: bool,
    /// The class-prior estimate: support-max (the paper's 1/max r over the support) or
    /// known-normal-median (1/median r over the labeled normal rows). Stored in the model.
    #[arg(long, value_enum, default_value_t = PriorEstimate::SupportMax, hide_possible_values = true)]
    prior_estimate: PriorEstimate,
    /// Validate and keep an exponential moving average of the weights with this
    /// decay (e.g. 0.999) instead of the raw weights (0 = off).
    #[arg(long, default_value_t = 0.0)]
    weight_average: f64,
    /// The learning rate over the --iterations budget: constant (the paper's) or a
    /// cosine decay to zero (in `eval`, for ours and the meta-learned baselines).
    #[arg(long, value_enum, default_value_t = LrSchedule::Constant, hide_possible_values = true)]
    lr_schedule: LrSchedule,
    /// Hidden width of f, g and h (paper: 100).
    #[arg(long, default_value_t = NetConfig::PAPER_HIDDEN, value_parser = clap::value_parser!(i64).range(1..=4096))]
    hidden: i64,
    /// Embedding size M of h, the length of the per-task weights w (paper: 100).
    #[arg(long, default_value_t = NetConfig::PAPER_EMBED_DIM, value_parser = clap::value_parser!(i64).range(1..=4096))]
    embed_dim: i64,
}

impl ModelOptions {
    /// Set these options in `cfg`; the episode priors must lie in (0, 1).
    pub fn apply(&self, cfg: &mut TrainConfig) -> anyhow::Result<()> {
        if let Some(p) = self.episode_priors.iter().find(|p| !(**p > 0.0 && **p < 1.0)) {
            bail!("--episode-priors: {p} is not a prior strictly between 0 and 1");
        }
        if !(self.true_prior_risk_weight >= 0.0 && self.true_prior_risk_weight.is_finite()) {
            bail!("--true-prior-risk-weight: {} is not a finite weight ≥ 0", self.true_prior_risk_weight);
        }
        if !(0.0..=1.0).contains(&self.onset_share) {
            bail!("--onset-share: {} is not a share between 0 and 1", self.onset_share);
        }
        cfg.prior_loss_weight = self.prior_loss_weight;
        cfg.true_prior_risk_weight = self.true_prior_risk_weight;
        cfg.sampler.episode_priors = self.episode_priors.clone();
        cfg.sampler.onset_share = self.onset_share;
        cfg.init_scale = self.init_scale;
        cfg.prior_head = self.prior_head;
        cfg.prior_estimate = self.prior_estimate;
        cfg.weight_average = self.weight_average;
        cfg.lr_schedule = self.lr_schedule;
        cfg.hidden = self.hidden;
        cfg.embed_dim = self.embed_dim;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Debug, Parser)]
    struct Command {
        #[command(flatten)]
        options: ModelOptions,
    }

    fn applied(args: &[&str]) -> anyhow::Result<TrainConfig> {
        let command = Command::try_parse_from(std::iter::once("metapu").chain(args.iter().copied()))?;
        let mut cfg = TrainConfig::default();
        command.options.apply(&mut cfg)?;
        Ok(cfg)
    }

    #[test]
    fn flags_reach_the_training_config() {
        let cfg = applied(&[
            "--prior-loss-weight",
            "0",
            "--true-prior-risk-weight",
            "0.5",
            "--episode-priors",
            "0.2,0.8",
            "--onset-share",
            "0.25",
            "--init-scale",
            "0.408",
            "--prior-head",
            "--prior-estimate",
            "known-normal-median",
            "--weight-average",
            "0.999",
            "--lr-schedule",
            "cosine",
            "--hidden",
            "200",
            "--embed-dim",
            "150",
        ])
        .unwrap();
        assert_eq!(cfg.prior_loss_weight, 0.0);
        assert_eq!(cfg.true_prior_risk_weight, 0.5);
        assert_eq!(TrainConfig::default().true_prior_risk_weight, 0.0);
        assert_eq!(cfg.sampler.episode_priors, vec![0.2, 0.8]);
        assert_eq!(cfg.sampler.onset_share, 0.25);
        assert_eq!(cfg.init_scale, 0.408);
        assert!(cfg.prior_head);
        assert_eq!(cfg.prior_estimate, PriorEstimate::KnownNormalMedian);
        assert_eq!(TrainConfig::default().prior_estimate, PriorEstimate::SupportMax);
        assert_eq!(cfg.weight_average, 0.999);
        assert_eq!(cfg.lr_schedule, LrSchedule::Cosine);
        assert_eq!((cfg.hidden, cfg.embed_dim), (200, 150));
        assert_eq!((TrainConfig::default().hidden, TrainConfig::default().embed_dim), (100, 100));
    }

    #[test]
    fn a_prior_outside_the_open_unit_interval_is_refused() {
        for bad in ["0", "1", "1.5", "-0.2", "NaN"] {
            let err = applied(&["--episode-priors", &format!("0.4,{bad}")]).unwrap_err();
            assert!(err.to_string().contains("not a prior strictly between 0 and 1"), "{bad}: {err}");
        }
        assert!(applied(&["--episode-priors", "0.01,0.99"]).is_ok());
        for bad in ["-0.1", "1.5", "NaN"] {
            let err = applied(&[&format!("--onset-share={bad}")]).unwrap_err();
            assert!(err.to_string().contains("not a share between 0 and 1"), "{bad}: {err}");
        }
    }

    #[test]
    fn a_negative_or_unbounded_risk_weight_is_refused() {
        for bad in ["-1", "inf", "NaN"] {
            let err = applied(&[&format!("--true-prior-risk-weight={bad}")]).unwrap_err();
            assert!(err.to_string().contains("not a finite weight ≥ 0"), "{bad}: {err}");
        }
        assert!(applied(&["--true-prior-risk-weight", "0"]).is_ok());
    }
}
