use std::path::PathBuf;

use anyhow::{bail, Context};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use metapu::data::protocol::ProtocolConfig;
use metapu::data::split::Split;
use metapu::data::synthetic::{generate, SyntheticConfig};
use metapu::data::TaskSet;
use metapu::model::{default_device, file, PreprocessKind};
use metapu::train::TrainConfig;
use metapu_lab::eval::{self, EvalConfig, EvalProgress, Method, OursModels, SplitData, SplitRun};

use crate::model_options::ModelOptions;

#[derive(Debug, Args)]
pub struct EvalArgs {
    /// "synthetic" (the paper's Synthetic tasks, regenerated per split), a labeled-task
    /// CSV or an N-BaIoT directory.
    #[arg(long, default_value = "synthetic")]
    data: String,
    /// Repeat the experiment over this many random source/validation/target splits,
    /// meta-training anew each time.
    #[arg(long, default_value_t = 5)]
    splits: usize,
    /// Index of the first split to run (its data and episodes are those of the same
    /// split in a full run), so that one experiment's splits can run in several
    /// processes and be joined with --merge.
    #[arg(long, default_value_t = 0, conflicts_with = "split")]
    first_split: usize,
    /// Use this split file (one split) instead of random splits.
    #[arg(long)]
    split: Option<PathBuf>,
    /// Evaluate this model file (ours and its prior ablations, plus any single-task
    /// baselines named in --methods, on the same supports) on --split's targets.
    #[arg(long, requires = "split")]
    model: Option<PathBuf>,
    /// Combine the results.json files of earlier runs into one table instead of running
    /// anything (they must share data, seed and protocol: checked on the episodes); a
    /// method found in several files is taken from the last.
    #[arg(long, num_args = 1.., conflicts_with_all = ["model", "split"])]
    merge: Vec<PathBuf>,
    /// Methods, comma-separated: ours, ours-no-z, ours-no-prior, ours-true-prior, naive,
    /// upu, nnpu, dre, drpu, mdre, mnnpu, np (default: all).
    #[arg(long, value_delimiter = ',')]
    methods: Vec<String>,
    /// Maximum meta-training iterations (ours and the meta-learned baselines).
    #[arg(long, default_value_t = 10_000)]
    iterations: u64,
    #[arg(long, default_value_t = 500)]
    eval_every: u64,
    #[arg(long, default_value_t = 10)]
    patience: u64,
    /// Source tasks per meta-training step.
    #[arg(long, default_value_t = 1)]
    meta_batch: usize,
    /// Candidates for the task-vector size K (ours, NP), chosen on validation tasks.
    #[arg(long, value_delimiter = ',', default_value = "16,32,64,128")]
    k: Vec<i64>,
    /// Candidates for the MAML inner step size (MDRE, MnnPU).
    #[arg(long, value_delimiter = ',', default_value = "0.01,0.1,1")]
    steps: Vec<f64>,
    /// Test rows per target episode.
    #[arg(long, default_value_t = 200)]
    test_size: usize,
    /// Target episodes per (task, N_p, π).
    #[arg(long, default_value_t = 1)]
    target_repeats: usize,
    /// Ours and the meta-learned baselines: meta-train one model per target N_p, each
    /// with that N_p in every training support and chosen on that N_p's validation
    /// episodes (the paper's Algorithm 1 takes one N_p), instead of one model trained
    /// on N_p ~ U{1..5}.
    #[arg(long)]
    per_support_size: bool,
    /// Ours and the meta-learned baselines: meta-train this many models per split
    /// (training seeds one apart), each chosen on validation, and use them as one
    /// ensemble: ours averages their posteriors min(1, π̂·r), the baselines their
    /// sigmoid(score). Ours' ensemble is validated on the episodes a single model of the
    /// split is validated on in training.
    #[arg(long, default_value_t = 1, conflicts_with = "model")]
    members: usize,
    /// Ours: instead of meta-training, use split S's models saved in these directories
    /// by --save-models (`split-S.safetensors` and any `split-S-member-M.safetensors`,
    /// directory after directory) as the members of its ensemble (one file: that model
    /// alone), scored on the episodes a training run would draw.
    #[arg(long, num_args = 1.., conflicts_with_all = ["members", "per_support_size", "model", "split"])]
    members_from: Vec<PathBuf>,
    /// Ours with --members-from: read every member's ratio at the mean prior estimate
    /// of split S's models in these directories (loaded as --members-from loads),
    /// instead of at each member's own estimate.
    #[arg(long, num_args = 1.., requires = "members_from")]
    prior_from: Vec<PathBuf>,
    /// Ours: choose a map of the prior estimate, π̂ ↦ min(1, c·π̂^γ) with c ∈ {0.7,
    /// 0.85, 1, 1.15} and γ ∈ {0.8, 1, 1.2, 1.5}, on ours' validation episodes (the
    /// identity unless one is strictly better there), and use it on the targets.
    #[arg(long)]
    calibrate_prior: bool,
    /// Ours: validate (the figure options are chosen by) on this many fresh episodes
    /// per (validation task, N_p, π), drawn with a seed of their own, instead of on the
    /// episodes training kept its best checkpoint on, which favour the model trained
    /// with the split's seed.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    fresh_validation: Option<u64>,
    /// Feature preprocessing: log-standard (signed log, then standardisation), standard,
    /// l2 (the paper's) or none.
    #[arg(long, value_enum, default_value_t = PreprocessKind::LogStandard, hide_possible_values = true)]
    preprocess: PreprocessKind,
    #[command(flatten)]
    model_options: ModelOptions,
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Also write ours' chosen model of each split here, as `split-S.safetensors` (with
    /// --per-support-size `split-S-positives-N.safetensors`; ensemble members after the
    /// first get `-member-M` before the extension); the data of split S is
    /// `metapu datasets synthetic --seed S`'s (with --seed 0).
    #[arg(long)]
    save_models: Option<PathBuf>,
    /// Where results.json, results.md and the SVG figures go.
    #[arg(long, default_value = "runs/eval")]
    out: PathBuf,
    /// Torch intra-op threads (default: torch's choice).
    #[arg(long)]
    threads: Option<i32>,
}

