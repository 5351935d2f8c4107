//! The meta-PU network: DeepSets task vectors (f, g), the instance embedding h and
//! the learned regulariser λ, shared by all tasks (paper section 4, appendix
//! "Network Architecture"). Inputs are already preprocessed.

use serde::{Deserialize, Serialize};
use tch::{nn, Device, Kind, Tensor};

use super::closed_form;
use super::mlp::Mlp;
use super::support::{AdaptedBatch, SupportBatch};

/// Architecture and fixed hyperparameters; stored in the model file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NetConfig {
    /// Feature count D.
    pub input_dim: i64,
    /// Hidden width of f, g and h (paper: 100).
    pub hidden: i64,
    /// Output width of f (paper: 100).
    pub set_dim: i64,
    /// Task-vector size K (paper: chosen in {16, 32, 64, 128}).
    pub task_dim: i64,
    /// Embedding size M of h (paper: 100).
    pub embed_dim: i64,
    /// Sigmoid sharpness τ of the smoothed risk (paper: 10).
    pub tau: f64,
    /// λ at initialisation (then learned).
    pub lambda_init: f64,
    /// false = the "w/o z" ablation: h sees only x.
    pub use_task_vectors: bool,
    /// A learned correction of the prior estimate (see `MetaPuNet::corrected_prior`).
    /// Written only when on: a model without it is the same file as before the option
    /// existed, and such files load as the paper's estimate.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub prior_head: bool,
    /// How the class prior is estimated from the adapted ratio. Written only when not
    /// the paper's, so older files load unchanged.
    #[serde(default, skip_serializing_if = "PriorEstimate::is_paper")]
    pub prior_estimate: PriorEstimate,
}

/// The class-prior estimate of an adapted task.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum PriorEstimate {
    /// The paper's `1/max r` over every support row.
    #[default]
    SupportMax,
    /// `1/median r` over the known-normal rows (see
    /// `closed_form::prior_from_known_normal_median`).
    KnownNormalMedian,
}

impl PriorEstimate {
    pub fn is_paper(&self) -> bool {
        *self == Self::SupportMax
    }
}

impl NetConfig {
    /// The paper's hidden width of f, g and h.
    pub const PAPER_HIDDEN: i64 = 100;
    /// The paper's embedding size M of h.
    pub const PAPER_EMBED_DIM: i64 = 100;

    pub fn paper(input_dim: i64, task_dim: i64) -> Self {
        Self {
            input_dim,
            hidden: Self::PAPER_HIDDEN,
            set_dim: 100,
            task_dim,
            embed_dim: Self::PAPER_EMBED_DIM,
            tau: 10.0,
            lambda_init: 0.1,
            use_task_vectors: true,
            prior_head: false,
            prior_estimate: PriorEstimate::SupportMax,
        }
    }
}

/// Support statistics the prior head reads besides z_p and z_u.
const PRIOR_STATS: i64 = 5;
/// Hidden width of the prior head.
const PRIOR_HIDDEN: i64 = 64;

#[derive(Debug)]
pub struct MetaPuNet {
    pub vs: nn::VarStore,
    pub config: NetConfig,
    f: Mlp,
    g: Mlp,
    h: Mlp,
    prior: Option<Mlp>,
    log_lambda: Tensor,
}

impl MetaPuNet {
    /// A freshly initialised network (torch's default init; seed with `tch::manual_seed`).
    pub fn new(config: NetConfig, device: Device) -> Self {
        let vs = nn::VarStore::new(device);
        let root = vs.root();
        let c = &config;
        // f: 3 layers, g: 2 layers, h: 4 layers (paper appendix).
        let f = Mlp::new(&(&root / "f"), &[c.input_dim, c.hidden, c.hidden, c.set_dim]);
        let g = Mlp::new(&(&root / "g"), &[c.set_dim, c.hidden, c.task_dim]);
        let h_in = if c.use_task_vectors { c.input_dim + 2 * c.task_dim } else { c.input_dim };
        let h = Mlp::new(&(&root / "h"), &[h_in, c.hidden, c.hidden, c.hidden, c.embed_dim]);
        let prior =
            c.prior_head.then(|| Mlp::new(&(&root / "p"), &[2 * c.task_dim + PRIOR_STATS, PRIOR_HIDDEN, 1]));
        let log_lambda = root.var("log_lambda", &[], nn::Init::Const(c.lambda_init.ln()));
        Self { vs, config, f, g, h, prior, log_lambda }
    }

