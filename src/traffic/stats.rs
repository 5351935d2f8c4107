//! Damped incremental statistics (Kitsune, NDSS 2018, section IV-B): a stream's
//! weight, linear sum and squared sum decay by `2^(-λ·Δt)` between arrivals, so
//! each λ sees a different time horizon (λ = 5: ~0.2 s; λ = 0.01: ~100 s).

/// One stream's damped window at one decay rate.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Damped {
    pub weight: f64,
    linear: f64,
    squared: f64,
    last: f64,
}

fn decay_factor(lambda: f64, dt: f64) -> f64 {
    (-lambda * dt).exp2()
}

impl Damped {
    pub fn new(now: f64) -> Self {
        Self { weight: 0.0, linear: 0.0, squared: 0.0, last: now }
    }

    /// Age the window to `now`; time never runs backwards (late packets count as now).
    pub fn decay(&mut self, lambda: f64, now: f64) {
        let dt = now - self.last;
        if dt > 0.0 {
            let g = decay_factor(lambda, dt);
            self.weight *= g;
            self.linear *= g;
            self.squared *= g;
            self.last = now;
        }
    }

    pub fn insert(&mut self, lambda: f64, x: f64, now: f64) {
        self.decay(lambda, now);
        self.weight += 1.0;
        self.linear += x;
        self.squared += x * x;
    }

    pub fn mean(&self) -> f64 {
        if self.weight > 0.0 {
            self.linear / self.weight
        } else {
            0.0
        }
    }

    pub fn variance(&self) -> f64 {
        if self.weight > 0.0 {
            (self.squared / self.weight - self.mean().powi(2)).abs()
        } else {
            0.0
        }
    }

    pub fn std(&self) -> f64 {
        self.variance().sqrt()
    }

    pub fn last_update(&self) -> f64 {
        self.last
    }
}

/// The seven statistics N-BaIoT reports for a two-way stream (channel or socket),
/// seen from the direction of the packet just inserted.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PairStats {
    pub weight: f64,
    pub mean: f64,
    pub std: f64,
    pub magnitude: f64,
    pub radius: f64,
    pub covariance: f64,
    pub pcc: f64,
}

/// A two-way stream at one decay rate: a damped window per direction plus the
/// damped sum of products of the two directions' residuals.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DampedPair {
    side: [Damped; 2],
    residual_products: f64,
    products_last: f64,
    last_residual: [f64; 2],
}

impl DampedPair {
    pub fn new(now: f64) -> Self {
        Self {
            side: [Damped::new(now); 2],
            residual_products: 0.0,
            products_last: now,
            last_residual: [0.0; 2],
        }
    }

    /// Insert `x` on direction `dir` (0 or 1) and report the pair from that side.
    pub fn insert(&mut self, lambda: f64, dir: usize, x: f64, now: f64) -> PairStats {
        let other = 1 - dir;
        self.side[dir].insert(lambda, x, now);
        self.side[other].decay(lambda, now);
        let dt = now - self.products_last;
        if dt > 0.0 {
            self.residual_products *= decay_factor(lambda, dt);
            self.products_last = now;
        }
        let residual = x - self.side[dir].mean();
        self.residual_products += residual * self.last_residual[other];
        self.last_residual[dir] = residual;

        let (me, them) = (&self.side[dir], &self.side[other]);
        let covariance = self.residual_products / (me.weight + them.weight);
        let spread = me.std() * them.std();
        PairStats {
            weight: me.weight,
            mean: me.mean(),
            std: me.std(),
            magnitude: (me.mean().powi(2) + them.mean().powi(2)).sqrt(),
            // N-BaIoT's radius is sqrt(σ_i⁴ + σ_j⁴): checked on its published rows,
            // where radius² = variance_i² + variance_j² to the printed digits.
            radius: (me.variance().powi(2) + them.variance().powi(2)).sqrt(),
            covariance,
            pcc: if spread > 0.0 { covariance / spread } else { 0.0 },
        }
    }

    pub fn last_update(&self) -> f64 {
        self.side[0].last.max(self.side[1].last)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-9 * b.abs().max(1.0)
    }

    #[test]
    fn one_way_window_by_hand() {
        // λ = 1: one second halves the window. 100 at t=10, 300 at t=11.
        let mut s = Damped::new(10.0);
        s.insert(1.0, 100.0, 10.0);
        s.insert(1.0, 300.0, 11.0);
        assert!(close(s.weight, 1.5));
        assert!(close(s.mean(), 350.0 / 1.5));
        assert!(close(s.variance(), 95_000.0 / 1.5 - (350.0f64 / 1.5).powi(2)));
        // Late packets do not run time backwards.
        s.decay(1.0, 10.5);
        assert!(close(s.weight, 1.5));
    }

    #[test]
    fn two_way_stream_by_hand() {
        let l = 1.0;
        let mut p = DampedPair::new(0.0);
        let a = p.insert(l, 0, 100.0, 0.0);
        assert_eq!((a.weight, a.mean, a.std, a.magnitude, a.covariance), (1.0, 100.0, 0.0, 100.0, 0.0));
        // a: w = 1.5, mean 233.33, residual 66.67 (b has none yet: no product).
        let a = p.insert(l, 0, 300.0, 1.0);
        assert!(close(a.covariance, 0.0));
        // b: first packet, residual 0. Magnitude sees a's mean decayed to t=2.
        let b = p.insert(l, 1, 200.0, 2.0);
        assert!(close(b.weight, 1.0));
        assert!(close(b.magnitude, (200.0f64.powi(2) + (350.0f64 / 1.5).powi(2)).sqrt()));
        let var_a = 95_000.0 / 1.5 - (350.0f64 / 1.5).powi(2);
        assert!(close(b.radius, var_a));
        // b: w = 1.5, mean 333.33, residual 66.67 → products 66.67², a's weight 1.5/4.
        let b = p.insert(l, 1, 400.0, 3.0);
        let r = 400.0 - 500.0 / 1.5;
        let r_a = 300.0 - 350.0 / 1.5;
        assert!(close(b.mean, 500.0 / 1.5));
        assert!(close(b.covariance, r * r_a / (1.5 + 0.375)));
        let var_b = (0.5 * 40_000.0 + 160_000.0) / 1.5 - (500.0f64 / 1.5).powi(2);
        assert!(close(b.pcc, b.covariance / (var_b.sqrt() * var_a.sqrt())));
        assert!(close(b.radius, (var_a.powi(2) + var_b.powi(2)).sqrt()));
    }
}