struct Bar(ProgressBar);

impl EvalProgress for Bar {
    fn start(&mut self, what: &str) {
        self.0.set_message(what.to_string());
    }
    fn done(&mut self) {
        self.0.inc(1);
    }
}

/// Split task ids at random in the proportions of the paper's Synthetic (100/20/20).
fn random_split(data: &TaskSet, seed: u64) -> Split {
    let mut ids: Vec<String> = data.tasks.iter().map(|t| t.id.clone()).collect();
    ids.shuffle(&mut ChaCha8Rng::seed_from_u64(seed));
    let n = ids.len();
    let (val, target) = ((n / 7).max(1), (n / 7).max(1));
    let source = n.saturating_sub(val + target);
    Split {
        source: ids[..source].to_vec(),
        validation: ids[source..source + val].to_vec(),
        target: ids[source + val..].to_vec(),
    }
}

pub fn run(a: EvalArgs) -> anyhow::Result<()> {
    if let Some(t) = a.threads {
        tch::set_num_threads(t);
    }
    let methods: Vec<Method> = if a.methods.is_empty() && a.model.is_some() {
        // A given model: ours and its prior ablations; baselines only when named.
        vec![Method::Ours, Method::OursNoPrior, Method::OursTruePrior]
    } else if a.methods.is_empty() {
        Method::ALL.to_vec()
    } else {
        a.methods
            .iter()
            .map(|m| Method::parse(m).with_context(|| format!("unknown method '{m}'")))
            .collect::<anyhow::Result<_>>()?
    };
    let protocol = ProtocolConfig { test_size: a.test_size, ..ProtocolConfig::default() };
    let mut train = TrainConfig {
        seed: a.seed,
        max_iterations: a.iterations,
        eval_every: a.eval_every,
        patience: a.patience,
        meta_batch: a.meta_batch,
        protocol: protocol.clone(),
        preprocess: a.preprocess,
        ..TrainConfig::default()
    };
    a.model_options.apply(&mut train)?;
    let cfg = EvalConfig {
        seed: a.seed,
        methods,
        train,
        task_dims: a.k.clone(),
        step_sizes: a.steps.clone(),
        protocol,
        target_repeats: a.target_repeats,
        per_support_size: a.per_support_size,
        members: a.members.max(1),
        calibrate_prior: a.calibrate_prior,
        fresh_validation: a.fresh_validation.map(|r| r as usize),
    };
    let device = default_device();
    std::fs::create_dir_all(&a.out).with_context(|| format!("creating {}", a.out.display()))?;
    let synthetic = a.data == "synthetic";
    let loaded = if synthetic { None } else { Some(TaskSet::load(std::path::Path::new(&a.data), false)?) };
    let dataset = if synthetic { "Synthetic".to_string() } else { a.data.clone() };

    if !a.merge.is_empty() {
        return merge_results(&a);
    }
    if let Some(model_path) = &a.model {
        return evaluate_model(&a, model_path, loaded.as_ref(), &cfg, &dataset);
    }
    let splits = if a.split.is_some() { 1 } else { a.splits.max(1) };
    let bar = ProgressBar::new(splits as u64 * eval::units_per_split(&cfg));
    bar.set_style(
        ProgressStyle::with_template("{bar:30} {pos}/{len} runs, {elapsed} elapsed, ~{eta} left: {msg}")
            .expect("valid template"),
    );
    let mut progress = Bar(bar);
    let started = std::time::Instant::now();
    let mut runs: Vec<SplitRun> = Vec::new();
    for s in a.first_split..a.first_split + splits {
        let (data, split) = match (&loaded, &a.split) {
            (None, _) => generate(&SyntheticConfig::default(), a.seed + s as u64),
            (Some(d), Some(path)) => (d.clone(), Split::load(path)?),
            (Some(d), None) => (d.clone(), random_split(d, a.seed + s as u64)),
        };
        let sd = SplitData {
            data: &data,
            source: Split::resolve(&split.source, &data)?,
            validation: Split::resolve(&split.validation, &data)?,
            target: Split::resolve(&split.target, &data)?,
        };
        if sd.target.is_empty() {
            bail!("split {s} has no target tasks");
        }
        let ours = if a.members_from.is_empty() {
            OursModels::Train
        } else {
            let members = load_members(&a.members_from, s, &data, device)?;
            let prior_from = load_members(&a.prior_from, s, &data, device)?;
            if let (Some(p), Some(m)) = (prior_from.first(), members.first()) {
                if p.preprocess != m.preprocess {
                    bail!("--prior-from models preprocess features unlike the --members-from ones");
                }
            }
            OursModels::Given { members, prior_from }
        };
        let outcome = eval::run_split_with(s, &sd, &cfg, ours, device, &mut progress)?;
        if let Some(dir) = &a.save_models {
            save_models(dir, s, &outcome.ours_models)?;
        }
        runs.push(outcome.run);
        write_outputs(&a, &dataset, &runs, started.elapsed().as_secs_f64())?;
    }
    progress.0.finish_and_clear();
    let summary = eval::report::summarise(&dataset, &runs);
    print!("{}", eval::report::markdown(&summary));
    println!("\nwritten to {} ({:.0} s)", a.out.display(), started.elapsed().as_secs_f64());
    Ok(())
}

