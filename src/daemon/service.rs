//! The daemon's main loop: it selects over its inputs — control requests, adaptation
//! results, partition assignments, housekeeping ticks, the batch deadline and
//! consumed messages — and hands the work to the parts that do it: [`Pipeline`]
//! (score a micro-batch), [`Outbox`] (publish, store offsets after acknowledgement),
//! [`Detector`] (adapt, reload), [`StateStore`] (snapshots, restore) and [`Health`].

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::FutureExt;
use rdkafka::consumer::{CommitMode, Consumer, StreamConsumer};
use rdkafka::message::{BorrowedMessage, Message};
use rdkafka::producer::FutureProducer;
use tokio::sync::mpsc;

use super::adapter::Finished;
use super::config::DaemonConfig;
use super::control::{Control, DaemonError};
use super::detector::Detector;
use super::events;
use super::health::Health;
use super::kafka::{AssignmentEvent, ChangelogContext, DaemonContext};
use super::metrics::Metrics;
use super::notify;
use super::outbox::Outbox;
use super::state::StateStore;
use crate::monitor::clock::Now;
use crate::monitor::driver::Driver;
use crate::monitor::output::{unix_now, IncidentEvent, Source};
use crate::monitor::pipeline::{Emitted, Received};

/// Period of the loop's housekeeping (adaptation, snapshots, health).
const HOUSEKEEPING: Duration = Duration::from_millis(100);

pub(crate) struct Service {
    pub(crate) cfg: DaemonConfig,
    pub(crate) detector: Detector,
    pub(crate) driver: Driver,
    pub(crate) outbox: Outbox,
    pub(crate) state: StateStore,
    pub(crate) health: Arc<Health>,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) consumer: StreamConsumer<DaemonContext>,
    /// The kinds topic, read whole (`kinds.rs`).
    pub(crate) kinds: StreamConsumer<ChangelogContext>,
    pub(crate) assignments: mpsc::UnboundedReceiver<AssignmentEvent>,
    /// Messages the consumer handed out while a restore was read, to be scored next.
    pub(crate) held: Vec<Received>,
    /// For the health check's metadata request.
    pub(crate) producer: FutureProducer,
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
        source: Source { topic: m.topic().to_string(), partition: m.partition(), offset: m.offset() },
        key: m.key().map(<[u8]>::to_vec),
        payload: m.payload().unwrap_or_default().to_vec(),
    }
}

/// When housekeeping last did each of its jobs.
struct Timers {
    /// Half of what systemd asked for, if it asked.
    watchdog_every: Option<Duration>,
    adapt: Instant,
    watchdog: Instant,
    idle: Instant,
    message: Instant,
}

impl Service {
    fn now_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    /// When the gathered batch is due: at its deadline, or at once while deferred or
    /// held records wait.
    fn deadline(&self) -> Option<tokio::time::Instant> {
        let now_ms = self.now_ms();
        let due_ms = self.driver.due_ms(now_ms).or_else(|| (!self.held.is_empty()).then_some(now_ms))?;
        Some(tokio::time::Instant::from_std(self.started) + Duration::from_millis(due_ms))
    }

