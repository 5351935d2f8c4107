//! `metapu train`: meta-train a model on labeled source tasks with the product's recipe
//! options (the work is the library's `train::command`; the lab's `metapu-lab train`
//! adds the knobs its experiments vary).

pub use metapu::train::command::TrainArgs;

pub fn run(a: TrainArgs) -> anyhow::Result<()> {
    let trained = metapu::train::command::run(&a, &a.config())?;
    println!("{}", trained.summary());
    Ok(())
}
