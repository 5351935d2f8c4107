//! Paired Student t-test (two-sided), for "not significantly worse than the best".

/// Mean and standard error of the mean.
pub fn mean_se(v: &[f64]) -> (f64, f64) {
    let n = v.len() as f64;
    if v.is_empty() {
        return (f64::NAN, f64::NAN);
    }
    let mean = v.iter().sum::<f64>() / n;
    if v.len() < 2 {
        return (mean, 0.0);
    }
    let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0);
    (mean, (var / n).sqrt())
}

/// Result of a paired t-test on a − b.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PairedT {
    pub t: f64,
    pub df: f64,
    /// Two-sided p-value.
    pub p: f64,
}

/// Paired t-test of equal means; `a` and `b` are aligned observations.
pub fn paired_t(a: &[f64], b: &[f64]) -> PairedT {
    let d: Vec<f64> = a.iter().zip(b).map(|(x, y)| x - y).collect();
    let df = d.len() as f64 - 1.0;
    let (mean, se) = mean_se(&d);
    if d.len() < 2 || se == 0.0 {
        // Identical columns (or one pair): no evidence of a difference unless the mean differs.
        let p = if mean == 0.0 || mean.is_nan() { 1.0 } else { 0.0 };
        return PairedT { t: if mean == 0.0 { 0.0 } else { f64::INFINITY * mean.signum() }, df, p };
    }
    let t = mean / se;
    PairedT { t, df, p: two_sided_p(t, df) }
}

/// P(|T| ≥ |t|) for Student's t with `df` degrees of freedom:
/// I_{df/(df+t²)}(df/2, 1/2).
pub fn two_sided_p(t: f64, df: f64) -> f64 {
    regularized_incomplete_beta(df / (df + t * t), df / 2.0, 0.5)
}

fn ln_gamma(x: f64) -> f64 {
    // Lanczos approximation (g = 7, n = 9), accurate to ~1e-15 for x > 0.
    const C: [f64; 9] = [
        0.999_999_999_999_809_9,
        676.520_368_121_885_1,
        -1_259.139_216_722_402_8,
        771.323_428_777_653_1,
        -176.615_029_162_140_6,
        12.507_343_278_686_905,
        -0.138_571_095_265_720_12,
        9.984_369_578_019_572e-6,
        1.505_632_735_149_311_6e-7,
    ];
    if x < 0.5 {
        let pi = std::f64::consts::PI;
        return (pi / (pi * x).sin()).ln() - ln_gamma(1.0 - x);
    }
    let x = x - 1.0;
    let mut a = C[0];
    let t = x + 7.5;
    for (i, c) in C.iter().enumerate().skip(1) {
        a += c / (x + i as f64);
    }
    0.5 * (2.0 * std::f64::consts::PI).ln() + (x + 0.5) * t.ln() - t + a.ln()
}

/// I_x(a, b) by its continued fraction (modified Lentz), using the symmetry
/// I_x(a, b) = 1 − I_{1−x}(b, a) where the fraction converges slowly.
pub fn regularized_incomplete_beta(x: f64, a: f64, b: f64) -> f64 {
    if x <= 0.0 {
        return 0.0;
    }
    if x >= 1.0 {
        return 1.0;
    }
    let front = (ln_gamma(a + b) - ln_gamma(a) - ln_gamma(b) + a * x.ln() + b * (1.0 - x).ln()).exp();
    if x > (a + 1.0) / (a + b + 2.0) {
        return 1.0 - regularized_incomplete_beta(1.0 - x, b, a);
    }
    let tiny = 1e-300;
    let (mut c, mut d) = (1.0, 1.0 - (a + b) * x / (a + 1.0));
    if d.abs() < tiny {
        d = tiny;
    }
    d = 1.0 / d;
    let mut f = d;
    for m in 1..500 {
        let m = m as f64;
        // Even step.
        let num = m * (b - m) * x / ((a + 2.0 * m - 1.0) * (a + 2.0 * m));
        d = 1.0 + num * d;
        d = if d.abs() < tiny { 1.0 / tiny } else { 1.0 / d };
        c = 1.0 + num / c;
        if c.abs() < tiny {
            c = tiny;
        }
        f *= c * d;
        // Odd step.
        let num = -(a + m) * (a + b + m) * x / ((a + 2.0 * m) * (a + 2.0 * m + 1.0));
        d = 1.0 + num * d;
        d = if d.abs() < tiny { 1.0 / tiny } else { 1.0 / d };
        c = 1.0 + num / c;
        if c.abs() < tiny {
            c = tiny;
        }
        let delta = c * d;
        f *= delta;
        if (delta - 1.0).abs() < 1e-15 {
            break;
        }
    }
    front * f / a
}
