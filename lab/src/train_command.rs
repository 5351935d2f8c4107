//! `metapu-lab train`: `metapu train` with the meta-training knobs the experiments vary.

use clap::Args;
use metapu::train::command::{self, TrainArgs};

use crate::model_options::ModelOptions;

#[derive(Debug, Args)]
pub struct LabTrainArgs {
    #[command(flatten)]
    train: TrainArgs,
    #[command(flatten)]
    model_options: ModelOptions,
}

pub fn run(a: LabTrainArgs) -> anyhow::Result<()> {
    let mut cfg = a.train.config();
    a.model_options.apply(&mut cfg)?;
    println!("{}", command::run(&a.train, &cfg)?.summary());
    Ok(())
}
