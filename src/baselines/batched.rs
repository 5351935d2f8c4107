//! Many small independent networks trained as one: E episodes, each with its own MLP,
//! stacked as `[E, in, out]` weights and run with batched matmuls. The loss is the sum
//! of per-episode losses, so each network's gradient (and Adam's elementwise update)
//! is exactly what training it alone would give — at the cost of one forward.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tch::nn::OptimizerConfig;
use tch::{nn, Device, Kind, Tensor};

pub struct BatchedMlp {
    pub vs: nn::VarStore,
    weights: Vec<Tensor>,
    biases: Vec<Tensor>,
}

impl BatchedMlp {
    /// `episodes` networks of layer sizes `dims`, initialised like torch's `Linear`
    /// (uniform ±1/√fan_in) from `seed`.
    pub fn new(episodes: i64, dims: &[i64], seed: u64, device: Device) -> Self {
        let vs = nn::VarStore::new(device);
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let root = vs.root();
        let (mut weights, mut biases) = (Vec::new(), Vec::new());
        for (i, io) in dims.windows(2).enumerate() {
            let (fan_in, fan_out) = (io[0], io[1]);
            let bound = 1.0 / (fan_in as f32).sqrt();
            let mut uniform = |n: i64| -> Vec<f32> { (0..n).map(|_| rng.gen_range(-bound..bound)).collect() };
            let w = Tensor::from_slice(&uniform(episodes * fan_in * fan_out))
                .reshape([episodes, fan_in, fan_out]);
            let b = Tensor::from_slice(&uniform(episodes * fan_out)).reshape([episodes, 1, fan_out]);
            weights.push(root.var_copy(&format!("w{i}"), &w.to_device(device)));
            biases.push(root.var_copy(&format!("b{i}"), &b.to_device(device)));
        }
        Self { vs, weights, biases }
    }

    /// `x` `[E, N, in]` → `[E, N, out]`, ReLU between layers.
    pub fn forward(&self, x: &Tensor) -> Tensor {
        let last = self.weights.len() - 1;
        let mut y = x.shallow_clone();
        for (i, (w, b)) in self.weights.iter().zip(&self.biases).enumerate() {
            y = y.bmm(w) + b;
            if i < last {
                y = y.relu();
            }
        }
        y
    }

    pub fn adam(&self, learning_rate: f64) -> Result<nn::Optimizer, tch::TchError> {
        nn::Adam::default().build(&self.vs, learning_rate)
    }
}

/// Masked mean over dim 1 of `v` `[E, N]` → `[E]`.
pub fn masked_mean(v: &Tensor, mask: &Tensor) -> Tensor {
    (v * mask).sum_dim_intlist(1, false, Kind::Float)
        / mask.sum_dim_intlist(1, false, Kind::Float).clamp_min(1.0)
}