    /// Re-draw every weight from a seeded generator of our own, with the same
    /// distributions as tch's defaults, and λ back to its initial value. Unlike
    /// `tch::manual_seed`, this does not depend on torch's process-wide generator, which
    /// other threads may draw from, so the same seed always gives the same network.
    pub fn init_from_seed(&self, seed: u64) {
        self.init_from_seed_scaled(seed, 1.0);
    }

    /// As [`Self::init_from_seed`], with every weight bound multiplied by `scale`
    /// (1/√6 gives PyTorch's `nn.Linear` default, U(±1/√fan_in)).
    pub fn init_from_seed_scaled(&self, seed: u64, scale: f64) {
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        let mut vars: Vec<(String, Tensor)> = self.vs.variables().into_iter().collect();
        vars.sort_by(|a, b| a.0.cmp(&b.0));
        let fan_in = |name: &str| -> i64 {
            let weight = name.replace(".bias", ".weight");
            vars.iter().find(|(n, _)| *n == weight).map_or(1, |(_, w)| w.size().get(1).copied().unwrap_or(1))
        };
        tch::no_grad(|| {
            for (name, var) in &vars {
                let mut var = var.shallow_clone();
                if name == "log_lambda" {
                    let _ = var.fill_(self.config.lambda_init.ln());
                    continue;
                }
                if name.starts_with("p.1.") {
                    // The prior head's output layer starts at zero, so an untrained
                    // head gives the paper's estimate (clipped to [0.001, 0.999]).
                    let _ = var.zero_();
                    continue;
                }
                let fan = fan_in(name).max(1) as f64;
                // tch's defaults: Kaiming-uniform weights for ReLU, U(±1/√fan_in) biases.
                let bound =
                    if name.ends_with(".weight") { scale * (6.0 / fan).sqrt() } else { 1.0 / fan.sqrt() };
                let values: Vec<f32> =
                    (0..var.numel()).map(|_| rng.gen_range(-bound..bound) as f32).collect();
                let t = Tensor::from_slice(&values)
                    .reshape(var.size())
                    .to_kind(var.kind())
                    .to_device(var.device());
                var.copy_(&t);
            }
        });
    }

    pub fn device(&self) -> Device {
        self.vs.device()
    }

    pub fn kind(&self) -> Kind {
        self.log_lambda.kind()
    }

    /// λ > 0, parameterised by its logarithm.
    pub fn lambda(&self) -> Tensor {
        self.log_lambda.exp()
    }

    /// Task vectors z_p, z_u (`[B, K]`) of a support batch.
    pub fn task_vectors(&self, support: &SupportBatch) -> (Tensor, Tensor) {
        let fx = self.f.forward(&support.x);
        let z_p = self.g.forward(&closed_form::masked_mean(&fx, &support.pos));
        let z_u = self.g.forward(&closed_form::masked_mean(&fx, &support.unl));
        (z_p, z_u)
    }

    // h's first layer on [x, z_p, z_u] is W_x·x + (W_z·[z_p, z_u] + b): the task part
    // is computed once per task, not once per row, and the [N, D + 2K] concatenation
    // is never built. Same weights, same result up to rounding.
    fn first_layer_rows(&self, x: &Tensor) -> Tensor {
        let (w, _) = self.h.first_layer();
        x.matmul(&w.narrow(1, 0, self.config.input_dim).tr())
    }

    fn first_layer_tasks(&self, z_p: &Tensor, z_u: &Tensor) -> Tensor {
        let (w, bias) = self.h.first_layer();
        let (d, k) = (self.config.input_dim, self.config.task_dim);
        let task = Tensor::cat(&[z_p, z_u], -1).matmul(&w.narrow(1, d, 2 * k).tr());
        match bias {
            Some(b) => task + b,
            None => task,
        }
    }

    /// Embeddings h([x, z_p, z_u]) for rows `x` (`[B, N, D]`) of each task → `[B, N, M]`.
    pub fn embed(&self, x: &Tensor, z_p: &Tensor, z_u: &Tensor) -> Tensor {
        if !self.config.use_task_vectors {
            return self.h.forward(x).softplus();
        }
        let mut first = self.first_layer_rows(x);
        let _ = first.g_add_(&self.first_layer_tasks(z_p, z_u).unsqueeze(1));
        let _ = first.relu_();
        self.h.forward_from(1, &first).softplus()
    }

    /// Adapt to every task of the batch: task vectors, one batched closed-form solve,
    /// the prior estimate. `leak` > 0 only in meta-training (see `nonnegative_weights`).
    pub fn adapt(&self, support: &SupportBatch, leak: f64) -> AdaptedBatch {
        self.adapt_draws(support, 1, leak)
    }

