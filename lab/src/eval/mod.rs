//! The paper's experiment (section 5): for each split, meta-train ours (and its
//! ablation without task vectors) and the meta-learned baselines on source tasks,
//! choose every method's hyperparameters on validation tasks only, then score every
//! method on the same target episodes (N_p × π × target tasks).
//!
//! - `metapu::baselines` — Naive, uPU, nnPU, DRPU (networks), DRE (uLSIF)
//! - [`meta`] — MDRE, MnnPU (MAML-style), NP
//! - [`stats`] — the paired t-test; [`report`] — tables, JSON; [`plot`] — SVG figures

mod baseline_runs;
pub mod merge;
pub mod meta;
mod ours;
pub mod plot;
pub mod report;
pub mod stats;
pub mod stream;

use std::collections::BTreeMap;
use std::sync::atomic::AtomicBool;
use std::time::Instant;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use tch::{Device, Kind};

use baseline_runs::*;
use meta::{MetaBaseline, MetaTrainConfig};
use metapu::baselines::single::{self, NeuralBaseline};
use metapu::baselines::PackedEpisodes;
use metapu::data::protocol::{self, Episode, ProtocolConfig};
use metapu::data::{Task, TaskSet};
use metapu::episodes::{EpisodeScores, EpisodeSet, Evaluation, PriorMode};
use metapu::model::prior_calibration::PriorCalibration;
use metapu::model::Model;
use metapu::train::episodes::{EpisodeSampler, SamplerConfig, SourceTask};
use metapu::train::{self, TrainConfig, TrainError};
use ours::*;

/// Every method of the comparison, by its command-line name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Method {
    Ours,
    OursNoZ,
    OursNoPrior,
    OursTruePrior,
    Naive,
    UPu,
    NnPu,
    Dre,
    Drpu,
    Mdre,
    MnnPu,
    Np,
}

impl Method {
    pub const ALL: [Method; 12] = [
        Method::Ours,
        Method::OursNoZ,
        Method::OursNoPrior,
        Method::OursTruePrior,
        Method::Naive,
        Method::UPu,
        Method::NnPu,
        Method::Dre,
        Method::Drpu,
        Method::Mdre,
        Method::MnnPu,
        Method::Np,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Method::Ours => "ours",
            Method::OursNoZ => "ours-no-z",
            Method::OursNoPrior => "ours-no-prior",
            Method::OursTruePrior => "ours-true-prior",
            Method::Naive => "naive",
            Method::UPu => "upu",
            Method::NnPu => "nnpu",
            Method::Dre => "dre",
            Method::Drpu => "drpu",
            Method::Mdre => "mdre",
            Method::MnnPu => "mnnpu",
            Method::Np => "np",
        }
    }

    /// The label in tables (the paper's names).
    pub fn label(self) -> &'static str {
        match self {
            Method::Ours => "Ours",
            Method::OursNoZ => "Ours w/o z",
            Method::OursNoPrior => "Ours w/o π",
            Method::OursTruePrior => "Ours w/ true π",
            Method::Naive => "Naive",
            Method::UPu => "uPU",
            Method::NnPu => "nnPU",
            Method::Dre => "DRE",
            Method::Drpu => "DRPU",
            Method::Mdre => "MDRE",
            Method::MnnPu => "MnnPU",
            Method::Np => "NP",
        }
    }

    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|m| m.name() == name)
    }

    /// Given the true target prior (the single-task and MAML baselines, and the "w/ true
    /// π" ablation; NP, as in the paper, is not).
    pub fn uses_true_prior(self) -> bool {
        !matches!(self, Method::Ours | Method::OursNoZ | Method::OursNoPrior | Method::Np)
    }
}

#[derive(Debug, Clone)]
pub struct EvalConfig {
    pub seed: u64,
    pub methods: Vec<Method>,
    /// Meta-training of ours and of the meta-learned baselines.
    pub train: TrainConfig,
    /// Candidates for K (ours, NP), chosen on validation tasks.
    pub task_dims: Vec<i64>,
    /// Candidates for the MAML inner step size (MDRE, MnnPU).
    pub step_sizes: Vec<f64>,
    pub protocol: ProtocolConfig,
    /// Target episodes per (task, N_p, π).
    pub target_repeats: usize,
    /// Ours and the meta-learned baselines: meta-train one model per target N_p, with
    /// that N_p in every training support and chosen on that N_p's validation episodes
    /// (the paper's Algorithm 1 takes a fixed N_p), instead of one model for all N_p.
    pub per_support_size: bool,
    /// Ours and the meta-learned baselines: meta-train this many models (ensemble
    /// members, training seeds seed, seed + 1, …), each chosen on validation on its
    /// own, and use them as one (ours: `model::ensemble`; the baselines average their
    /// sigmoid(score)). 1 = the single model of the paper.
    pub members: usize,
    /// Ours: choose a map of the prior estimate, π̂ ↦ min(1, c·π̂^γ), from
    /// `PriorCalibration::grid()` on ours' validation episodes (per model, or per
    /// ensemble), and use it on the targets. Off: the paper's π̂.
    pub calibrate_prior: bool,
    /// Ours: measure the validation accuracy that chooses between options on this many
    /// fresh episodes per (validation task, N_p, π), drawn with a seed no training run
    /// of the split uses, instead of on the episodes the split's training validated
    /// (and kept its best checkpoint) on. None: those episodes.
    pub fresh_validation: Option<usize>,
}

