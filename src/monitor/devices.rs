//! Per-device state: the positive and unlabeled windows, the adapted classifier and
//! bookkeeping; a table with least-recently-seen eviction and idle expiry.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::model::TaskState;

use super::behaviours::MemoryRules;
use super::clock::Now;
use super::feedback::Feedback;
use super::incidents::{Applied, Decision, IncidentRules, IncidentTracker, Transition};
use super::kinds::{KindError, Kinds, Share};
use super::onboarding::{seed_of, Onboarding, MAX_SPAN_S};
use super::output::PriorUpdate;
use super::record::Source;
use super::snapshot::Snapshot;
use super::windows::{RowWindow, SharedRows};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowSizes {
    pub positive: usize,
    pub unlabeled: usize,
    pub bootstrap_positives: usize,
}

#[derive(Debug, Clone)]
pub struct Device {
    pub positive: RowWindow,
    pub unlabeled: RowWindow,
    /// The adapted classifier, once the device has a positive and was adapted.
    pub state: Option<TaskState>,
    /// Records seen since the device was first tracked (or restored).
    pub seen: u64,
    /// Records since the windows were last handed to adaptation.
    pub changed: usize,
    /// The handover whose classifier `state` is (see [`AdaptJob::handover`]).
    installed_handover: u64,
    /// Windows changed since the last snapshot.
    pub unsnapshotted: bool,
    /// When the last snapshot was taken (service clock, ms).
    pub last_snapshot_ms: u64,
    /// The stamps ([`RowWindow::stamp`]) of the known-normal and unlabeled rows last
    /// written to the state topic (0: not written by this process), and when the
    /// unlabeled rows were (service clock, ms).
    pub positive_written: u64,
    pub unlabeled_written: u64,
    pub unlabeled_written_ms: u64,
    /// Kafka partition the device's records arrive on (state follows it).
    pub partition: i32,
    /// The state partition its snapshot was restored from, where it stays; `None`: the
    /// one its input partition maps to.
    pub home: Option<i32>,
    /// The newest input record that entered the windows. A redelivered record (at or
    /// before it on the same topic-partition, after a crash or a rebalance) is scored
    /// again but does not enter the windows twice.
    pub last_source: Option<Source>,
    /// When the device was first tracked (or restored), service clock, ms.
    first_seen_ms: u64,
    /// Reported once as sending traffic with no known-normal record.
    unmonitored_reported: bool,
    /// Its last decisions and open incident.
    pub incidents: IncidentTracker,
    /// Silent for `devices.idle_timeout_s`: its unlabeled window and classifier were
    /// freed, its known-normal records kept (until it sends again).
    pub idle: bool,
    /// An operator's onboarding in progress: its records are known-normal until it ends.
    pub onboarding: Option<Onboarding>,
    /// The last onboarding finished (who, when, the span, how many records it took).
    pub onboarded: Option<Onboarding>,
    last_seen_ms: u64,
    lru_key: u64,
    /// Its clock under the event clock: the newest (bounded) timestamp of its records,
    /// Unix seconds; 0 before its first record.
    pub clock: f64,
    /// Under the event clock, when (on its own clock) it is next re-adapted; `None`
    /// until its first record sets it.
    pub next_adapt_ts: Option<f64>,
    /// Under the event clock, records since its last adaptation point.
    pub records_since_adaptation: usize,
    /// Its kind, as the operator named it when onboarding it (`kinds.rs`).
    pub kind: Option<String>,
    /// Known-normal rows its kind offers it (its siblings'), while its own positive
    /// window has room: adapted on after its own.
    pub offered: Option<SharedRows>,
    /// Its known-normal rows are what an operator accepted (an onboarding, or records
    /// labeled normal by a trusted producer): shared with its kind.
    pub rows_accepted: bool,
}

impl Device {
    /// Rows changed since they were last written to the state topic.
    pub fn rows_unwritten(&self) -> (bool, bool) {
        (self.positive.stamp() != self.positive_written, self.unlabeled.stamp() != self.unlabeled_written)
    }

    /// `handovers`: the table's count so far, so that a job handed out for an earlier
    /// device of the same id (evicted since) cannot install its classifier here.
    fn new(dim: usize, sizes: &WindowSizes, partition: i32, handovers: u64) -> Self {
        Self {
            positive: RowWindow::new(dim, sizes.positive),
            unlabeled: RowWindow::new(dim, sizes.unlabeled),
            state: None,
            seen: 0,
            changed: 0,
            installed_handover: handovers,
            unsnapshotted: false,
            last_snapshot_ms: 0,
            positive_written: 0,
            unlabeled_written: 0,
            unlabeled_written_ms: 0,
            partition,
            home: None,
            last_source: None,
            first_seen_ms: 0,
            unmonitored_reported: false,
            incidents: IncidentTracker::default(),
            idle: false,
            onboarding: None,
            onboarded: None,
            last_seen_ms: 0,
            lru_key: 0,
            clock: 0.0,
            next_adapt_ts: None,
            records_since_adaptation: 0,
            kind: None,
            offered: None,
            rows_accepted: false,
        }
    }

    /// Known-normal rows of its own, or offered by its kind.
    pub fn has_known_normal(&self) -> bool {
        !self.positive.is_empty() || self.offered.is_some()
    }

    /// Something to adapt on: known-normal records and recent traffic (an idle device
    /// has only the first).
    pub fn adaptable(&self) -> bool {
        self.has_known_normal() && !self.unlabeled.is_empty()
    }

    /// Something to adapt on and no classifier yet: adapted at once, before its
    /// records are scored.
    pub fn awaits_first_classifier(&self) -> bool {
        self.state.is_none() && self.adaptable()
    }

    /// The known-normal rows it is adapted on: its own, then as many of those its kind
    /// offers as its window has room for.
    fn known_normal_rows(&self) -> SharedRows {
        let own = self.positive.shared();
        let Some(offered) = &self.offered else { return own };
        let room = (self.positive.capacity() - self.positive.len()) * self.positive.dim();
        if room == 0 {
            return own;
        }
        let mut rows = Vec::with_capacity(own.len() + room.min(offered.len()));
        rows.extend_from_slice(&own);
        rows.extend_from_slice(&offered[..room.min(offered.len())]);
        SharedRows::new(rows)
    }

    /// The prior update of a device just adapted, as of `time` (Unix seconds); `None`
    /// if it has no classifier.
    pub fn prior_update(&self, id: &str, model_version: &str, time: f64) -> Option<PriorUpdate> {
        let prior = self.state.as_ref()?.prior;
        Some(PriorUpdate {
            device: id.to_string(),
            prior,
            attack_share: 1.0 - prior,
            positive_window: self.positive.len(),
            unlabeled_window: self.unlabeled.len(),
            time,
            model_version: model_version.to_string(),
        })
    }

