//! Small untrained models and random rows for the model's own tests.

use rand::Rng;

use super::{MetaPuNet, Model, NetConfig, PreprocessKind, Preprocessor, Provenance};

/// The paper's network on 6 features (task vectors of 4), initialised from `seed`, rows
/// scaled to unit length.
pub fn untrained(seed: u64) -> Model {
    let net = MetaPuNet::new(NetConfig::paper(6, 4), tch::Device::Cpu);
    net.init_from_seed(seed);
    Model {
        net,
        preprocess: Preprocessor::identity(PreprocessKind::L2, 6),
        feature_names: (0..6).map(|i| format!("x{i}")).collect(),
        provenance: Provenance::default(),
    }
}

/// `n` rows of 6 features, each uniform in [0, 10).
pub fn rows(rng: &mut rand_chacha::ChaCha8Rng, n: usize) -> Vec<f32> {
    (0..n * 6).map(|_| rng.gen_range(0.0f32..10.0)).collect()
}