/// The seed of the fresh validation episodes of the split whose seed is `seed`: far
/// from the training seeds 1000·S + m that the docs' members use.
fn fresh_validation_seed(seed: u64) -> u64 {
    seed ^ 0x005E_ED0F_F4E5_4A11
}

/// Where ours' models come from in `run_split_with`.
pub enum OursModels {
    /// Meta-train them (every K candidate, `members` times).
    Train,
    /// Use `members` as the members of one ensemble for every N_p (e.g. the models an
    /// earlier run saved); they must share their preprocessing. With `prior_from`
    /// non-empty, every member reads its ratio at the mean of these models' prior
    /// estimates instead of its own (same preprocessing too).
    Given { members: Vec<Model>, prior_from: Vec<Model> },
}

/// Per-method outcome on one split: accuracy per target episode, timings, choice.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MethodRun {
    pub method: Method,
    pub accuracies: Vec<f64>,
    /// Ours: the estimated prior per target episode.
    pub estimated_priors: Option<Vec<f64>>,
    /// Meta-training (or per-episode fitting on the target supports), seconds.
    pub train_seconds: f64,
    /// Adapting to and scoring all target episodes, seconds (single-task methods fit
    /// during this step: their train time is this one).
    pub test_seconds: f64,
    pub validation_accuracy: f64,
    /// The hyperparameters chosen on validation tasks.
    pub chosen: String,
    /// Meta-trained methods: the iteration of the checkpoint kept (early stopping on
    /// validation), to tell whether the budget was binding. Absent in older results.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub best_iteration: Option<u64>,
    /// With one model per target N_p (`per_support_size`): each one's kept iteration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub best_iteration_by_positives: Option<BTreeMap<usize, u64>>,
    /// Ours with `calibrate_prior`: the map of the prior estimate chosen on validation
    /// for each of its models (one, or one per target N_p).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prior_maps: Option<Vec<PriorCalibration>>,
}

/// One split's target episodes and every method's results on them.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SplitRun {
    pub split: usize,
    pub episodes: Vec<EpisodeInfo>,
    pub methods: Vec<MethodRun>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EpisodeInfo {
    pub task: String,
    pub n_pos: usize,
    pub prior: f64,
    pub test_rows: usize,
}

/// Observer of the runs (progress bars).
pub trait EvalProgress {
    /// A unit of work is about to start; `units` in all.
    fn start(&mut self, _what: &str) {}
    fn done(&mut self) {}
}

impl EvalProgress for () {}

/// Units of work `run_split` reports, for a progress bar's length.
pub fn units_per_split(cfg: &EvalConfig) -> u64 {
    let has = |m: Method| cfg.methods.contains(&m);
    let k = cfg.task_dims.len() as u64;
    let ours = has(Method::Ours) || has(Method::OursNoPrior) || has(Method::OursTruePrior);
    let singles = [Method::Naive, Method::UPu, Method::NnPu, Method::Drpu, Method::Dre];
    // Models per meta-learned method and candidate: per target N_p, per member.
    let models = if cfg.per_support_size { cfg.protocol.positives.len() as u64 } else { 1 }
        * cfg.members.max(1) as u64;
    u64::from(ours) * k * models
        + u64::from(has(Method::OursNoZ))
        + singles.iter().filter(|m| has(**m)).count() as u64
        + (u64::from(has(Method::Mdre)) + u64::from(has(Method::MnnPu)))
            * cfg.step_sizes.len() as u64
            * models
        + u64::from(has(Method::Np)) * k * models
}

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len().max(1) as f64
}

/// Index of the best candidate by mean validation accuracy.
fn best_by_validation(candidates: &[Vec<f64>]) -> usize {
    let means: Vec<f64> = candidates.iter().map(|c| mean(c)).collect();
    (0..means.len()).max_by(|&a, &b| means[a].total_cmp(&means[b])).unwrap_or(0)
}