    pub fn heap_bytes(&self) -> usize {
        self.positive.heap_bytes()
            + self.unlabeled.heap_bytes()
            + self.state.as_ref().map_or(0, |s| 4 * (s.z_p.len() + s.z_u.len() + s.w.len()))
    }
}

/// A device's windows handed to adaptation.
#[derive(Debug, Clone)]
pub struct AdaptJob {
    pub device: String,
    pub positive: SharedRows,
    pub unlabeled: SharedRows,
    /// Numbers the handovers of the whole table in order: a classifier adapted on
    /// older windows than the installed one is stale (the adapter thread can finish a
    /// job after an analyst's verdict re-adapted the device at once).
    pub handover: u64,
}

/// What [`DeviceTable::observe`] did with a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Observed {
    /// Devices evicted to make room for a new one.
    pub evicted: usize,
    /// The record was already in the windows (redelivery): left out of them.
    pub replayed: bool,
    /// The record entered the positive window as known-normal: labeled so, or taken
    /// so (a new device's first records, or an onboarding span's).
    pub taken_as_normal: bool,
}

/// A forgotten device: its id, input partition and home (see [`Device::home`]).
pub type Forgotten = (String, i32, Option<i32>);

#[derive(Debug)]
pub struct DeviceTable {
    dim: usize,
    sizes: WindowSizes,
    max_tracked: usize,
    devices: HashMap<String, Device>,
    /// lru key → device id; the smallest key is the least recently seen.
    recency: BTreeMap<u64, String>,
    clock: u64,
    /// Windows handed to adaptation so far (see [`AdaptJob::handover`]).
    handovers: u64,
    /// Devices evicted (capacity or idle) with an incident open: their incidents must
    /// still be closed on the incidents topic (see [`Self::take_evicted_with_incidents`]).
    evicted_with_incidents: Vec<(String, Device)>,
    /// Devices evicted (capacity or idle), their input partitions and homes: their
    /// snapshots on the state topic must be deleted too (see [`Self::take_forgotten`]).
    forgotten: Vec<Forgotten>,
    /// Devices being onboarded, so that a span ends even if the device falls silent.
    onboarding: BTreeSet<String>,
    /// Onboardings ended, with the known-normal records each left (see
    /// [`Self::take_onboarded`]).
    onboarded: Vec<(String, Onboarding, usize)>,
    /// The pipeline's time (Unix seconds) for onboarding spans: the wall clock in the
    /// daemon, the records' own in a replay of captures. `None`: the wall clock.
    time: Option<f64>,
    /// Each device runs on its records' own clock ([`Device::clock`]) rather than
    /// [`Self::time`]: onboarding spans, incidents and adaptation follow capture time.
    pub event_clock: bool,
    /// What each kind's members shared (the kinds topic, read whole).
    kinds: Kinds,
    /// Shares of members held here, to publish on the kinds topic (see
    /// [`Self::take_shares`]).
    shares: Vec<Share>,
    /// Members whose accepted rows changed since the last shares were taken.
    share_due: BTreeSet<String>,
}

impl DeviceTable {
    /// The window sizes every device gets.
    pub fn sizes(&self) -> &WindowSizes {
        &self.sizes
    }

    pub fn new(dim: usize, sizes: WindowSizes, max_tracked: usize) -> Self {
        Self {
            dim,
            sizes,
            max_tracked,
            devices: HashMap::new(),
            recency: BTreeMap::new(),
            clock: 0,
            handovers: 0,
            evicted_with_incidents: Vec::new(),
            forgotten: Vec::new(),
            onboarding: BTreeSet::new(),
            onboarded: Vec::new(),
            time: None,
            event_clock: false,
            kinds: Kinds::default(),
            shares: Vec::new(),
            share_due: BTreeSet::new(),
        }
    }

    pub fn len(&self) -> usize {
        self.devices.len()
    }

    pub fn is_empty(&self) -> bool {
        self.devices.is_empty()
    }

    pub fn dim(&self) -> usize {
        self.dim
    }

    /// The time onboarding spans are judged by from now on (see [`Self::time`]).
    pub fn set_time(&mut self, unix: f64) {
        self.time = Some(unix);
    }

    /// The pipeline's time as last set (0 before it is).
    pub fn time(&self) -> f64 {
        self.time.unwrap_or(0.0)
    }

    /// Now for one device at `service_ms` of the service's clock. Under the event clock:
    /// its records' clock plus the service time since its last record arrived, so that
    /// time still passes for a device that falls silent (an incident closes, a span
    /// ends) while a replay at any speed sees only record time. Otherwise the table's
    /// time.
    pub fn now_of(&self, id: &str, service_ms: u64) -> Now {
        match self.devices.get(id).filter(|_| self.event_clock) {
            Some(d) => Now::event(d.clock + service_ms.saturating_sub(d.last_seen_ms) as f64 / 1000.0),
            None if self.event_clock => Now::event(self.time()),
            None => Now { ms: service_ms, unix: self.time() },
        }
    }

    pub fn get(&self, id: &str) -> Option<&Device> {
        self.devices.get(id)
    }

    pub fn get_mut(&mut self, id: &str) -> Option<&mut Device> {
        self.devices.get_mut(id)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&String, &Device)> {
        self.devices.iter()
    }

    /// Seen now; an active device becomes the most recently seen (idle ones are not in
    /// the recency order: they hold no unlabeled window and do not count in
    /// `max_tracked`).
    fn touch(&mut self, id: &str, now_ms: u64) {
        self.clock += 1;
        let clock = self.clock;
        if let Some(d) = self.devices.get_mut(id) {
            self.recency.remove(&d.lru_key);
            d.lru_key = clock;
            d.last_seen_ms = now_ms;
            if !d.idle {
                self.recency.insert(clock, id.to_string());
            }
        }
    }

