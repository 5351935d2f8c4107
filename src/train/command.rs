//! The `train` command's work, shared by `metapu train` and the lab's `metapu-lab
//! train`: load the tasks, resolve the split, meta-train with a progress bar (Ctrl-C
//! stops and keeps the best model so far) and write the model. The product's command
//! takes [`TrainArgs`] alone; the lab adds the meta-training knobs its experiments vary
//! to the configuration before [`run`].

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use indicatif::{HumanDuration, ProgressBar, ProgressStyle};

use crate::data::split::Split;
use crate::data::{DataError, TaskSet};
use crate::model::file::{self, ModelFileError};
use crate::model::{default_device, PreprocessKind};
use crate::train::baseline::{self, BaselineComparison};
use crate::train::{
    self as training, Checkpoint, LrSchedule, Progress, TrainConfig, TrainError, TrainOutcome,
};

#[derive(Debug, Args)]
pub struct TrainArgs {
    /// Labeled-task CSV, or an N-BaIoT directory (UCI or Kaggle layout).
    #[arg(long)]
    pub data: PathBuf,
    /// Split file naming source and validation tasks.
    #[arg(long, conflicts_with_all = ["source", "validation"])]
    pub split: Option<PathBuf>,
    /// Source task ids (comma-separated), instead of --split.
    #[arg(long, value_delimiter = ',', requires = "validation")]
    pub source: Vec<String>,
    /// Validation task ids (comma-separated), instead of --split.
    #[arg(long, value_delimiter = ',')]
    pub validation: Vec<String>,
    /// Where to write the model (.safetensors).
    #[arg(long)]
    pub out: PathBuf,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Meta-training iterations: the learning rate decays to zero over them (cosine)
    /// and the best validated checkpoint is kept.
    #[arg(long, default_value_t = 60_000)]
    pub iterations: u64,
    /// Validate every N iterations.
    #[arg(long, default_value_t = 500)]
    pub eval_every: u64,
    /// Stop after this many validations without improvement (default: run the whole
    /// budget).
    #[arg(long)]
    pub patience: Option<u64>,
    /// Task-vector size K.
    #[arg(long, default_value_t = 32)]
    pub k: i64,
    /// Source tasks per meta-training step.
    #[arg(long, default_value_t = 8)]
    pub meta_batch: usize,
    /// Query rows per episode.
    #[arg(long, default_value_t = 100)]
    pub query_size: usize,
    #[arg(long, default_value_t = 1e-3)]
    pub learning_rate: f64,
    /// Validation episodes per (task, N_p, π).
    #[arg(long, default_value_t = 1)]
    pub validation_repeats: usize,
    /// Skip malformed data rows (counted) instead of stopping.
    #[arg(long)]
    pub skip_bad_rows: bool,
    /// Feature preprocessing: log-standard (signed log, then standardisation), standard,
    /// l2 (the paper's) or none. Default: log-standard when a source feature reaches
    /// |x| > 1000 (counts, byte totals, timestamps), none otherwise.
    #[arg(long, value_enum, hide_possible_values = true)]
    pub preprocess: Option<PreprocessKind>,
    /// Torch intra-op threads (default: torch's choice).
    #[arg(long)]
    pub threads: Option<i32>,
}

impl TrainArgs {
    /// The meta-training configuration these options give: the recipe chosen on the
    /// Synthetic benchmark's validation tasks (docs/experiments/2026-11-25-synthetic-recipe.md;
    /// docs/experiments/2026-11-28-train-defaults.md): a cosine rate over the whole
    /// budget, the weights' moving average validated and kept, episodes drawn at the
    /// evaluation protocol's priors, PyTorch's initial weight bounds. Without
    /// `--preprocess` the kind is [`PreprocessKind::LogStandard`] here and chosen from
    /// the data by [`run`].
    pub fn config(&self) -> TrainConfig {
        let eval_every = self.eval_every.max(1);
        let mut cfg = TrainConfig {
            seed: self.seed,
            max_iterations: self.iterations,
            eval_every,
            patience: self.patience.unwrap_or(self.iterations.div_ceil(eval_every)),
            meta_batch: self.meta_batch.max(1),
            learning_rate: self.learning_rate,
            lr_schedule: LrSchedule::Cosine,
            task_dim: self.k,
            validation_repeats: self.validation_repeats.max(1),
            preprocess: self.preprocess.unwrap_or(PreprocessKind::LogStandard),
            weight_average: 0.999,
            init_scale: 0.408,
            ..TrainConfig::default()
        };
        cfg.sampler.query_size = self.query_size.max(2);
        cfg.sampler.episode_priors = cfg.protocol.priors.clone();
        cfg
    }
}

