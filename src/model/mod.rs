//! The meta-learned PU model: all of the paper's math lives below this module,
//! free of Kafka and I/O so it can be tested on its own.
//!
//! - [`closed_form`] — k, K, the batched solve, w = max(0, w̃), π = min(1, 1/max r)
//! - [`net`] — f, g, h and λ; adaptation and ratios on preprocessed tensors
//! - [`ensemble`] — several models' posteriors averaged into one decision
//! - [`prior_calibration`] — a map of the prior estimate chosen on validation tasks
//! - [`row_cache`] — per-row parts of an adaptation kept for a device's next one
//! - [`support`] — padding many tasks into one batch; the adapted per-task state
//! - [`preprocess`] — the feature transform that travels with the model
//! - [`file`] — the `.safetensors` model file with its metadata
//! - [`Model`] — the user-facing bundle of all of the above on raw features

pub mod closed_form;
mod draws;
pub mod ensemble;
pub mod explain;
pub mod file;
pub mod mlp;
pub mod net;
pub mod preprocess;
pub mod prior_calibration;
pub mod row_cache;
pub mod support;
#[cfg(test)]
mod test_models;

use serde::{Deserialize, Serialize};
use tch::{Device, Kind, Tensor};

pub use net::{MetaPuNet, NetConfig, PriorEstimate};
pub use preprocess::{PreprocessKind, Preprocessor};
pub use row_cache::RowCache;
pub use support::{AdaptedBatch, Support, SupportBatch, TaskState};

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ModelError {
    #[error("task {task}: {found} values do not make whole rows of {expected} features")]
    Dimension { expected: usize, found: usize, task: usize },
    #[error("task {task}: the support set has no positive (known-normal) rows")]
    NoPositives { task: usize },
    #[error("task {task}: features contain NaN or infinity")]
    NonFinite { task: usize },
    #[error("no tasks given")]
    EmptyBatch,
    #[error("task {task}: adapted state does not match the model's dimensions")]
    BadState { task: usize },
    #[error("record {record} refers to task {index}, but only {len} states were given")]
    TaskIndex { record: usize, index: usize, len: usize },
    #[error("the model expects {expected} features per record, the data has {found}")]
    FeatureCount { expected: usize, found: usize },
    #[error("{supports} supports do not make groups of {draws} draws of one device each")]
    Draws { supports: usize, draws: usize },
}

/// Where a model came from; stored in its file.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Provenance {
    /// sha256 of the training data as loaded (features and labels, in order).
    pub data_sha256: String,
    pub seed: u64,
    pub iterations: u64,
    pub best_iteration: u64,
    pub best_validation_accuracy: f64,
    pub source_tasks: usize,
    pub validation_tasks: usize,
    pub metapu_version: String,
}

/// Scores of records: posterior probability of normal traffic and the decision.
#[derive(Debug, Clone, PartialEq)]
pub struct Scores {
    pub posterior: Vec<f32>,
    pub normal: Vec<bool>,
}

/// A trained model on raw features: network, preprocessing and metadata.
#[derive(Debug)]
pub struct Model {
    pub net: MetaPuNet,
    pub preprocess: Preprocessor,
    pub feature_names: Vec<String>,
    pub provenance: Provenance,
}

/// CPU unless built with the `cuda` feature and a GPU is present.
pub fn default_device() -> Device {
    if cfg!(feature = "cuda") {
        Device::cuda_if_available()
    } else {
        Device::Cpu
    }
}

/// Where adaptation and scoring run, in words for the start-up log and `metapu info`;
/// `fallback` is true for a CUDA build that found no usable GPU (an operator who
/// installed the GPU build wants to hear that, loudly).
pub fn compute_report() -> (Device, String, bool) {
    let device = default_device();
    match device {
        Device::Cuda(i) => (device, format!("GPU (CUDA device {i} of {})", tch::Cuda::device_count()), false),
        _ if cfg!(feature = "cuda") => (
            device,
            "CPU: this CUDA build found no usable GPU (no NVIDIA driver, no device, or none visible to \
             the service)"
                .to_string(),
            true,
        ),
        _ => (device, "CPU".to_string(), false),
    }
}

fn check_rows(rows: &[f32], dim: usize, task: usize) -> Result<(), ModelError> {
    if rows.len() % dim != 0 {
        return Err(ModelError::Dimension { expected: dim, found: rows.len(), task });
    }
    if rows.iter().any(|v| !v.is_finite()) {
        return Err(ModelError::NonFinite { task });
    }
    Ok(())
}

impl Model {
    pub fn dim(&self) -> usize {
        self.net.config.input_dim as usize
    }

    /// Refuse data whose feature count differs from the model's.
    pub fn check_feature_count(&self, found: usize) -> Result<(), ModelError> {
        if found == self.dim() {
            Ok(())
        } else {
            Err(ModelError::FeatureCount { expected: self.dim(), found })
        }
    }

    /// Adapt to one task's raw support set.
    pub fn adapt(&self, support: Support<'_>) -> Result<TaskState, ModelError> {
        Ok(self.adapt_batch(&[support])?.remove(0))
    }

    /// Adapt to many tasks with one batched closed-form solve.
    pub fn adapt_batch(&self, supports: &[Support<'_>]) -> Result<Vec<TaskState>, ModelError> {
        self.adapt_plain(supports, 1)
    }

    /// Score raw records (row-major), record i under `states[task[i]]`, in one forward;
    /// a state with draws scores a record by the largest of its solves' posteriors.
    pub fn score(
        &self,
        states: &[&TaskState],
        task: &[usize],
        records: &[f32],
        threshold: f32,
    ) -> Result<Scores, ModelError> {
        let dim = self.dim();
        check_rows(records, dim, 0)?;
        let n = records.len() / dim;
        if task.len() != n {
            return Err(ModelError::Dimension { expected: dim, found: records.len(), task: 0 });
        }
        if let Some((record, &index)) = task.iter().enumerate().find(|(_, &t)| t >= states.len()) {
            return Err(ModelError::TaskIndex { record, index, len: states.len() });
        }
        if n == 0 {
            return Ok(Scores { posterior: vec![], normal: vec![] });
        }
        let adapted = AdaptedBatch::from_states(states, self.net.kind(), self.net.device())?;
        if adapted.w.size()[1] != self.net.config.embed_dim {
            return Err(ModelError::BadState { task: 0 });
        }
        let x = Tensor::from_slice(records).reshape([n as i64, dim as i64]).to_kind(self.net.kind());
        let x = self.preprocess.apply_tensor(&x.to_device(self.net.device()));
        let idx: Vec<i64> = task.iter().map(|&t| t as i64).collect();
        let idx = Tensor::from_slice(&idx).to_device(self.net.device());
        let posterior = tch::no_grad(|| {
            if states.iter().all(|s| s.draws.is_empty()) {
                let r = self.net.ratio_flat(&adapted, &idx, &x);
                Ok(closed_form::posterior(&adapted.prior.index_select(0, &idx), &r))
            } else {
                draws::largest_posterior(&self.net, states, &adapted, &idx, &x)
            }
        })?;
        let posterior =
            Vec::<f32>::try_from(posterior.to_kind(Kind::Float).to_device(Device::Cpu)).unwrap_or_default();
        let normal = posterior.iter().map(|&p| p >= threshold).collect();
        Ok(Scores { posterior, normal })
    }
}
