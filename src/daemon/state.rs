//! Device state on the state topic: paced background snapshots of changed devices (a
//! main record, and rows only when they changed: see [`crate::monitor::snapshot`]), snapshots
//! awaited on revocation and shutdown, failed ones retried, tombstones for evicted
//! devices, and windows restored (and adapted) when partitions are assigned.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::producer::{FutureProducer, FutureRecord};
use tokio::sync::mpsc;

use super::config::{DaemonConfig, KafkaConfig};
use super::delivery::send_all;
use super::events;
use super::health::Health;
use super::kafka;
use super::metrics::Metrics;
use super::notify;
use crate::monitor::devices::{Device, DeviceTable};
use crate::monitor::engine::Engine;
use crate::monitor::snapshot::{encode_rows, Part, Snapshot};

/// A record for the state topic: key, state partition, value (`None`: a tombstone that
/// deletes the key), and what it is of which device (to retry it if it fails).
struct Encoded {
    key: Vec<u8>,
    partition: i32,
    value: Option<Vec<u8>>,
    device: String,
    part: Part,
}

pub(crate) struct StateStore {
    kafka: KafkaConfig,
    health: Arc<Health>,
    /// A restore's read that makes no progress for this long has failed.
    restore_stall: Duration,
    producer: FutureProducer,
    /// The state topic's partition count; an input partition p is kept in p mod this.
    partitions: i32,
    /// The input topic's partition count, as last read (refreshed at each restore).
    input_partitions: i32,
    interval_ms: u64,
    unlabeled_interval_ms: u64,
    metrics: Arc<Metrics>,
    /// Background snapshots and tombstones that failed, to be tried again.
    failures: (mpsc::UnboundedSender<Vec<Failed>>, mpsc::UnboundedReceiver<Vec<Failed>>),
    /// Snapshots whose owner is not known (see [`Self::read`]): restored when their
    /// device sends a record here, with their home state partition.
    parked: HashMap<String, (i32, Snapshot)>,
}

impl StateStore {
    pub(crate) fn new(
        cfg: &DaemonConfig,
        producer: FutureProducer,
        partitions: i32,
        input_partitions: i32,
        metrics: Arc<Metrics>,
        health: Arc<Health>,
    ) -> Self {
        Self {
            kafka: cfg.kafka.clone(),
            health,
            restore_stall: Duration::from_secs(cfg.state.restore_stall_s.max(1)),
            producer,
            partitions: partitions.max(1),
            input_partitions: input_partitions.max(1),
            interval_ms: cfg.state.snapshot_interval_s.max(1) * 1000,
            unlabeled_interval_ms: cfg.state.unlabeled_interval_s.max(1) * 1000,
            metrics,
            failures: mpsc::unbounded_channel(),
            parked: HashMap::new(),
        }
    }

    fn state_partition(&self, input_partition: i32) -> i32 {
        state_partition(input_partition, self.partitions)
    }

    /// The unlabeled rows were last written `state.unlabeled_interval_s` ago or more.
    fn unlabeled_interval_passed(&self, d: &Device, now_ms: u64) -> bool {
        now_ms.saturating_sub(d.unlabeled_written_ms) >= self.unlabeled_interval_ms
    }

