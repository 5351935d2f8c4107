//! The meta-training knobs the experiments vary, beyond the product's `metapu train`
//! options: the lab's `train` and `eval` share them, so that a flag means the same in
//! both and a model trained by one can be reproduced by the other.

use anyhow::bail;
use clap::Args;

use metapu::model::PriorEstimate;
use metapu::train::{LrSchedule, TrainConfig};

/// Each option overrides what the command starts from when given: `metapu train`'s
/// recipe for `train`, the paper's settings (`TrainConfig::default()`) for `eval`.
#[derive(Debug, Args)]
pub struct ModelOptions {
    /// Weight of the prior-estimation term β·(π̂ − π)² in the meta-training loss
    /// (0 = the paper's loss; default 1).
    #[arg(long)]
    prior_loss_weight: Option<f64>,
    /// Weight α of a second meta-training risk that scores the adapted ratio at each
    /// query's true prior, α·R(π·r), beside the paper's risk at the estimate
    /// (0 = the paper's loss).
    #[arg(long)]
    true_prior_risk_weight: Option<f64>,
    /// Draw each meta-training episode's class prior from these (e.g.
    /// 0.2,0.4,0.6,0.8, the evaluation protocol's) and sample its unlabeled support and
    /// query at it; `own`: each source task's own ratio (the paper's sampling).
    #[arg(long, value_parser = parse_episode_priors)]
    episode_priors: Option<EpisodePriors>,
    /// Share of meta-training episodes drawn as an attack's onset: no attack in the
    /// unlabeled support, the task's attacks in the query (0 = the paper's episodes).
    #[arg(long)]
    onset_share: Option<f64>,
    /// Share of meta-training batches shaped as deployment meets a device: 5–50
    /// known-normal rows from one stretch of a task's time, 200 unlabeled rows from all
    /// of it at a prior of 0.9–1, the task's attacks in the query (0 = none).
    #[arg(long)]
    deployment_share: Option<f64>,
    /// Scale of the initial weight bounds (1 = Kaiming-uniform; 0.408 = PyTorch's
    /// nn.Linear default).
    #[arg(long)]
    init_scale: Option<f64>,
    /// Learn a correction of the prior estimate 1/max r from the support's statistics
    /// (trained by the prior term). Default: the paper's estimate alone.
    #[arg(long)]
    prior_head: bool,
    /// The class-prior estimate: support-max (the paper's 1/max r over the support) or
    /// known-normal-median (1/median r over the labeled normal rows). Stored in the model.
    #[arg(long, value_enum, hide_possible_values = true)]
    prior_estimate: Option<PriorEstimate>,
    /// Validate and keep an exponential moving average of the weights with this
    /// decay (e.g. 0.999) instead of the raw weights (0 = off).
    #[arg(long)]
    weight_average: Option<f64>,
    /// The learning rate over the --iterations budget: constant (the paper's) or a
    /// cosine decay to zero (in `eval`, for ours and the meta-learned baselines).
    #[arg(long, value_enum, hide_possible_values = true)]
    lr_schedule: Option<LrSchedule>,
    /// Hidden width of f, g and h (paper: 100).
    #[arg(long, value_parser = clap::value_parser!(i64).range(1..=4096))]
    hidden: Option<i64>,
    /// Embedding size M of h, the length of the per-task weights w (paper: 100).
    #[arg(long, value_parser = clap::value_parser!(i64).range(1..=4096))]
    embed_dim: Option<i64>,
}

/// `--episode-priors`: a list of priors, or `own` (empty: each task's own ratio).
#[derive(Debug, Clone)]
struct EpisodePriors(Vec<f64>);

fn parse_episode_priors(s: &str) -> Result<EpisodePriors, String> {
    if s == "own" {
        return Ok(EpisodePriors(Vec::new()));
    }
    let priors = s
        .split(',')
        .map(|p| p.trim().parse::<f64>().map_err(|e| format!("{p:?}: {e}")))
        .collect::<Result<Vec<_>, _>>()?;
    match priors.iter().find(|p| !(**p > 0.0 && **p < 1.0)) {
        Some(p) => Err(format!("{p} is not a prior strictly between 0 and 1")),
        None => Ok(EpisodePriors(priors)),
    }
}

impl ModelOptions {
    /// Set the given options in `cfg`.
    pub fn apply(&self, cfg: &mut TrainConfig) -> anyhow::Result<()> {
        if let Some(a) = self.true_prior_risk_weight.filter(|a| !(*a >= 0.0 && a.is_finite())) {
            bail!("--true-prior-risk-weight: {a} is not a finite weight ≥ 0");
        }
        if let Some(s) = self.onset_share.filter(|s| !(0.0..=1.0).contains(s)) {
            bail!("--onset-share: {s} is not a share between 0 and 1");
        }
        if let Some(s) = self.deployment_share.filter(|s| !(0.0..=1.0).contains(s)) {
            bail!("--deployment-share: {s} is not a share between 0 and 1");
        }
        let set = |field: &mut f64, value: Option<f64>| *field = value.unwrap_or(*field);
        set(&mut cfg.prior_loss_weight, self.prior_loss_weight);
        set(&mut cfg.true_prior_risk_weight, self.true_prior_risk_weight);
        set(&mut cfg.sampler.onset_share, self.onset_share);
        set(&mut cfg.sampler.deployment_share, self.deployment_share);
        set(&mut cfg.init_scale, self.init_scale);
        set(&mut cfg.weight_average, self.weight_average);
        if let Some(EpisodePriors(p)) = &self.episode_priors {
            cfg.sampler.episode_priors = p.clone();
        }
        cfg.prior_head |= self.prior_head;
        cfg.prior_estimate = self.prior_estimate.unwrap_or(cfg.prior_estimate);
        cfg.lr_schedule = self.lr_schedule.unwrap_or(cfg.lr_schedule);
        cfg.hidden = self.hidden.unwrap_or(cfg.hidden);
        cfg.embed_dim = self.embed_dim.unwrap_or(cfg.embed_dim);
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
    fn an_option_not_given_keeps_what_the_command_starts_from() {
        let mut start = TrainConfig { init_scale: 0.408, weight_average: 0.999, ..TrainConfig::default() };
        start.sampler.episode_priors = vec![0.2, 0.8];
        let command = Command::try_parse_from(["metapu", "--hidden", "50"]).unwrap();
        let mut cfg = start.clone();
        command.options.apply(&mut cfg).unwrap();
        assert_eq!(format!("{cfg:?}"), format!("{:?}", TrainConfig { hidden: 50, ..start.clone() }));
        let command = Command::try_parse_from(["metapu", "--episode-priors", "own"]).unwrap();
        command.options.apply(&mut cfg).unwrap();
        assert!(cfg.sampler.episode_priors.is_empty());
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
