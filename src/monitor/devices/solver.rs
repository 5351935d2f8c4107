//! Where the event clock's adaptation jobs are solved. The devices hand a job over at a
//! device's adaptation point k and installs its classifier at the device's point k+1
//! (`owner.rs`), so a job can be solved while scoring goes on. Which solver does it
//! changes when the work is done, never what is decided: a job's result depends on its
//! windows alone, and it is installed at a point fixed on the device's time.
//!
//! - [`InlineSolver`] solves a job when its result is first needed, on the scoring
//!   thread, with the scoring model (the lab, the tests, the benches' reference);
//! - [`ThreadSolver`] solves jobs on threads of their own, each with its own copy of the
//!   model (torch tensors are not `Sync`): the daemon's. A device's jobs always go to the
//!   same thread, which keeps its rows' parts (`RowCache`).

use std::collections::VecDeque;
use std::sync::mpsc;

use super::adapt_jobs::{run_adaptation_cached, Adapted};
use super::adapt_worker::{AdaptWorker, WorkerSettings};
use super::AdaptJob;
use crate::model::{Model, RowCache};

/// One submission's results, under the model generation it was submitted with.
pub struct Solved {
    pub generation: u64,
    pub states: Vec<Adapted>,
}

/// Solves submitted jobs; results come back in submission order.
pub trait Solver: Send {
    /// Start solving `jobs` (adapted on the model of `generation`).
    fn submit(&mut self, generation: u64, jobs: Vec<AdaptJob>);

    /// The next submission's results: `None` when none is submitted and not yet taken,
    /// or (`wait` false) when the next is not solved yet. `scoring` is the model the
    /// monitor scores with.
    fn next(&mut self, scoring: &Model, wait: bool) -> Option<Solved>;

    /// Solve later submissions on `models` (a copy per thread that solves), of
    /// `generation` (a reload).
    fn replace_model(&mut self, models: Vec<Model>, generation: u64);
}

/// Solves on the scoring thread, when a result is asked for.
pub struct InlineSolver {
    queued: VecDeque<(u64, Vec<AdaptJob>)>,
    batch_size: usize,
    rows: RowCache,
}

impl InlineSolver {
    pub fn new(batch_size: usize) -> Self {
        Self { queued: VecDeque::new(), batch_size, rows: RowCache::default() }
    }
}

impl Solver for InlineSolver {
    fn submit(&mut self, generation: u64, jobs: Vec<AdaptJob>) {
        self.queued.push_back((generation, jobs));
    }

    fn next(&mut self, scoring: &Model, wait: bool) -> Option<Solved> {
        if !wait {
            return None;
        }
        let (generation, jobs) = self.queued.pop_front()?;
        Some(Solved {
            generation,
            states: run_adaptation_cached(scoring, &jobs, self.batch_size, &mut self.rows),
        })
    }

    /// It solves on the scoring model, which the monitor replaces itself; the rows'
    /// parts were the old model's.
    fn replace_model(&mut self, _models: Vec<Model>, _generation: u64) {
        self.rows = RowCache::default();
    }
}

/// A solver thread: the adaptation worker, its results on a channel of its own.
struct Worker {
    worker: AdaptWorker,
    results: mpsc::Receiver<Vec<Adapted>>,
}

impl Worker {
    fn spawn(index: usize, model: Model, batch_size: usize) -> Self {
        let (done_tx, results) = mpsc::channel();
        // A device's jobs always come to the same thread: its rows' parts are kept.
        let settings = WorkerSettings { batch_size, nice_offset: 0, cache_rows: true };
        // The devices drop results of an older model themselves: every job is solved.
        let worker =
            AdaptWorker::spawn(format!("metapu-solve-{index}"), model, SOLVE_ANY, settings, move |f| {
                done_tx.send(f.states).is_ok()
            });
        Self { worker, results }
    }
}

/// A submission not yet taken: the workers whose share is still out, and the results of
/// the others.
struct Submission {
    generation: u64,
    waiting: Vec<usize>,
    states: Vec<Adapted>,
}

/// The generation every solver thread's jobs and models are given: the devices keep
/// the generations and drops what an older model solved.
const SOLVE_ANY: u64 = 0;

/// Solves on threads of its own: each submission is split by device over the threads.
pub struct ThreadSolver {
    workers: Vec<Worker>,
    /// Which thread solves a device's jobs (fixed seeds: the same in every process).
    route: ahash::RandomState,
    in_flight: VecDeque<Submission>,
}

impl ThreadSolver {
    /// A thread per model copy in `models` (at least one).
    pub fn spawn(models: Vec<Model>, batch_size: usize) -> Self {
        assert!(!models.is_empty(), "a solver needs a model copy per thread");
        let workers = models.into_iter().enumerate().map(|(i, m)| Worker::spawn(i, m, batch_size)).collect();
        Self { workers, route: ahash::RandomState::with_seeds(9, 10, 11, 12), in_flight: VecDeque::new() }
    }
}

impl Solver for ThreadSolver {
    fn submit(&mut self, generation: u64, jobs: Vec<AdaptJob>) {
        let mut shares: Vec<Vec<AdaptJob>> = self.workers.iter().map(|_| Vec::new()).collect();
        for job in jobs {
            let at = self.route.hash_one(job.device.as_str()) as usize % shares.len();
            shares[at].push(job);
        }
        let mut waiting = Vec::new();
        for (i, share) in shares.into_iter().enumerate().filter(|(_, s)| !s.is_empty()) {
            // A thread that is gone answers nothing: its jobs' devices keep the
            // classifier they have until a first-classifier adaptation gives them one.
            if self.workers[i].worker.solve(SOLVE_ANY, share) {
                waiting.push(i);
            } else {
                tracing::error!("a solver thread is gone; adaptation jobs dropped");
            }
        }
        self.in_flight.push_back(Submission { generation, waiting, states: Vec::new() });
    }

    fn next(&mut self, _scoring: &Model, wait: bool) -> Option<Solved> {
        let first = self.in_flight.front_mut()?;
        // Each thread answers in submission order, and the oldest submission is taken
        // first: a thread's next answer is its share of this one.
        let mut still = Vec::new();
        for &i in &first.waiting {
            let results = &self.workers[i].results;
            let answer = if wait { results.recv().ok() } else { results.try_recv().ok() };
            match answer {
                Some(states) => first.states.extend(states),
                // The thread died with work in flight (a bug in torch's solve): fail loudly.
                None if wait => panic!("solver thread {i} ended with work in flight"),
                None => still.push(i),
            }
        }
        first.waiting = still;
        if !first.waiting.is_empty() {
            return None;
        }
        let done = self.in_flight.pop_front()?;
        Some(Solved { generation: done.generation, states: done.states })
    }

    fn replace_model(&mut self, models: Vec<Model>, _generation: u64) {
        assert_eq!(models.len(), self.workers.len(), "a model copy per solver thread");
        for (worker, model) in self.workers.iter().zip(models) {
            if !worker.worker.set_model(model, SOLVE_ANY) {
                tracing::error!("a solver thread is gone; the new model is not adapted on");
            }
        }
    }
}
