//! Where the event clock's adaptation jobs are solved. The engine hands a job over at a
//! device's adaptation point k and installs its classifier at the device's point k+1
//! (`engine.rs`), so a job can be solved while scoring goes on. Which solver does it
//! changes when the work is done, never what is decided: a job's result depends on its
//! windows alone, and it is installed at a point fixed on the device's time.
//!
//! - [`InlineSolver`] solves a job when its result is first needed, on the scoring
//!   thread, with the scoring model (the lab, the tests, the benches' reference);
//! - [`ThreadSolver`] solves jobs in order on a thread of its own, with its own copy of
//!   the model (torch tensors are not `Sync`): the daemon's.

use std::collections::VecDeque;
use std::sync::mpsc;

use super::engine::{run_adaptation_cached, AdaptJob, Adapted};
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

    /// Solve later submissions on `model`, of `generation` (a reload).
    fn replace_model(&mut self, model: Box<Model>, generation: u64);
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
    fn replace_model(&mut self, _model: Box<Model>, _generation: u64) {
        self.rows = RowCache::default();
    }
}

enum Message {
    Model(Box<Model>),
    Solve(u64, Vec<AdaptJob>),
}

/// Solves on a thread of its own, one submission after the other.
pub struct ThreadSolver {
    tx: Option<mpsc::Sender<Message>>,
    results: mpsc::Receiver<Solved>,
    /// Submissions whose results are not taken yet.
    in_flight: usize,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl ThreadSolver {
    pub fn spawn(model: Model, batch_size: usize) -> Self {
        let (tx, rx) = mpsc::channel::<Message>();
        let (done_tx, results) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("metapu-solve".into())
            .spawn(move || {
                let (mut model, mut rows) = (model, RowCache::default());
                while let Ok(message) = rx.recv() {
                    match message {
                        Message::Model(m) => (model, rows) = (*m, RowCache::default()),
                        Message::Solve(generation, jobs) => {
                            let states = run_adaptation_cached(&model, &jobs, batch_size, &mut rows);
                            if done_tx.send(Solved { generation, states }).is_err() {
                                break;
                            }
                        }
                    }
                }
            })
            .expect("spawning the solver thread");
        Self { tx: Some(tx), results, in_flight: 0, thread: Some(thread) }
    }

    fn send(&self, message: Message) -> bool {
        self.tx.as_ref().is_some_and(|tx| tx.send(message).is_ok())
    }
}

impl Solver for ThreadSolver {
    fn submit(&mut self, generation: u64, jobs: Vec<AdaptJob>) {
        // A thread that is gone answers nothing: its jobs' devices keep the classifier
        // they have until a first-classifier adaptation gives them one.
        if self.send(Message::Solve(generation, jobs)) {
            self.in_flight += 1;
        } else {
            tracing::error!("the solver thread is gone; adaptation jobs dropped");
        }
    }

    fn next(&mut self, _scoring: &Model, wait: bool) -> Option<Solved> {
        if self.in_flight == 0 {
            return None;
        }
        let solved = if wait { self.results.recv().ok() } else { self.results.try_recv().ok() };
        if solved.is_some() {
            self.in_flight -= 1;
        } else if wait {
            // The thread died with work in flight (a bug in torch's solve): fail loudly.
            panic!("the solver thread ended with {} submissions in flight", self.in_flight);
        }
        solved
    }

    fn replace_model(&mut self, model: Box<Model>, _generation: u64) {
        if !self.send(Message::Model(model)) {
            tracing::error!("the solver thread is gone; the new model is not adapted on");
        }
    }
}

impl Drop for ThreadSolver {
    fn drop(&mut self) {
        self.tx.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
