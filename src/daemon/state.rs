//! The state topic's I/O: the monitor's state records sent (awaited on revocation and
//! shutdown; failures handed back to the monitor, which keeps the books), and the state
//! topic read when partitions are assigned, each snapshot sorted to the input partition
//! it is restored on (or parked: see [`StateStore::read`]).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::producer::{FutureProducer, FutureRecord};
use tokio::sync::mpsc;

use super::config::{DaemonConfig, KafkaConfig};
use super::delivery::send_all;
use super::health::Health;
use super::internal_events::{Restoring, SnapshotsSent, StateRead, StateRestoreFailed};
use super::kafka;
use super::notify;
use super::Metrics;
use crate::monitor::devices::snapshot::{StateRecord, WriteFailed};
use crate::monitor::{Restore, Restored};

/// A state record and the state partition it goes to.
struct Encoded {
    record: StateRecord,
    partition: i32,
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
    metrics: Arc<Metrics>,
    /// Background writes that failed, for the monitor to have made again.
    failures: (mpsc::UnboundedSender<Vec<WriteFailed>>, mpsc::UnboundedReceiver<Vec<WriteFailed>>),
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
            metrics,
            failures: mpsc::unbounded_channel(),
        }
    }

    fn state_partition(&self, input_partition: i32) -> i32 {
        state_partition(input_partition, self.partitions)
    }

    /// Input partitions were added since the state topic was made: a device's snapshot
    /// may be in any state partition, not the one its input partition maps to.
    fn moved(&self) -> bool {
        self.input_partitions != self.partitions
    }

    /// Send the monitor's state records: in the background, failures kept for
    /// [`Self::take_failures`]; or with `wait`, awaited, and the failures returned.
    pub(crate) async fn write(&self, records: Vec<StateRecord>, wait: bool) -> Vec<WriteFailed> {
        let records: Vec<Encoded> = records
            .into_iter()
            .map(|r| Encoded {
                partition: r.home.unwrap_or_else(|| self.state_partition(r.input_partition)),
                record: r,
            })
            .collect();
        if wait {
            return send(&self.producer, &self.kafka.state_topic, &self.metrics, &records).await;
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
        Vec::new()
    }

    /// Background writes that failed since the last call.
    pub(crate) fn take_failures(&mut self) -> Vec<WriteFailed> {
        let mut failed = Vec::new();
        while let Ok(more) = self.failures.1.try_recv() {
            failed.extend(more);
        }
        failed
    }

    /// The read of a restore: the state topic for newly assigned partitions, to its end.
    /// Not ready from now until [`Self::restored`]; a read that stalls is tried again,
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
        self.metrics.emit(Restoring(true));
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

    /// A restore's read sorted for the monitor: each snapshot with the input partition
    /// it is restored on, or parked (its owner is not known); another member's skipped.
    /// Not ready until [`Self::restored`].
    pub(crate) fn sort(&mut self, reading: Reading) -> Restored {
        let Reading { started, assigned, input_partitions, changelog } = reading;
        self.input_partitions = input_partitions;
        let moved = self.moved();
        let mut snapshots = Vec::new();
        for (device, home, snapshot) in changelog.entries.snapshots() {
            let snapshot = match snapshot {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!(device, error = %e, "bad snapshot; ignored");
                    continue;
                }
            };
            let owner = snapshot.last_source.as_ref().map(|l| l.partition);
            let partition = match (moved, owner) {
                (false, Some(p)) => Some(p),
                (false, None) => {
                    Some(assigned.iter().copied().find(|p| self.state_partition(*p) == home).unwrap_or(0))
                }
                (true, Some(p)) if snapshot.input_partitions == self.input_partitions as u32 => {
                    if !assigned.contains(&p) {
                        continue; // another member's
                    }
                    Some(p)
                }
                (true, _) => None,
            };
            snapshots.push(Restore { device, home, snapshot, partition });
        }
        self.metrics.emit(StateRead { bytes: changelog.bytes, seconds: started.elapsed().as_secs_f64() });
        Restored { snapshots, input_partitions: self.input_partitions as u32, clear_parked: moved }
    }

    /// The monitor has put a restore in place: ready again.
    pub(crate) fn restored(&self) {
        self.metrics.emit(Restoring(false));
        self.health.restoring(false);
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
            Ok(Err(e)) => metrics.emit(StateRestoreFailed { reason: &e.to_string(), retry_in: pause }),
            // The reader panicked: a bug, not a broker's state.
            Err(e) => std::panic::resume_unwind(e.into_panic()),
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_secs(30));
    }
}

/// Send encoded snapshots and tombstones and wait for their acknowledgement; counts
/// them and returns those that failed.
async fn send(
    producer: &FutureProducer,
    topic: &str,
    metrics: &Metrics,
    records: &[Encoded],
) -> Vec<WriteFailed> {
    let failed: Vec<WriteFailed> = send_all(producer, records, |e| {
        let rec = FutureRecord::to(topic).key(&e.record.key).partition(e.partition);
        match &e.record.value {
            Some(bytes) => rec.payload(bytes),
            None => rec,
        }
    })
    .await
    .into_iter()
    .map(|e| WriteFailed {
        device: e.record.device.clone(),
        part: e.record.part,
        partition: e.partition,
        tombstone: e.record.value.is_none(),
    })
    .collect();
    let bytes: usize =
        records.iter().map(|e| e.record.key.len() + e.record.value.as_ref().map_or(0, Vec::len)).sum();
    metrics.emit(SnapshotsSent {
        written: records.len() - failed.len(),
        bytes: bytes as u64,
        failed: failed.len(),
    });
    failed
}

/// The first input topic's partition count, if a broker says.
async fn input_partitions(kafka: &KafkaConfig) -> Option<i32> {
    kafka::topic_metadata_off_runtime(kafka, kafka.input_topics.first()?).await.and_then(|m| m.partitions)
}
