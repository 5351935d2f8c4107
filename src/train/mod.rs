//! Meta-training (paper Algorithm 1) with validation under the target protocol,
//! early stopping and the best checkpoint kept.

pub mod average;
pub mod baseline;
pub mod checkpoint;
pub mod command;
pub mod episodes;
pub mod schedule;

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use tch::nn::OptimizerConfig;
use tch::{nn, Device, Kind};

use crate::data::protocol::{self, Episode, ProtocolConfig};
use crate::data::{Task, TaskSet};
use crate::episodes::{EpisodeSet, PriorMode};
use crate::model::{
    closed_form, MetaPuNet, Model, NetConfig, PreprocessKind, Preprocessor, PriorEstimate, Provenance,
};
use average::WeightAverage;
use checkpoint::{snapshot, BestCheckpoint};
use episodes::{EpisodeSampler, SamplerConfig, SourceTask};
pub use schedule::LrSchedule;

#[derive(Debug, Clone)]
pub struct TrainConfig {
    pub seed: u64,
    pub max_iterations: u64,
    pub eval_every: u64,
    /// Evaluations without improvement before stopping.
    pub patience: u64,
    /// Tasks per meta-training step (the paper uses 1).
    pub meta_batch: usize,
    pub learning_rate: f64,
    /// How the learning rate moves over `max_iterations`.
    pub lr_schedule: LrSchedule,
    pub task_dim: i64,
    pub preprocess: PreprocessKind,
    pub sampler: SamplerConfig,
    pub protocol: ProtocolConfig,
    /// Validation episodes per (task, N_p, π).
    pub validation_repeats: usize,
    /// Slope kept for negative w̃ during training so a dead w can recover.
    pub weight_leak: f64,
    pub use_task_vectors: bool,
    /// Weight β of the prior term β·(π̂ − π_S)² added to the smoothed risk, where π_S
    /// is the true positive share of the unlabeled support (known in source tasks
    /// whose labels were hidden). 0 = the paper's loss.
    pub prior_loss_weight: f64,
    /// Weight α of a second smoothed risk, α·R(π_Q·r), that scores the adapted ratio
    /// at the query's true prior π_Q instead of the estimate: it trains the ratio to
    /// separate the classes whatever the estimate's error. 0 = the paper's loss.
    pub true_prior_risk_weight: f64,
    /// Scale of the initial weight bounds (1 = Kaiming-uniform, tch's default).
    pub init_scale: f64,
    /// Learn a correction of the prior estimate (`NetConfig::prior_head`).
    pub prior_head: bool,
    /// The class-prior estimate, in meta-training (the risk is taken at it) and in the
    /// model file (`NetConfig::prior_estimate`).
    pub prior_estimate: PriorEstimate,
    /// Decay of the weight average that is validated and kept (0 = the raw weights).
    pub weight_average: f64,
    /// Hidden width of f, g and h (`NetConfig::hidden`; paper: 100).
    pub hidden: i64,
    /// Embedding size M of h (`NetConfig::embed_dim`; paper: 100).
    pub embed_dim: i64,
}

