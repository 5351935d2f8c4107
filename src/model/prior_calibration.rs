//! A monotone map of the prior estimate, π̂ ↦ min(1, c·π̂^γ), chosen on validation
//! tasks. The estimate min(1, 1/max_S r) is the paper's; with 30 support rows of two
//! overlapping classes its error is mostly spread, not bias (docs/architecture.md), so
//! the identity is always a candidate and wins ties: a map is used only where
//! validation prefers it.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PriorCalibration {
    /// c
    pub scale: f64,
    /// γ
    pub power: f64,
}

impl PriorCalibration {
    pub const IDENTITY: Self = Self { scale: 1.0, power: 1.0 };

    /// The candidates, the identity first: c ∈ {0.7, 0.85, 1, 1.15}, γ ∈ {0.8, 1, 1.2,
    /// 1.5} (also the grid `examples/prior_estimators.rs` prints).
    pub fn grid() -> Vec<Self> {
        let mut out = vec![Self::IDENTITY];
        for scale in [0.7, 0.85, 1.0, 1.15] {
            for power in [0.8, 1.0, 1.2, 1.5] {
                let c = Self { scale, power };
                if c != Self::IDENTITY {
                    out.push(c);
                }
            }
        }
        out
    }

    /// The calibrated prior, in [0, 1]; NaN stays NaN (a broken estimate is never
    /// turned into a usable one).
    pub fn apply(&self, prior: f64) -> f64 {
        if prior.is_nan() {
            return prior;
        }
        (self.scale * prior.max(0.0).powf(self.power)).min(1.0)
    }

    /// The candidate with the highest `score` (validation accuracy); the earliest on
    /// ties, so the identity unless another is strictly better. NaN scores never win.
    pub fn best_by(candidates: &[Self], mut score: impl FnMut(Self) -> f64) -> Option<(Self, f64)> {
        let mut best: Option<(Self, f64)> = None;
        for &c in candidates {
            let s = score(c);
            if !s.is_nan() && best.is_none_or(|(_, b)| s > b) {
                best = Some((c, s));
            }
        }
        best
    }

    pub fn is_identity(&self) -> bool {
        *self == Self::IDENTITY
    }
}

impl std::fmt::Display for PriorCalibration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.is_identity() {
            write!(f, "π̂")
        } else {
            write!(f, "{}·π̂^{}", self.scale, self.power)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_into_the_unit_interval_and_keeps_nan() {
        let c = PriorCalibration { scale: 1.15, power: 0.8 };
        assert_eq!(c.apply(1.0), 1.0);
        assert_eq!(c.apply(0.0), 0.0);
        assert!((c.apply(0.5) - 1.15 * 0.5f64.powf(0.8)).abs() < 1e-12);
        assert!(c.apply(f64::NAN).is_nan());
        assert_eq!(PriorCalibration::IDENTITY.apply(0.37), 0.37);
    }

    #[test]
    fn the_grid_starts_with_the_identity_and_holds_no_duplicate() {
        let g = PriorCalibration::grid();
        assert_eq!(g[0], PriorCalibration::IDENTITY);
        assert_eq!(g.len(), 16);
        assert_eq!(g.iter().filter(|c| c.is_identity()).count(), 1);
    }

    #[test]
    fn choice_keeps_the_identity_on_ties_and_takes_a_strictly_better_map() {
        let g = PriorCalibration::grid();
        let (flat, _) = PriorCalibration::best_by(&g, |_| 0.8).unwrap();
        assert!(flat.is_identity());
        // A score that peaks at c = 0.85, γ = 1.2 (estimates too high at low π).
        let (peak, s) =
            PriorCalibration::best_by(&g, |c| 1.0 - (c.scale - 0.85).abs() - (c.power - 1.2).abs()).unwrap();
        assert_eq!(peak, PriorCalibration { scale: 0.85, power: 1.2 });
        assert!((s - 1.0).abs() < 1e-12);
        assert!(PriorCalibration::best_by(&g, |_| f64::NAN).is_none());
    }
}
