//! Meta-learned baselines, meta-trained on the same source episodes as ours and
//! chosen on the same validation episodes; on target tasks given the true prior π.
//!
//! - MnnPU / MDRE (MAML-style): one 5-layer network (100 hidden units) whose
//!   weights take 3 gradient steps on each support (nnPU risk / uLSIF squared loss),
//!   meta-trained through those steps on the query's classification risk.
//! - NP: a classifier v([x, z_p, z_u]) with task vectors from f, g as in ours (the
//!   paper's; it is not given the prior: with π as an input it learned to predict the
//!   majority class from π alone).

use std::time::Instant;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use tch::nn::{self, OptimizerConfig};
use tch::{Device, Kind, Tensor};

use metapu::baselines::PackedEpisodes;
use metapu::model::closed_form::masked_mean;
use metapu::model::mlp::Mlp;
use metapu::train::average::WeightAverage;
use metapu::train::checkpoint::{snapshot, BestCheckpoint};
use metapu::train::episodes::{EpisodeSampler, TrainBatch};
use metapu::train::LrSchedule;

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum MetaBaseline {
    MnnPu { step: f64 },
    Mdre { step: f64 },
    Np { task_dim: i64 },
}

/// The paper's candidates for the MAML inner step size.
pub const STEP_SIZES: [f64; 3] = [1e-2, 1e-1, 1.0];
const INNER_STEPS: usize = 3;
const TAU: f64 = 10.0;

#[derive(Debug, Clone)]
pub struct MetaTrainConfig {
    pub seed: u64,
    pub max_iterations: u64,
    pub eval_every: u64,
    pub patience: u64,
    pub meta_batch: usize,
    /// Decay of the validated weight average, as for ours (0 = the raw weights).
    pub weight_average: f64,
    /// The learning rate over the budget, as for ours.
    pub lr_schedule: LrSchedule,
}

/// Adam's rate for the meta-learned baselines (the paper's 10⁻³), where the schedule
/// starts.
const LEARNING_RATE: f64 = 1e-3;

/// A meta-trained baseline.
pub struct MetaModel {
    method: MetaBaseline,
    vs: nn::VarStore,
    /// MAML: the network's weights and biases, in layer order.
    params: Vec<Tensor>,
    np: Option<(Mlp, Mlp, Mlp)>,
    pub best_validation_accuracy: f64,
    /// The iteration of the kept checkpoint.
    pub best_iteration: u64,
    pub iterations: u64,
    pub seconds: f64,
}

fn functional_forward(params: &[Tensor], x: &Tensor) -> Tensor {
    let layers = params.len() / 2;
    let mut y = x.shallow_clone();
    for l in 0..layers {
        y = y.matmul(&params[2 * l]) + &params[2 * l + 1];
        if l + 1 < layers {
            y = y.relu();
        }
    }
    y.squeeze_dim(-1)
}

fn mean_over(v: &Tensor, mask: &Tensor) -> Tensor {
    (v * mask).sum(Kind::Float) / mask.sum(Kind::Float).clamp_min(1.0)
}

/// Support loss of one task (rows `[S, D]`, masks `[S]`) under MAML weights.
fn inner_loss(
    method: MetaBaseline,
    params: &[Tensor],
    x: &Tensor,
    pos: &Tensor,
    unl: &Tensor,
    prior: f64,
) -> Tensor {
    let out = functional_forward(params, x);
    match method {
        MetaBaseline::MnnPu { .. } => {
            let positive = mean_over(&(-&out).sigmoid(), pos) * prior;
            let negative = mean_over(&out.sigmoid(), unl) - mean_over(&out.sigmoid(), pos) * prior;
            // Non-negative correction, differentiably: the negative risk is floored at 0.
            positive + negative.clamp_min(0.0)
        }
        MetaBaseline::Mdre { .. } => {
            let r = out.softplus();
            mean_over(&(r.square() * 0.5), unl) - mean_over(&r, pos)
        }
        MetaBaseline::Np { .. } => unreachable!("NP does not adapt by gradient steps"),
    }
}

/// Decision scores (≥ 0 = positive) of rows `x` under adapted weights.
fn maml_scores(method: MetaBaseline, params: &[Tensor], x: &Tensor, prior: f64) -> Tensor {
    let out = functional_forward(params, x);
    match method {
        MetaBaseline::Mdre { .. } => out.softplus() * prior - 0.5,
        _ => out,
    }
}