/// The data one split works on: preprocessed tasks and the index lists.
pub struct SplitData<'a> {
    pub data: &'a TaskSet,
    pub source: Vec<usize>,
    pub validation: Vec<usize>,
    pub target: Vec<usize>,
}

/// One split's results, and the models of ours they came from (to keep for later
/// analysis without meta-training again).
pub struct SplitOutcome {
    pub run: SplitRun,
    /// Ours' chosen model(s): for every N_p (None) or one per target N_p, each with
    /// its ensemble members in order.
    pub ours_models: Vec<(Option<usize>, Vec<Model>)>,
}

/// Run every configured method on one split, meta-training ours.
pub fn run_split(
    split: usize,
    sd: &SplitData<'_>,
    cfg: &EvalConfig,
    device: Device,
    progress: &mut dyn EvalProgress,
) -> Result<SplitOutcome, TrainError> {
    run_split_with(split, sd, cfg, OursModels::Train, device, progress)
}

/// Run every configured method on one split, with ours' models from `ours`. The
/// episodes depend on the split's seed only, so given models are scored on the
/// episodes a run that trained them would have drawn.
pub fn run_split_with(
    split: usize,
    sd: &SplitData<'_>,
    cfg: &EvalConfig,
    ours: OursModels,
    device: Device,
    progress: &mut dyn EvalProgress,
) -> Result<SplitOutcome, TrainError> {
    let seed = cfg.seed.wrapping_add(1000 * split as u64);
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let dim = sd.data.dim();
    let stop = AtomicBool::new(false);

    // Ours first: its fitted preprocessing is used by every method, so all see the
    // same features.
    let wants_ours =
        cfg.methods.iter().any(|m| matches!(m, Method::Ours | Method::OursNoPrior | Method::OursTruePrior));
    let given = matches!(ours, OursModels::Given { .. });
    let mut ours = match ours {
        _ if !wants_ours => Vec::new(),
        OursModels::Train => train_ours(split, sd, cfg, seed, device, progress)?,
        OursModels::Given { members, .. } if members.is_empty() => Vec::new(),
        OursModels::Given { members, prior_from } => vec![given_ours(members, prior_from)],
    };
    let pre = match ours.first() {
        Some(fit) => fit.models[0].preprocess.clone(),
        None => {
            let rows: Vec<f32> = sd.source.iter().flat_map(|&i| sd.data.tasks[i].x.iter().copied()).collect();
            metapu::model::Preprocessor::fit(cfg.train.preprocess, &rows, dim)
        }
    };
    let tasks: Vec<Task> =
        sd.data.tasks.iter().map(|t| Task { x: pre.transformed(&t.x), ..t.clone() }).collect();
    let pick = |idx: &[usize]| -> Vec<(usize, &Task)> { idx.iter().map(|&i| (i, &tasks[i])).collect() };
    let val_episodes = protocol::episodes(&pick(&sd.validation), &cfg.protocol, 1, &mut rng);
    let target_episodes = protocol::episodes(&pick(&sd.target), &cfg.protocol, cfg.target_repeats, &mut rng);
    let val_packed = PackedEpisodes::new(&val_episodes, &tasks, dim, device);
    let target_packed = PackedEpisodes::new(&target_episodes, &tasks, dim, device);

    let mut methods = Vec::new();
    if !ours.is_empty() && !target_episodes.is_empty() {
        let wanted: Vec<Method> =
            OURS_MODES.iter().map(|(m, _)| *m).filter(|m| cfg.methods.contains(m)).collect();
        let validated = (given
            || cfg.calibrate_prior
            || cfg.fresh_validation.is_some()
            || ours.iter().any(|f| f.models.len() > 1))
        .then(|| ours_validation(&mut ours, sd, &tasks, cfg, seed));
        let mut summary = OursSummary::of(&ours);
        if let Some(v) = validated {
            summary.validation_accuracy = v;
        }
        if cfg.calibrate_prior {
            summary.prior_maps = Some(ours.iter().map(|f| f.calibration).collect());
        }
        let models: Vec<OursScoring<'_>> = ours
            .iter()
            .map(|f| OursScoring {
                members: &f.models,
                n_pos: f.n_pos,
                calibration: f.calibration,
                prior_from: &f.prior_from,
            })
            .collect();
        methods.extend(ours_runs(&models, &target_episodes, &tasks, &wanted, &summary));
    }
    if cfg.methods.contains(&Method::OursNoZ) {
        let split_at = (split, seed, device);
        methods.extend(ours_no_z_run(sd, cfg, &tasks, &target_episodes, split_at, &stop, progress)?);
    }

    methods.extend(single_task_runs(cfg, Some(&val_packed), &target_packed, seed, device, split, progress)?);

    // Meta-learned baselines.
    let sources: Vec<SourceTask> = sd
        .source
        .iter()
        .filter_map(|&i| SourceTask::partition(i, &tasks[i], cfg.train.sampler.labeled_fraction, &mut rng))
        .collect();
    if sources.is_empty() {
        return Err(TrainError::NoSourceTasks);
    }
    let sampler = EpisodeSampler {
        sources: &sources,
        tasks: &tasks,
        dim,
        cfg: &cfg.train.sampler,
        kind: Kind::Float,
        device,
    };
    let mcfg = MetaTrainConfig {
        seed,
        max_iterations: cfg.train.max_iterations,
        eval_every: cfg.train.eval_every,
        patience: cfg.train.patience,
        meta_batch: cfg.train.meta_batch,
        weight_average: cfg.train.weight_average,
        lr_schedule: cfg.train.lr_schedule,
    };
    let scoring = MetaScoring {
        tasks: &tasks,
        validation: &pick(&sd.validation),
        val_packed: &val_packed,
        target_episodes: &target_episodes,
        target_packed: &target_packed,
    };
    for method in [Method::Mdre, Method::MnnPu, Method::Np] {
        if cfg.methods.contains(&method) {
            let at = (split, seed, device);
            methods.extend(meta_baseline_run(method, cfg, &sampler, &mcfg, &scoring, at, progress)?);
        }
    }
    methods.sort_by_key(|m| m.method);
    let episodes = target_episodes
        .iter()
        .map(|e: &Episode| EpisodeInfo {
            task: sd.data.tasks[e.task].id.clone(),
            n_pos: e.n_pos,
            prior: e.prior,
            test_rows: e.test.len(),
        })
        .collect();
    let ours_models = ours.into_iter().map(|fit| (fit.n_pos, fit.models)).collect();
    Ok(SplitOutcome { run: SplitRun { split, episodes, methods }, ours_models })
}