impl Default for TrainConfig {
    fn default() -> Self {
        Self {
            seed: 0,
            max_iterations: 30_000,
            eval_every: 500,
            patience: 10,
            meta_batch: 1,
            learning_rate: 1e-3,
            lr_schedule: LrSchedule::Constant,
            task_dim: 32,
            preprocess: PreprocessKind::LogStandard,
            sampler: SamplerConfig::default(),
            protocol: ProtocolConfig::default(),
            validation_repeats: 1,
            weight_leak: 0.01,
            use_task_vectors: true,
            prior_loss_weight: 1.0,
            true_prior_risk_weight: 0.0,
            init_scale: 1.0,
            prior_head: false,
            prior_estimate: PriorEstimate::SupportMax,
            weight_average: 0.0,
            hidden: NetConfig::PAPER_HIDDEN,
            embed_dim: NetConfig::PAPER_EMBED_DIM,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum TrainError {
    #[error("no usable source task (each needs ≥2 labeled positives, a negative and unlabeled rows)")]
    NoSourceTasks,
    #[error("no validation episode could be drawn from the validation tasks")]
    NoValidationEpisodes,
    #[error("optimizer: {0}")]
    Torch(#[from] tch::TchError),
}

/// One validation point on the learning curve.
#[derive(Debug, Clone, PartialEq)]
pub struct Checkpoint {
    pub iteration: u64,
    pub train_loss: f64,
    pub validation_accuracy: f64,
    pub prior_rmse: f64,
    pub seconds: f64,
}

#[derive(Debug)]
pub struct TrainOutcome {
    pub model: Model,
    pub history: Vec<Checkpoint>,
    pub iterations: u64,
    pub interrupted: bool,
    pub seconds: f64,
}

/// Observer of training progress (progress bars, logs).
pub trait Progress {
    fn step(&mut self, _iteration: u64, _loss: f64) {}
    fn checkpoint(&mut self, _c: &Checkpoint, _best: f64) {}
}

impl Progress for () {}

fn preprocessed(set: &TaskSet, pre: &Preprocessor) -> Vec<Task> {
    set.tasks.iter().map(|t| Task { x: pre.transformed(&t.x), ..t.clone() }).collect()
}

/// The source tasks' labeled/unlabeled partition and the fixed validation episodes
/// (checkpoints are compared on the same draws) that a run with `cfg` draws first from
/// `rng`, seeded with `cfg.seed`; `tasks` are preprocessed.
fn sources_and_validation(
    tasks: &[Task],
    source: &[usize],
    validation: &[usize],
    cfg: &TrainConfig,
    rng: &mut ChaCha8Rng,
) -> (Vec<SourceTask>, Vec<Episode>) {
    let sources = source
        .iter()
        .filter_map(|&i| SourceTask::partition(i, &tasks[i], cfg.sampler.labeled_fraction, rng))
        .collect();
    let val_tasks: Vec<(usize, &Task)> = validation.iter().map(|&i| (i, &tasks[i])).collect();
    (sources, protocol::episodes(&val_tasks, &cfg.protocol, cfg.validation_repeats, rng))
}

/// The validation episodes a run with `cfg` checks its checkpoints on, for scoring
/// other models on the same draws (an ensemble against its members); `tasks` are
/// preprocessed as the run's model preprocesses them.
pub fn validation_episodes(
    tasks: &[Task],
    source: &[usize],
    validation: &[usize],
    cfg: &TrainConfig,
) -> Vec<Episode> {
    sources_and_validation(tasks, source, validation, cfg, &mut ChaCha8Rng::seed_from_u64(cfg.seed)).1
}

/// Meta-train on `source` task indices, validating on `validation` ones.
/// `stop` (e.g. set by Ctrl-C) ends training early, keeping the best model so far.
pub fn train(
    data: &TaskSet,
    source: &[usize],
    validation: &[usize],
    cfg: &TrainConfig,
    device: Device,
    stop: &AtomicBool,
    progress: &mut dyn Progress,
) -> Result<TrainOutcome, TrainError> {
    let started = Instant::now();
    let dim = data.dim();
    let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed);

    // Preprocessing is fitted on source rows only.
    let source_rows: Vec<f32> = source.iter().flat_map(|&i| data.tasks[i].x.iter().copied()).collect();
    let pre = Preprocessor::fit(cfg.preprocess, &source_rows, dim);
    let tasks = preprocessed(data, &pre);

    let (sources, val_episodes) = sources_and_validation(&tasks, source, validation, cfg, &mut rng);
    if sources.is_empty() {
        return Err(TrainError::NoSourceTasks);
    }
    let kind = Kind::Float;
    let val_set =
        EpisodeSet::new(val_episodes, &tasks, dim, kind, device).ok_or(TrainError::NoValidationEpisodes)?;

    let mut net_cfg = NetConfig::paper(dim as i64, cfg.task_dim);
    net_cfg.use_task_vectors = cfg.use_task_vectors;
    net_cfg.prior_head = cfg.prior_head;
    net_cfg.prior_estimate = cfg.prior_estimate;
    net_cfg.hidden = cfg.hidden;
    net_cfg.embed_dim = cfg.embed_dim;
    let net = MetaPuNet::new(net_cfg, device);
    net.init_from_seed_scaled(cfg.seed, cfg.init_scale);
    let mut opt = nn::Adam::default().build(&net.vs, cfg.learning_rate)?;
    let mut average = WeightAverage::new(&net.vs, cfg.weight_average);
    let sampler = EpisodeSampler { sources: &sources, tasks: &tasks, dim, cfg: &cfg.sampler, kind, device };

    let mut best = BestCheckpoint::new(&net.vs, cfg.patience);
    let mut history = Vec::new();
    let mut loss_sum = 0.0;
    let mut loss_count = 0u64;
    let mut iteration = 0;
    let mut interrupted = false;
    while iteration < cfg.max_iterations {
        if stop.load(Ordering::Relaxed) {
            interrupted = true;
            break;
        }
        iteration += 1;
        opt.set_lr(cfg.lr_schedule.rate(cfg.learning_rate, iteration, cfg.max_iterations));
        let batch = sampler.sample(cfg.meta_batch, &mut rng);
        let adapted = net.adapt(&batch.support, cfg.weight_leak);
        let ratio = net.ratio_grouped(&adapted, &batch.query_x);
        let mut loss = closed_form::smoothed_pn_risk(
            &adapted.prior,
            &ratio,
            &batch.query_y,
            &batch.query_mask,
            net.config.tau,
        );
        if cfg.prior_loss_weight > 0.0 {
            let known = &batch.support_prior_known;
            let squared = (&adapted.prior - &batch.support_prior).square() * known;
            let prior_loss = squared.sum(kind) / known.sum(kind).clamp_min(1.0);
            loss += prior_loss * cfg.prior_loss_weight;
        }
        if cfg.true_prior_risk_weight > 0.0 {
            let true_prior = closed_form::query_prior(&batch.query_y, &batch.query_mask);
            let risk = closed_form::smoothed_pn_risk(
                &true_prior,
                &ratio,
                &batch.query_y,
                &batch.query_mask,
                net.config.tau,
            );
            loss += risk * cfg.true_prior_risk_weight;
        }
        let value = loss.double_value(&[]);
        if value.is_finite() {
            opt.backward_step(&loss);
            average.update();
            loss_sum += value;
            loss_count += 1;
        }
        progress.step(iteration, value);

        if iteration % cfg.eval_every == 0 || iteration == cfg.max_iterations {
            // Validate (and keep, if best) the averaged weights, then train on.
            let (eval, saved) = average.applied(|| {
                let eval = val_set.evaluate(&net, PriorMode::Estimated);
                let saved = best.improves(eval.mean_accuracy).then(|| snapshot(&net.vs));
                (eval, saved)
            });
            let c = Checkpoint {
                iteration,
                train_loss: loss_sum / loss_count.max(1) as f64,
                validation_accuracy: eval.mean_accuracy,
                prior_rmse: eval.prior_rmse,
                seconds: started.elapsed().as_secs_f64(),
            };
            (loss_sum, loss_count) = (0.0, 0);
            let out_of_patience = best.record(c.validation_accuracy, iteration, saved);
            progress.checkpoint(&c, best.accuracy());
            history.push(c);
            if out_of_patience {
                break;
            }
        }
    }
    if history.is_empty() {
        // Interrupted before the first evaluation: evaluate and keep what we have, as a
        // checkpoint would (the averaged weights when averaging).
        let (accuracy, weights) = average
            .applied(|| (val_set.evaluate(&net, PriorMode::Estimated).mean_accuracy, snapshot(&net.vs)));
        best.keep(accuracy, iteration, weights);
    }
    best.restore(&net.vs);
    let provenance = Provenance {
        data_sha256: data.content_hash(),
        seed: cfg.seed,
        iterations: iteration,
        best_iteration: best.iteration(),
        best_validation_accuracy: best.accuracy(),
        source_tasks: sources.len(),
        validation_tasks: validation.len(),
        metapu_version: env!("CARGO_PKG_VERSION").into(),
    };
    let model = Model { net, preprocess: pre, feature_names: data.feature_names.clone(), provenance };
    Ok(TrainOutcome {
        model,
        history,
        iterations: iteration,
        interrupted,
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// Meta-train on the paper's Synthetic benchmark generated with `data_seed`, using its
/// source and validation split. Returns the outcome with the data and split.
pub fn train_on_synthetic(
    data_seed: u64,
    cfg: &TrainConfig,
    device: Device,
) -> Result<(TrainOutcome, TaskSet, crate::data::split::Split), TrainError> {
    use crate::data::split::Split;
    use crate::data::synthetic::{generate, SyntheticConfig};
    let (data, split) = generate(&SyntheticConfig::default(), data_seed);
    let source = Split::resolve(&split.source, &data).expect("generated ids resolve");
    let validation = Split::resolve(&split.validation, &data).expect("generated ids resolve");
    let out = train(&data, &source, &validation, cfg, device, &AtomicBool::new(false), &mut ())?;
    Ok((out, data, split))
}