    /// Input partitions were added since the state topic was made: a device's snapshot
    /// may be in any state partition, not the one its input partition maps to.
    fn moved(&self) -> bool {
        self.input_partitions != self.partitions
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
            .filter(|(_, d)| {
                let unlabeled_due = d.rows_unwritten().1 && self.unlabeled_interval_passed(d, now_ms);
                (d.unsnapshotted && now_ms.saturating_sub(d.last_snapshot_ms) >= self.interval_ms)
                    || unlabeled_due
            })
            .take(budget)
            .map(|(id, _)| id.clone())
            .collect();
        let records = self.encode(devices, &due, now_ms, false);
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

    /// Write snapshots of changed devices (or of `only`), unlabeled rows included, and
    /// wait for their acknowledgement (revocation, shutdown).
    pub(crate) async fn snapshot(&mut self, devices: &mut DeviceTable, only: Option<&[String]>, now_ms: u64) {
        let ids: Vec<String> = match only {
            Some(ids) => ids.to_vec(),
            None => devices
                .iter()
                .filter(|(_, d)| d.unsnapshotted || d.rows_unwritten() != (false, false))
                .map(|(id, _)| id.clone())
                .collect(),
        };
        let records = self.encode(devices, &ids, now_ms, true);
        if records.is_empty() {
            return;
        }
        let failed = send(&self.producer, &self.kafka.state_topic, &self.metrics, &records).await;
        mark_failed(devices, failed);
    }

    /// Tombstones for the devices evicted since the last call, then the given devices'
    /// records, marked as snapshotted now: rows that changed since they were last written
    /// (the unlabeled ones only every `state.unlabeled_interval_s`, unless `all_rows`),
    /// then the main record. Rows go first: a main record never names rows not yet sent.
    fn encode(&self, devices: &mut DeviceTable, ids: &[String], now_ms: u64, all_rows: bool) -> Vec<Encoded> {
        let dim = devices.dim();
        let mut records: Vec<Encoded> = Vec::new();
        for (id, partition, home) in devices.take_forgotten() {
            let partition = home.unwrap_or_else(|| self.state_partition(partition));
            records.extend(Part::ALL.map(|part| Encoded {
                key: part.key(&id),
                partition,
                value: None,
                device: id.clone(),
                part,
            }));
        }
        for id in ids {
            let Some(d) = devices.get_mut(id) else { continue };
            let partition = d.home.unwrap_or_else(|| self.state_partition(d.partition));
            let encoded =
                |part: Part, value| Encoded { key: part.key(id), partition, value, device: id.clone(), part };
            let (positive_unwritten, unlabeled_unwritten) = d.rows_unwritten();
            if positive_unwritten {
                records.push(encoded(Part::Positive, encode_rows(dim, d.positive.rows())));
                d.positive_written = d.positive.stamp();
            }
            let unlabeled_due =
                all_rows || d.unlabeled_written == 0 || self.unlabeled_interval_passed(d, now_ms);
            if unlabeled_due && unlabeled_unwritten {
                records.push(encoded(Part::Unlabeled, encode_rows(dim, d.unlabeled.rows())));
                d.unlabeled_written = d.unlabeled.stamp();
                d.unlabeled_written_ms = now_ms;
            }
            d.unsnapshotted = false;
            d.last_snapshot_ms = now_ms;
            let main = Snapshot {
                seen: d.seen,
                last_source: d.last_source.clone(),
                incidents: d.incidents.clone(),
                onboarding: d.onboarding.clone(),
                onboarded: d.onboarded.clone(),
                kind: d.kind.clone(),
                rows_accepted: d.rows_accepted,
                pinned: d.positive.pinned(),
                input_partitions: self.input_partitions as u32,
                rows_apart: true,
                ..Snapshot::empty(dim)
            };
            records.push(encoded(Part::Main, Some(main.encode_main())));
        }
        records
    }

    /// The read of a restore: the state topic for newly assigned partitions, to its end.
    /// Not ready from now until [`Self::install`]; a read that stalls is tried again,
    /// never taken as complete. The future owns what it needs, so the service can go on
    /// polling its consumer (the group's `max.poll.interval.ms`) while it runs.
    ///
    /// Once input partitions were added, a device's records may arrive on a partition
    /// that maps to another state partition than its snapshot's. Then every state
    /// partition is read: a snapshot written under today's partition count is restored
    /// by the member owning its last record's partition (others skip it); an older one
    /// is parked until its device sends a record here ([`Self::promote`]).
    pub(crate) fn read(
        &self,
        parts: &[(String, i32)],
    ) -> impl std::future::Future<Output = Reading> + 'static {
        self.metrics.state_restoring.set(1);
        self.health.restoring(true);
        let (kafka, metrics, stall) = (self.kafka.clone(), Arc::clone(&self.metrics), self.restore_stall);
        let (state_partitions, known) = (self.partitions, self.input_partitions);
        let parts = parts.to_vec();
        async move {
            let started = Instant::now();
            let input_partitions = input_partitions(&kafka).await.unwrap_or(known);
            let moved = input_partitions != state_partitions;
            let wanted: BTreeSet<i32> = match moved {
                true => (0..state_partitions).collect(),
                false => parts.iter().map(|(_, p)| state_partition(*p, state_partitions)).collect(),
            };
            let changelog = read_to_end(&kafka, &metrics, stall, wanted.into_iter().collect()).await;
            Reading {
                started,
                assigned: parts.iter().map(|(_, p)| *p).collect(),
                input_partitions,
                changelog,
            }
        }
    }

    /// A restore's read put in place: windows restored where we have none in memory
    /// (ours are newer), snapshots of unknown owners parked, and the restored devices
    /// adapted here, before any of their records is scored: a restart must not leave
    /// them `unknown` until the next adaptation round. Ready again after.
    pub(crate) fn install(&mut self, engine: &mut Engine, reading: Reading, now_ms: u64) {
        let Reading { started, assigned, input_partitions, changelog } = reading;
        self.input_partitions = input_partitions;
        let moved = self.moved();
        let mut restored = Vec::new();
        if moved {
            self.parked.clear();
        }
        for (device, home, snapshot) in changelog.entries.snapshots() {
            if engine.devices.get(&device).is_some() {
                continue;
            }
            let s = match snapshot {
                Ok(s) if s.dim == engine.devices.dim() => s,
                Ok(_) => {
                    tracing::warn!(device, "snapshot has another feature count; ignored");
                    continue;
                }
                Err(e) => {
                    tracing::warn!(device, error = %e, "bad snapshot; ignored");
                    continue;
                }
            };
            let owner = s.last_source.as_ref().map(|l| l.partition);
            let partition = match (moved, owner) {
                (false, Some(p)) => p,
                (false, None) => {
                    assigned.iter().copied().find(|p| self.state_partition(*p) == home).unwrap_or(0)
                }
                (true, Some(p)) if s.input_partitions == self.input_partitions as u32 => {
                    if !assigned.contains(&p) {
                        continue; // another member's
                    }
                    p
                }
                (true, _) => {
                    self.parked.insert(device, (home, s));
                    continue;
                }
            };
            engine.devices.restore(&device, &s, partition, home, now_ms);
            restored.push(device);
        }
        self.metrics.state_parked.set(self.parked.len() as i64);
        let adapted = engine.adapt_now(restored.iter().map(String::as_str)).len();
        let seconds = started.elapsed().as_secs_f64();
        events::state_restored(&self.metrics, restored.len(), adapted, changelog.bytes, seconds);
        self.metrics.state_restoring.set(0);
        self.health.restoring(false);
    }

