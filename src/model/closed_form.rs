//! The paper's closed-form adaptation (section 4.2–4.3), as pure tensor functions.
//!
//! Every function works on a batch of B tasks whose support sets are padded to a
//! common length S; `pos` and `unl` are `[B, S]` 0/1 masks (a padded slot is 0 in
//! both). Keeping this free of networks makes it testable on hand-built embeddings.

use tch::{Kind, Tensor};

/// Mean of `x` (`[B, S, C]`) over the rows selected by `mask` (`[B, S]`) → `[B, C]`.
/// An empty selection gives zeros instead of NaN.
pub fn masked_mean(x: &Tensor, mask: &Tensor) -> Tensor {
    let count = mask.sum_dim_intlist(1, false, x.kind()).clamp_min(1.0).unsqueeze(-1);
    (x * mask.unsqueeze(-1)).sum_dim_intlist(1, false, x.kind()) / count
}

/// Unconstrained ratio weights `w̃ = (K + λI)^-1 k` with `k = mean_p h`,
/// `K = mean_u h hᵀ`, for embeddings `h` (`[B, S, M]`); `lambda` is a scalar tensor.
/// One batched solve for all B tasks.
pub fn unconstrained_weights(h: &Tensor, pos: &Tensor, unl: &Tensor, lambda: &Tensor) -> Tensor {
    let (_, _, m) = h.size3().expect("embeddings must be [B, S, M]");
    let k = masked_mean(h, pos);
    let n_unl = unl.sum_dim_intlist(1, false, h.kind()).clamp_min(1.0).view([-1, 1, 1]);
    let h_unl = h * unl.unsqueeze(-1);
    let gram = h_unl.transpose(1, 2).bmm(h) / n_unl;
    let eye = Tensor::eye(m, (h.kind(), h.device()));
    // Solved in f64: K is rank-deficient for small supports, so (K + λI) can be
    // ill-conditioned enough for f32 to lose the digits that make batched and
    // one-by-one adaptation agree.
    let system = (gram + eye * lambda).to_kind(Kind::Double);
    let k = k.to_kind(Kind::Double);
    // No error check inside torch: a numerically singular system must not abort the
    // process; its non-finite weights become 0 (that task then scores as all-anomalous
    // until the next adaptation).
    let (w, _info) = Tensor::linalg_solve_ex(&system, &k.unsqueeze(-1), true, false);
    w.squeeze_dim(-1).nan_to_num(0.0, 0.0, 0.0).to_kind(h.kind())
}

/// `max(0, w̃)`, the paper's non-negativity fix. With `leak > 0` negative weights keep
/// a slope of `leak` instead: used only in meta-training, so that a task whose
/// weights all clamp to zero still passes a gradient back (a "dead" w otherwise
/// stops learning for good).
pub fn nonnegative_weights(unconstrained: &Tensor, leak: f64) -> Tensor {
    if leak > 0.0 {
        unconstrained.relu() + unconstrained.clamp_max(0.0) * leak
    } else {
        unconstrained.relu()
    }
}

/// Density ratio `r = w·h` for embeddings `[B, N, M]` and weights `[B, M]` → `[B, N]`.
pub fn ratio(h: &Tensor, w: &Tensor) -> Tensor {
    (h * w.unsqueeze(1)).sum_dim_intlist(-1, false, h.kind())
}

/// Class prior `π = min(1, 1 / max_S r)` over the valid support rows (`mask`, `[B, S]`).
/// A task whose ratio is nowhere above 1 (including an all-zero w) gets π = 1.
pub fn prior_from_ratio(support_ratio: &Tensor, mask: &Tensor) -> Tensor {
    let invalid = mask.le(0.0);
    let max_ratio = support_ratio.masked_fill(&invalid, f64::NEG_INFINITY).amax(1, false);
    max_ratio.clamp_min(1.0).reciprocal()
}

/// Class prior `π = min(1, 1 / median_P r)` over the known-normal support rows
/// (`pos`, `[B, S]`). On a normal row r = p_P/p_U ≈ 1/π wherever attacks do not overlap
/// normal traffic, so the median of the labeled rows estimates 1/π without resting on
/// the one most extreme row of the support, which on mostly-normal traffic drags π down
/// and calls normal rows attacks. A task without a labeled row falls back to `fallback`.
pub fn prior_from_known_normal_median(support_ratio: &Tensor, pos: &Tensor, fallback: &Tensor) -> Tensor {
    let unlabeled = pos.le(0.0);
    let median = support_ratio.masked_fill(&unlabeled, f64::NAN).nanmedian_dim(1, false).0;
    let prior = median.clamp_min(1.0).reciprocal();
    let has_labeled = unlabeled.logical_not().any_dim(1, false);
    prior.where_self(&has_labeled, fallback)
}

/// Posterior of the positive (normal) class, `π·r(x)` clipped to [0, 1].
pub fn posterior(prior: &Tensor, ratio: &Tensor) -> Tensor {
    (prior * ratio).clamp(0.0, 1.0)
}

/// Sigmoid-smoothed PN risk (paper eq. 14) of queries `[B, Q]` with labels in
/// {1, 0} and a validity mask; the classifier margin is `u = π·r − 0.5`.
/// The query keeps its task's positive ratio, so the class-weighted risk equals the
/// plain mean over queries. Averaged over the B tasks.
pub fn smoothed_pn_risk(
    prior: &Tensor,
    query_ratio: &Tensor,
    labels: &Tensor,
    mask: &Tensor,
    tau: f64,
) -> Tensor {
    let margin = prior.unsqueeze(-1) * query_ratio - 0.5;
    let sign = labels * 2.0 - 1.0;
    let loss = (-(margin * sign) * tau).sigmoid();
    let per_task = (loss * mask).sum_dim_intlist(1, false, mask.kind())
        / mask.sum_dim_intlist(1, false, mask.kind()).clamp_min(1.0);
    per_task.mean(per_task.kind())
}

/// Share of positives among each task's valid query rows (`[B, Q]` labels in {1, 0}
/// and mask) → `[B]`: the class prior the query was drawn at.
pub fn query_prior(labels: &Tensor, mask: &Tensor) -> Tensor {
    masked_mean(&labels.unsqueeze(-1), mask).squeeze_dim(-1)
}

#[cfg(test)]
mod tests {
    use tch::{Device, Kind, Tensor};

    use super::*;

    fn rows(values: &[f64], tasks: i64) -> Tensor {
        Tensor::from_slice(values).reshape([tasks, -1])
    }

    #[test]
    fn the_median_estimate_reads_the_labeled_rows_only() {
        // Task 0: labeled ratios 2, 2.5 and 40, unlabeled 1 and 80: the median of the
        // labeled rows (2.5) gives π = 0.4, where the support's max (80) gives 1/80.
        // Task 1: no labeled row, so the fallback. Task 2: labeled ratios under 1, π = 1.
        let ratio = rows(&[2.0, 2.5, 40.0, 1.0, 80.0, 3.0, 3.0, 3.0, 3.0, 3.0, 0.5, 0.2, 0.1, 9.0, 9.0], 3);
        let pos = rows(&[1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0, 0.0], 3);
        let any = Tensor::ones([3, 5], (Kind::Double, Device::Cpu));
        let max = prior_from_ratio(&ratio, &any);
        let median = prior_from_known_normal_median(&ratio, &pos, &max);
        let got: Vec<f64> = Vec::try_from(&median).unwrap();
        assert_eq!(got, vec![0.4, 1.0 / 3.0, 1.0]);
        assert_eq!(max.double_value(&[0]), 1.0 / 80.0);
    }
}
