//! What the door's schedules ask of the devices: adaptation on the service clock,
//! snapshots for the state topic, idle devices, devices without known-normal traffic,
//! partitions that leave and snapshots restored.

use super::*;
use crate::monitor::clock::Clock;
use crate::monitor::devices::snapshot::{StateRecord, WriteFailed};
use crate::monitor::devices::PriorUpdate;

/// How a device's state records are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Writing {
    /// Every row, not only those changed since the last write (revocation, shutdown).
    pub all_rows: bool,
    /// A device's unlabeled rows at most this often (ms).
    pub unlabeled_interval_ms: u64,
    /// The input topic's partition count, written into each snapshot.
    pub input_partitions: u32,
}

impl Devices {
    /// The clock the devices' time follows.
    pub fn clock(&self) -> Clock {
        self.table.clock()
    }

    /// The adapter thread's classifiers installed (those of devices still tracked, not
    /// already newer): the prior updates of the devices whose classifier changed.
    pub fn install_adapted(&mut self, results: Vec<Adapted>, now: Now) -> Vec<PriorUpdate> {
        let installed = self.install(results);
        installed.iter().filter_map(|id| self.prior_update(id, now)).collect()
    }

    /// The state records of `ids` (tombstones of devices evicted since the last call
    /// first), each with the classifier waiting for its next point.
    pub fn state_records(&mut self, ids: &[String], now_ms: u64, writing: Writing) -> Vec<StateRecord> {
        let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
        self.collect_pending(&refs);
        let next =
            ids.iter().filter_map(|id| Some((id.clone(), self.pending.get(id)?.state.clone()?))).collect();
        let classifiers = Classifiers { model: &self.version, next };
        self.table.state_records(
            ids,
            now_ms,
            writing.all_rows,
            writing.unlabeled_interval_ms,
            writing.input_partitions,
            &classifiers,
        )
    }

    /// The state records of up to `budget` changed devices whose last snapshot is
    /// `interval_ms` old.
    pub fn snapshots_due(
        &mut self,
        now_ms: u64,
        interval_ms: u64,
        budget: usize,
        writing: Writing,
    ) -> Vec<StateRecord> {
        let due = self.table.snapshots_due(now_ms, interval_ms, writing.unlabeled_interval_ms, budget);
        self.state_records(&due, now_ms, writing)
    }

    /// Devices with anything not yet on the state topic.
    pub fn unsnapshotted(&self) -> Vec<String> {
        self.table.unsnapshotted()
    }

    /// State records the broker did not acknowledge: written again.
    pub fn writes_failed(&mut self, failed: Vec<WriteFailed>) {
        self.table.writes_failed(failed);
    }

    /// Devices silent for `idle_ms` go idle; how many.
    pub fn evict_idle(&mut self, now_ms: u64, idle_ms: u64) -> usize {
        self.table.evict_idle(now_ms, idle_ms).len()
    }

    /// Devices sending traffic for `after_ms` with no known-normal record: how many, and
    /// those not reported before (device, records, ms since first seen).
    pub fn unmonitored(&mut self, now_ms: u64, after_ms: u64) -> (usize, Vec<(String, u64, u64)>) {
        self.table.unmonitored(now_ms, after_ms)
    }

    /// Input partitions revoked: their stream times go, and the devices of the partitions
    /// `gone` from this member leave, with their state records (every row).
    pub fn leave(
        &mut self,
        revoked: &[(String, i32)],
        gone: &[i32],
        now_ms: u64,
        writing: Writing,
    ) -> (usize, Vec<StateRecord>) {
        self.table.streams_mut().forget(revoked);
        let leaving = self.table.on_partitions(gone);
        let records = self.state_records(&leaving, now_ms, Writing { all_rows: true, ..writing });
        for d in &leaving {
            self.table.remove(d);
        }
        (leaving.len(), records)
    }

    /// Whether a snapshot read for `id` is to be placed: its device is not held here
    /// (ours is newer) and it has the table's feature count.
    pub fn takes_snapshot(&self, id: &str, snapshot: &Snapshot) -> bool {
        if self.table.get(id).is_some() {
            return false;
        }
        if snapshot.dim != self.table.dim() {
            tracing::warn!(device = id, "snapshot has another feature count; ignored");
            return false;
        }
        true
    }
}