/// Ours with a given model on target tasks: estimated, true and no prior.
pub fn evaluate_model(
    model: &Model,
    data: &TaskSet,
    validation: &[usize],
    target: &[usize],
    cfg: &EvalConfig,
) -> Result<SplitRun, TrainError> {
    let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed);
    let dim = data.dim();
    let tasks: Vec<Task> =
        data.tasks.iter().map(|t| Task { x: model.preprocess.transformed(&t.x), ..t.clone() }).collect();
    let pick: Vec<(usize, &Task)> = target.iter().map(|&i| (i, &tasks[i])).collect();
    let episodes = protocol::episodes(&pick, &cfg.protocol, cfg.target_repeats, &mut rng);
    if episodes.is_empty() {
        return Err(TrainError::NoValidationEpisodes);
    }
    let all: Vec<Method> = OURS_MODES.iter().map(|(m, _)| *m).collect();
    let summary = OursSummary {
        train_seconds: 0.0,
        validation_accuracy: model.provenance.best_validation_accuracy,
        chosen: format!("K={}", model.net.config.task_dim),
        best_iteration: Some(model.provenance.best_iteration),
        best_iteration_by_positives: None,
        prior_maps: None,
    };
    let mut methods = ours_runs(
        &[OursScoring {
            members: std::slice::from_ref(model),
            n_pos: None,
            calibration: PriorCalibration::IDENTITY,
            prior_from: &[],
        }],
        &episodes,
        &tasks,
        &all,
        &summary,
    );
    // Single-task baselines asked for, on the same supports and test sets.
    let device = model.net.device();
    let val_pick: Vec<(usize, &Task)> = validation.iter().map(|&i| (i, &tasks[i])).collect();
    let val_episodes = protocol::episodes(&val_pick, &cfg.protocol, 1, &mut rng);
    let val_packed =
        (!val_episodes.is_empty()).then(|| PackedEpisodes::new(&val_episodes, &tasks, dim, device));
    let target_packed = PackedEpisodes::new(&episodes, &tasks, dim, device);
    methods.extend(single_task_runs(cfg, val_packed.as_ref(), &target_packed, cfg.seed, device, 0, &mut ())?);
    methods.sort_by_key(|m| m.method);
    let episodes = episodes
        .iter()
        .map(|e| EpisodeInfo {
            task: data.tasks[e.task].id.clone(),
            n_pos: e.n_pos,
            prior: e.prior,
            test_rows: e.test.len(),
        })
        .collect();
    Ok(SplitRun { split: 0, episodes, methods })
}
