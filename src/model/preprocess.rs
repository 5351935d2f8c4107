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

    /// Transform row-major rows in place.
    pub fn apply(&self, rows: &mut [f32]) {
        let dim = self.dim();
        for row in rows.chunks_exact_mut(dim) {
            match self.kind {
                PreprocessKind::L2 => {
                    let norm = row.iter().map(|v| f64::from(*v) * f64::from(*v)).sum::<f64>().sqrt();
                    if norm > 0.0 {
                        row.iter_mut().for_each(|v| *v = (f64::from(*v) / norm) as f32);
                    }
                }
                PreprocessKind::None => {}
                _ => {
                    for (j, v) in row.iter_mut().enumerate() {
                        *v = (self.pointwise(*v) - self.shift[j]) / self.scale[j];
                    }
                }
            }
        }
    }

    pub fn transformed(&self, rows: &[f32]) -> Vec<f32> {
        let mut out = rows.to_vec();
        self.apply(&mut out);
        out
    }
}
