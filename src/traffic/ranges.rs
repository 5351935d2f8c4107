//! Side-by-side feature ranges of simulated and real rows (docs/traffic.md):
//! per group of rows, the min / median / max of chosen columns, and the share of
//! values inside the real benign bounds of all nine N-BaIoT devices.

use std::path::Path;

use crate::data::DataError;

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spread {
    pub min: f32,
    pub median: f32,
    pub max: f32,
}

/// min / median / max of column `col` over row-major `rows` of width `dim`.
pub fn spread(rows: &[f32], dim: usize, col: usize) -> Option<Spread> {
    let mut v: Vec<f32> = rows.chunks(dim).filter_map(|r| r.get(col).copied()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f32::total_cmp);
    Some(Spread { min: v[0], median: v[v.len() / 2], max: v[v.len() - 1] })
}

/// Per-feature benign bounds: `feature,min,max` lines.
pub fn read_bounds(path: &Path) -> Result<Vec<(String, f32, f32)>, DataError> {
    let bad = |reason: String| DataError::BadFile { path: path.into(), reason };
    let file = std::fs::File::open(path).map_err(|source| DataError::Io { path: path.into(), source })?;
    let mut r = csv::ReaderBuilder::new().has_headers(true).from_reader(std::io::BufReader::new(file));
    let mut out = Vec::new();
    for rec in r.records() {
        let rec = rec.map_err(|e| bad(e.to_string()))?;
        let num = |i: usize| -> Result<f32, DataError> {
            rec.get(i)
                .and_then(|s| s.trim().parse().ok())
                .ok_or_else(|| bad(format!("line {}: not a number", out.len() + 2)))
        };
        out.push((rec.get(0).unwrap_or_default().to_string(), num(1)?, num(2)?));
    }
    Ok(out)
}

/// Share of values of each column inside `[min, max]` of the bounds (same order).
pub fn share_within(rows: &[f32], dim: usize, bounds: &[(String, f32, f32)]) -> Vec<f64> {
    let n = rows.len() / dim.max(1);
    (0..dim.min(bounds.len()))
        .map(|c| {
            let (_, lo, hi) = &bounds[c];
            let inside = rows.chunks(dim).filter(|r| r[c] >= *lo && r[c] <= *hi).count();
            inside as f64 / n.max(1) as f64
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_and_share() {
        let rows = [1.0, 10.0, 3.0, 30.0, 2.0, 20.0];
        assert_eq!(spread(&rows, 2, 1), Some(Spread { min: 10.0, median: 20.0, max: 30.0 }));
        let bounds = vec![("a".to_string(), 0.0, 2.5), ("b".to_string(), 15.0, 100.0)];
        let s = share_within(&rows, 2, &bounds);
        assert!((s[0] - 2.0 / 3.0).abs() < 1e-12 && (s[1] - 2.0 / 3.0).abs() < 1e-12);
    }
}
