//! Which features moved: the robust deviation of unusual records from a device's
//! known-normal ones, per feature, on the model's preprocessed scale (where the model
//! sees them) — the median of the unusual records against the median and MAD of the
//! normal ones.

use super::preprocess::Preprocessor;

/// One feature's move.
#[derive(Debug, Clone, PartialEq)]
pub struct Deviation {
    pub feature: usize,
    /// |median(unusual) − median(normal)| / (1.4826 · MAD(normal)), preprocessed scale,
    /// with the MAD floored (a feature constant in normal traffic is not infinitely
    /// far from any change).
    pub robust_z: f32,
    /// Medians on the raw scale, for words ("40× its normal").
    pub normal: f32,
    pub unusual: f32,
}

/// MAD floor on the preprocessed (standardised) scale: a tenth of the source data's
/// standard deviation.
const MAD_FLOOR: f32 = 0.1;

fn median(values: &mut [f32]) -> f32 {
    if values.is_empty() {
        return 0.0;
    }
    values.sort_unstable_by(f32::total_cmp);
    let mid = values.len() / 2;
    if values.len() % 2 == 1 {
        values[mid]
    } else {
        (values[mid - 1] + values[mid]) / 2.0
    }
}

fn column(rows: &[f32], dim: usize, j: usize) -> Vec<f32> {
    rows.chunks_exact(dim).map(|r| r[j]).collect()
}

/// The `top` features by robust deviation of `unusual` rows from `normal` rows (both
/// raw, row-major, width `pre.dim()`), largest first. Empty when either has no row.
pub fn top_deviations(pre: &Preprocessor, normal: &[f32], unusual: &[f32], top: usize) -> Vec<Deviation> {
    let dim = pre.dim();
    if dim == 0 || normal.len() < dim || unusual.len() < dim {
        return Vec::new();
    }
    let (normal_t, unusual_t) = (pre.transformed(normal), pre.transformed(unusual));
    let mut out: Vec<Deviation> = (0..dim)
        .map(|j| {
            let mut n = column(&normal_t, dim, j);
            let center = median(&mut n);
            let mut spread: Vec<f32> = n.iter().map(|v| (v - center).abs()).collect();
            let mad = (1.4826 * median(&mut spread)).max(MAD_FLOOR);
            let moved = median(&mut column(&unusual_t, dim, j));
            Deviation {
                feature: j,
                robust_z: (moved - center).abs() / mad,
                normal: median(&mut column(normal, dim, j)),
                unusual: median(&mut column(unusual, dim, j)),
            }
        })
        .collect();
    out.sort_by(|a, b| b.robust_z.total_cmp(&a.robust_z).then(a.feature.cmp(&b.feature)));
    out.truncate(top);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::PreprocessKind;

    #[test]
    fn the_feature_that_moved_comes_first_and_spread_matters() {
        // Three features: 0 steady then shifted by 5; 1 noisy (±4) and shifted by 5;
        // 2 unchanged.
        let normal: Vec<f32> =
            (0..20).flat_map(|i| [10.0, if i % 2 == 0 { 6.0 } else { 14.0 }, 3.0]).collect();
        let unusual: Vec<f32> =
            (0..5).flat_map(|i| [15.0, if i % 2 == 0 { 11.0 } else { 19.0 }, 3.0]).collect();
        let pre = Preprocessor::identity(PreprocessKind::None, 3);
        let top = top_deviations(&pre, &normal, &unusual, 2);
        assert_eq!(top.iter().map(|d| d.feature).collect::<Vec<_>>(), [0, 1]);
        assert_eq!((top[0].normal, top[0].unusual), (10.0, 15.0));
        assert!(top[0].robust_z > 10.0 * top[1].robust_z, "{top:?}");
        assert!(top_deviations(&pre, &normal, &[], 2).is_empty());
    }
}
