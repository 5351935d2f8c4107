//! Single-task baselines, trained on each target episode's support alone and given
//! the episode's true prior π (as in the paper): Naive, uPU, nnPU and DRPU with a
//! 5-layer network (100 hidden units, Adam 1e-3, sigmoid loss), and DRE (uLSIF with an
//! RBF kernel of median-distance width). Every episode is trained at once (see
//! `batched`); accuracies are taken at each candidate iteration count.

use tch::{Device, Kind, Tensor};

use super::batched::{masked_mean, BatchedMlp};
use super::packed::PackedEpisodes;

/// The paper's candidates for the number of training iterations.
pub const ITERATIONS: [usize; 3] = [100, 500, 1000];
/// uLSIF regularisation candidates (DRE).
pub const DRE_LAMBDAS: [f64; 5] = [1e-3, 1e-2, 1e-1, 1.0, 10.0];
/// Non-negative correction candidates (DRPU).
pub const DRPU_ALPHAS: [f64; 3] = [0.1, 0.2, 0.3];

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum NeuralBaseline {
    /// Unlabeled rows taken as negatives.
    Naive,
    /// Unbiased PU risk (du Plessis et al. 2015).
    UPu,
    /// Non-negative PU risk with its gradient-ascent step (Kiryo et al. 2017).
    NnPu,
    /// Non-negative Bregman (squared) density-ratio fit; decision π·r − ½.
    Drpu { alpha: f64 },
}

fn sigmoid_loss(z: &Tensor, positive: bool) -> Tensor {
    if positive {
        (-z).sigmoid()
    } else {
        z.sigmoid()
    }
}

/// Per-episode training loss `[E]` of a network output on the support.
fn episode_loss(method: NeuralBaseline, out_p: &Tensor, out_u: &Tensor, p: &PackedEpisodes) -> Tensor {
    let (pm, um, pi) = (&p.pos_mask, &p.unl_mask, &p.prior);
    match method {
        NeuralBaseline::Naive => {
            pi * masked_mean(&sigmoid_loss(out_p, true), pm)
                + (-pi + 1.0) * masked_mean(&sigmoid_loss(out_u, false), um)
        }
        NeuralBaseline::UPu => {
            pi * masked_mean(&sigmoid_loss(out_p, true), pm)
                - pi * masked_mean(&sigmoid_loss(out_p, false), pm)
                + masked_mean(&sigmoid_loss(out_u, false), um)
        }
        NeuralBaseline::NnPu => {
            let positive = pi * masked_mean(&sigmoid_loss(out_p, true), pm);
            let negative = masked_mean(&sigmoid_loss(out_u, false), um)
                - pi * masked_mean(&sigmoid_loss(out_p, false), pm);
            // Where the negative risk goes below 0, step up its gradient instead (γ = 1, β = 0).
            let below = negative.lt(0.0);
            (positive + &negative).where_self(&below.logical_not(), &(-negative))
        }
        NeuralBaseline::Drpu { alpha } => {
            let (r_p, r_u) = (out_p.softplus(), out_u.softplus());
            let half_sq_p = masked_mean(&(r_p.square() * 0.5), pm);
            let corrected = masked_mean(&(r_u.square() * 0.5), um) - &half_sq_p * alpha;
            let below = corrected.lt(0.0);
            let full = &corrected + half_sq_p * alpha - masked_mean(&r_p, pm);
            full.where_self(&below.logical_not(), &(-corrected))
        }
    }
}

fn decision(method: NeuralBaseline, out: &Tensor, p: &PackedEpisodes) -> Tensor {
    match method {
        NeuralBaseline::Drpu { .. } => out.softplus() * p.prior.unsqueeze(-1) - 0.5,
        _ => out.shallow_clone(),
    }
}