    /// Record one valid record of `id` that arrived from `source`.
    pub fn observe(
        &mut self,
        id: &str,
        features: &[f32],
        known_normal: bool,
        source: &Source,
        clock: f64,
        now_ms: u64,
    ) -> Observed {
        let mut out = Observed::default();
        let arriving = self.devices.get(id).is_none_or(|d| d.idle);
        if arriving {
            // Room among the active devices, for a new one or one back from idleness.
            while self.recency.len() >= self.max_tracked {
                if self.evict_oldest().is_none() {
                    break;
                }
                out.evicted += 1;
            }
        }
        if !self.devices.contains_key(id) {
            let mut d = Device::new(self.dim, &self.sizes, source.partition, self.handovers);
            d.first_seen_ms = now_ms;
            self.devices.insert(id.to_string(), d);
        }
        let bootstrap = self.sizes.bootstrap_positives as u64;
        let table_time = self.time();
        let event_clock = self.event_clock;
        if let Some(d) = self.devices.get_mut(id) {
            d.clock = d.clock.max(clock);
            let now_unix = if event_clock { d.clock } else { table_time };
            out.replayed = d.last_source.as_ref().is_some_and(|last| {
                last.partition == source.partition
                    && last.topic == source.topic
                    && source.offset <= last.offset
            });
            d.idle = false;
            let onboarding = d.onboarding.as_ref().map(|o| o.active(now_unix));
            if onboarding == Some(false) {
                Self::finish_onboarding(id, d, &mut self.onboarded);
                self.onboarding.remove(id);
            }
            if !out.replayed {
                if onboarding == Some(true) {
                    if let Some(o) = d.onboarding.as_mut() {
                        o.take(&mut d.positive, features, seed_of(id));
                    }
                    out.taken_as_normal = true;
                } else if known_normal || d.seen < bootstrap {
                    d.positive.push(features);
                    out.taken_as_normal = true;
                    // Labeled by a producer the operator trusts: accepted, as an
                    // onboarding is (a bootstrap's first records are merely first).
                    if known_normal {
                        d.rows_accepted = true;
                        if d.kind.is_some() {
                            self.share_due.insert(id.to_string());
                        }
                    }
                }
                d.unlabeled.push(features);
                d.seen += 1;
                d.changed += 1;
                d.unsnapshotted = true;
                d.partition = source.partition;
                d.last_source = Some(source.clone());
            }
        }
        self.touch(id, now_ms);
        out
    }

    /// Start onboarding a tracked device for `span_s` seconds from `now` (Unix), as a
    /// member of `kind` if one is named (it leaves the kind it was of, withdrawing what
    /// it shared there).
    pub fn start_onboarding(
        &mut self,
        id: &str,
        span_s: f64,
        kind: Option<&str>,
        by: String,
        note: String,
        now: f64,
    ) -> Result<Onboarding, String> {
        if let Some(k) = kind {
            super::kinds::check_name(k).map_err(|e| e.to_string())?;
        }
        if !(span_s.is_finite() && span_s > 0.0 && span_s <= MAX_SPAN_S) {
            return Err(format!(
                "an onboarding span must be more than 0 s and at most {MAX_SPAN_S} s, not {span_s}"
            ));
        }
        let d = self.devices.get_mut(id).ok_or_else(|| {
            format!(
                "unknown device {id}: not tracked by this daemon (onboard a device once it sends traffic)"
            )
        })?;
        if let Some(o) = d.onboarding.as_ref().filter(|o| o.active(now)) {
            return Err(format!(
                "{id} is already being onboarded, until {:.0} (Unix seconds), by {:?}",
                o.until, o.by
            ));
        }
        let o = Onboarding::new(now, span_s, by, note);
        d.positive.pin(0); // onboarding replaces the window, kept rows included
        d.onboarding = Some(o.clone());
        d.unsnapshotted = true;
        self.onboarding.insert(id.to_string());
        if let Some(k) = kind {
            self.join_kind(id, k, now)?;
        }
        Ok(o)
    }

    /// The tracked device `id` is of `kind` from now (`now`: Unix seconds); it leaves
    /// the kind it was of, withdrawing what it shared there.
    pub fn join_kind(&mut self, id: &str, kind: &str, now: f64) -> Result<(), String> {
        super::kinds::check_name(kind).map_err(|e| e.to_string())?;
        let d = self.devices.get_mut(id).ok_or_else(|| format!("unknown device {id}"))?;
        if d.kind.as_deref() == Some(kind) {
            return Ok(());
        }
        d.unsnapshotted = true;
        if d.rows_accepted || !d.incidents.memory.is_empty() {
            self.share_due.insert(id.to_string());
        }
        if let Some(old) = d.kind.replace(kind.to_string()) {
            self.shares.push(Share::withdrawn(old, id, self.dim, now));
        }
        self.refresh_offered(id);
        Ok(())
    }

    /// End the onboardings whose span is over at `service_ms` (devices that fell silent
    /// too), each on its device's time ([`Self::now_of`]).
    pub fn end_onboarding_due(&mut self, service_ms: u64) {
        let due: Vec<String> = self
            .onboarding
            .iter()
            .filter(|id| {
                let now = self.now_of(id, service_ms).unix;
                self.devices.get(*id).and_then(|d| d.onboarding.as_ref()).is_none_or(|o| !o.active(now))
            })
            .cloned()
            .collect();
        for id in due {
            self.onboarding.remove(&id);
            if let Some(d) = self.devices.get_mut(&id) {
                Self::finish_onboarding(&id, d, &mut self.onboarded);
            }
        }
    }

    fn finish_onboarding(id: &str, d: &mut Device, ended: &mut Vec<(String, Onboarding, usize)>) {
        if let Some(o) = d.onboarding.take() {
            ended.push((id.to_string(), o.clone(), d.positive.len()));
            d.onboarded = Some(o);
            d.rows_accepted = true;
            d.unsnapshotted = true;
            d.changed = d.changed.max(1);
        }
    }

    /// Onboardings ended since the last call: device, the span, known-normal records.
    /// A member's onboarded rows are shared with its kind.
    pub fn take_onboarded(&mut self) -> Vec<(String, Onboarding, usize)> {
        let ended = std::mem::take(&mut self.onboarded);
        for (id, ..) in &ended {
            self.share(id);
        }
        ended
    }

    /// Queue what a member accepted for its kind: its known-normal rows if an operator
    /// onboarded it, and the behaviours analysts dismissed on it.
    fn share(&mut self, id: &str) {
        let Some(d) = self.devices.get(id) else { return };
        let Some(kind) = d.kind.clone() else { return };
        let normal = if d.rows_accepted { d.positive.rows().to_vec() } else { Vec::new() };
        // What people dismissed, not what the daemon learned by itself.
        let behaviours = d
            .incidents
            .memory
            .behaviours
            .iter()
            .filter(|b| !b.dismissal.learned)
            .cloned()
            .map(|mut b| {
                b.dismissal.on = Some(id.to_string());
                b
            })
            .collect();
        let at = self.time_of(d);
        self.shares.push(Share { kind, device: id.to_string(), dim: self.dim, normal, behaviours, at });
    }

    /// Now for device `d`, Unix seconds: its own clock on the event clock, the table's
    /// otherwise.
    fn time_of(&self, d: &Device) -> f64 {
        if self.event_clock {
            d.clock
        } else {
            self.time()
        }
    }

