//! Feature preprocessing fitted on source data and stored in the model file, so
//! that training, evaluation and the daemon transform records identically.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum PreprocessKind {
    /// sign(x)·ln(1+|x|), then per-feature standardisation. The log tames N-BaIoT's
    /// heavy tails (packet counts, raw epoch timestamps of ~1.5e9 in HH_jit_*_mean).
    LogStandard,
    /// Per-feature standardisation only.
    Standard,
    /// Each record scaled to unit ℓ2 norm (the paper's choice).
    L2,
    /// Identity.
    None,
}

impl PreprocessKind {
    /// Magnitude past which a feature is taken for a count, a byte total or a
    /// timestamp, whose heavy tail the signed log tames.
    const HEAVY_TAIL: f32 = 1000.0;

    /// `metapu train`'s choice when none is given: log-standard for data whose source
    /// rows reach |x| > 1000 somewhere (N-BaIoT's, the simulator's: packet sizes, byte
    /// variances, epoch timestamps), none for data on a small scale (the Synthetic
    /// benchmark, trained without preprocessing in every experiment that chose the recipe).
    pub fn for_sources(data: &crate::data::TaskSet, source: &[usize]) -> Self {
        let heavy = source
            .iter()
            .filter_map(|&i| data.tasks.get(i))
            .any(|t| t.x.iter().any(|v| v.abs() > Self::HEAVY_TAIL));
        if heavy {
            Self::LogStandard
        } else {
            Self::None
        }
    }
}

/// A fitted transform: `(t(x) - shift) / scale` per feature, where t is the
/// optional signed log; for `L2` the row is normalised instead.
#[derive(Debug, Clone, PartialEq)]
pub struct Preprocessor {
    pub kind: PreprocessKind,
    pub shift: Vec<f32>,
    pub scale: Vec<f32>,
}

fn signed_log1p(x: f32) -> f32 {
    x.signum() * x.abs().ln_1p()
}

impl Preprocessor {
    pub fn identity(kind: PreprocessKind, dim: usize) -> Self {
        Self { kind, shift: vec![0.0; dim], scale: vec![1.0; dim] }
    }

    pub fn dim(&self) -> usize {
        self.shift.len()
    }

    /// Fit on row-major `rows` of width `dim` (means and standard deviations in f64).
    pub fn fit(kind: PreprocessKind, rows: &[f32], dim: usize) -> Self {
        let mut pre = Self::identity(kind, dim);
        if !matches!(kind, PreprocessKind::LogStandard | PreprocessKind::Standard) || rows.is_empty() {
            return pre;
        }
        let n = (rows.len() / dim) as f64;
        let mut sum = vec![0f64; dim];
        let mut sq = vec![0f64; dim];
        for row in rows.chunks_exact(dim) {
            for (j, &v) in row.iter().enumerate() {
                let t = f64::from(pre.pointwise(v));
                sum[j] += t;
                sq[j] += t * t;
            }
        }
        for j in 0..dim {
            let mean = sum[j] / n;
            let var = (sq[j] / n - mean * mean).max(0.0);
            pre.shift[j] = mean as f32;
            // A constant feature keeps scale 1 rather than dividing by ~0.
            pre.scale[j] = if var.sqrt() > 1e-6 { var.sqrt() as f32 } else { 1.0 };
        }
        pre
    }

    fn pointwise(&self, v: f32) -> f32 {
        match self.kind {
            PreprocessKind::LogStandard => signed_log1p(v),
            _ => v,
        }
    }

    /// Transform a `[…, D]` tensor (torch's vectorised kernels: this runs on every
    /// adaptation and every scored micro-batch).
    pub fn apply_tensor(&self, x: &tch::Tensor) -> tch::Tensor {
        let (kind, device) = (x.kind(), x.device());
        let vector = |v: &[f32]| tch::Tensor::from_slice(v).to_kind(kind).to_device(device);
        match self.kind {
            PreprocessKind::None => x.shallow_clone(),
            PreprocessKind::L2 => {
                // f32's smallest normal, not f64's: that one is 0 in an f32 tensor, and an
                // all-zero row (a padded support slot) became 0/0 = NaN.
                let norm =
                    x.square().sum_dim_intlist(-1, true, kind).sqrt().clamp_min(f64::from(f32::MIN_POSITIVE));
                x / norm
            }
            PreprocessKind::Standard => {
                let mut t = x - vector(&self.shift);
                let _ = t.g_div_(&vector(&self.scale));
                t
            }
            // One buffer, worked in place: this runs over every window row at each
            // re-adaptation, where fresh temporaries per step cost as much as the math.
            // copysign(log1p|x|, x) is sign(x)·log1p|x| (±0 aside).
            PreprocessKind::LogStandard => {
                let mut t = x.abs();
                let _ = t.log1p_();
                let _ = t.copysign_(x);
                let _ = t.g_sub_(&vector(&self.shift));
                let _ = t.g_div_(&vector(&self.scale));
                t
            }
        }
    }

    /// Transform row-major rows (same arithmetic as [`Preprocessor::apply_tensor`]).
    pub fn transformed(&self, rows: &[f32]) -> Vec<f32> {
        let dim = self.dim().max(1);
        let x = tch::Tensor::from_slice(rows).reshape([(rows.len() / dim) as i64, dim as i64]);
        Vec::<f32>::try_from(self.apply_tensor(&x).flatten(0, -1)).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::{Task, TaskSet};

    fn set(values: &[&[f32]]) -> TaskSet {
        let tasks = values.iter().map(|x| Task { x: x.to_vec(), ..Task::new("t") }).collect();
        TaskSet { feature_names: vec!["a".into()], tasks, skipped_rows: 0 }
    }

    #[test]
    fn the_log_is_chosen_where_a_source_row_reaches_the_heavy_tail() {
        let data = set(&[&[0.5, -3.0], &[2e3], &[-4e9]]);
        // Only source tasks count: the other tasks' scales do not choose.
        assert_eq!(PreprocessKind::for_sources(&data, &[0]), PreprocessKind::None);
        assert_eq!(PreprocessKind::for_sources(&data, &[0, 1]), PreprocessKind::LogStandard);
        assert_eq!(PreprocessKind::for_sources(&data, &[2]), PreprocessKind::LogStandard);
    }
}
