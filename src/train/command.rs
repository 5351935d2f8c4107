//! The `train` command's work, shared by `metapu train` and the lab's `metapu-lab
//! train`: load the tasks, resolve the split, meta-train with a progress bar (Ctrl-C
//! stops and keeps the best model so far) and write the model. The product's command
//! takes [`TrainArgs`] alone; the lab adds the meta-training knobs its experiments vary
//! to the configuration before [`run`].

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};

use crate::data::split::Split;
use crate::data::{DataError, TaskSet};
use crate::model::file::{self, ModelFileError};
use crate::model::{default_device, PreprocessKind};
use crate::train::{self as training, Checkpoint, Progress, TrainConfig, TrainError, TrainOutcome};

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
    /// Maximum meta-training iterations.
    #[arg(long, default_value_t = 30_000)]
    pub iterations: u64,
    /// Validate every N iterations.
    #[arg(long, default_value_t = 500)]
    pub eval_every: u64,
    /// Stop after this many validations without improvement.
    #[arg(long, default_value_t = 10)]
    pub patience: u64,
    /// Task-vector size K.
    #[arg(long, default_value_t = 32)]
    pub k: i64,
    /// Source tasks per meta-training step.
    #[arg(long, default_value_t = 1)]
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
    /// l2 (the paper's) or none.
    #[arg(long, value_enum, default_value_t = PreprocessKind::LogStandard, hide_possible_values = true)]
    pub preprocess: PreprocessKind,
    /// Torch intra-op threads (default: torch's choice).
    #[arg(long)]
    pub threads: Option<i32>,
}

impl TrainArgs {
    /// The meta-training configuration these options give.
    pub fn config(&self) -> TrainConfig {
        let mut cfg = TrainConfig {
            seed: self.seed,
            max_iterations: self.iterations,
            eval_every: self.eval_every.max(1),
            patience: self.patience,
            meta_batch: self.meta_batch.max(1),
            learning_rate: self.learning_rate,
            task_dim: self.k,
            validation_repeats: self.validation_repeats.max(1),
            preprocess: self.preprocess,
            ..TrainConfig::default()
        };
        cfg.sampler.query_size = self.query_size.max(2);
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
}

impl Trained {
    pub fn summary(&self) -> String {
        let (o, p) = (&self.outcome, &self.outcome.model.provenance);
        let interrupted = if o.interrupted { "interrupted: wrote the best model so far\n" } else { "" };
        format!(
            "{interrupted}trained {} iterations in {:.1}s ({:.2} ms/iteration); best validation accuracy {:.4} at iteration {}; wrote {}",
            o.iterations,
            o.seconds,
            1e3 * o.seconds / o.iterations.max(1) as f64,
            p.best_validation_accuracy,
            p.best_iteration,
            self.out.display()
        )
    }
}

/// Progress bar showing the running loss and the latest and best validation accuracy.
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
        self.bar.suspend(|| {
            tracing::info!(
                iteration = c.iteration,
                loss = format!("{:.4}", c.train_loss),
                validation_accuracy = format!("{:.4}", c.validation_accuracy),
                prior_rmse = format!("{:.4}", c.prior_rmse),
                best = format!("{best:.4}"),
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
    tracing::info!(
        tasks = data.tasks.len(),
        rows = data.rows(),
        features = data.dim(),
        source = source.len(),
        validation = validation.len(),
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
    Ok(Trained { outcome, out: a.out.clone() })
}