fn save_models(
    dir: &std::path::Path,
    split: usize,
    models: &[(Option<usize>, Vec<metapu::model::Model>)],
) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    for (n_pos, members) in models {
        for (m, model) in members.iter().enumerate() {
            let positives = n_pos.map(|n| format!("-positives-{n}")).unwrap_or_default();
            let member = if m == 0 { String::new() } else { format!("-member-{m}") };
            let name = format!("split-{split}{positives}{member}.safetensors");
            file::save(model, &dir.join(&name)).with_context(|| format!("writing {name}"))?;
        }
    }
    Ok(())
}

/// `--members-from DIRS`: split `split`'s models from each directory (the first member,
/// then members 1, 2, … while their files exist), checked to fit the data and to share
/// one preprocessing (all members see the same features).
fn load_members(
    dirs: &[PathBuf],
    split: usize,
    data: &TaskSet,
    device: tch::Device,
) -> anyhow::Result<Vec<metapu::model::Model>> {
    let mut members: Vec<metapu::model::Model> = Vec::new();
    for dir in dirs {
        let first = dir.join(format!("split-{split}.safetensors"));
        let others = (1..).map(|m| dir.join(format!("split-{split}-member-{m}.safetensors")));
        for path in std::iter::once(first).chain(others.take_while(|p| p.exists())) {
            let model = file::load(&path, device).with_context(|| format!("loading {}", path.display()))?;
            model.check_feature_count(data.dim()).with_context(|| format!("{}", path.display()))?;
            if members.first().is_some_and(|m| m.preprocess != model.preprocess) {
                bail!("{} preprocesses features unlike the first member", path.display());
            }
            members.push(model);
        }
    }
    Ok(members)
}