    /// Whether snapshots are parked (see [`Self::read`]).
    pub(crate) fn has_parked(&self) -> bool {
        !self.parked.is_empty()
    }

    /// Restore (and adapt) the parked snapshots of devices that just sent a record here,
    /// on the partition it came on, before the record is scored.
    pub(crate) fn promote<'a>(
        &mut self,
        engine: &mut Engine,
        arrived: impl Iterator<Item = (&'a str, i32)>,
        now_ms: u64,
    ) {
        let mut promoted = Vec::new();
        for (device, partition) in arrived {
            if let Some((home, s)) = self.parked.remove(device) {
                engine.devices.restore(device, &s, partition, home, now_ms);
                promoted.push(device.to_string());
            }
        }
        if promoted.is_empty() {
            return;
        }
        self.metrics.state_parked.set(self.parked.len() as i64);
        let adapted = engine.adapt_now(promoted.iter().map(String::as_str)).len();
        events::state_restored(&self.metrics, promoted.len(), adapted, 0, 0.0);
    }
}

/// The state partition an input partition's devices are first written to.
fn state_partition(input_partition: i32, state_partitions: i32) -> i32 {
    input_partition.rem_euclid(state_partitions)
}

/// What a restore read (see [`StateStore::read`]).
pub(crate) struct Reading {
    started: Instant,
    /// The input partitions it was for.
    assigned: Vec<i32>,
    /// The input topic's partition count at the read.
    input_partitions: i32,
    changelog: kafka::Changelog,
}

/// The state partitions read to their end, tried again (with a growing pause) until a
/// read gets there. systemd's watchdog is fed meanwhile: the daemon is alive, waiting
/// on the brokers.
async fn read_to_end(
    kafka: &KafkaConfig,
    metrics: &Metrics,
    stall: Duration,
    partitions: Vec<i32>,
) -> kafka::Changelog {
    let mut pause = Duration::from_secs(1);
    loop {
        let (kc, list) = (kafka.clone(), partitions.clone());
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
            Ok(Err(e)) => events::state_restore_failed(metrics, &e.to_string(), pause),
            // The reader panicked: a bug, not a broker's state.
            Err(e) => std::panic::resume_unwind(e.into_panic()),
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_secs(30));
    }
}

/// Failed sends to try again: a tracked device's records at its next round (rows that
/// failed written again), an untracked device's tombstones at the next write.
fn mark_failed(devices: &mut DeviceTable, failed: Vec<Failed>) {
    for f in failed {
        match devices.get_mut(&f.device) {
            Some(d) => {
                d.unsnapshotted = true;
                match f.part {
                    Part::Positive => d.positive_written = 0,
                    Part::Unlabeled => d.unlabeled_written = 0,
                    Part::Main => {}
                }
            }
            None if f.tombstone && f.part == Part::Main => {
                devices.forget_again((f.device, f.partition, Some(f.partition)))
            }
            None => {}
        }
    }
}

/// A record that was not acknowledged.
struct Failed {
    device: String,
    part: Part,
    partition: i32,
    tombstone: bool,
}

/// Send encoded snapshots and tombstones and wait for their acknowledgement; counts
/// them and returns those that failed.
async fn send(producer: &FutureProducer, topic: &str, metrics: &Metrics, records: &[Encoded]) -> Vec<Failed> {
    let failed: Vec<Failed> = send_all(producer, records, |r| {
        let rec = FutureRecord::to(topic).key(&r.key).partition(r.partition);
        match &r.value {
            Some(bytes) => rec.payload(bytes),
            None => rec,
        }
    })
    .await
    .into_iter()
    .map(|r| Failed {
        device: r.device.clone(),
        part: r.part,
        partition: r.partition,
        tombstone: r.value.is_none(),
    })
    .collect();
    let bytes: usize = records.iter().map(|r| r.key.len() + r.value.as_ref().map_or(0, Vec::len)).sum();
    events::snapshots_sent(metrics, records.len() - failed.len(), bytes as u64, failed.len());
    failed
}

/// The first input topic's partition count, if a broker says.
async fn input_partitions(kafka: &KafkaConfig) -> Option<i32> {
    kafka::topic_metadata_off_runtime(kafka, kafka.input_topics.first()?).await.and_then(|m| m.partitions)
}
