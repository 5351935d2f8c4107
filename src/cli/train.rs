use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use anyhow::{bail, Context};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};

use metapu::data::split::Split;
use metapu::data::TaskSet;
use metapu::model::{default_device, file};
use metapu::train::{self, Checkpoint, Progress, TrainConfig};

use super::model_options::ModelOptions;

#[derive(Debug, Args)]
pub struct TrainArgs {
    /// Labeled-task CSV, or an N-BaIoT directory (UCI or Kaggle layout).
    #[arg(long)]
    data: PathBuf,
    /// Split file naming source and validation tasks.
    #[arg(long, conflicts_with_all = ["source", "validation"])]
    split: Option<PathBuf>,
    /// Source task ids (comma-separated), instead of --split.
    #[arg(long, value_delimiter = ',', requires = "validation")]
    source: Vec<String>,
    /// Validation task ids (comma-separated), instead of --split.
    #[arg(long, value_delimiter = ',')]
    validation: Vec<String>,
    /// Where to write the model (.safetensors).
    #[arg(long)]
    out: PathBuf,
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Maximum meta-training iterations.
    #[arg(long, default_value_t = 30_000)]
    iterations: u64,
    /// Validate every N iterations.
    #[arg(long, default_value_t = 500)]
    eval_every: u64,
    /// Stop after this many validations without improvement.
    #[arg(long, default_value_t = 10)]
    patience: u64,
    /// Task-vector size K.
    #[arg(long, default_value_t = 32)]
    k: i64,
    /// Source tasks per meta-training step.
    #[arg(long, default_value_t = 1)]
    meta_batch: usize,
    /// Query rows per episode.
    #[arg(long, default_value_t = 100)]
    query_size: usize,
    #[arg(long, default_value_t = 1e-3)]
    learning_rate: f64,
    /// Validation episodes per (task, N_p, π).
    #[arg(long, default_value_t = 1)]
    validation_repeats: usize,
    /// Skip malformed data rows (counted) instead of stopping.
    #[arg(long)]
    skip_bad_rows: bool,
    #[command(flatten)]
    model_options: ModelOptions,
    /// Torch intra-op threads (default: torch's choice).
    #[arg(long)]
    threads: Option<i32>,
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

fn resolve_split(a: &TrainArgs, data: &TaskSet) -> anyhow::Result<(Vec<usize>, Vec<usize>)> {
    let split = match &a.split {
        Some(p) => Split::load(p)?,
        None if !a.source.is_empty() => {
            Split { source: a.source.clone(), validation: a.validation.clone(), target: vec![] }
        }
        None => bail!("give --split FILE, or --source and --validation task lists"),
    };
    Ok((Split::resolve(&split.source, data)?, Split::resolve(&split.validation, data)?))
}

pub fn run(a: TrainArgs) -> anyhow::Result<()> {
    if let Some(n) = a.threads {
        tch::set_num_threads(n);
    }
    let data =
        TaskSet::load(&a.data, a.skip_bad_rows).with_context(|| format!("loading {}", a.data.display()))?;
    if data.skipped_rows > 0 {
        tracing::warn!(skipped = data.skipped_rows, "bad rows skipped");
    }
    let (source, validation) = resolve_split(&a, &data)?;
    tracing::info!(
        tasks = data.tasks.len(),
        rows = data.rows(),
        features = data.dim(),
        source = source.len(),
        validation = validation.len(),
        "data loaded"
    );

    let mut cfg = TrainConfig {
        seed: a.seed,
        max_iterations: a.iterations,
        eval_every: a.eval_every.max(1),
        patience: a.patience,
        meta_batch: a.meta_batch.max(1),
        learning_rate: a.learning_rate,
        task_dim: a.k,
        validation_repeats: a.validation_repeats.max(1),
        ..TrainConfig::default()
    };
    a.model_options.apply(&mut cfg)?;
    cfg.sampler.query_size = a.query_size.max(2);

    let stop = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&stop);
    ctrlc::set_handler(move || flag.store(true, Ordering::Relaxed))
        .context("installing the Ctrl-C handler")?;

    let bar = ProgressBar::new(cfg.max_iterations);
    bar.set_style(
        ProgressStyle::with_template(
            "{elapsed_precise} [{bar:30}] {pos}/{len} it ({per_sec}, ETA {eta}) {msg}",
        )
        .expect("valid template")
        .progress_chars("=> "),
    );
    let mut progress = Bar { bar, validation: String::new() };
    let outcome = train::train(&data, &source, &validation, &cfg, default_device(), &stop, &mut progress)?;
    progress.bar.finish_and_clear();

    file::save(&outcome.model, &a.out)?;
    let p = &outcome.model.provenance;
    if outcome.interrupted {
        println!("interrupted: wrote the best model so far");
    }
    println!(
        "trained {} iterations in {:.1}s ({:.2} ms/iteration); best validation accuracy {:.4} at iteration {}; wrote {}",
        outcome.iterations,
        outcome.seconds,
        1e3 * outcome.seconds / outcome.iterations.max(1) as f64,
        p.best_validation_accuracy,
        p.best_iteration,
        a.out.display()
    );
    Ok(())
}
