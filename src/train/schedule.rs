//! The learning rate over the meta-training budget. The paper keeps Adam at 10⁻³
//! throughout; a cosine decay to zero at the budget's end lets the last steps settle
//! into a minimum instead of jittering around it at the full step size.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum LrSchedule {
    /// The paper's: the same rate at every step.
    #[default]
    Constant,
    /// ½(1 + cos(π·t/T)) times the rate at step t of a budget of T steps.
    Cosine,
}

impl LrSchedule {
    /// The rate for step `iteration` (1-based) of `budget` steps.
    pub fn rate(self, base: f64, iteration: u64, budget: u64) -> f64 {
        match self {
            Self::Constant => base,
            Self::Cosine => {
                let progress = (iteration.saturating_sub(1) as f64 / budget.max(1) as f64).min(1.0);
                base * 0.5 * (1.0 + (std::f64::consts::PI * progress).cos())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constant_keeps_the_rate_and_cosine_falls_from_it_to_zero() {
        for t in [1, 500, 1000] {
            assert_eq!(LrSchedule::Constant.rate(1e-3, t, 1000), 1e-3);
        }
        let cosine = |t| LrSchedule::Cosine.rate(1e-3, t, 1000);
        assert_eq!(cosine(1), 1e-3);
        assert!((cosine(501) - 0.5e-3).abs() < 1e-12);
        assert!(cosine(1000) < 1e-8 && cosine(1000) > 0.0);
        assert!((2..=1000).all(|t| cosine(t) < cosine(t - 1)));
    }
}
