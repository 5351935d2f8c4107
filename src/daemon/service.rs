//! The daemon's main loop: it selects over its inputs — control requests, adaptation
//! results, partition assignments, the kinds topic, housekeeping ticks, the batch
//! deadline and consumed messages — hands each to the [`Monitor`] as an [`Input`] with
//! the time, and carries out what comes back: [`Outbox`] (publish, store offsets after
//! acknowledgement), [`ModelHost`] (the adapter thread, reloads), [`StateStore`] (state
//! records, restores) and [`Health`]. It decides nothing itself.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::FutureExt;
use rdkafka::consumer::{CommitMode, Consumer, StreamConsumer};
use rdkafka::message::{BorrowedMessage, Message};
use tokio::sync::mpsc;

use super::config::DaemonConfig;
use super::control::{Control, DaemonError};
use super::health::Health;
use super::internal_events::{BatchScored, ConsumeFailed, MessageConsumed};
use super::kafka::{AssignmentEvent, ChangelogContext, DaemonContext};
use super::model_host::{self, ModelHost};
use super::notify;
use super::outbox::Outbox;
use super::state::StateStore;
use super::Metrics;
use crate::monitor::clock::Now;
use crate::monitor::record::Source;
use crate::monitor::{Command, Input, Monitor, Output, Received};
use crate::wall_clock::unix_now;

/// Period of the loop's housekeeping (the monitor's tick, deliveries, health).
const HOUSEKEEPING: Duration = Duration::from_millis(100);

pub(crate) struct Service {
    pub(crate) cfg: DaemonConfig,
    pub(crate) monitor: Monitor,
    pub(crate) model_host: ModelHost,
    pub(crate) outbox: Outbox,
    pub(crate) state: StateStore,
    pub(crate) health: Arc<Health>,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) consumer: StreamConsumer<DaemonContext>,
    /// The kinds topic, read whole (`kinds.rs`).
    pub(crate) kinds: StreamConsumer<ChangelogContext>,
    pub(crate) assignments: mpsc::UnboundedReceiver<AssignmentEvent>,
    /// Turns true when the daemon is asked to stop (or its handle is gone): the loop
    /// ends, and a restore waiting on its brokers gives up on it rather than hold the
    /// stop for as long.
    pub(crate) stop: tokio::sync::watch::Receiver<bool>,
    /// A restore was given up for a stop: its partitions' records are not scored
    /// (they are not committed either; the next owner takes them with their state).
    pub(crate) restore_abandoned: bool,
    pub(crate) started: Instant,
}

