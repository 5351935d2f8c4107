//! Adaptation jobs solved: a device's windows (an [`AdaptJob`]) to its classifier, in
//! batches of one batched solve each. The devices (`owner.rs`) run them inline; the solver
//! (`solver.rs`) and the daemon's adapter thread run them off the scoring path. Both
//! import this, neither the other.

use super::AdaptJob;
use crate::model::{Model, RowCache, Support, TaskState};

/// A device's classifier adapted on the windows of one [`AdaptJob`].
#[derive(Debug, Clone)]
pub struct Adapted {
    pub device: String,
    pub handover: u64,
    pub state: TaskState,
}

/// Adapt jobs in batches of `batch_size` with one batched solve each.
pub fn run_adaptation(model: &Model, jobs: &[AdaptJob], batch_size: usize) -> Vec<Adapted> {
    adapt_jobs(model, jobs, batch_size, None)
}

/// [`run_adaptation`], embedding only the rows that the devices' last adaptations in
/// `cache` did not have (`model/row_cache.rs`).
pub fn run_adaptation_cached(
    model: &Model,
    jobs: &[AdaptJob],
    batch_size: usize,
    cache: &mut RowCache,
) -> Vec<Adapted> {
    adapt_jobs(model, jobs, batch_size, Some(cache))
}

fn adapt_jobs(
    model: &Model,
    jobs: &[AdaptJob],
    batch_size: usize,
    mut cache: Option<&mut RowCache>,
) -> Vec<Adapted> {
    let mut out = Vec::with_capacity(jobs.len());
    for chunk in jobs.chunks(batch_size.max(1)) {
        let supports: Vec<(&str, Support<'_>)> = chunk
            .iter()
            .map(|j| (j.device.as_str(), Support { positives: &j.positive, unlabeled: &j.unlabeled }))
            .collect();
        let adapted = match cache.as_deref_mut() {
            Some(cache) => model.adapt_batch_cached(&supports, cache),
            None => model.adapt_batch(&supports.iter().map(|(_, s)| *s).collect::<Vec<_>>()),
        };
        match adapted {
            Ok(states) => out.extend(chunk.iter().zip(states).map(|(j, state)| Adapted {
                device: j.device.clone(),
                handover: j.handover,
                state,
            })),
            Err(e) => tracing::warn!(error = %e, devices = chunk.len(), "adaptation batch failed"),
        }
    }
    out
}