    /// [`Self::adapt`] for tasks in groups of `draws` consecutive draws of one device:
    /// each group's task vectors are the mean of its draws', so that one embedding of a
    /// record serves every draw's solve when it is scored (`model/draws.rs`; 1: every
    /// task its own, as `adapt`).
    pub fn adapt_draws(&self, support: &SupportBatch, draws: i64, leak: f64) -> AdaptedBatch {
        let (z_p, z_u) = self.task_vectors(support);
        let (z_p, z_u) = (shared_by_draws(&z_p, draws), shared_by_draws(&z_u, draws));
        let h = self.embed(&support.x, &z_p, &z_u);
        self.solve(h, z_p, z_u, &support.pos, &support.unl, leak)
    }

    /// Whether [`Self::adapt_rows`] applies: h sees the task vectors (its first layer
    /// splits into a row part and a task part).
    pub fn adapts_from_rows(&self) -> bool {
        self.config.use_task_vectors
    }

    /// The parts of an adaptation that depend on a row alone, not on its task: f(x)
    /// (`[N, set_dim]`) and h's first layer on x, W_x·x (`[N, hidden]`), for
    /// preprocessed rows `x` (`[N, D]`).
    pub fn row_parts(&self, x: &Tensor) -> (Tensor, Tensor) {
        (self.f.forward(x), self.first_layer_rows(x))
    }

    /// [`Self::adapt`] from each support row's [`Self::row_parts`] (`f`: `[B, S,
    /// set_dim]`, `wx`: `[B, S, hidden]`) instead of its features: the same adaptation,
    /// without computing again what a row's earlier adaptations computed.
    /// Groups of `draws` consecutive tasks share their task vectors, as in
    /// [`Self::adapt_draws`] (1: every task its own).
    pub fn adapt_rows(
        &self,
        f: &Tensor,
        wx: &Tensor,
        pos: &Tensor,
        unl: &Tensor,
        draws: i64,
    ) -> AdaptedBatch {
        let z_p = shared_by_draws(&self.g.forward(&closed_form::masked_mean(f, pos)), draws);
        let z_u = shared_by_draws(&self.g.forward(&closed_form::masked_mean(f, unl)), draws);
        let mut first = wx + self.first_layer_tasks(&z_p, &z_u).unsqueeze(1);
        let _ = first.relu_();
        let h = self.h.forward_from(1, &first).softplus();
        self.solve(h, z_p, z_u, pos, unl, 0.0)
    }

    /// The closed-form solve and the prior estimate on embeddings `h` of the support.
    fn solve(
        &self,
        h: Tensor,
        z_p: Tensor,
        z_u: Tensor,
        pos: &Tensor,
        unl: &Tensor,
        leak: f64,
    ) -> AdaptedBatch {
        let w_raw = closed_form::unconstrained_weights(&h, pos, unl, &self.lambda());
        let w = closed_form::nonnegative_weights(&w_raw, leak);
        let support_ratio = closed_form::ratio(&h, &w);
        let any = (pos + unl).clamp_max(1.0);
        let support_max = closed_form::prior_from_ratio(&support_ratio, &any);
        let prior = match self.config.prior_estimate {
            PriorEstimate::SupportMax => support_max,
            PriorEstimate::KnownNormalMedian => {
                closed_form::prior_from_known_normal_median(&support_ratio, pos, &support_max)
            }
        };
        let prior = match &self.prior {
            Some(head) => self.corrected_prior(head, &prior, &support_ratio, pos, unl, &z_p, &z_u),
            None => prior,
        };
        AdaptedBatch { z_p, z_u, w, prior }
    }

    /// The prior head: `logit π = logit π_max + p([z_p, z_u, stats])`, where π_max is
    /// the paper's `1/max_S r` and the stats describe how the support scores under it.
    /// `1/max r` rests on the single largest ratio of 30 rows, so it is noisy at small
    /// N_p and biased upward at low π (r shrinks under λ); the head, trained with the
    /// prior loss on source tasks, learns how far to move it.
    #[allow(clippy::too_many_arguments)]
    fn corrected_prior(
        &self,
        head: &Mlp,
        prior_max: &Tensor,
        support_ratio: &Tensor,
        pos: &Tensor,
        unl: &Tensor,
        z_p: &Tensor,
        z_u: &Tensor,
    ) -> Tensor {
        let eps = 1e-3;
        let logit = prior_max.clamp(eps, 1.0 - eps).logit(None);
        let posterior = closed_form::posterior(&prior_max.unsqueeze(-1), support_ratio).unsqueeze(-1);
        let soft_positive =
            ((prior_max.unsqueeze(-1) * support_ratio - 0.5) * self.config.tau).sigmoid().unsqueeze(-1);
        let kind = support_ratio.kind();
        let labeled_share =
            pos.sum_dim_intlist(1, false, kind) / (pos + unl).sum_dim_intlist(1, false, kind).clamp_min(1.0);
        let stats = Tensor::stack(
            &[
                logit.shallow_clone(),
                closed_form::masked_mean(&posterior, unl).squeeze_dim(-1),
                closed_form::masked_mean(&posterior, pos).squeeze_dim(-1),
                closed_form::masked_mean(&soft_positive, unl).squeeze_dim(-1),
                labeled_share,
            ],
            -1,
        );
        let delta = head.forward(&Tensor::cat(&[z_p, z_u, &stats], -1)).squeeze_dim(-1);
        (logit + delta).sigmoid()
    }