    /// Shares to publish on the kinds topic since the last call (a member labeled
    /// records of shares once per call, however many it labeled).
    pub fn take_shares(&mut self) -> Vec<Share> {
        for id in std::mem::take(&mut self.share_due) {
            self.share(&id);
        }
        std::mem::take(&mut self.shares)
    }

    /// A share read on the kinds topic (this daemon's own included): the kind's members
    /// held here are offered what it now holds.
    pub fn apply_share(&mut self, share: Share) -> Result<(), KindError> {
        let kind = self.kinds.apply(share, self.dim)?;
        let members: Vec<String> = self
            .devices
            .iter()
            .filter(|(_, d)| d.kind.as_deref() == Some(kind.as_str()))
            .map(|(id, _)| id.clone())
            .collect();
        for id in members {
            self.refresh_offered(&id);
        }
        Ok(())
    }

    /// What the device's kind offers it now; re-adapted if that changed what it is
    /// adapted on.
    fn refresh_offered(&mut self, id: &str) {
        let Some(d) = self.devices.get_mut(id) else { return };
        let offered =
            d.kind.as_deref().and_then(|k| self.kinds.offered_rows(k, id, self.dim, self.sizes.positive));
        if offered != d.offered {
            d.offered = offered;
            if d.positive.len() < d.positive.capacity() {
                d.changed = d.changed.max(1);
            }
        }
    }

    /// Kinds and their members that shared something (for the metrics).
    pub fn kind_counts(&self) -> Vec<(String, usize)> {
        self.kinds.counts()
    }

