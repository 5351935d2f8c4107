//! A device's state on the state topic, as the table keeps its books: which devices are
//! due a snapshot, their records (rows only when they changed), and writes that failed
//! marked to be made again. The shell sends the records; the books are kept here.

use super::snapshot::{
    encode_rows, encode_span_rows, Part, SavedClassifiers, SavedPoints, StateRecord, WriteFailed,
};
use super::*;
use crate::model::TaskState;

/// What a snapshot keeps of the devices' classifiers on the event clock: the model they
/// belong to, and each device's classifier waiting for its next point.
pub struct Classifiers<'a> {
    pub model: &'a str,
    pub next: HashMap<String, TaskState>,
}

impl DeviceTable {
    /// Changed devices whose last snapshot is `interval_ms` old, or whose unlabeled rows
    /// changed and were last written `unlabeled_interval_ms` ago; at most `budget`.
    pub(super) fn snapshots_due(
        &self,
        now_ms: u64,
        interval_ms: u64,
        unlabeled_interval_ms: u64,
        budget: usize,
    ) -> Vec<String> {
        self.devices
            .iter()
            .filter(|(_, d)| {
                let unlabeled_due =
                    d.rows_unwritten().1 && d.unlabeled_interval_passed(now_ms, unlabeled_interval_ms);
                (d.unsnapshotted && now_ms.saturating_sub(d.last_snapshot_ms) >= interval_ms) || unlabeled_due
            })
            .take(budget)
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// Every device with something not yet on the state topic.
    pub(super) fn unsnapshotted(&self) -> Vec<String> {
        self.devices
            .iter()
            .filter(|(_, d)| d.unsnapshotted || d.rows_unwritten() != (false, false))
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// Tombstones for the devices evicted since the last call, then the given devices'
    /// records, marked as snapshotted now: rows that changed since they were last written
    /// (the unlabeled ones only every `unlabeled_interval_ms`, unless `all_rows`), then
    /// the main record. Rows go first: a main record never names rows not yet sent.
    pub(super) fn state_records(
        &mut self,
        ids: &[String],
        now_ms: u64,
        all_rows: bool,
        unlabeled_interval_ms: u64,
        input_partitions: u32,
        classifiers: &Classifiers<'_>,
    ) -> Vec<StateRecord> {
        let dim = self.dim;
        let mut records: Vec<StateRecord> = Vec::new();
        for (id, input_partition, home) in self.take_forgotten() {
            records.extend(Part::ALL.map(|part| StateRecord {
                key: part.key(&id),
                input_partition,
                home,
                value: None,
                device: id.clone(),
                part,
            }));
        }
        for id in ids {
            let Some(d) = self.devices.get_mut(id) else { continue };
            let (input_partition, home) = (d.partition, d.home);
            let encoded = |part: Part, value| StateRecord {
                key: part.key(id),
                input_partition,
                home,
                value,
                device: id.clone(),
                part,
            };
            let (positive_unwritten, unlabeled_unwritten) = d.rows_unwritten();
            if positive_unwritten {
                records.push(encoded(Part::Positive, encode_rows(dim, d.positive.rows())));
                d.positive_written = d.positive.stamp();
            }
            let unlabeled_due = all_rows
                || d.unlabeled_written == 0
                || d.unlabeled_interval_passed(now_ms, unlabeled_interval_ms);
            if unlabeled_due && unlabeled_unwritten {
                records.push(encoded(
                    Part::Unlabeled,
                    encode_span_rows(dim, d.unlabeled.rows(), &d.unlabeled.layout()),
                ));
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
                input_partitions,
                rows_apart: true,
                points: Some(SavedPoints {
                    clock: d.clock,
                    next: d.next_adapt_ts,
                    since: d.records_since_adaptation,
                    classifiers: d.classifier.clone().filter(|_| self.clock == Clock::Event).map(|scoring| {
                        SavedClassifiers {
                            model: classifiers.model.to_string(),
                            scoring,
                            next: classifiers.next.get(id).cloned(),
                        }
                    }),
                }),
                ..Snapshot::empty(dim)
            };
            records.push(encoded(Part::Main, Some(main.encode_main())));
        }
        records
    }

    /// Writes that were not acknowledged, to be made again: a tracked device's records
    /// at its next round (rows that failed written again), an untracked device's
    /// tombstones at the next write.
    pub(super) fn writes_failed(&mut self, failed: Vec<WriteFailed>) {
        for f in failed {
            match self.devices.get_mut(&f.device) {
                Some(d) => {
                    d.unsnapshotted = true;
                    match f.part {
                        Part::Positive => d.positive_written = 0,
                        Part::Unlabeled => d.unlabeled_written = 0,
                        Part::Main => {}
                    }
                }
                None if f.tombstone && f.part == Part::Main => {
                    self.forget_again((f.device, f.partition, Some(f.partition)))
                }
                None => {}
            }
        }
    }
}

impl Device {
    /// The unlabeled rows were last written `interval_ms` ago or more.
    fn unlabeled_interval_passed(&self, now_ms: u64, interval_ms: u64) -> bool {
        now_ms.saturating_sub(self.unlabeled_written_ms) >= interval_ms
    }
}