    /// Density ratio of rows `x` (`[B, N, D]`) under each task's adapted state → `[B, N]`.
    pub fn ratio_grouped(&self, adapted: &AdaptedBatch, x: &Tensor) -> Tensor {
        let h = self.embed(x, &adapted.z_p, &adapted.z_u);
        closed_form::ratio(&h, &adapted.w)
    }

    /// Density ratio of a flat list of rows `x` (`[N, D]`), row i belonging to task
    /// `task[i]` (int64 `[N]`) → `[N]`. One forward for rows of many tasks.
    pub fn ratio_flat(&self, adapted: &AdaptedBatch, task: &Tensor, x: &Tensor) -> Tensor {
        let w = adapted.w.index_select(0, task);
        let h = self.embed_flat(&adapted.z_p, &adapted.z_u, task, x);
        let kind = h.kind();
        (h * w).sum_dim_intlist(-1, false, kind)
    }

    /// Embeddings of a flat list of rows `x` (`[N, D]`), row i under the task vectors
    /// of task `task[i]` (`z_p`, `z_u`: `[T, K]`) → `[N, M]`.
    pub fn embed_flat(&self, z_p: &Tensor, z_u: &Tensor, task: &Tensor, x: &Tensor) -> Tensor {
        if !self.config.use_task_vectors {
            return self.h.forward(x).softplus();
        }
        // The task part of h's first layer once per task, then gathered per row.
        let tasks = self.first_layer_tasks(z_p, z_u).index_select(0, task);
        let mut first = self.first_layer_rows(x);
        let _ = first.g_add_(&tasks);
        let _ = first.relu_();
        self.h.forward_from(1, &first).softplus()
    }
}

/// Task vectors `[B, K]` with each group of `draws` consecutive rows replaced by the
/// group's mean (B a multiple of `draws`).
fn shared_by_draws(z: &Tensor, draws: i64) -> Tensor {
    if draws <= 1 {
        return z.shallow_clone();
    }
    let (b, k) = z.size2().expect("task vectors must be [B, K]");
    z.reshape([b / draws, draws, k])
        .mean_dim(1, true, z.kind())
        .expand([b / draws, draws, k], false)
        .reshape([b, k])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_first_layer_equals_the_concatenated_input() {
        let _g = tch::no_grad_guard();
        let net = MetaPuNet::new(NetConfig::paper(7, 4), Device::Cpu);
        net.init_from_seed(3);
        let x = Tensor::randn([3, 5, 7], (Kind::Float, Device::Cpu));
        let z_p = Tensor::randn([3, 4], (Kind::Float, Device::Cpu));
        let z_u = Tensor::randn([3, 4], (Kind::Float, Device::Cpu));
        let expand = |z: &Tensor| z.unsqueeze(1).expand([3, 5, 4], false);
        let concatenated = net.h.forward(&Tensor::cat(&[&x, &expand(&z_p), &expand(&z_u)], -1)).softplus();
        let split = net.embed(&x, &z_p, &z_u);
        assert!(split.allclose(&concatenated, 1e-5, 1e-6, false));
        // Per-row gathering of task parts (scoring) agrees with the grouped form.
        let adapted = AdaptedBatch {
            z_p: z_p.shallow_clone(),
            z_u: z_u.shallow_clone(),
            w: Tensor::rand([3, 100], (Kind::Float, Device::Cpu)),
            prior: Tensor::ones([3], (Kind::Float, Device::Cpu)),
        };
        let grouped = net.ratio_grouped(&adapted, &x);
        let task = Tensor::from_slice(&[0i64, 0, 0, 0, 0, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2]);
        let flat = net.ratio_flat(&adapted, &task, &x.reshape([15, 7]));
        assert!(flat.allclose(&grouped.reshape([15]), 1e-4, 1e-5, false));
    }
}