    pub(crate) async fn run(
        mut self,
        mut control: mpsc::UnboundedReceiver<Control>,
    ) -> Result<(), DaemonError> {
        let mut housekeeping = tokio::time::interval(HOUSEKEEPING);
        let now = Instant::now();
        let mut timers = Timers {
            watchdog_every: notify::watchdog_interval(),
            adapt: now,
            watchdog: now,
            idle: now,
            message: now,
        };
        notify::notify("READY=1");
        self.health.started();
        tracing::info!(version = %self.detector.version(), topics = ?self.cfg.kafka.input_topics, "metapu daemon running");
        loop {
            let deadline = self.deadline();
            tokio::select! {
                biased;
                c = control.recv() => match c {
                    Some(Control::Reload) => self.detector.reload(&self.cfg.model.path, &self.metrics),
                    Some(Control::Shutdown) | None => break,
                },
                done = self.detector.adapted() => self.installed(done.ok_or(DaemonError::AdapterGone)?),
                Some(event) = self.assignments.recv() => self.on_assignment(event).await,
                m = self.kinds.recv() => match m {
                    Ok(m) => {
                        let share = [received(&m)];
                        let now = Now::service(self.now_ms());
                        let version = self.detector.version().to_string();
                        let emitted =
                            self.driver.shares(&mut self.detector.engine, &share, now, &version, self.metrics.as_ref());
                        self.outbox.add(&emitted);
                    }
                    Err(e) => {
                        events::consume_failed(&e);
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                },
                _ = housekeeping.tick() => self.housekeeping(&mut timers).await,
                // While a batch's worth of records waits for its turn, take no more.
                m = self.consumer.recv(), if !self.driver.backlogged() => match m {
                    Ok(m) => {
                        timers.message = Instant::now();
                        self.health.message_received();
                        let mut full = self.driver.gather(received(&m), self.now_ms());
                        // Take what is already queued without a trip through the
                        // select! per message (a backlog arrives thousands at a time).
                        while !full {
                            match self.consumer.recv().now_or_never() {
                                Some(Ok(m)) => full = self.driver.gather(received(&m), self.now_ms()),
                                Some(Err(e)) => { events::consume_failed(&e); break; }
                                None => break,
                            }
                        }
                        if full {
                            let batch = self.driver.take();
                            self.process(batch).await;
                        }
                    }
                    Err(e) => {
                        events::consume_failed(&e);
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                },
                // A started batch at its deadline; deferred and held records at once.
                _ = due(deadline) => {
                    let batch = self.driver.take();
                    self.process(batch).await
                }
            }
        }
        let batch = self.driver.take();
        self.process(batch).await;
        while self.driver.pipeline.has_deferred() {
            self.process(Vec::new()).await;
        }
        self.shutdown().await;
        Ok(())
    }

    /// Score a micro-batch, hand its outputs to the outbox (its offsets are stored
    /// once they are acknowledged).
    async fn process(&mut self, messages: Vec<Received>) {
        // Assignments first: restored windows must be in place before their devices'
        // records are scored.
        while let Ok(event) = self.assignments.try_recv() {
            self.on_assignment(event).await;
        }
        // Records received while a restore was read come after those gathered before it.
        let mut messages = messages;
        messages.append(&mut self.held);
        if messages.is_empty() && !self.driver.pipeline.has_deferred() {
            return;
        }
        self.metrics.records_consumed.inc_by(messages.len() as u64);
        let now_ms = self.now_ms();
        let state = &mut self.state;
        let (engine, version) = self.detector.engine_and_version();
        // Windows parked by a restore are placed before their devices' records are scored.
        let place_parked = |engine: &mut _, batch: &[_]| {
            if state.has_parked() {
                let arrived = batch.iter().filter_map(|c: &crate::monitor::pipeline::Consumed| {
                    c.decoded.as_ref().ok().map(|r| (r.device.as_str(), c.message.source.partition))
                });
                state.promote(engine, arrived, now_ms);
            }
        };
        let step = self.driver.run(
            engine,
            messages,
            Now::service(now_ms),
            version,
            self.metrics.as_ref(),
            place_parked,
        );
        self.outbox.submit(&step.emitted, step.offsets);
        self.outbox.settle(&self.consumer, false).await;
    }

    fn installed(&mut self, done: Finished) {
        let updates: Vec<Emitted> =
            self.detector.install(done, &self.metrics).into_iter().map(Emitted::Prior).collect();
        self.outbox.add(&updates);
    }

    async fn on_assignment(&mut self, event: AssignmentEvent) {
        // Outputs of records from revoked partitions are settled while we still own them.
        self.outbox.settle(&self.consumer, true).await;
        let now_ms = self.now_ms();
        match event {
            AssignmentEvent::Assigned(parts) => self.restore(&parts).await,
            AssignmentEvent::Revoked(parts) => {
                self.driver.pipeline.drop_deferred(&parts);
                let still = self.consumer.context().assignment.partitions();
                let gone: Vec<i32> = parts.iter().map(|(_, p)| *p).filter(|p| !still.contains(p)).collect();
                let devices = &mut self.detector.engine.devices;
                let leaving = devices.on_partitions(&gone);
                self.state.snapshot(devices, Some(&leaving), now_ms).await;
                for d in &leaving {
                    devices.remove(d);
                }
                events::devices_evicted(&self.metrics, "revoked", leaving.len());
            }
        }
    }

    /// Restore the state of newly assigned partitions. The consumer is paused meanwhile
    /// but still polled, however long the read takes: a member that stops polling for
    /// `max.poll.interval.ms` is put out of its group, and would come back to restore
    /// again. What it still hands out (fetched before the pause) waits in `held` and is
    /// scored after the restore, in order; a rebalance meanwhile is taken after it.
    async fn restore(&mut self, parts: &[(String, i32)]) {
        let paused = self.consumer.assignment().ok().filter(|tpl| tpl.count() > 0);
        if let Some(tpl) = &paused {
            if let Err(e) = self.consumer.pause(tpl) {
                tracing::warn!(error = %e, "could not pause the consumer for a restore");
            }
        }
        let mut reading = std::pin::pin!(self.state.read(parts));
        let reading = loop {
            tokio::select! {
                r = &mut reading => break r,
                m = self.consumer.recv() => match m {
                    Ok(m) => self.held.push(received(&m)),
                    Err(e) => events::consume_failed(&e),
                },
            }
        };
        let now_ms = self.now_ms();
        self.state.install(&mut self.detector.engine, reading, now_ms);
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
        let adapt_every = Duration::from_millis(self.cfg.adaptation.interval_ms.max(1));
        let after_records = self.cfg.adaptation.after_records;
        let interval_due = t.adapt.elapsed() >= adapt_every;
        // On the event clock the engine adapts as the records' time passes.
        let scheduled_here = self.detector.engine.cadence.is_none();
        if scheduled_here && (interval_due || after_records > 0) {
            let min_changed = if interval_due { self.cfg.adaptation.min_records } else { after_records };
            if self.detector.schedule(min_changed) || interval_due {
                t.adapt = Instant::now();
            }
        }
        let now_ms = self.now_ms();
        self.state.snapshot_due(&mut self.detector.engine.devices, now_ms, HOUSEKEEPING);
        // Once a second: jobs that scan every device.
        if t.idle.elapsed() >= Duration::from_secs(1) {
            self.evict_idle(now_ms);
            self.report_unmonitored(now_ms);
            let (engine, version) = self.detector.engine_and_version();
            let incident_events =
                self.driver.tick(engine, Now::service(now_ms), version, self.metrics.as_ref());
            if !incident_events.is_empty() {
                // Through the batch deliveries (retried until acknowledged), with no offsets.
                self.outbox.submit(&incident_events, Vec::new());
            }
            t.idle = Instant::now();
        }
        if let Some(every) = t.watchdog_every {
            if t.watchdog.elapsed() >= every {
                notify::notify("WATCHDOG=1");
                t.watchdog = Instant::now();
            }
        }
        self.outbox.settle(&self.consumer, false).await;
        self.metrics.devices_tracked.set(self.detector.engine.devices.len() as i64);
        self.health.refresh(t.message, &self.producer).await;
    }

    fn evict_idle(&mut self, now_ms: u64) {
        let idle_s = self.cfg.devices.idle_timeout_s;
        if idle_s > 0 {
            let gone = self.detector.engine.devices.evict_idle(now_ms, idle_s * 1000);
            events::devices_evicted(&self.metrics, "idle", gone.len());
        }
    }

    /// Devices sending traffic without any known-normal record are not scored: each is
    /// reported once on the incidents topic (delivered as every output is: sent again
    /// until acknowledged), and all are counted in a gauge.
    fn report_unmonitored(&mut self, now_ms: u64) {
        let after_s = self.cfg.incidents.unmonitored_after_s;
        if after_s == 0 {
            return;
        }
        let (total, new) = self.detector.engine.devices.unmonitored(now_ms, after_s * 1000);
        events::unmonitored(&self.metrics, total, &new);
        let reports: Vec<Emitted> = new
            .into_iter()
            .map(|(device, records, since_ms)| {
                let since_s = since_ms as f64 / 1000.0;
                let message = format!(
                    "device {device} sent {records} records in {since_s:.0} s and none is labeled normal: \
                     it is not scored until some of its traffic is onboarded as known-normal"
                );
                Emitted::Incident(IncidentEvent::Unmonitored {
                    device,
                    records,
                    since_s,
                    time: unix_now(),
                    message,
                })
            })
            .collect();
        self.outbox.add(&reports);
    }

    async fn shutdown(mut self) {
        notify::notify("STOPPING=1");
        self.health.stopping();
        tracing::info!("shutting down: flushing, snapshotting, committing");
        self.outbox.settle(&self.consumer, true).await;
        let now_ms = self.now_ms();
        self.state.snapshot(&mut self.detector.engine.devices, None, now_ms).await;
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
