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
    // Meta-training (embeddings that carry a gradient) keeps the solve every shipped
    // model was trained through, K over every slot and a general (LU) solve, so that
    // training and the models it gives do not change. The same weights up to rounding.
    let training = h.requires_grad();
    let (_, s, m) = h.size3().expect("embeddings must be [B, S, M]");
    let k = masked_mean(h, pos);
    let n_unl = unl.sum_dim_intlist(1, false, h.kind()).clamp_min(1.0).view([-1, 1, 1]);
    let h_unl = h * unl.unsqueeze(-1);
    let gram = if training {
        h_unl.transpose(1, 2).bmm(h) / n_unl
    } else {
        // K from the slots that hold an unlabeled row in some task: a support's
        // positives come first, so the slots before the fewest positives of the batch
        // hold none.
        let first = first_unlabeled_slot(unl).min(s);
        let h_unl = h_unl.narrow(1, first, s - first);
        h_unl.transpose(1, 2).bmm(&h_unl) / n_unl
    };
    let eye = Tensor::eye(m, (h.kind(), h.device()));
    // Solved in f64: K is rank-deficient for small supports, so (K + λI) can be
    // ill-conditioned enough for f32 to lose the digits that make batched and
    // one-by-one adaptation agree.
    let system = (gram + eye * lambda).to_kind(Kind::Double);
    let k = k.to_kind(Kind::Double).unsqueeze(-1);
    // No error check inside torch: a system that is numerically singular (or, for the
    // Cholesky factor, not positive definite) must not abort the process; its task's
    // weights become 0 (it then scores as all-anomalous until the next adaptation), as
    // do non-finite ones.
    let w = if training {
        Tensor::linalg_solve_ex(&system, &k, true, false).0
    } else {
        // K + λI is symmetric positive definite (K a mean of outer products, λ > 0): a
        // Cholesky factor solves it at half an LU's cost.
        let (factor, info) = system.linalg_cholesky_ex(false, false);
        let failed = info.ne(0).view([-1, 1, 1]);
        k.cholesky_solve(&factor, false).masked_fill(&failed, 0.0)
    };
    w.squeeze_dim(-1).nan_to_num(0.0, 0.0, 0.0).to_kind(h.kind())
}

/// The first slot (`[B, S]` masks) that is unlabeled in any task; S when none is.
fn first_unlabeled_slot(unl: &Tensor) -> i64 {
    let any = unl.gt(0.0).any_dim(0, false);
    let slots = any.size()[0];
    // argmax of a 0/1 vector is its first 1 (0 when all are 0: check that slot).
    let first = any.to_kind(Kind::Uint8).argmax(0, false).int64_value(&[]);
    if slots > 0 && any.int64_value(&[first]) != 0 {
        first
    } else {
        slots
    }
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

    /// The solve equals `(K + λI)^-1 k` written out, for tasks whose positives, unlabeled
    /// rows and padding differ (K from the unlabeled slots only, a Cholesky factor
    /// instead of a general solve).
    #[test]
    fn the_weights_solve_the_written_out_system() {
        let (b, s, m) = (3i64, 9i64, 4i64);
        let h = Tensor::rand([b, s, m], (Kind::Double, Device::Cpu));
        // Positives 2, 4 and 1; unlabeled 5, 3 and 8; padding 2, 2 and 0.
        let mask = |spans: [(i64, i64); 3]| {
            let rows: Vec<f64> = spans
                .iter()
                .flat_map(|&(from, to)| (0..s).map(move |i| f64::from(u8::from(i >= from && i < to))))
                .collect();
            Tensor::from_slice(&rows).reshape([b, s])
        };
        let pos = mask([(0, 2), (0, 4), (0, 1)]);
        let unl = mask([(2, 7), (4, 7), (1, 9)]);
        let lambda = Tensor::from(0.1f64);
        let got = unconstrained_weights(&h, &pos, &unl, &lambda);
        for t in 0..b {
            let (ht, pt, ut) = (h.get(t), pos.get(t), unl.get(t));
            let k = (&ht * pt.unsqueeze(-1)).sum_dim_intlist(0, false, Kind::Double) / pt.sum(Kind::Double);
            let hu = &ht * ut.unsqueeze(-1);
            let gram = hu.tr().matmul(&hu) / ut.sum(Kind::Double);
            let want = (gram + Tensor::eye(m, (Kind::Double, Device::Cpu)) * 0.1).inverse().matmul(&k);
            let diff = (got.get(t) - want).abs().max().double_value(&[]);
            assert!(diff < 1e-9, "task {t}: {diff}");
        }
        // Meta-training's solve (LU over every slot) gives the same weights.
        let trained = unconstrained_weights(&h.set_requires_grad(true), &pos, &unl, &lambda);
        assert!(trained.detach().allclose(&got, 1e-9, 1e-9, false));
        // No unlabeled slot anywhere: K is 0 and w = k/λ.
        let none = Tensor::zeros([b, s], (Kind::Double, Device::Cpu));
        let k_only = unconstrained_weights(&h, &pos, &none, &lambda);
        let want = masked_mean(&h, &pos) / 0.1;
        assert!(k_only.allclose(&want, 1e-9, 1e-9, false));
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
