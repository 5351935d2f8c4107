//! Adaptation off the scoring path: a dedicated thread with its own copy of the model
//! takes windows, runs the batched closed-form solves and sends the classifiers back.
//! The service never waits for it; at most one job is in flight. (Torch tensors are
//! not `Sync`, so each thread owns its model instead of sharing one.)

use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::model::Model;

use crate::monitor::{run_adaptation, AdaptJob, Adapted};

/// How many nice levels the adaptation thread (and the torch workers it starts) runs
/// below the daemon: scoring comes first, adaptation takes the CPU time scoring leaves.
/// Relative, so a unit's own `Nice=` still applies to both.
const ADAPTER_NICE_OFFSET: i32 = 10;

/// Lower the calling thread's CPU priority by `offset` nice levels (on Linux the nice
/// value is per thread, and threads it starts inherit it). Raising the nice value needs
/// no privilege; a failure only leaves the priority as it was.
fn lower_priority(offset: i32) {
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

enum Message {
    Model(Box<Model>, u64),
    Adapt(u64, Vec<AdaptJob>),
}

pub struct Finished {
    /// The model generation the states belong to.
    pub generation: u64,
    pub states: Vec<Adapted>,
    pub elapsed: Duration,
    pub batches: usize,
}

pub struct Adapter {
    tx: Option<mpsc::Sender<Message>>,
    pub results: tokio::sync::mpsc::UnboundedReceiver<Finished>,
    pub busy: bool,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Adapter {
    pub fn spawn(model: Model, generation: u64, batch_size: usize) -> Self {
        let (tx, rx) = mpsc::channel::<Message>();
        let (done_tx, done_rx) = tokio::sync::mpsc::unbounded_channel();
        let thread = std::thread::Builder::new()
            .name("metapu-adapt".into())
            .spawn(move || {
                lower_priority(ADAPTER_NICE_OFFSET);
                let (mut model, mut current) = (model, generation);
                while let Ok(message) = rx.recv() {
                    match message {
                        Message::Model(m, g) => (model, current) = (*m, g),
                        Message::Adapt(generation, jobs) => {
                            let started = Instant::now();
                            let states = if generation == current {
                                run_adaptation(&model, &jobs, batch_size)
                            } else {
                                vec![]
                            };
                            let batches = jobs.len().div_ceil(batch_size.max(1));
                            let done = Finished { generation, states, elapsed: started.elapsed(), batches };
                            if done_tx.send(done).is_err() {
                                break;
                            }
                        }
                    }
                }
            })
            .expect("spawning the adaptation thread");
        Self { tx: Some(tx), results: done_rx, busy: false, thread: Some(thread) }
    }

    /// Replace the adapter's model (after a reload).
    pub fn set_model(&self, model: Model, generation: u64) {
        if let Some(tx) = &self.tx {
            let _ = tx.send(Message::Model(Box::new(model), generation));
        }
    }

    /// Hand over a job unless one is running. Returns whether it was taken.
    pub fn submit(&mut self, generation: u64, jobs: Vec<AdaptJob>) -> bool {
        if self.busy || jobs.is_empty() {
            return false;
        }
        let sent = self.tx.as_ref().is_some_and(|tx| tx.send(Message::Adapt(generation, jobs)).is_ok());
        self.busy = sent;
        sent
    }
}

impl Drop for Adapter {
    fn drop(&mut self) {
        self.tx.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
