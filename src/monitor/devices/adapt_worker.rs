//! The one adaptation worker: a thread with its own copy of the model (torch tensors
//! are not `Sync`) that takes a device's windows in batched jobs, runs the closed-form
//! solves and hands the classifiers back. The daemon's service-clock adapter
//! (`daemon/adapter.rs`) runs one; the event clock's `ThreadSolver` one per solver
//! thread. Each says where results go and whether the thread yields to scoring.

use std::sync::mpsc;
use std::time::{Duration, Instant};

use super::adapt_jobs::{run_adaptation, run_adaptation_cached, Adapted};
use super::AdaptJob;
use crate::model::{Model, RowCache};

/// One job's results, under the model generation it was submitted with.
pub struct Finished {
    pub generation: u64,
    pub states: Vec<Adapted>,
    pub elapsed: Duration,
    /// Batched solves it took.
    pub batches: usize,
}

/// How a worker runs.
#[derive(Debug, Clone, Copy)]
pub struct WorkerSettings {
    /// Devices per batched solve.
    pub batch_size: usize,
    /// Nice levels below the process the thread runs at (0: as the process), so that
    /// scoring comes first and adaptation takes the CPU time scoring leaves.
    pub nice_offset: i32,
    /// Keep each device's rows' parts between its jobs (`RowCache`): worth it where a
    /// device's jobs always come to the same worker and its windows move a little
    /// between them.
    pub cache_rows: bool,
}

enum Message {
    Model(Box<Model>, u64),
    Solve(u64, Vec<AdaptJob>),
}

/// A running worker. Dropping it ends the thread once its job in hand is done.
pub struct AdaptWorker {
    tx: Option<mpsc::Sender<Message>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl AdaptWorker {
    /// A thread `name` solving on `model` of `generation`; each job's results go to
    /// `done`, which says whether anyone still takes them (the thread ends when not).
    /// Jobs submitted under another generation than its model's are not solved (their
    /// results would be dropped): they come back empty.
    pub fn spawn(
        name: String,
        model: Model,
        generation: u64,
        settings: WorkerSettings,
        mut done: impl FnMut(Finished) -> bool + Send + 'static,
    ) -> Self {
        let (tx, rx) = mpsc::channel::<Message>();
        let thread = std::thread::Builder::new()
            .name(name)
            .spawn(move || {
                lower_priority(settings.nice_offset);
                let (mut model, mut current, mut rows) = (model, generation, RowCache::default());
                while let Ok(message) = rx.recv() {
                    match message {
                        Message::Model(m, g) => (model, current, rows) = (*m, g, RowCache::default()),
                        Message::Solve(generation, jobs) => {
                            let started = Instant::now();
                            let states = match (generation == current, settings.cache_rows) {
                                (false, _) => Vec::new(),
                                (true, true) => {
                                    run_adaptation_cached(&model, &jobs, settings.batch_size, &mut rows)
                                }
                                (true, false) => run_adaptation(&model, &jobs, settings.batch_size),
                            };
                            let batches = jobs.len().div_ceil(settings.batch_size.max(1));
                            if !done(Finished { generation, states, elapsed: started.elapsed(), batches }) {
                                break;
                            }
                        }
                    }
                }
            })
            .expect("spawning an adaptation thread");
        Self { tx: Some(tx), thread: Some(thread) }
    }

    /// Solve `jobs` of `generation`. False when the thread is gone.
    pub fn solve(&self, generation: u64, jobs: Vec<AdaptJob>) -> bool {
        self.send(Message::Solve(generation, jobs))
    }

    /// Solve later jobs on `model` of `generation` (a reload). False when the thread
    /// is gone.
    pub fn set_model(&self, model: Model, generation: u64) -> bool {
        self.send(Message::Model(Box::new(model), generation))
    }

    fn send(&self, message: Message) -> bool {
        self.tx.as_ref().is_some_and(|tx| tx.send(message).is_ok())
    }
}

impl Drop for AdaptWorker {
    fn drop(&mut self) {
        self.tx.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Lower the calling thread's CPU priority by `offset` nice levels (on Linux the nice
/// value is per thread, and threads it starts inherit it). Raising the nice value needs
/// no privilege; a failure only leaves the priority as it was.
fn lower_priority(offset: i32) {
    if offset == 0 {
        return;
    }
    #[cfg(target_os = "linux")]
    // SAFETY: plain syscalls on the calling thread's own id; errno is thread-local.
    unsafe {
        let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
        // getpriority returns the nice value, and -1 is a valid one: errno tells.
        *libc::__errno_location() = 0;
        let current = libc::getpriority(libc::PRIO_PROCESS, tid);
        if current == -1 && *libc::__errno_location() != 0 {
            tracing::debug!("could not read the adaptation thread's priority");
            return;
        }
        let nice = (current + offset).min(19);
        if libc::setpriority(libc::PRIO_PROCESS, tid, nice) != 0 {
            tracing::debug!(nice, "could not lower the adaptation thread's priority");
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = offset;
}