    /// Make room among the active devices: the least recently seen goes idle, keeping its
    /// known-normal records, or is forgotten if it has none.
    fn evict_oldest(&mut self) -> Option<String> {
        let (_, id) = self.recency.pop_first()?;
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
    fn go_idle(&mut self, id: &str) -> bool {
        let (table_time, event_clock) = (self.time(), self.event_clock);
        let Some(d) = self.devices.get_mut(id) else { return false };
        if d.positive.is_empty() && d.kind.is_none() {
            return false;
        }
        if d.incidents.open.is_some() {
            // Closed as evicted, explained on the windows it had.
            self.evicted_with_incidents.push((id.to_string(), d.clone()));
            d.incidents.close_evicted(if event_clock { d.clock } else { table_time });
        }
        d.unlabeled = RowWindow::new(self.dim, self.sizes.unlabeled);
        d.state = None;
        // A classifier the adapter still works on is stale now.
        d.installed_handover = self.handovers;
        d.changed = 0;
        d.idle = true;
        d.unsnapshotted = true;
        self.recency.remove(&d.lru_key);
        true
    }

    /// An evicted device: its snapshot is to be deleted, and it is kept until its open
    /// incident is closed.
    fn forget_evicted(&mut self, id: &str, d: Device) {
        self.forgotten.push((id.to_string(), d.partition, d.home));
        if d.incidents.open.is_some() {
            self.evicted_with_incidents.push((id.to_string(), d));
        }
    }

    /// Devices evicted since the last call whose incident was open, with their windows
    /// (to explain the incident as it closes).
    pub fn take_evicted_with_incidents(&mut self) -> Vec<(String, Device)> {
        std::mem::take(&mut self.evicted_with_incidents)
    }

    /// Devices evicted since the last call and not tracked again, with their partitions:
    /// the daemon stopped tracking them, so their snapshots go too. Otherwise a restart
    /// would restore them, an evicted incident would reopen and close a second time,
    /// and the state topic would bring back every device ever seen.
    pub fn take_forgotten(&mut self) -> Vec<Forgotten> {
        let mut forgotten = std::mem::take(&mut self.forgotten);
        forgotten.retain(|(id, _, _)| !self.devices.contains_key(id));
        forgotten
    }

    /// A device whose snapshot could not be deleted: to be tried again.
    pub fn forget_again(&mut self, forgotten: Forgotten) {
        self.forgotten.push(forgotten);
    }

    /// Devices not seen for `idle_ms` go idle; returns their ids. A device with
    /// known-normal records keeps them (in memory and, at the next snapshot round, on
    /// the state topic) and frees its unlabeled window and classifier: an operator's
    /// onboarding is not lost to a weekend off, and an idle device costs its positive
    /// window only. It is adapted again on its next records. One with no known-normal
    /// record has nothing worth keeping and is forgotten, snapshot and all.
    pub fn evict_idle(&mut self, now_ms: u64, idle_ms: u64) -> Vec<String> {
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
    pub fn forget(&mut self, id: &str) -> Option<usize> {
        let d = self.remove(id)?;
        let known_normal = d.positive.len();
        if let Some(kind) = d.kind.clone() {
            self.shares.push(Share::withdrawn(kind, id, self.dim, self.time_of(&d)));
        }
        self.forget_evicted(id, d);
        Some(known_normal)
    }

    pub fn remove(&mut self, id: &str) -> Option<Device> {
        let d = self.devices.remove(id)?;
        self.recency.remove(&d.lru_key);
        Some(d)
    }

    /// Devices on the given partitions (for snapshot-and-drop on revocation).
    pub fn on_partitions(&self, partitions: &[i32]) -> Vec<String> {
        self.devices
            .iter()
            .filter(|(_, d)| partitions.contains(&d.partition))
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// Devices to re-adapt: windows changed (at least `min_changed` records, counted as
    /// a share of a full unlabeled window: [`super::engine::records_needed`]) and a
    /// positive.
    pub fn due_for_adaptation(&self, min_changed: usize) -> Vec<String> {
        let capacity = self.sizes.unlabeled;
        self.devices
            .iter()
            .filter(|(_, d)| {
                d.changed >= super::engine::records_needed(min_changed, d.unlabeled.len(), capacity)
                    && d.adaptable()
            })
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// A device's windows for adaptation (shared, copy on write), marked handed over.
    pub fn take_windows(&mut self, id: &str) -> Option<AdaptJob> {
        let d = self.devices.get_mut(id)?;
        d.changed = 0;
        self.handovers += 1;
        Some(AdaptJob {
            device: id.to_string(),
            positive: d.known_normal_rows(),
            unlabeled: d.unlabeled.shared(),
            handover: self.handovers,
        })
    }

    /// Install the classifier adapted on `handover`'s windows, unless the device is no
    /// longer tracked or already has one adapted on newer windows. Returns whether it
    /// was installed.
    pub fn install(&mut self, id: &str, handover: u64, state: TaskState) -> bool {
        match self.devices.get_mut(id) {
            Some(d) if handover > d.installed_handover => {
                d.state = Some(state);
                d.installed_handover = handover;
                true
            }
            _ => false,
        }
    }

    /// Install restored windows (state topic: read from state partition `home`);
    /// counts as seen now.
    pub fn restore(&mut self, id: &str, snapshot: &Snapshot, partition: i32, home: i32, now_ms: u64) {
        let mut d = Device::new(self.dim, &self.sizes, partition, self.handovers);
        d.home = Some(home);
        d.positive = RowWindow::from_rows(self.dim, self.sizes.positive, &snapshot.positive);
        d.unlabeled = RowWindow::from_rows(self.dim, self.sizes.unlabeled, &snapshot.unlabeled);
        d.seen = snapshot.seen;
        d.last_source = snapshot.last_source.clone();
        d.changed = usize::from(d.adaptable());
        d.idle = d.unlabeled.is_empty() && !d.positive.is_empty();
        d.first_seen_ms = now_ms;
        d.incidents = snapshot.incidents.clone();
        // An open incident's quiet period runs on from its last anomalous record on the
        // event clock (a restart changes no incident), from now on the service's.
        let last_ts = d.incidents.open.as_ref().map(|i| i.figures.last_ts).filter(|_| self.event_clock);
        d.incidents = match last_ts {
            Some(ts) => {
                d.clock = ts;
                d.incidents.restored(Now::event(ts).ms)
            }
            None => d.incidents.restored(now_ms),
        };
        d.onboarding = snapshot.onboarding.clone();
        d.onboarded = snapshot.onboarded.clone();
        d.kind = snapshot.kind.clone();
        d.rows_accepted = snapshot.rows_accepted;
        d.positive.pin(snapshot.pinned);
        if snapshot.rows_apart {
            // On the state topic as they are. (A whole snapshot's rows are written again,
            // apart, with the device's next main record, which would otherwise lack them.)
            (d.positive_written, d.unlabeled_written) = (d.positive.stamp(), d.unlabeled.stamp());
            d.unlabeled_written_ms = now_ms;
        }
        if d.onboarding.is_some() {
            self.onboarding.insert(id.to_string());
        }
        if let Some(old) = self.devices.insert(id.to_string(), d) {
            self.recency.remove(&old.lru_key);
        }
        self.refresh_offered(id);
        self.touch(id, now_ms);
        while self.recency.len() > self.max_tracked {
            if self.evict_oldest().is_none() {
                break;
            }
        }
    }

    /// Devices that have sent traffic for `after_ms` without one known-normal record, so
    /// they cannot be scored: how many there are, and those not reported before (now
    /// marked reported) with their records seen and milliseconds since first seen.
    pub fn unmonitored(&mut self, now_ms: u64, after_ms: u64) -> (usize, Vec<(String, u64, u64)>) {
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

    /// Devices with an open incident.
    pub fn with_open_incidents(&self) -> Vec<String> {
        self.devices.iter().filter(|(_, d)| d.incidents.open.is_some()).map(|(id, _)| id.clone()).collect()
    }

    /// A scored record's decision moves the device's incident state; the transition,
    /// if it opened one.
    pub fn observe_decision(
        &mut self,
        id: &str,
        decision: Decision<'_>,
        rules: &IncidentRules,
        now: Now,
    ) -> Option<Transition> {
        let d = self.devices.get_mut(id)?;
        // Traffic declared normal while it is onboarded raises nothing.
        if d.onboarding.is_some() {
            return None;
        }
        let kind = d.kind.as_deref().and_then(|k| self.kinds.memory(k));
        d.incidents.observe(id, decision, rules, kind, now.ms, now.unix)
    }

    /// Time passes for the device's open incident: an update or a quiet close, if due.
    pub fn tick_incident(&mut self, id: &str, rules: &IncidentRules, now: Now) -> Option<Transition> {
        self.devices.get_mut(id)?.incidents.tick(rules, self.dim, now.ms, now.unix)
    }

    /// An analyst's verdict on one of the device's incidents.
    pub fn apply_feedback(
        &mut self,
        fb: &Feedback,
        now_unix: f64,
        max_age_s: u64,
        memory: &MemoryRules,
    ) -> Result<Applied, String> {
        let d = self
            .devices
            .get_mut(&fb.device)
            .ok_or_else(|| format!("unknown device {}: not tracked by this daemon", fb.device))?;
        let applied =
            d.incidents.feedback(fb, now_unix, max_age_s, memory, self.dim).map_err(|e| e.to_string())?;
        // The verdict, and what it made the device remember, are its state: snapshotted
        // at the next round, not only when the device next sends.
        d.unsnapshotted = true;
        // Any verdict may change what it remembers (a confirmed one forgets): its kind hears.
        if memory.remember_ms > 0 {
            self.share(&fb.device);
        }
        Ok(applied)
    }

    /// Forget every adapted state (after a model reload), keeping windows.
    pub fn invalidate_states(&mut self) {
        for d in self.devices.values_mut() {
            d.state = None;
            d.changed = d.changed.max(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_table_bootstraps_evicts_and_schedules() {
        let sizes = WindowSizes { positive: 2, unlabeled: 4, bootstrap_positives: 1 };
        let mut t = DeviceTable::new(1, sizes, 2);
        t.observe("a", &[1.0], false, &at(0, 0), 0.0, 0); // bootstrap: first record is known-normal
        t.observe("a", &[2.0], false, &at(0, 1), 0.0, 1);
        assert_eq!(t.get("a").unwrap().positive.len(), 1);
        assert_eq!(t.get("a").unwrap().unlabeled.len(), 2);
        t.observe("b", &[3.0], false, &at(0, 2), 0.0, 2);
        t.observe("a", &[4.0], true, &at(0, 3), 0.0, 3); // a is now the most recent
        assert_eq!(t.observe("c", &[5.0], false, &at(0, 4), 0.0, 4).evicted, 1, "cap of 2: one eviction");
        assert!(
            t.get("b").is_some_and(|b| b.idle && b.positive.len() == 1),
            "least recently seen: idle, its known-normal record kept"
        );
        assert!(t.get("a").is_some());
        let due = t.due_for_adaptation(1);
        assert!(due.contains(&"a".to_string()) && due.contains(&"c".to_string()), "{due:?}");
        t.take_windows("a");
        assert!(!t.due_for_adaptation(1).contains(&"a".to_string()));
        assert_eq!(t.evict_idle(1000, 500).len(), 2);
    }

    #[test]
    fn an_evicted_device_with_an_open_incident_is_kept_until_taken() {
        let sizes = WindowSizes { positive: 2, unlabeled: 4, bootstrap_positives: 1 };
        let mut t = DeviceTable::new(1, sizes, 1);
        t.observe("quiet", &[1.0], true, &at(0, 0), 0.0, 0);
        t.observe("alarmed", &[2.0], true, &at(0, 1), 0.0, 1); // evicts "quiet": no incident
        assert!(t.take_evicted_with_incidents().is_empty());
        open_incident(&mut t, "alarmed");
        t.observe("new", &[3.0], true, &at(0, 2), 0.0, 2); // evicts "alarmed"
        let kept = t.take_evicted_with_incidents();
        assert_eq!(kept.len(), 1);
        assert_eq!(kept[0].0, "alarmed");
        assert_eq!(kept[0].1.positive.len(), 1, "with its windows, to explain the incident");
        assert!(t.take_evicted_with_incidents().is_empty(), "taken once");
        open_incident(&mut t, "new");
        assert_eq!(t.evict_idle(1000, 500), ["new"]);
        assert_eq!(t.take_evicted_with_incidents().len(), 1, "idle eviction too");
        t.observe("moved", &[4.0], true, &at(0, 3), 0.0, 3);
        open_incident(&mut t, "moved");
        t.remove("moved"); // revoked: the snapshot carries the incident to its new owner
        assert!(t.take_evicted_with_incidents().is_empty());
    }

    /// A verdict is the device's state: it is snapshotted at the next round even if the
    /// device sends nothing more (a restart would otherwise forget the dismissal).
    #[test]
    fn a_verdict_marks_the_device_for_its_next_snapshot() {
        use crate::monitor::feedback::{Feedback, Verdict};
        let sizes = WindowSizes { positive: 2, unlabeled: 4, bootstrap_positives: 1 };
        let mut t = DeviceTable::new(1, sizes, 10);
        t.observe("cam", &[1.0], true, &at(0, 0), 0.0, 0);
        open_incident(&mut t, "cam");
        t.get_mut("cam").unwrap().unsnapshotted = false;
        let id = t.get("cam").unwrap().incidents.open.as_ref().unwrap().id.clone();
        let fb = Feedback {
            device: "cam".into(),
            incident_id: id,
            verdict: Verdict::FalsePositive,
            by: "ana".into(),
            note: String::new(),
        };
        let memory = MemoryRules { remember_ms: 1_000, volume_factor: 3.0, learn_quiet: false };
        t.apply_feedback(&fb, 1.0, 60, &memory).expect("dismissed");
        let d = t.get("cam").unwrap();
        assert!(d.unsnapshotted && d.incidents.memory.len() == 1);
    }

    /// A device silent for the idle timeout keeps its known-normal records (and its
    /// snapshot is written again, without the unlabeled window); its unlabeled window and
    /// classifier go, and it is adapted again only once new records arrive. One that
    /// was never onboarded is forgotten.
    #[test]
    fn an_idle_device_keeps_its_known_normal_records() {
        let sizes = WindowSizes { positive: 3, unlabeled: 4, bootstrap_positives: 0 };
        let mut t = DeviceTable::new(1, sizes, 10);
        t.observe("cam", &[1.0], true, &at(0, 0), 0.0, 0);
        t.observe("cam", &[2.0], false, &at(0, 1), 0.0, 0);
        t.observe("plug", &[3.0], false, &at(0, 2), 0.0, 0);
        t.take_windows("cam");
        t.install("cam", 1, classifier(0.9));
        t.get_mut("cam").unwrap().unsnapshotted = false;
        let mut idle = t.evict_idle(1000, 500);
        idle.sort();
        assert_eq!(idle, ["cam", "plug"]);
        let cam = t.get("cam").expect("an onboarded device stays");
        assert_eq!(cam.positive.rows(), [1.0], "its known-normal records kept");
        assert!(cam.unlabeled.is_empty() && cam.unlabeled.heap_bytes() == 0, "its unlabeled window freed");
        assert!(cam.state.is_none() && cam.idle && cam.unsnapshotted);
        assert!(t.get("plug").is_none(), "never onboarded: forgotten");
        assert_eq!(t.take_forgotten(), [("plug".to_string(), 0, None)], "and its snapshot with it");
        assert!(t.evict_idle(5000, 500).is_empty(), "idle once");
        t.invalidate_states(); // a model reload
        assert!(t.due_for_adaptation(1).is_empty(), "nothing to adapt on while idle");
        t.observe("cam", &[4.0], false, &at(0, 3), 0.0, 6000);
        let cam = t.get("cam").unwrap();
        assert!(!cam.idle && cam.unlabeled.len() == 1 && cam.positive.len() == 1);
        assert_eq!(t.due_for_adaptation(1), ["cam"]);
    }

    #[test]
    fn evicted_devices_are_forgotten_unless_tracked_again_and_revoked_ones_are_not() {
        let sizes = WindowSizes { positive: 2, unlabeled: 4, bootstrap_positives: 0 };
        let mut t = DeviceTable::new(1, sizes, 1);
        t.observe("a", &[1.0], false, &at(3, 0), 0.0, 0);
        t.observe("b", &[2.0], false, &at(4, 1), 0.0, 1); // evicts a (capacity)
        assert_eq!(t.take_forgotten(), [("a".to_string(), 3, None)]);
        assert!(t.take_forgotten().is_empty(), "taken once");
        t.observe("a", &[3.0], false, &at(3, 2), 0.0, 2); // evicts b, a is back
        t.observe("b", &[4.0], false, &at(4, 3), 0.0, 3); // evicts a, b is back
        assert_eq!(
            t.take_forgotten(),
            [("a".to_string(), 3, None)],
            "b is tracked again: its snapshot stays"
        );
        t.remove("b"); // revoked: its snapshot is its new owner's to restore
        assert!(t.take_forgotten().is_empty());
        t.forget_again(("c".into(), 0, None));
        assert_eq!(t.take_forgotten(), [("c".to_string(), 0, None)]);
    }

    /// `max_tracked` bounds the active devices. The least recently seen one with
    /// known-normal records goes idle to make room (its unlabeled window and classifier
    /// freed, its known-normal records and snapshot kept) and comes back when it sends;
    /// idle ones do not count.
    #[test]
    fn at_capacity_an_onboarded_device_goes_idle_and_keeps_its_known_normal_records() {
        let sizes = WindowSizes { positive: 2, unlabeled: 4, bootstrap_positives: 0 };
        let mut t = DeviceTable::new(1, sizes, 2);
        t.observe("cam", &[1.0], true, &at(0, 0), 0.0, 0);
        t.observe("plug", &[2.0], true, &at(0, 1), 0.0, 1);
        let made_room = t.observe("lock", &[3.0], true, &at(0, 2), 0.0, 2);
        assert_eq!(made_room.evicted, 1);
        let cam = t.get("cam").expect("kept");
        assert!(cam.idle && cam.unlabeled.is_empty() && cam.positive.rows() == [1.0] && cam.unsnapshotted);
        assert!(t.take_forgotten().is_empty(), "its snapshot stays");
        assert_eq!(t.len(), 3, "two active, one idle");
        // Back: the least recently seen active one (plug) goes idle in its place.
        assert_eq!(t.observe("cam", &[4.0], false, &at(0, 3), 0.0, 3).evicted, 1);
        assert!(!t.get("cam").unwrap().idle && t.get("plug").unwrap().idle && !t.get("lock").unwrap().idle);
        assert_eq!(t.get("cam").unwrap().positive.rows(), [1.0]);
        // A device never onboarded is forgotten instead.
        t.observe("tv", &[5.0], false, &at(0, 4), 0.0, 4); // lock goes idle
        t.observe("plug", &[6.0], false, &at(0, 5), 0.0, 5); // cam goes idle
        t.observe("lock", &[7.0], false, &at(0, 6), 0.0, 6); // tv is forgotten
        assert!(t.get("tv").is_none());
        assert_eq!(t.take_forgotten(), [("tv".to_string(), 0, None)]);
        assert_eq!(t.len(), 3);
    }

    /// A kind's members: one onboarded shares its rows; a new sibling with none of its
    /// own is offered them (so it can be scored at once) after its own, as its window has
    /// room; one forgotten, or gone to another kind, withdraws what it shared.
    #[test]
    fn a_kinds_members_are_offered_what_their_siblings_were_onboarded_on() {
        let sizes = WindowSizes { positive: 3, unlabeled: 8, bootstrap_positives: 0 };
        let mut t = DeviceTable::new(1, sizes, 10);
        t.set_time(100.0);
        t.observe("cam-a", &[0.0], false, &at(0, 0), 0.0, 0);
        t.start_onboarding("cam-a", 3600.0, Some("cam"), "ops".into(), "".into(), 100.0).unwrap();
        assert!(t.start_onboarding("cam-a", 60.0, Some("a b"), "ops".into(), "".into(), 100.0).is_err());
        for i in 1..=2 {
            t.observe("cam-a", &[i as f32], false, &at(0, i), 0.0, 0);
        }
        assert!(t.take_shares().is_empty(), "nothing shared until the onboarding ends");
        t.end_onboarding_due(0);
        assert!(t.take_onboarded().is_empty());
        t.get_mut("cam-a").unwrap().onboarding.as_mut().unwrap().until = 0.0;
        t.end_onboarding_due(0);
        assert_eq!(t.take_onboarded().len(), 1);
        let shares = t.take_shares();
        assert_eq!(shares.len(), 1);
        assert_eq!((shares[0].key().as_str(), &shares[0].normal[..]), ("cam/cam-a", &[1.0, 2.0][..]));

        // A sibling with no known-normal row of its own: unscored until its kind offers.
        t.observe("cam-b", &[9.0], false, &at(0, 3), 0.0, 0);
        t.join_kind("cam-b", "cam", 100.0).unwrap();
        assert!(!t.get("cam-b").unwrap().adaptable());
        t.apply_share(shares[0].clone()).unwrap();
        assert!(t.get("cam-b").unwrap().awaits_first_classifier(), "offered rows are something to adapt on");
        assert!(t.get("cam-a").unwrap().offered.is_none(), "never offered its own");
        // Its own rows first, then the offered ones its window has room for.
        t.get_mut("cam-b").unwrap().positive.push(&[7.0]);
        let job = t.take_windows("cam-b").unwrap();
        assert_eq!(&job.positive[..], &[7.0, 2.0, 1.0]);
        // Gone to another kind: what it shared is withdrawn from the first.
        t.join_kind("cam-a", "plug", 100.0).unwrap();
        let moved = t.take_shares();
        let keys: Vec<(String, bool)> = moved.iter().map(|s| (s.key(), s.is_empty())).collect();
        assert_eq!(
            keys,
            [("cam/cam-a".into(), true), ("plug/cam-a".into(), false)],
            "withdrawn, then shared"
        );
        t.apply_share(moved[0].clone()).unwrap();
        assert!(t.get("cam-b").unwrap().offered.is_none() && t.kind_counts().is_empty());
        t.apply_share(moved[1].clone()).unwrap();
        assert_eq!(t.kind_counts(), [("plug".to_string(), 1)]);
        // Forgotten: withdrawn from its kind.
        t.forget("cam-b");
        assert_eq!(t.take_shares()[0].key(), "cam/cam-b");
        // Records labeled normal by a trusted producer are accepted rows too: one share
        // however many arrive; a bootstrap's first records are not.
        t.observe("cam-c", &[5.0], false, &at(0, 4), 0.0, 0);
        t.join_kind("cam-c", "cam", 100.0).unwrap();
        assert!(t.take_shares().is_empty(), "nothing accepted on it yet");
        t.observe("cam-c", &[6.0], true, &at(0, 5), 0.0, 0);
        t.observe("cam-c", &[7.0], true, &at(0, 6), 0.0, 0);
        let labeled = t.take_shares();
        assert_eq!((labeled.len(), &labeled[0].normal[..]), (1, &[6.0, 7.0][..]));
    }

    /// An operator's onboarding: refused for what cannot be onboarded; while it runs the
    /// device's records are known-normal whatever their label, and its decisions open
    /// no incident; it ends on time even for a silent device, once, with its count.
    #[test]
    fn onboarding_takes_a_span_of_records_and_ends_on_time() {
        use crate::monitor::clock::Now;
        use crate::monitor::incidents::Decision;
        let sizes = WindowSizes { positive: 4, unlabeled: 8, bootstrap_positives: 0 };
        let mut t = DeviceTable::new(1, sizes, 10);
        let now = crate::monitor::clock::unix_now();
        t.set_time(now);
        let start = |t: &mut DeviceTable, id: &str, span: f64| {
            t.start_onboarding(id, span, None, "ops".into(), "".into(), now)
        };
        assert!(start(&mut t, "cam", 60.0).unwrap_err().contains("unknown device cam"));
        t.observe("cam", &[0.0], false, &at(0, 0), 0.0, 0);
        assert!(start(&mut t, "cam", 0.0).unwrap_err().contains("more than 0 s"));
        assert!(start(&mut t, "cam", -5.0).is_err() && start(&mut t, "cam", f64::NAN).is_err());
        assert_eq!(start(&mut t, "cam", 3600.0).unwrap().until, now + 3600.0);
        assert!(start(&mut t, "cam", 60.0).unwrap_err().contains("cam is already being onboarded"));
        let taken: Vec<bool> = (1..=6)
            .map(|i| t.observe("cam", &[i as f32], false, &at(0, i), 0.0, 0).taken_as_normal)
            .collect();
        assert_eq!(taken, [true; 6]);
        let cam = t.get("cam").unwrap();
        assert_eq!((cam.positive.len(), cam.onboarding.as_ref().unwrap().records), (4, 6));
        let rules = one_anomaly_opens();
        let d = Decision {
            anomalous: true,
            posterior: 0.1,
            prior: 0.7,
            ts: 0.0,
            source: &at(0, 6),
            features: &[6.0],
            context: None,
        };
        assert!(
            t.observe_decision("cam", d, &rules, Now::service(0)).is_none(),
            "no incident while onboarding"
        );
        t.set_time(now + 10.0);
        t.end_onboarding_due(0);
        assert!(t.take_onboarded().is_empty(), "not yet");
        t.set_time(now + 3600.0);
        t.end_onboarding_due(0); // silent since
        let ended = t.take_onboarded();
        assert_eq!(ended.len(), 1);
        assert_eq!((ended[0].0.as_str(), ended[0].1.records, ended[0].2), ("cam", 6, 4));
        let cam = t.get("cam").unwrap();
        assert!(cam.onboarding.is_none() && cam.onboarded.as_ref().is_some_and(|o| o.by == "ops"));
        t.set_time(now + 7200.0);
        t.end_onboarding_due(0);
        assert!(t.take_onboarded().is_empty(), "ended once");
        assert!(!t.observe("cam", &[9.0], false, &at(0, 9), 0.0, 0).taken_as_normal, "labels rule again");
    }

    #[test]
    fn an_unmonitored_device_is_reported_once() {
        let sizes = WindowSizes { positive: 2, unlabeled: 4, bootstrap_positives: 0 };
        let mut t = DeviceTable::new(1, sizes, 10);
        t.observe("a", &[1.0], false, &at(0, 0), 0.0, 0);
        t.observe("b", &[1.0], true, &at(0, 1), 0.0, 0);
        let reported =
            |t: &mut DeviceTable| t.unmonitored(1000, 500).1.into_iter().map(|r| r.0).collect::<Vec<_>>();
        assert_eq!(reported(&mut t), ["a"]);
        assert!(reported(&mut t).is_empty(), "once (its delivery is retried until acknowledged)");
        assert_eq!(t.unmonitored(1000, 500).0, 1, "still counted");
    }

    /// Incident rules under which one anomalous decision opens an incident.
    fn one_anomaly_opens() -> crate::monitor::incidents::IncidentRules {
        crate::monitor::incidents::IncidentRules {
            open_k: 1,
            open_n: 1,
            update_interval_ms: 1_000,
            quiet_ms: 10_000,
            reopen_ms: 0,
            keep_records: 1,
            memory: crate::monitor::behaviours::MemoryRules::OFF,
            fan_out: crate::monitor::fanout::FanOutRules::OFF,
        }
    }

    fn open_incident(t: &mut DeviceTable, id: &str) {
        use crate::monitor::incidents::Decision;
        let rules = one_anomaly_opens();
        let source = at(0, 99);
        let d = Decision {
            anomalous: true,
            posterior: 0.1,
            prior: 0.7,
            ts: 0.0,
            source: &source,
            features: &[0.0],
            context: None,
        };
        t.get_mut(id).unwrap().incidents.observe(id, d, &rules, None, 0, 0.0).expect("opened");
        assert!(t.get(id).unwrap().incidents.open.is_some());
    }

    fn classifier(prior: f32) -> TaskState {
        TaskState { z_p: vec![], z_u: vec![], w: vec![], prior }
    }

    #[test]
    fn a_classifier_adapted_on_older_windows_never_replaces_a_newer_one() {
        let sizes = WindowSizes { positive: 2, unlabeled: 4, bootstrap_positives: 1 };
        let mut t = DeviceTable::new(1, sizes, 2);
        t.observe("a", &[1.0], true, &at(0, 0), 0.0, 0);
        let older = t.take_windows("a").unwrap();
        t.observe("a", &[2.0], true, &at(0, 1), 0.0, 1);
        let newer = t.take_windows("a").unwrap();
        // The newer job finishes first (an analyst's verdict adapts at once); the older
        // one, still running on the adapter thread, finishes after it.
        assert!(t.install("a", newer.handover, classifier(0.7)));
        assert!(!t.install("a", older.handover, classifier(0.2)), "stale classifier installed");
        assert_eq!(t.get("a").unwrap().state.as_ref().unwrap().prior, 0.7);
        // A job handed out before the device went idle cannot land after it.
        let evicted = t.take_windows("a").unwrap();
        assert_eq!(t.evict_idle(1000, 500).len(), 1);
        t.observe("a", &[3.0], true, &at(0, 2), 0.0, 1000);
        assert!(!t.install("a", evicted.handover, classifier(0.3)));
        assert!(t.get("a").unwrap().state.is_none());
        let fresh = t.take_windows("a").unwrap();
        assert!(t.install("a", fresh.handover, classifier(0.9)));
        assert!(!t.install("gone", fresh.handover + 1, classifier(0.9)), "untracked device");
    }

    fn at(partition: i32, offset: i64) -> Source {
        Source { topic: "in".into(), partition, offset }
    }

    #[test]
    fn redelivered_records_do_not_enter_the_windows_twice() {
        let sizes = WindowSizes { positive: 4, unlabeled: 8, bootstrap_positives: 0 };
        let mut t = DeviceTable::new(1, sizes, 10);
        for offset in 0..3 {
            assert!(!t.observe("a", &[offset as f32], offset == 0, &at(0, offset), 0.0, 0).replayed);
        }
        // A restart replays from the last committed offset: 1 and 2 are already in.
        assert!(t.observe("a", &[1.0], false, &at(0, 1), 0.0, 0).replayed);
        assert!(t.observe("a", &[2.0], false, &at(0, 2), 0.0, 0).replayed);
        assert!(!t.observe("a", &[3.0], false, &at(0, 3), 0.0, 0).replayed);
        assert_eq!(t.get("a").unwrap().unlabeled.len(), 4);
        assert_eq!(t.get("a").unwrap().seen, 4);
        // Another partition (the device's key moved) or topic: offsets are not comparable.
        assert!(!t.observe("a", &[9.0], false, &at(1, 0), 0.0, 0).replayed);
        let other_topic = Source { topic: "other".into(), partition: 1, offset: 0 };
        assert!(!t.observe("a", &[9.0], false, &other_topic, 0.0, 0).replayed);
    }
}
