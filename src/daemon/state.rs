//! Device state on the state topic: paced background snapshots of changed windows,
//! snapshots awaited on revocation and shutdown, failed ones retried, tombstones for
//! evicted devices, and windows restored (and adapted) when partitions are assigned.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::producer::{FutureProducer, FutureRecord};
use tokio::sync::mpsc;

use super::config::{DaemonConfig, KafkaConfig};
use super::delivery::send_all;
use super::devices::DeviceTable;
use super::engine::Engine;
use super::events;
use super::health::Health;
use super::kafka;
use super::metrics::Metrics;
use super::notify;
use super::snapshot::Snapshot;

/// An encoded snapshot: device, state partition, bytes (`None`: a tombstone that deletes
/// the device's snapshot).
type Encoded = (String, i32, Option<Vec<u8>>);

pub(crate) struct StateStore {
    kafka: KafkaConfig,
    health: Arc<Health>,
    /// A restore's read that makes no progress for this long has failed.
    restore_stall: Duration,
    producer: FutureProducer,
    /// The state topic's partition count; an input partition p is kept in p mod this.
    partitions: i32,
    interval_ms: u64,
    metrics: Arc<Metrics>,
    /// Background snapshots and tombstones that failed, to be tried again.
    failures: (mpsc::UnboundedSender<Vec<Failed>>, mpsc::UnboundedReceiver<Vec<Failed>>),
}

impl StateStore {
    pub(crate) fn new(
        cfg: &DaemonConfig,
        producer: FutureProducer,
        partitions: i32,
        metrics: Arc<Metrics>,
        health: Arc<Health>,
    ) -> Self {
        Self {
            kafka: cfg.kafka.clone(),
            health,
            restore_stall: Duration::from_secs(cfg.state.restore_stall_s.max(1)),
            producer,
            partitions: partitions.max(1),
            interval_ms: cfg.state.snapshot_interval_s.max(1) * 1000,
            metrics,
            failures: mpsc::unbounded_channel(),
        }
    }

    fn state_partition(&self, input_partition: i32) -> i32 {
        input_partition.rem_euclid(self.partitions)
    }

    /// One housekeeping tick's share of the paced background snapshots: changed devices
    /// whose last snapshot is `state.snapshot_interval_s` old, at most the fleet's size
    /// spread over the interval (twice over, to catch up). Writing every window at once
    /// would stall consumption for seconds on a large fleet. Sends are not awaited
    /// here; failures come back through `failures` and are retried.
    pub(crate) fn snapshot_due(&mut self, devices: &mut DeviceTable, now_ms: u64, tick: Duration) {
        while let Ok(failed) = self.failures.1.try_recv() {
            mark_failed(devices, failed);
        }
        let budget =
            (2 * devices.len() as u64 * tick.as_millis() as u64).div_ceil(self.interval_ms).max(16) as usize;
        let due: Vec<String> = devices
            .iter()
            .filter(|(_, d)| d.unsnapshotted && now_ms.saturating_sub(d.last_snapshot_ms) >= self.interval_ms)
            .take(budget)
            .map(|(id, _)| id.clone())
            .collect();
        let records = self.encode(devices, &due, now_ms);
        if records.is_empty() {
            return;
        }
        let (producer, topic, metrics) =
            (self.producer.clone(), self.kafka.state_topic.clone(), Arc::clone(&self.metrics));
        let failures = self.failures.0.clone();
        tokio::spawn(async move {
            let failed = send(&producer, &topic, &metrics, &records).await;
            if !failed.is_empty() {
                let _ = failures.send(failed);
            }
        });
    }

    /// Write snapshots of changed devices (or of `only`) and wait for their
    /// acknowledgement (revocation, shutdown).
    pub(crate) async fn snapshot(&mut self, devices: &mut DeviceTable, only: Option<&[String]>, now_ms: u64) {
        let ids: Vec<String> = match only {
            Some(ids) => ids.to_vec(),
            None => devices.iter().filter(|(_, d)| d.unsnapshotted).map(|(id, _)| id.clone()).collect(),
        };
        let records = self.encode(devices, &ids, now_ms);
        if records.is_empty() {
            return;
        }
        let failed = send(&self.producer, &self.kafka.state_topic, &self.metrics, &records).await;
        mark_failed(devices, failed);
    }

    /// Tombstones for the devices evicted since the last call, then encoded snapshots of
    /// the given devices, marked as snapshotted now.
    fn encode(&self, devices: &mut DeviceTable, ids: &[String], now_ms: u64) -> Vec<Encoded> {
        let dim = devices.dim();
        let mut records: Vec<Encoded> = devices
            .take_forgotten()
            .into_iter()
            .map(|(id, partition)| (id, self.state_partition(partition), None))
            .collect();
        for id in ids {
            if let Some(d) = devices.get_mut(id) {
                d.unsnapshotted = false;
                d.last_snapshot_ms = now_ms;
                let snap = Snapshot {
                    dim,
                    positive: d.positive.rows().to_vec(),
                    unlabeled: d.unlabeled.rows().to_vec(),
                    seen: d.seen,
                    last_source: d.last_source.clone(),
                    incidents: d.incidents.clone(),
                    learning: d.learning(),
                    onboarding: d.onboarding.clone(),
                    onboarded: d.onboarded.clone(),
                    pinned: d.positive.pinned(),
                };
                records.push((id.clone(), self.state_partition(d.partition), Some(snap.encode())));
            }
        }
        records
    }

