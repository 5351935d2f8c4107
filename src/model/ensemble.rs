//! Several independently meta-trained models used as one: each adapts to the support
//! on its own (its own w and π̂), and the ensemble averages their posteriors.

/// A member's posterior P(positive | x) = min(1, π·r(x)); NaN stays NaN so that a
/// broken score is never read as "normal".
pub fn posterior(prior: f64, ratio: f64) -> f64 {
    let p = prior * ratio;
    if p > 1.0 {
        1.0
    } else {
        p
    }
}

/// The ensemble's posterior: the mean of its members' posteriors, from (π_m, r_m(x))
/// pairs. With one member the decision `≥ 0.5` is that member's `π·r ≥ 0.5`.
pub fn mean_posterior(members: impl IntoIterator<Item = (f64, f64)>) -> f64 {
    let (sum, n) = members
        .into_iter()
        .fold((0.0, 0usize), |(s, n), (prior, ratio)| (s + posterior(prior, ratio), n + 1));
    if n == 0 {
        f64::NAN
    } else {
        sum / n as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_member_decides_as_the_single_model_and_two_average() {
        for (prior, ratio) in [(0.4, 1.0), (0.4, 1.25), (0.4, 1.3), (1.0, 0.49), (0.2, 9.0)] {
            assert_eq!(mean_posterior([(prior, ratio)]) >= 0.5, prior * ratio - 0.5 >= 0.0);
        }
        // A confident member (clipped at 1) and a doubtful one: 0.5 · (1 + 0.2) = 0.6.
        assert!((mean_posterior([(0.5, 4.0), (0.5, 0.4)]) - 0.6).abs() < 1e-12);
        assert!(mean_posterior([(0.5, 0.8), (0.5, 0.8)]) < 0.5);
        assert!(mean_posterior([(0.5, f64::NAN), (0.5, 2.0)]).is_nan());
        assert!(mean_posterior(std::iter::empty()).is_nan());
    }
}