/// Resolves at `deadline`; never without one.
async fn due(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

/// A consumed message's bytes and coordinates, copied out of librdkafka's buffer.
fn received(m: &BorrowedMessage<'_>) -> Received {
    Received {
        source: Source::new(m.topic().to_string(), m.partition(), m.offset()),
        key: m.key().map(<[u8]>::to_vec),
        payload: m.payload().unwrap_or_default().to_vec(),
    }
}

/// When housekeeping last did its own jobs.
struct Timers {
    /// Half of what systemd asked for, if it asked.
    watchdog_every: Option<Duration>,
    watchdog: Instant,
}

impl Service {
    fn now_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    /// The monitor's time now: the service's clock, and the wall clock for events.
    fn now(&self) -> Now {
        Now::at(self.now_ms(), unix_now())
    }

    /// Hand the monitor one input now.
    fn tell(&mut self, input: Input) -> Output {
        let now = self.now();
        self.monitor.handle(input, now, self.metrics.as_ref())
    }

    /// When the gathered batch is due.
    fn deadline(&self) -> Option<tokio::time::Instant> {
        let due_ms = self.monitor.due_ms(self.now_ms())?;
        Some(tokio::time::Instant::from_std(self.started) + Duration::from_millis(due_ms))
    }

    pub(crate) async fn run(
        mut self,
        mut control: mpsc::UnboundedReceiver<Control>,
    ) -> Result<(), DaemonError> {
        let mut housekeeping = tokio::time::interval(HOUSEKEEPING);
        let now = Instant::now();
        let mut timers = Timers { watchdog_every: notify::watchdog_interval(), watchdog: now };
        notify::notify("READY=1");
        self.health.started();
        tracing::info!(version = %self.monitor.version(), topics = ?self.cfg.kafka.input_topics, "metapu daemon running");
        // The loop's own copy of the stop flag: its branches' handlers take the service.
        let mut stop = self.stop.clone();
        loop {
            let deadline = self.deadline();
            tokio::select! {
                biased;
                // Asked to stop, or the handle is gone (the flag's sender with it).
                _ = stop.wait_for(|stop| *stop) => break,
                c = control.recv() => match c {
                    Some(Control::Reload) => {
                        if let Some(input) = model_host::reload(&self.cfg.model.path, self.cfg.adaptation.solver_threads, self.monitor.dim(), &self.metrics) {
                            let out = self.tell(input);
                            self.carry_out(out).await;
                        }
                    }
                    None => break,
                },
                done = self.model_host.adapted() => {
                    let out = self.tell(done.ok_or(DaemonError::AdapterGone)?);
                    self.carry_out(out).await;
                }
                Some(event) = self.assignments.recv() => self.on_assignment(event).await,
                m = self.kinds.recv() => match m {
                    Ok(m) => {
                        let out = self.tell(Input::Shares(vec![received(&m)]));
                        self.carry_out(out).await;
                    }
                    Err(e) => {
                        self.metrics.emit(ConsumeFailed(&e));
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                },
                _ = housekeeping.tick() => self.housekeeping(&mut timers).await,
                // While a batch's worth of records waits for its turn, take no more.
                m = self.consumer.recv(), if !self.monitor.backlogged() => match m {
                    Ok(m) => {
                        self.health.message_received();
                        self.arrived(received(&m));
                        // Take what is already queued without a trip through the
                        // select! per message (a backlog arrives thousands at a time).
                        while !self.monitor.batch_full() {
                            match self.consumer.recv().now_or_never() {
                                Some(Ok(m)) => self.arrived(received(&m)),
                                Some(Err(e)) => { self.metrics.emit(ConsumeFailed(&e)); break; }
                                None => break,
                            }
                        }
                        if self.monitor.batch_full() {
                            self.process().await;
                        }
                    }
                    Err(e) => {
                        self.metrics.emit(ConsumeFailed(&e));
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                },
                // A started batch at its deadline; deferred records at once.
                _ = due(deadline) => self.process().await,
            }
        }
        while self.monitor.has_work() && !self.restore_abandoned {
            self.process().await;
        }
        self.shutdown().await;
        Ok(())
    }

    fn arrived(&mut self, message: Received) {
        // A verdict, onboarding or forget is counted by what it does, not as a record.
        if message.source.topic != self.cfg.kafka.feedback_topic {
            self.metrics.emit(MessageConsumed);
        }
        let at_ms = self.now_ms();
        self.tell(Input::Arrived { message, at_ms });
    }

    /// Run the next micro-batch and hand its outputs to the outbox (its offsets are
    /// stored once they are acknowledged).
    async fn process(&mut self) {
        // Assignments first: restored windows must be in place before their devices'
        // records are scored.
        while let Ok(event) = self.assignments.try_recv() {
            self.on_assignment(event).await;
        }
        if self.restore_abandoned {
            return;
        }
        let started = Instant::now();
        let out = self.tell(Input::Run);
        if out.ran {
            self.metrics.emit(BatchScored { seconds: started.elapsed().as_secs_f64() });
        }
        self.carry_out(out).await;
        self.outbox.settle(&self.consumer, false).await;
    }

    /// What the monitor gave: outputs to the outbox, commands to the adapter and the
    /// state topic (state writes that must be awaited are).
    async fn carry_out(&mut self, out: Output) {
        let Output { emitted, offsets, commands, ran, .. } = out;
        if ran {
            self.outbox.submit(&emitted, offsets);
        } else if !emitted.is_empty() {
            // Outside a micro-batch: delivered with the next one, as surely.
            self.outbox.add(&emitted);
        }
        for command in self.model_host.carry_out(commands) {
            if let Command::WriteState { records, wait } = command {
                let failed = self.state.write(records, wait).await;
                if !failed.is_empty() {
                    self.tell(Input::WritesFailed(failed));
                }
            }
        }
    }

    async fn on_assignment(&mut self, event: AssignmentEvent) {
        // Settling and writing a revoked partition's state wait on the brokers (up to
        // the producer's message timeout when they are gone: a group lost in an outage)
        // and consume nothing meanwhile: not ready until done.
        self.health.handing_over(true);
        // Outputs of records from revoked partitions are settled while we still own them.
        self.outbox.settle(&self.consumer, true).await;
        match event {
            AssignmentEvent::Assigned(parts) => self.restore(&parts).await,
            AssignmentEvent::Revoked(parts) => {
                let still = self.consumer.context().assignment.partitions();
                let gone: Vec<i32> = parts.iter().map(|(_, p)| *p).filter(|p| !still.contains(p)).collect();
                let out = self.tell(Input::Revoked { partitions: parts, gone });
                self.carry_out(out).await;
            }
        }
        self.health.handing_over(false);
    }

    /// Restore the state of newly assigned partitions. The consumer is paused meanwhile
    /// but still polled, however long the read takes: a member that stops polling for
    /// `max.poll.interval.ms` is put out of its group, and would come back to restore
    /// again. What it still hands out (fetched before the pause) is held and gathered
    /// after the restore, in order; a rebalance meanwhile is taken after it.
    ///
    /// Asked to stop meanwhile, it gives the restore up: nothing of those partitions is
    /// scored or written, and the stop is not held for as long as the brokers are gone.
    async fn restore(&mut self, parts: &[(String, i32)]) {
        if self.restore_abandoned || *self.stop.borrow() {
            self.restore_abandoned = true;
            return;
        }
        let paused = self.consumer.assignment().ok().filter(|tpl| tpl.count() > 0);
        if let Some(tpl) = &paused {
            if let Err(e) = self.consumer.pause(tpl) {
                tracing::warn!(error = %e, "could not pause the consumer for a restore");
            }
        }
        let mut held = Vec::new();
        let mut reading = std::pin::pin!(self.state.read(parts));
        let reading = loop {
            tokio::select! {
                r = &mut reading => break r,
                m = self.consumer.recv() => match m {
                    Ok(m) => held.push(received(&m)),
                    Err(e) => self.metrics.emit(ConsumeFailed(&e)),
                },
                _ = self.stop.wait_for(|stop| *stop) => {
                    tracing::warn!(partitions = ?parts, "stopping during a restore: it is given up");
                    self.restore_abandoned = true;
                    return;
                }
            }
        };
        let restored = self.state.sort(reading);
        self.tell(Input::Restored(restored));
        self.state.restored();
        for message in held {
            self.arrived(message);
        }
        if paused.is_some() {
            // What is assigned now (a rebalance may have come meanwhile).
            if let Ok(tpl) = self.consumer.assignment() {
                if let Err(e) = self.consumer.resume(&tpl) {
                    tracing::warn!(error = %e, "could not resume the consumer after a restore");
                }
            }
        }
    }

    async fn housekeeping(&mut self, t: &mut Timers) {
        let failed = self.state.take_failures();
        if !failed.is_empty() {
            self.tell(Input::WritesFailed(failed));
        }
        let out = self.tell(Input::Tick);
        self.carry_out(out).await;
        if let Some(every) = t.watchdog_every {
            if t.watchdog.elapsed() >= every {
                notify::notify("WATCHDOG=1");
                t.watchdog = Instant::now();
            }
        }
        self.outbox.settle(&self.consumer, false).await;
        self.health.refresh();
    }

    async fn shutdown(mut self) {
        notify::notify("STOPPING=1");
        self.health.stopping();
        tracing::info!("shutting down: flushing, snapshotting, committing");
        self.outbox.settle(&self.consumer, true).await;
        let out = self.tell(Input::Shutdown);
        self.carry_out(out).await;
        self.outbox.drain_sinks(Duration::from_secs(5)).await;
        self.outbox.flush(Duration::from_secs(10)).await;
        if let Err(e) = self.consumer.commit_consumer_state(CommitMode::Sync) {
            tracing::debug!(error = %e, "final commit");
        }
        // Closing a group consumer can block for its session timeout: do it off the runtime.
        let consumer = self.consumer;
        let _ = tokio::task::spawn_blocking(move || {
            consumer.unsubscribe();
            drop(consumer);
        })
        .await;
        tracing::info!("stopped");
    }
}
