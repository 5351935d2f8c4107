//! Exponential moving average of the weights over meta-training steps (Polyak
//! averaging). Validation accuracy of the raw weights moves by a point or more
//! from one checkpoint to the next at Adam's 1e-3 step; the average follows the
//! same trajectory without that step noise, and is what gets validated and kept.
//! With a decay of 0 it is off: nothing is copied and every call is a no-op, so a
//! training loop uses it the same way either way.

use tch::{nn, Tensor};

pub struct WeightAverage {
    decay: f64,
    steps: u64,
    /// (live variable, its running average), paired by name once.
    pairs: Vec<(Tensor, Tensor)>,
}

impl WeightAverage {
    /// Averages start at the current weights; `decay` ≤ 0 turns averaging off.
    pub fn new(vs: &nn::VarStore, decay: f64) -> Self {
        let pairs = if decay > 0.0 {
            let mut named: Vec<(String, Tensor)> = vs.variables().into_iter().collect();
            named.sort_by(|a, b| a.0.cmp(&b.0));
            named.into_iter().map(|(_, var)| (var.shallow_clone(), var.detach().copy())).collect()
        } else {
            Vec::new()
        };
        Self { decay, steps: 0, pairs }
    }

    /// Fold the current weights in, after an optimiser step. The first steps use a
    /// shorter memory, (1 + n)/(10 + n), so the average is not anchored to the
    /// random initialisation.
    pub fn update(&mut self) {
        self.steps += 1;
        let n = self.steps as f64;
        let decay = self.decay.min((1.0 + n) / (10.0 + n));
        tch::no_grad(|| {
            for (var, avg) in &mut self.pairs {
                let _ = avg.g_mul_scalar_(decay).g_add_(&(&*var * (1.0 - decay)));
            }
        });
    }

    /// Run `f` (validate, snapshot) with the averaged weights in place of the live
    /// ones, then put the live ones back so that training goes on from them.
    pub fn applied<R>(&mut self, f: impl FnOnce() -> R) -> R {
        self.swap();
        let result = f();
        self.swap();
        result
    }

    /// Exchange the live weights and the averages; a second call undoes the first.
    fn swap(&mut self) {
        tch::no_grad(|| {
            for (var, avg) in &mut self.pairs {
                let live = var.detach().copy();
                var.copy_(avg);
                avg.copy_(&live);
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::{Device, Kind};

    #[test]
    fn the_average_trails_the_weights_and_is_applied_only_inside_applied() {
        let vs = nn::VarStore::new(Device::Cpu);
        let mut w = vs.root().var("w", &[2], nn::Init::Const(0.0));
        let mut avg = WeightAverage::new(&vs, 0.5);
        tch::no_grad(|| {
            let _ = w.fill_(1.0);
        });
        avg.update(); // decay min(0.5, 2/11): avg = 0 * 2/11 + 1 * 9/11
        let seen = avg.applied(|| w.double_value(&[0]));
        let expected = 9.0 / 11.0;
        assert!((seen - expected).abs() < 1e-6, "{seen}");
        assert_eq!(w.sum(Kind::Float).double_value(&[]), 2.0);

        // Off: the live weights are what `applied` sees.
        let mut off = WeightAverage::new(&vs, 0.0);
        off.update();
        assert_eq!(off.applied(|| w.double_value(&[0])), 1.0);
    }
}
