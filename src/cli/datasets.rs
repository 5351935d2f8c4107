use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, Subcommand};

use metapu::data::csv_tasks;
use metapu::data::synthetic::{self, SyntheticConfig};

#[derive(Debug, Subcommand)]
pub enum DatasetsCommand {
    /// The paper's Synthetic benchmark: 140 rotated Gaussian-mixture / half-moon tasks
    /// as a labeled-task CSV, plus a 100/20/20 source/validation/target split file.
    Synthetic(SyntheticArgs),
}

#[derive(Debug, Args)]
pub struct SyntheticArgs {
    /// Output CSV.
    #[arg(long)]
    out: PathBuf,
    /// Split file to write [default: <out without .csv>.split.json].
    #[arg(long)]
    split: Option<PathBuf>,
    #[arg(long, default_value_t = 0)]
    seed: u64,
}

pub fn split_path_for(out: &std::path::Path) -> PathBuf {
    out.with_extension("split.json")
}

pub fn run(cmd: DatasetsCommand) -> anyhow::Result<()> {
    match cmd {
        DatasetsCommand::Synthetic(a) => {
            let (set, split) = synthetic::generate(&SyntheticConfig::default(), a.seed);
            let mut file = std::io::BufWriter::new(
                std::fs::File::create(&a.out).with_context(|| format!("creating {}", a.out.display()))?,
            );
            csv_tasks::write(&set, &mut file).with_context(|| format!("writing {}", a.out.display()))?;
            let split_path = a.split.unwrap_or_else(|| split_path_for(&a.out));
            split.save(&split_path)?;
            println!(
                "wrote {} ({} tasks, {} rows) and {} ({} source / {} validation / {} target)",
                a.out.display(),
                set.tasks.len(),
                set.rows(),
                split_path.display(),
                split.source.len(),
                split.validation.len(),
                split.target.len()
            );
            Ok(())
        }
    }
}
