//! metapu's lab: the experiments that measure the product, apart from it. [`eval`] is
//! the paper's section 5 experiment (ours, its ablations and the baselines on the same
//! protocol episodes) and the real-traffic streaming, which feeds captures through the
//! daemon's own pipeline core on their capture clock. The lab depends on the product;
//! the product knows nothing of the lab.

pub mod eval;
