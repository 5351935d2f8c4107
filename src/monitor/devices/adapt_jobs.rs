//! Adaptation jobs solved: a device's windows (an [`AdaptJob`]) to its classifier, on the
//! windows or on its draws (`drawn_supports.rs`), in batches of one batched solve each.
//! The devices (`owner.rs`) run them inline; the solver (`solver.rs`) and the daemon's
//! adapter thread run them off the scoring path. Both import this, neither the other.

use super::drawn_supports::{draw_supports, DrawnSupport, DRAWS};
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
        // The table adapts all its devices one way; a batch of both is solved in two.
        for drawn in [false, true] {
            let group: Vec<&AdaptJob> = chunk.iter().filter(|j| j.drawn == drawn).collect();
            if !group.is_empty() {
                out.extend(adapt_group(model, &group, drawn, cache.as_deref_mut()));
            }
        }
    }
    out
}

/// One batched solve of `jobs`: on their draws, or on their windows as they are.
fn adapt_group(model: &Model, jobs: &[&AdaptJob], drawn: bool, cache: Option<&mut RowCache>) -> Vec<Adapted> {
    let draws: Vec<Vec<DrawnSupport>> =
        if drawn { jobs.iter().map(|j| draw_supports(j, model.dim())).collect() } else { Vec::new() };
    let supports: Vec<(&str, Support<'_>)> = if drawn {
        jobs.iter()
            .zip(&draws)
            .flat_map(|(j, mine)| {
                mine.iter().map(|d| {
                    (j.device.as_str(), Support { positives: &d.positives, unlabeled: &d.unlabeled })
                })
            })
            .collect()
    } else {
        jobs.iter()
            .map(|j| (j.device.as_str(), Support { positives: &j.positive, unlabeled: &j.unlabeled }))
            .collect()
    };
    match model.adapt_drawn(&supports, if drawn { DRAWS } else { 1 }, cache) {
        Ok(states) => jobs
            .iter()
            .zip(states)
            .map(|(j, state)| Adapted { device: j.device.clone(), handover: j.handover, state })
            .collect(),
        Err(e) => {
            tracing::warn!(error = %e, devices = jobs.len(), "adaptation batch failed");
            Vec::new()
        }
    }
}