/// Why the command failed.
#[derive(Debug, thiserror::Error)]
pub enum TrainCommandError {
    #[error("loading {path}: {source}")]
    Data { path: PathBuf, source: DataError },
    #[error("{0}")]
    Split(DataError),
    #[error("give --split FILE, or --source and --validation task lists")]
    NoSplit,
    #[error("installing the Ctrl-C handler: {0}")]
    Interrupt(#[from] ctrlc::Error),
    #[error(transparent)]
    Train(#[from] TrainError),
    #[error(transparent)]
    Write(#[from] ModelFileError),
}

/// What a run did, as one line for the user.
pub struct Trained {
    pub outcome: TrainOutcome,
    pub out: PathBuf,
    /// The model against nnPU on the run's validation episodes.
    pub baseline: BaselineComparison,
}

impl Trained {
    pub fn summary(&self) -> String {
        let (o, p) = (&self.outcome, &self.outcome.model.provenance);
        let interrupted = if o.interrupted { "interrupted: wrote the best model so far\n" } else { "" };
        format!(
            "{interrupted}trained {} iterations in {:.1}s ({:.2} ms/iteration); best validation accuracy {:.4} at iteration {}; wrote {}\n{}",
            o.iterations,
            o.seconds,
            1e3 * o.seconds / o.iterations.max(1) as f64,
            p.best_validation_accuracy,
            p.best_iteration,
            self.out.display(),
            self.baseline.summary()
        )
    }
}

/// Progress on a terminal as a bar (running loss, latest and best validation
/// accuracy); at every validation, also a log line with the time left, which is all a
/// journal or a pipe sees (the bar draws only on a terminal).
struct Bar {
    bar: ProgressBar,
    validation: String,
}

impl Progress for Bar {
    fn step(&mut self, iteration: u64, loss: f64) {
        self.bar.set_position(iteration);
        if iteration % 50 == 0 {
            self.bar.set_message(format!("loss {loss:.4}{}", self.validation));
        }
    }

    fn checkpoint(&mut self, c: &Checkpoint, best: f64) {
        self.validation = format!(" | validation {:.4} (best {best:.4})", c.validation_accuracy);
        let total = self.bar.length().unwrap_or(c.iteration);
        let left = c.seconds / c.iteration.max(1) as f64 * total.saturating_sub(c.iteration) as f64;
        self.bar.suspend(|| {
            tracing::info!(
                iteration = format!("{}/{total}", c.iteration),
                loss = format!("{:.4}", c.train_loss),
                validation_accuracy = format!("{:.4}", c.validation_accuracy),
                prior_rmse = format!("{:.4}", c.prior_rmse),
                best = format!("{best:.4}"),
                left = %HumanDuration(Duration::from_secs_f64(left)),
                "validation"
            )
        });
    }
}

fn resolve_split(a: &TrainArgs, data: &TaskSet) -> Result<(Vec<usize>, Vec<usize>), TrainCommandError> {
    let split = match &a.split {
        Some(p) => Split::load(p).map_err(TrainCommandError::Split)?,
        None if !a.source.is_empty() => {
            Split { source: a.source.clone(), validation: a.validation.clone(), target: vec![] }
        }
        None => return Err(TrainCommandError::NoSplit),
    };
    let resolve = |ids: &[String]| Split::resolve(ids, data).map_err(TrainCommandError::Split);
    Ok((resolve(&split.source)?, resolve(&split.validation)?))
}

/// Meta-train with `cfg` on the tasks and split `a` names, and write the model.
pub fn run(a: &TrainArgs, cfg: &TrainConfig) -> Result<Trained, TrainCommandError> {
    if let Some(n) = a.threads {
        tch::set_num_threads(n);
    }
    let data = TaskSet::load(&a.data, a.skip_bad_rows)
        .map_err(|source| TrainCommandError::Data { path: a.data.clone(), source })?;
    if data.skipped_rows > 0 {
        tracing::warn!(skipped = data.skipped_rows, "bad rows skipped");
    }
    let (source, validation) = resolve_split(a, &data)?;
    let mut cfg = cfg.clone();
    if a.preprocess.is_none() {
        cfg.preprocess = PreprocessKind::for_sources(&data, &source);
    }
    let cfg = &cfg;
    tracing::info!(
        tasks = data.tasks.len(),
        rows = data.rows(),
        features = data.dim(),
        source = source.len(),
        validation = validation.len(),
        preprocess = ?cfg.preprocess,
        "data loaded"
    );
    let stop = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&stop);
    ctrlc::set_handler(move || flag.store(true, Ordering::Relaxed))?;

    let bar = ProgressBar::new(cfg.max_iterations);
    bar.set_style(
        ProgressStyle::with_template(
            "{elapsed_precise} [{bar:30}] {pos}/{len} it ({per_sec}, ETA {eta}) {msg}",
        )
        .expect("valid template")
        .progress_chars("=> "),
    );
    let mut progress = Bar { bar, validation: String::new() };
    let outcome = training::train(&data, &source, &validation, cfg, default_device(), &stop, &mut progress)?;
    progress.bar.finish_and_clear();
    file::save(&outcome.model, &a.out)?;
    tracing::info!("fitting nnPU on the validation episodes, for comparison");
    let baseline =
        baseline::compare_with_nnpu(&outcome.model, &data, &source, &validation, cfg, default_device())?;
    Ok(Trained { outcome, out: a.out.clone(), baseline })
}
