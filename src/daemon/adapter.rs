//! Adaptation off the scoring path, on the service clock: the monitor's adaptation
//! worker on a thread below the daemon's priority, its results coming back to the
//! service loop. The service never waits for it; at most one job is in flight.

use crate::model::Model;
use crate::monitor::{AdaptJob, AdaptWorker, WorkerSettings};

pub use crate::monitor::Finished;

/// How many nice levels the adaptation thread (and the torch workers it starts) runs
/// below the daemon: scoring comes first, adaptation takes the CPU time scoring leaves.
/// Relative, so a unit's own `Nice=` still applies to both.
const ADAPTER_NICE_OFFSET: i32 = 10;

pub struct Adapter {
    worker: AdaptWorker,
    pub results: tokio::sync::mpsc::UnboundedReceiver<Finished>,
    pub busy: bool,
}

impl Adapter {
    pub fn spawn(model: Model, generation: u64, batch_size: usize) -> Self {
        let (done_tx, results) = tokio::sync::mpsc::unbounded_channel();
        // Every device's windows, all at once, each round: a cache of rows' parts would
        // hold the whole fleet's.
        let settings = WorkerSettings { batch_size, nice_offset: ADAPTER_NICE_OFFSET, cache_rows: false };
        let worker = AdaptWorker::spawn("metapu-adapt".into(), model, generation, settings, move |f| {
            done_tx.send(f).is_ok()
        });
        Self { worker, results, busy: false }
    }

    /// Replace the adapter's model (after a reload).
    pub fn set_model(&self, model: Model, generation: u64) {
        self.worker.set_model(model, generation);
    }

    /// Hand over a job unless one is running. Returns whether it was taken.
    pub fn submit(&mut self, generation: u64, jobs: Vec<AdaptJob>) -> bool {
        if self.busy || jobs.is_empty() {
            return false;
        }
        self.busy = self.worker.solve(generation, jobs);
        self.busy
    }
}