impl MetaModel {
    fn new(method: MetaBaseline, dim: i64, device: Device) -> Self {
        let vs = nn::VarStore::new(device);
        let root = vs.root();
        let mut params = Vec::new();
        let mut np = None;
        match method {
            MetaBaseline::Np { task_dim } => {
                let f = Mlp::new(&(&root / "f"), &[dim, 100, 100, 100]);
                let g = Mlp::new(&(&root / "g"), &[100, 100, task_dim]);
                let v = Mlp::new(&(&root / "v"), &[dim + 2 * task_dim, 100, 100, 100, 100, 1]);
                np = Some((f, g, v));
            }
            _ => {
                let dims = [dim, 100, 100, 100, 100, 1];
                for (i, io) in dims.windows(2).enumerate() {
                    let bound = 1.0 / (io[0] as f64).sqrt();
                    params.push(root.var(
                        &format!("w{i}"),
                        &[io[0], io[1]],
                        nn::Init::Uniform { lo: -bound, up: bound },
                    ));
                    params.push(root.var(
                        &format!("b{i}"),
                        &[io[1]],
                        nn::Init::Uniform { lo: -bound, up: bound },
                    ));
                }
            }
        }
        Self {
            method,
            vs,
            params,
            np,
            best_validation_accuracy: 0.0,
            best_iteration: 0,
            iterations: 0,
            seconds: 0.0,
        }
    }

    /// MAML inner loop: `INNER_STEPS` gradient steps on one support.
    fn adapt(&self, x: &Tensor, pos: &Tensor, unl: &Tensor, prior: f64, create_graph: bool) -> Vec<Tensor> {
        let step = match self.method {
            MetaBaseline::MnnPu { step } | MetaBaseline::Mdre { step } => step,
            MetaBaseline::Np { .. } => 0.0,
        };
        let mut fast: Vec<Tensor> = self.params.iter().map(Tensor::shallow_clone).collect();
        for _ in 0..INNER_STEPS {
            let loss = inner_loss(self.method, &fast, x, pos, unl, prior);
            let grads = Tensor::run_backward(&[&loss], &fast, true, create_graph);
            fast = fast.iter().zip(&grads).map(|(w, g)| w - g * step).collect();
        }
        fast
    }

    /// NP: v([x, z_p, z_u]) for rows `x` `[B, N, D]` given supports.
    fn np_scores(&self, x: &Tensor, sx: &Tensor, pos: &Tensor, unl: &Tensor) -> Tensor {
        let (f, g, v) = self.np.as_ref().expect("an NP model");
        let fx = f.forward(sx);
        let z_p = g.forward(&masked_mean(&fx, pos));
        let z_u = g.forward(&masked_mean(&fx, unl));
        let (b, n, _) = x.size3().expect("[B, N, D]");
        let k = z_p.size()[1];
        let zp = z_p.unsqueeze(1).expand([b, n, k], false);
        let zu = z_u.unsqueeze(1).expand([b, n, k], false);
        v.forward(&Tensor::cat(&[x, &zp, &zu], -1)).squeeze_dim(-1)
    }

    /// Query classification risk of a training batch: sigmoid loss (τ-smoothed for MDRE,
    /// as ours), logistic loss for NP.
    fn batch_loss(&self, batch: &TrainBatch) -> Tensor {
        let sign = &batch.query_y * 2.0 - 1.0;
        match self.method {
            MetaBaseline::Np { .. } => {
                let s =
                    self.np_scores(&batch.query_x, &batch.support.x, &batch.support.pos, &batch.support.unl);
                // Logistic loss, not the sigmoid: with the sigmoid, NP's outputs drifted
                // to |s| ≈ 20–50 within a few hundred steps, where it has no gradient,
                // and it stayed a one-class classifier.
                mean_over(&(-(s * sign)).softplus(), &batch.query_mask)
            }
            _ => {
                let b = batch.query_x.size()[0];
                let priors =
                    Vec::<f64>::try_from(batch.support_prior.to_kind(Kind::Double)).unwrap_or_default();
                let mut total = Tensor::zeros([], (Kind::Float, batch.query_x.device()));
                for i in 0..b {
                    let prior = priors.get(i as usize).copied().unwrap_or(0.5);
                    let fast = self.adapt(
                        &batch.support.x.get(i),
                        &batch.support.pos.get(i),
                        &batch.support.unl.get(i),
                        prior,
                        true,
                    );
                    let s = maml_scores(self.method, &fast, &batch.query_x.get(i), prior);
                    let scale = if matches!(self.method, MetaBaseline::Mdre { .. }) { TAU } else { 1.0 };
                    total += mean_over(&(-(s * sign.get(i)) * scale).sigmoid(), &batch.query_mask.get(i));
                }
                total / b as f64
            }
        }
    }