    /// Read the state topic for newly assigned partitions to its end; keep in-memory
    /// windows where we have them (they are newer). Not ready meanwhile; a read that
    /// stalls is tried again, never taken as complete. Restored devices are adapted
    /// here, before any of their records is scored: a restart must not leave them
    /// `unknown` until the next adaptation round.
    pub(crate) async fn restore(&self, engine: &mut Engine, parts: &[(String, i32)], now_ms: u64) {
        let wanted: BTreeSet<i32> = parts.iter().map(|(_, p)| self.state_partition(*p)).collect();
        let started = Instant::now();
        self.metrics.state_restoring.set(1);
        self.health.restoring(true);
        let changelog = self.read_to_end(wanted.into_iter().collect()).await;
        let assigned: Vec<i32> = parts.iter().map(|(_, p)| *p).collect();
        let mut restored = Vec::new();
        for (device, (state_partition, bytes)) in changelog.entries {
            if engine.devices.get(&device).is_some() {
                continue;
            }
            match Snapshot::decode(&bytes) {
                Ok(s) if s.dim == engine.devices.dim() => {
                    let partition = s.last_source.as_ref().map(|l| l.partition).unwrap_or_else(|| {
                        assigned
                            .iter()
                            .copied()
                            .find(|p| self.state_partition(*p) == state_partition)
                            .unwrap_or(0)
                    });
                    engine.devices.restore(&device, &s, partition, now_ms);
                    restored.push(device);
                }
                Ok(_) => tracing::warn!(device, "snapshot has another feature count; ignored"),
                Err(e) => tracing::warn!(device, error = %e, "bad snapshot; ignored"),
            }
        }
        let adapted = engine.adapt_now(restored.iter().map(String::as_str)).len();
        let seconds = started.elapsed().as_secs_f64();
        events::state_restored(&self.metrics, restored.len(), adapted, changelog.bytes, seconds);
        self.metrics.state_restoring.set(0);
        self.health.restoring(false);
    }

    /// The state partitions read to their end, tried again (with a growing pause) until
    /// a read gets there. systemd's watchdog is fed meanwhile: the daemon is alive,
    /// waiting on the brokers.
    async fn read_to_end(&self, partitions: Vec<i32>) -> kafka::Changelog {
        let mut pause = Duration::from_secs(1);
        loop {
            let (kc, list, stall) = (self.kafka.clone(), partitions.clone(), self.restore_stall);
            let mut read = tokio::task::spawn_blocking(move || kafka::read_changelog(&kc, &list, stall));
            let mut watchdog = tokio::time::interval(Duration::from_secs(5));
            let result = loop {
                tokio::select! {
                    r = &mut read => break r,
                    _ = watchdog.tick() => notify::notify("WATCHDOG=1"),
                }
            };
            match result {
                Ok(Ok(changelog)) => return changelog,
                Ok(Err(e)) => events::state_restore_failed(&self.metrics, &e.to_string(), pause),
                // The reader panicked: a bug, not a broker's state.
                Err(e) => std::panic::resume_unwind(e.into_panic()),
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_secs(30));
        }
    }
}

/// Failed sends to try again: a tracked device's snapshot at its next round, an
/// untracked device's tombstone at the next write.
fn mark_failed(devices: &mut DeviceTable, failed: Vec<Failed>) {
    for (id, partition, tombstone) in failed {
        match devices.get_mut(&id) {
            Some(d) => d.unsnapshotted = true,
            None if tombstone => devices.forget_again(id, partition),
            None => {}
        }
    }
}

/// A record that was not acknowledged: device, state partition, whether a tombstone.
type Failed = (String, i32, bool);

/// Send encoded snapshots and tombstones and wait for their acknowledgement; counts
/// them and returns those that failed.
async fn send(producer: &FutureProducer, topic: &str, metrics: &Metrics, records: &[Encoded]) -> Vec<Failed> {
    let failed: Vec<Failed> = send_all(producer, records, |(id, partition, bytes)| {
        let rec = FutureRecord::to(topic).key(id).partition(*partition);
        match bytes {
            Some(bytes) => rec.payload(bytes),
            None => rec,
        }
    })
    .await
    .into_iter()
    .map(|(id, partition, bytes)| (id.clone(), *partition, bytes.is_none()))
    .collect();
    events::snapshots_sent(metrics, records.len() - failed.len(), failed.len());
    failed
}