/// Train one network per episode for max(ITERATIONS) Adam steps; test accuracies per
/// episode at each entry of ITERATIONS.
pub fn neural(
    method: NeuralBaseline,
    p: &PackedEpisodes,
    seed: u64,
    device: Device,
) -> Result<Vec<Vec<f64>>, tch::TchError> {
    let net = BatchedMlp::new(p.count, &[p.dim, 100, 100, 100, 100, 1], seed, device);
    let mut opt = net.adam(1e-3)?;
    let mut out = Vec::new();
    for step in 1..=*ITERATIONS.iter().max().unwrap_or(&0) {
        let out_p = net.forward(&p.pos).squeeze_dim(-1);
        let out_u = net.forward(&p.unl).squeeze_dim(-1);
        let loss = episode_loss(method, &out_p, &out_u, p).sum(Kind::Float);
        opt.backward_step(&loss);
        if ITERATIONS.contains(&step) {
            let scores = tch::no_grad(|| decision(method, &net.forward(&p.test).squeeze_dim(-1), p));
            out.push(p.accuracies(&scores));
        }
    }
    Ok(out)
}

/// Median distance between an episode's support rows (the RBF width heuristic).
fn median_distance(rows: &[f32], dim: usize) -> f64 {
    let n = rows.len() / dim;
    let mut d = Vec::with_capacity(n * n / 2);
    for i in 0..n {
        for j in i + 1..n {
            let s: f32 = (0..dim).map(|k| (rows[i * dim + k] - rows[j * dim + k]).powi(2)).sum();
            d.push(f64::from(s).sqrt());
        }
    }
    if d.is_empty() {
        return 1.0;
    }
    d.sort_by(f64::total_cmp);
    d[d.len() / 2].max(1e-6)
}

/// DRE (uLSIF): r(x) = Σ α_l k(x, c_l) over the support rows as centres,
/// α = max(0, (H + λI)⁻¹ h), H = mean_u φφᵀ, h = mean_p φ; decision π·r − ½.
/// Test accuracies per episode for each λ of DRE_LAMBDAS.
pub fn dre(p: &PackedEpisodes) -> Vec<Vec<f64>> {
    let dim = p.dim as usize;
    let centres = Tensor::cat(&[&p.pos, &p.unl], 1).to_kind(Kind::Double);
    let centre_mask = Tensor::cat(&[&p.pos_mask, &p.unl_mask], 1).to_kind(Kind::Double);
    let widths: Vec<f64> = p
        .support_rows
        .iter()
        .map(|(pos, unl)| median_distance(&[pos.as_slice(), unl.as_slice()].concat(), dim))
        .collect();
    let two_sigma_sq = (Tensor::from_slice(&widths).square() * 2.0).to_device(centres.device());
    let features = |x: &Tensor| -> Tensor {
        let d2 = Tensor::cdist(&x.to_kind(Kind::Double), &centres, 2.0, None::<i64>).square();
        (-d2 / two_sigma_sq.view([-1, 1, 1])).exp() * centre_mask.unsqueeze(1)
    };
    let (phi_p, phi_u) = (features(&p.pos), features(&p.unl));
    let um = p.unl_mask.to_kind(Kind::Double);
    let pm = p.pos_mask.to_kind(Kind::Double);
    let weighted_u = &phi_u * um.unsqueeze(-1);
    let h_mat =
        weighted_u.transpose(1, 2).bmm(&phi_u) / um.sum_dim_intlist(1, true, Kind::Double).unsqueeze(-1);
    let h_vec = (&phi_p * pm.unsqueeze(-1)).sum_dim_intlist(1, false, Kind::Double)
        / pm.sum_dim_intlist(1, true, Kind::Double).clamp_min(1.0);
    let phi_test = features(&p.test);
    let s = centres.size()[1];
    let eye = Tensor::eye(s, (Kind::Double, centres.device()));
    DRE_LAMBDAS
        .iter()
        .map(|&lambda| {
            let alpha =
                Tensor::linalg_solve(&(&h_mat + &eye * lambda), &h_vec.unsqueeze(-1), true).clamp_min(0.0);
            let r = phi_test.bmm(&alpha).squeeze_dim(-1);
            let scores = r * p.prior.to_kind(Kind::Double).unsqueeze(-1) - 0.5;
            p.accuracies(&scores)
        })
        .collect()
}
