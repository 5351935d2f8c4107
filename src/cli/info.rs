use std::io::Write;
use std::path::PathBuf;

use clap::Args;

use metapu::model::{compute_report, file};

#[derive(Debug, Args)]
pub struct InfoArgs {
    /// Model file (.safetensors).
    model: PathBuf,
}

pub fn run(a: InfoArgs) -> anyhow::Result<()> {
    let (device, compute, _) = compute_report();
    let model = file::load(&a.model, device)?;
    let c = &model.net.config;
    // Written, not println!'d: `metapu info M | head -3` closes the pipe early, which
    // is the reader's choice, not an error (main treats a broken pipe as done).
    let mut out = std::io::stdout().lock();
    writeln!(out, "model        {}", a.model.display())?;
    writeln!(out, "compute      {compute}")?;
    writeln!(
        out,
        "features     {} ({} … {})",
        c.input_dim,
        model.feature_names.first().map_or("", String::as_str),
        model.feature_names.last().map_or("", String::as_str)
    )?;
    writeln!(
        out,
        "architecture K={} M={} hidden={} tau={} task vectors={}",
        c.task_dim, c.embed_dim, c.hidden, c.tau, c.use_task_vectors
    )?;
    writeln!(out, "lambda       {:.6}", model.net.lambda().double_value(&[]))?;
    writeln!(out, "preprocess   {:?}", model.preprocess.kind)?;
    let estimate = clap::ValueEnum::to_possible_value(&c.prior_estimate).map(|v| v.get_name().to_owned());
    writeln!(
        out,
        "prior        {}{}",
        estimate.unwrap_or_default(),
        if c.prior_head { " + learned correction" } else { "" }
    )?;
    writeln!(out, "provenance   {}", serde_json::to_string_pretty(&model.provenance)?)?;
    Ok(())
}
