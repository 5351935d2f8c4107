//! Early stopping on validation accuracy, shared by ours and the meta-learned
//! baselines: the best checkpoint's weights are kept in memory, training stops after
//! `patience` validations without a better one, and the best is put back at the end.

use tch::{nn, Tensor};

/// The variables of a store, by name, copied out of the graph.
type Weights = Vec<(String, Tensor)>;

pub struct BestCheckpoint {
    accuracy: f64,
    iteration: u64,
    weights: Weights,
    since_best: u64,
    patience: u64,
}

impl BestCheckpoint {
    /// Starts from the store's current (initial) weights, which any validation beats.
    pub fn new(vs: &nn::VarStore, patience: u64) -> Self {
        Self { accuracy: -1.0, iteration: 0, weights: snapshot(vs), since_best: 0, patience }
    }

    /// Whether a validation at `accuracy` would be kept: callers copy the weights only
    /// then (with a weight average, the averaged weights are in the store only briefly).
    pub fn improves(&self, accuracy: f64) -> bool {
        accuracy > self.accuracy
    }

    /// Record a validation; `weights` are the store's copy when [`Self::improves`] said
    /// so. Returns true once `patience` validations in a row have not improved.
    pub fn record(&mut self, accuracy: f64, iteration: u64, weights: Option<Weights>) -> bool {
        match weights {
            Some(weights) => {
                self.keep(accuracy, iteration, weights);
                self.since_best = 0;
            }
            None => self.since_best += 1,
        }
        self.since_best >= self.patience
    }

    /// Keep these weights whatever they score (training interrupted before its first
    /// validation keeps what it has).
    pub fn keep(&mut self, accuracy: f64, iteration: u64, weights: Weights) {
        (self.accuracy, self.iteration, self.weights) = (accuracy, iteration, weights);
    }

    /// Put the best weights back into the store.
    pub fn restore(&self, vs: &nn::VarStore) {
        let vars = vs.variables();
        tch::no_grad(|| {
            for (name, value) in &self.weights {
                if let Some(mut var) = vars.get(name).map(Tensor::shallow_clone) {
                    var.copy_(value);
                }
            }
        });
    }

    pub fn accuracy(&self) -> f64 {
        self.accuracy
    }

    pub fn iteration(&self) -> u64 {
        self.iteration
    }
}

/// Copy every variable of the store, sorted by name.
pub fn snapshot(vs: &nn::VarStore) -> Weights {
    let mut vars: Weights = vs.variables().into_iter().map(|(n, t)| (n, t.detach().copy())).collect();
    vars.sort_by(|a, b| a.0.cmp(&b.0));
    vars
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::Device;

    fn store_with(value: f64) -> nn::VarStore {
        let vs = nn::VarStore::new(Device::Cpu);
        let _ = vs.root().var("w", &[2], nn::Init::Const(value));
        vs
    }

    fn weight(vs: &nn::VarStore) -> f64 {
        vs.variables()["w"].double_value(&[0])
    }

    #[test]
    fn stops_after_patience_validations_without_improvement_and_restores_the_best() {
        let vs = store_with(1.0);
        let mut best = BestCheckpoint::new(&vs, 2);
        assert!(best.improves(0.5));
        assert!(!best.record(0.5, 10, Some(snapshot(&vs))));
        let _ = tch::no_grad(|| vs.variables()["w"].shallow_clone().fill_(7.0));
        assert!(!best.improves(0.5), "a tie is not an improvement");
        assert!(!best.record(0.4, 20, None));
        assert!(best.record(0.5, 30, None), "second validation without improvement");
        best.restore(&vs);
        assert_eq!((best.accuracy(), best.iteration()), (0.5, 10));
        assert_eq!(weight(&vs), 1.0);
    }

    #[test]
    fn an_improvement_resets_the_count() {
        let vs = store_with(0.0);
        let mut best = BestCheckpoint::new(&vs, 2);
        assert!(!best.record(0.3, 1, Some(snapshot(&vs))));
        assert!(!best.record(0.2, 2, None));
        assert!(!best.record(0.6, 3, Some(snapshot(&vs))));
        assert!(!best.record(0.1, 4, None));
        assert_eq!(best.iteration(), 3);
    }
}
