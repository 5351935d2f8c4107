//! metapu: few-shot anomaly detection for IoT fleets by meta-learned
//! positive-unlabeled classification (Kumagai et al., "Meta-learning for
//! Positive-unlabeled Classification").
//!
//! - [`model`] — the paper's model and its file format (pure, no I/O but the file)
//! - [`monitor`] — the daemon's decisions without Kafka: records in, incidents out
//! - [`daemon`] — the Kafka shell around the monitor: `metapu run`
//! - [`console`] — the analyst's desk and verdict API: `metapu console`
//! - [`data`] — tasks, loaders, the Synthetic generator, the evaluation protocol
//! - [`train`] — meta-training (Algorithm 1)
//! - [`evaluate`] — accuracy and prior error on protocol episodes

pub mod baselines;
pub mod broker;
pub mod console;
pub mod daemon;
pub mod data;
pub mod endpoints;
pub mod episodes;
pub mod model;
pub mod monitor;
pub mod sensor;
pub mod traffic;
pub mod train;
pub mod wall_clock;
