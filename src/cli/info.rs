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
    println!("model        {}", a.model.display());
    println!("compute      {compute}");
    println!(
        "features     {} ({} … {})",
        c.input_dim,
        model.feature_names.first().map_or("", String::as_str),
        model.feature_names.last().map_or("", String::as_str)
    );
    println!(
        "architecture K={} M={} hidden={} tau={} task vectors={}",
        c.task_dim, c.embed_dim, c.hidden, c.tau, c.use_task_vectors
    );
    println!("lambda       {:.6}", model.net.lambda().double_value(&[]));
    println!("preprocess   {:?}", model.preprocess.kind);
    let estimate = clap::ValueEnum::to_possible_value(&c.prior_estimate).map(|v| v.get_name().to_owned());
    println!(
        "prior        {}{}",
        estimate.unwrap_or_default(),
        if c.prior_head { " + learned correction" } else { "" }
    );
    println!("provenance   {}", serde_json::to_string_pretty(&model.provenance)?);
    Ok(())
}