    /// Test accuracy per episode, with each episode's true prior.
    pub fn evaluate(&self, p: &PackedEpisodes) -> Vec<f64> {
        p.accuracies(&self.scores(p))
    }

    /// Decision scores of every test row (positive at ≥ 0), episodes by rows.
    fn scores(&self, p: &PackedEpisodes) -> Tensor {
        match self.method {
            MetaBaseline::Np { .. } => tch::no_grad(|| {
                let sx = Tensor::cat(&[&p.pos, &p.unl], 1);
                let zeros_p = p.pos_mask.zeros_like();
                let zeros_u = p.unl_mask.zeros_like();
                let pos = Tensor::cat(&[&p.pos_mask, &zeros_u], 1);
                let unl = Tensor::cat(&[&zeros_p, &p.unl_mask], 1);
                self.np_scores(&p.test, &sx, &pos, &unl)
            }),
            _ => {
                let rows: Vec<Tensor> = (0..p.count)
                    .map(|i| {
                        let sx = Tensor::cat(&[p.pos.get(i), p.unl.get(i)], 0);
                        let pos = Tensor::cat(&[p.pos_mask.get(i), p.unl_mask.get(i).zeros_like()], 0);
                        let unl = Tensor::cat(&[p.pos_mask.get(i).zeros_like(), p.unl_mask.get(i)], 0);
                        let prior = p.priors[i as usize];
                        let fast = self.adapt(&sx, &pos, &unl, prior, false);
                        tch::no_grad(|| maml_scores(self.method, &fast, &p.test.get(i), prior)).detach()
                    })
                    .collect();
                Tensor::stack(&rows, 0)
            }
        }
    }
}

/// Test accuracy per episode of `members` used as one: a row is positive when the mean
/// of their sigmoid(score) is ≥ ½ (one member: its own decisions, unchanged).
pub fn evaluate_ensemble(members: &[MetaModel], p: &PackedEpisodes) -> Vec<f64> {
    match members {
        [] => Vec::new(),
        [one] => one.evaluate(p),
        _ => {
            let mut sum = members[0].scores(p).sigmoid();
            for m in &members[1..] {
                sum += m.scores(p).sigmoid();
            }
            p.accuracies(&(sum / members.len() as f64 - 0.5))
        }
    }
}

/// Meta-train `method` on source episodes from `sampler`, validating on `validation`;
/// the best validation checkpoint is kept.
pub fn meta_train(
    method: MetaBaseline,
    sampler: &EpisodeSampler<'_>,
    validation: &PackedEpisodes,
    cfg: &MetaTrainConfig,
) -> Result<MetaModel, tch::TchError> {
    let started = Instant::now();
    // Initial weights come from torch's generator, seeded here (runs are sequential).
    tch::manual_seed(cfg.seed as i64);
    let mut model = MetaModel::new(method, sampler.dim as i64, sampler.device);
    let mut opt = nn::Adam::default().build(&model.vs, LEARNING_RATE)?;
    let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed);
    let mut best = BestCheckpoint::new(&model.vs, cfg.patience);
    let mut average = WeightAverage::new(&model.vs, cfg.weight_average);
    let mut iteration = 0;
    while iteration < cfg.max_iterations {
        iteration += 1;
        opt.set_lr(cfg.lr_schedule.rate(LEARNING_RATE, iteration, cfg.max_iterations));
        let batch = sampler.sample(cfg.meta_batch, &mut rng);
        let loss = model.batch_loss(&batch);
        if loss.double_value(&[]).is_finite() {
            opt.backward_step(&loss);
            average.update();
        }
        if iteration % cfg.eval_every == 0 || iteration == cfg.max_iterations {
            let (acc, saved) = average.applied(|| {
                let acc = validation_mean(&model.evaluate(validation));
                (acc, best.improves(acc).then(|| snapshot(&model.vs)))
            });
            if best.record(acc, iteration, saved) {
                break;
            }
        }
    }
    best.restore(&model.vs);
    model.best_validation_accuracy = best.accuracy();
    model.best_iteration = best.iteration();
    model.iterations = iteration;
    model.seconds = started.elapsed().as_secs_f64();
    Ok(model)
}

fn validation_mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len().max(1) as f64
}
