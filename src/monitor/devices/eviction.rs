//! Room for the devices that send: least-recently-seen eviction at capacity, idleness
//! (known-normal rows kept), forgetting, partitions that moved away, and devices sending
//! without a known-normal record.

use super::*;

/// The active devices by when they were last seen, and how many may be active at once.
/// Idle devices are not in it: they hold no unlabeled window and do not count.
#[derive(Debug)]
pub(super) struct Recency {
    /// lru key → device id; the smallest key is the least recently seen.
    order: BTreeMap<u64, String>,
    /// The last lru key handed out (counts touches; not a time).
    last_key: u64,
    max_tracked: usize,
}

impl Recency {
    pub(super) fn new(max_tracked: usize) -> Self {
        Self { order: BTreeMap::new(), last_key: 0, max_tracked }
    }

    /// A key later than every key handed out before.
    pub(super) fn next_key(&mut self) -> u64 {
        self.last_key += 1;
        self.last_key
    }

    pub(super) fn insert(&mut self, key: u64, id: &str) {
        self.order.insert(key, id.to_string());
    }

    pub(super) fn remove(&mut self, key: u64) {
        self.order.remove(&key);
    }

    /// No room for another active device.
    pub(super) fn full(&self) -> bool {
        self.order.len() >= self.max_tracked
    }

    /// More active devices than there is room for (after a restore).
    pub(super) fn over(&self) -> bool {
        self.order.len() > self.max_tracked
    }

    fn pop_least_recent(&mut self) -> Option<String> {
        self.order.pop_first().map(|(_, id)| id)
    }
}

/// Devices that left the table (evicted, idle or forgotten) and what is still owed for
/// them: their open incidents closed on the incidents topic, their snapshots deleted.
#[derive(Debug, Default)]
pub(super) struct Departed {
    /// With an incident open, and the windows to explain it as it closes.
    with_incidents: Vec<(String, Device)>,
    /// Their input partitions and homes: whose snapshots to delete.
    forgotten: Vec<Forgotten>,
}

impl DeviceTable {
    /// Make room among the active devices: the least recently seen goes idle, keeping its
    /// known-normal records, or is forgotten if it has none.
    pub(super) fn evict_oldest(&mut self) -> Option<String> {
        let id = self.recency.pop_least_recent()?;
        if !self.go_idle(&id) {
            if let Some(d) = self.devices.remove(&id) {
                self.forget_evicted(&id, d);
            }
        }
        Some(id)
    }

    /// Free a device's unlabeled window and classifier and keep its known-normal records
    /// (in memory and, at the next snapshot round, on the state topic); an open incident
    /// closes as evicted. False for a device with no known-normal record.
    pub(super) fn go_idle(&mut self, id: &str) -> bool {
        let (table_time, event_clock) = (self.time(), self.clock == Clock::Event);
        let Some(d) = self.devices.get_mut(id) else { return false };
        if d.positive.is_empty() && d.kind.is_none() {
            return false;
        }
        if d.incidents.open().is_some() {
            // Closed as evicted, explained on the windows it had.
            self.departed.with_incidents.push((id.to_string(), d.clone()));
            d.incidents.close_evicted(if event_clock { d.clock } else { table_time });
        }
        d.unlabeled = SpanWindow::new(self.dim, self.sizes.span());
        d.classifier = None;
        // A classifier the adapter still works on is stale now.
        d.installed_handover = self.handovers;
        d.changed = 0;
        d.idle = true;
        d.unsnapshotted = true;
        self.recency.remove(d.lru_key);
        true
    }

    /// An evicted device: its snapshot is to be deleted, and it is kept until its open
    /// incident is closed.
    pub(super) fn forget_evicted(&mut self, id: &str, d: Device) {
        self.departed.forgotten.push((id.to_string(), d.partition, d.home));
        if d.incidents.open().is_some() {
            self.departed.with_incidents.push((id.to_string(), d));
        }
    }

    /// Devices evicted since the last call whose incident was open, with their windows
    /// (to explain the incident as it closes).
    pub(super) fn take_evicted_with_incidents(&mut self) -> Vec<(String, Device)> {
        std::mem::take(&mut self.departed.with_incidents)
    }

    /// Devices evicted since the last call and not tracked again, with their partitions:
    /// the daemon stopped tracking them, so their snapshots go too. Otherwise a restart
    /// would restore them, an evicted incident would reopen and close a second time,
    /// and the state topic would bring back every device ever seen.
    pub(super) fn take_forgotten(&mut self) -> Vec<Forgotten> {
        let mut forgotten = std::mem::take(&mut self.departed.forgotten);
        forgotten.retain(|(id, _, _)| !self.devices.contains_key(id));
        forgotten
    }

    /// A device whose snapshot could not be deleted: to be tried again.
    pub(super) fn forget_again(&mut self, forgotten: Forgotten) {
        self.departed.forgotten.push(forgotten);
    }

    /// Devices not seen for `idle_ms` go idle; returns their ids. A device with
    /// known-normal records keeps them (in memory and, at the next snapshot round, on
    /// the state topic) and frees its unlabeled window and classifier: an operator's
    /// onboarding is not lost to a weekend off, and an idle device costs its positive
    /// window only. It is adapted again on its next records. One with no known-normal
    /// record has nothing worth keeping and is forgotten, snapshot and all.
    pub(super) fn evict_idle(&mut self, now_ms: u64, idle_ms: u64) -> Vec<String> {
        let stale: Vec<String> = self
            .devices
            .iter()
            .filter(|(_, d)| !d.idle && now_ms.saturating_sub(d.last_seen_ms) >= idle_ms)
            .map(|(id, _)| id.clone())
            .collect();
        for id in &stale {
            if !self.go_idle(id) {
                if let Some(d) = self.remove(id) {
                    self.forget_evicted(id, d);
                }
            }
        }
        stale
    }

    /// Forget a device on an operator's request: gone from memory, its snapshot deleted
    /// at the next round, an open incident closed as evicted. Its known-normal records
    /// dropped, if it was tracked.
    pub(super) fn forget(&mut self, id: &str) -> Option<usize> {
        let d = self.remove(id)?;
        let known_normal = d.positive.len();
        if let Some(kind) = d.kind.clone() {
            self.shares.queue(Share::withdrawn(kind, id, self.dim, self.time_of(&d)));
        }
        self.forget_evicted(id, d);
        Some(known_normal)
    }

    pub(super) fn remove(&mut self, id: &str) -> Option<Device> {
        let d = self.devices.remove(id)?;
        self.recency.remove(d.lru_key);
        Some(d)
    }

    /// Devices on the given partitions (for snapshot-and-drop on revocation).
    pub(super) fn on_partitions(&self, partitions: &[i32]) -> Vec<String> {
        self.devices
            .iter()
            .filter(|(_, d)| partitions.contains(&d.partition))
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// Devices that have sent traffic for `after_ms` without one known-normal record, so
    /// they cannot be scored: how many there are, and those not reported before (now
    /// marked reported) with their records seen and milliseconds since first seen.
    pub(super) fn unmonitored(&mut self, now_ms: u64, after_ms: u64) -> (usize, Vec<(String, u64, u64)>) {
        let mut count = 0;
        let mut due = Vec::new();
        for (id, d) in self.devices.iter_mut() {
            let since = now_ms.saturating_sub(d.first_seen_ms);
            if !d.has_known_normal() && d.seen > 0 && since >= after_ms {
                count += 1;
                if !d.unmonitored_reported {
                    d.unmonitored_reported = true;
                    due.push((id.clone(), d.seen, since));
                }
            }
        }
        (count, due)
    }
}