fn write_outputs(a: &EvalArgs, dataset: &str, runs: &[SplitRun], seconds: f64) -> anyhow::Result<()> {
    let summary = eval::report::summarise(dataset, runs);
    let json = serde_json::json!({ "summary": summary, "runs": runs, "wall_seconds": seconds });
    std::fs::write(a.out.join("results.json"), serde_json::to_string_pretty(&json)? + "\n")?;
    std::fs::write(a.out.join("results.md"), eval::report::markdown(&summary))?;
    for (name, svg) in eval::plot::figures(&summary) {
        std::fs::write(a.out.join(name), svg)?;
    }
    Ok(())
}

/// `--merge FILES`: one comparison from several runs on the same episodes.
fn merge_results(a: &EvalArgs) -> anyhow::Result<()> {
    #[derive(serde::Deserialize)]
    struct Saved {
        summary: eval::report::Summary,
        runs: Vec<SplitRun>,
        wall_seconds: f64,
    }
    let mut saved = Vec::new();
    for path in &a.merge {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let s: Saved = serde_json::from_str(&text)
            .with_context(|| format!("{} is not an eval results.json", path.display()))?;
        saved.push(s);
    }
    let dataset = saved[0].summary.dataset.clone();
    let seconds = saved.iter().map(|s| s.wall_seconds).sum();
    let runs = eval::merge::merge_runs(saved.into_iter().map(|s| s.runs).collect())?;
    write_outputs(a, &dataset, &runs, seconds)?;
    print!("{}", eval::report::markdown(&eval::report::summarise(&dataset, &runs)));
    Ok(())
}

/// `--model M --split S`: ours (estimated, true and no prior) on S's target tasks.
fn evaluate_model(
    a: &EvalArgs,
    model_path: &std::path::Path,
    loaded: Option<&TaskSet>,
    cfg: &EvalConfig,
    dataset: &str,
) -> anyhow::Result<()> {
    let split_path = a.split.as_ref().context("--model needs --split")?;
    let model = file::load(model_path, default_device())?;
    let data = match loaded {
        Some(d) => d.clone(),
        None => generate(&SyntheticConfig::default(), a.seed).0,
    };
    let split = Split::load(split_path)?;
    let target = Split::resolve(&split.target, &data)?;
    let validation = Split::resolve(&split.validation, &data)?;
    let run = eval::evaluate_model(&model, &data, &validation, &target, cfg)?;
    let runs = vec![run];
    write_outputs(a, dataset, &runs, 0.0)?;
    print!("{}", eval::report::markdown(&eval::report::summarise(dataset, &runs)));
    Ok(())
}
