//! The devices layer: each device's state and its adaptation. `Devices` (`owner.rs`) is
//! what the door calls: it holds the model, the solver, the incident rules and the
//! device table, which keeps each device's state (its windows, classifier, onboarding,
//! kind and incident tracker); it takes a micro-batch's records into the table, scores
//! them, adapts the devices and moves their incidents.
//!
//! Here: a device, the table, and what it admits of each record (`observe`: the one
//! admission rule). The table's other jobs, each in its own file: `onboarding_spans`,
//! `kind_membership`, `eviction` (capacity, idleness, forgetting, moved partitions,
//! unmonitored devices), `adaptation` (due devices, handovers, installs, restores),
//! `state_topic` (snapshots) and `incident_routing` (to a device's tracker). Three of
//! those jobs own their state in a struct beside them: `eviction`'s `Recency` (who was
//! seen least recently, how many may be active) and `Departed` (incidents and snapshots
//! still owed for devices gone), `onboarding_spans`' `Onboardings`, `kind_membership`'s
//! `ShareQueue` (shares on their way to the kinds topic).
//!
//! Beside it: `owner` (batches in, plain values out), `windows` and `span_window` (the
//! windows), `onboarding` and `kinds` (known-normal traffic an operator gives a device
//! or its kind), `stream_time` (each input partition's time, the event clock's),
//! `drawn_supports` (with `windows.drawn`, windows to supports at the trained shape),
//! `adapt_jobs` (supports to classifiers, in batched solves), `adapt_worker` (the one
//! adaptation thread) and `solver` (where the event clock's jobs are solved).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::model::TaskState;

use super::clock::{Clock, Now};
use super::incidents::behaviours::MemoryRules;
use super::incidents::Feedback;
use super::incidents::{Applied, Decision, IncidentRules, IncidentTracker, Transition};
use super::record::Source;
use eviction::{Departed, Recency};
use kind_membership::ShareQueue;
use kinds::{KindError, Kinds, Share};
use onboarding::{seed_of, Onboarding, MAX_SPAN_S};
use onboarding_spans::Onboardings;
use snapshot::Snapshot;
use span_window::{SpanSizes, SpanWindow};
use stream_time::StreamClocks;
use windows::{RowWindow, SharedRows};

pub(super) mod adapt_jobs;
pub(super) mod adapt_worker;
pub mod kinds;
pub mod onboarding;
pub(super) mod owner;
pub mod snapshot;
pub mod solver;
pub mod span_window;
pub(super) mod stream_time;
pub(super) mod windows;

mod adaptation;
pub(super) mod drawn_supports;
pub use adaptation::{records_needed, Kept};
pub use state_topic::Classifiers;
mod eviction;
mod incident_change;
pub use incident_change::IncidentChange;
mod incident_routing;
mod kind_membership;
mod onboarding_spans;
mod prior_update;
pub use prior_update::PriorUpdate;
mod state_topic;
#[cfg(test)]
#[path = "table_tests.rs"]
mod tests;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowSizes {
    pub positive: usize,
    pub unlabeled: usize,
    pub bootstrap_positives: usize,
    /// Of the unlabeled rows, those spread over the device's earlier time
    /// (`span_window.rs`; 0: the newest only).
    pub unlabeled_spread: usize,
    /// Seconds of the device's time per stratum of the spread rows.
    pub spread_bucket_s: u64,
    /// Adapt on draws at the model's trained shape (`drawn_supports.rs`), not on the
    /// whole windows.
    pub drawn: bool,
}

/// The newest rows only, as before spread windows: what tests and benches build on
/// unless they say otherwise.
impl Default for WindowSizes {
    fn default() -> Self {
        Self {
            positive: 50,
            unlabeled: 200,
            bootstrap_positives: 0,
            unlabeled_spread: 0,
            spread_bucket_s: 600,
            drawn: false,
        }
    }
}

impl WindowSizes {
    /// The unlabeled window's sizes.
    fn span(&self) -> SpanSizes {
        SpanSizes {
            capacity: self.unlabeled,
            spread: self.unlabeled_spread,
            bucket_s: self.spread_bucket_s.max(1) as f64,
        }
    }
}

#[derive(Debug, Clone)]
pub struct Device {
    positive: RowWindow,
    /// Its newest rows and a sample of its earlier time (`span_window.rs`).
    unlabeled: SpanWindow,
    /// The adapted classifier, once the device has a positive and was adapted.
    classifier: Option<TaskState>,
    /// Records seen since the device was first tracked (or restored).
    seen: u64,
    /// Records scored since it was first tracked by this process, and of those
    /// anomalous (published with its priors).
    scored: u64,
    alerted: u64,
    /// The device's times of the first and the newest record it took as known-normal
    /// since this process began tracking it (published with its priors).
    known_span: Option<(f64, f64)>,
    /// Records since the windows were last handed to adaptation.
    changed: usize,
    /// The handover whose classifier `state` is (see [`AdaptJob::handover`]).
    installed_handover: u64,
    /// Windows changed since the last snapshot.
    unsnapshotted: bool,
    /// When the last snapshot was taken (service clock, ms).
    last_snapshot_ms: u64,
    /// The stamps ([`RowWindow::stamp`]) of the known-normal and unlabeled rows last
    /// written to the state topic (0: not written by this process), and when the
    /// unlabeled rows were (service clock, ms).
    positive_written: u64,
    unlabeled_written: u64,
    unlabeled_written_ms: u64,
    /// Kafka partition the device's records arrive on (state follows it).
    partition: i32,
    /// The state partition its snapshot was restored from, where it stays; `None`: the
    /// one its input partition maps to.
    home: Option<i32>,
    /// The newest input record that entered the windows. A redelivered record (at or
    /// before it on the same topic-partition, after a crash or a rebalance) is scored
    /// again but does not enter the windows twice.
    last_source: Option<Source>,
    /// When the device was first tracked (or restored), service clock, ms.
    first_seen_ms: u64,
    /// Reported once as sending traffic with no known-normal record.
    unmonitored_reported: bool,
    /// Its last decisions and open incident.
    incidents: IncidentTracker,
    /// Silent for `devices.idle_timeout_s`: its unlabeled window and classifier were
    /// freed, its known-normal records kept (until it sends again).
    idle: bool,
    /// An operator's onboarding in progress: its records are known-normal until it ends.
    onboarding: Option<Onboarding>,
    /// The last onboarding finished (who, when, the span, how many records it took).
    onboarded: Option<Onboarding>,
    last_seen_ms: u64,
    lru_key: u64,
    /// Its clock under the event clock: the newest (bounded) timestamp of its records,
    /// Unix seconds; 0 before its first record.
    clock: f64,
    /// Under the event clock, when (on its own clock) it is next re-adapted; `None`
    /// until its first record sets it.
    next_adapt_ts: Option<f64>,
    /// Under the event clock, records since its last adaptation point.
    records_since_adaptation: usize,
    /// Its kind, as the operator named it when onboarding it (`kinds.rs`).
    kind: Option<String>,
    /// Known-normal rows its kind offers it (its siblings'), while its own positive
    /// window has room: adapted on after its own.
    offered: Option<SharedRows>,
    /// Its known-normal rows are what an operator accepted (an onboarding, or records
    /// labeled normal by a trusted producer): shared with its kind.
    rows_accepted: bool,
}

/// A device's adaptation point as the devices plan on it: its clock, when it is next
/// re-adapted (event clock), records since its last point, rows in its unlabeled window.
#[derive(Debug, Clone, Copy, Default)]
pub struct AdaptationPoint {
    pub clock: f64,
    pub next: Option<f64>,
    pub since: usize,
    /// Rows in its unlabeled window (before the record being planned).
    pub rows: usize,
}

/// A device as the monitor shows it (tests and benches look; nothing decides on it).
#[derive(Debug, Clone, PartialEq)]
pub struct DeviceView {
    /// Records that entered its windows.
    pub seen: u64,
    /// Its known-normal window's rows.
    pub known_normal: Vec<f32>,
    /// Its unlabeled window's rows, oldest first.
    pub unlabeled: Vec<f32>,
    /// Its classifier's prior (none before its first adaptation).
    pub prior: Option<f32>,
    pub heap_bytes: usize,
}

impl Device {
    /// Its adapted classifier.
    fn classifier(&self) -> Option<&TaskState> {
        self.classifier.as_ref()
    }

    /// Its unlabeled window holds as many rows as it can: its classifier is adapted on
    /// a settled window, not one still filling.
    fn window_full(&self) -> bool {
        self.unlabeled.len() >= self.unlabeled.capacity()
    }

    /// Its windows changed since they were last handed to adaptation.
    fn changed_since_adaptation(&self) -> bool {
        self.changed > 0
    }

    /// Its incidents: the open one, the last closed, what it remembers.
    fn incidents(&self) -> &IncidentTracker {
        &self.incidents
    }

    /// Its own known-normal rows, without those its kind offers (what an incident is
    /// explained against).
    fn own_known_normal_rows(&self) -> &[f32] {
        self.positive.rows()
    }

    /// Its newest `n` unlabeled rows.
    fn newest_rows(&self, n: usize) -> Vec<f32> {
        self.unlabeled.newest(n)
    }

    /// Close its open incident as evicted (the device is gone from the table).
    fn close_evicted_incident(&mut self, now_unix: f64) -> Option<Transition> {
        self.incidents.close_evicted(now_unix)
    }

    fn view(&self) -> DeviceView {
        DeviceView {
            seen: self.seen,
            known_normal: self.positive.rows().to_vec(),
            unlabeled: self.unlabeled.rows().to_vec(),
            prior: self.classifier.as_ref().map(|s| s.prior),
            heap_bytes: self.heap_bytes(),
        }
    }

    /// Rows changed since they were last written to the state topic.
    fn rows_unwritten(&self) -> (bool, bool) {
        (self.positive.stamp() != self.positive_written, self.unlabeled.stamp() != self.unlabeled_written)
    }

    /// `handovers`: the table's count so far, so that a job handed out for an earlier
    /// device of the same id (evicted since) cannot install its classifier here.
    fn new(dim: usize, sizes: &WindowSizes, partition: i32, handovers: u64) -> Self {
        Self {
            positive: RowWindow::new(dim, sizes.positive),
            unlabeled: SpanWindow::new(dim, sizes.span()),
            classifier: None,
            seen: 0,
            scored: 0,
            alerted: 0,
            known_span: None,
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
    fn has_known_normal(&self) -> bool {
        !self.positive.is_empty() || self.offered.is_some()
    }

    /// Something to adapt on: known-normal records and recent traffic (an idle device
    /// has only the first).
    fn adaptable(&self) -> bool {
        self.has_known_normal() && !self.unlabeled.is_empty()
    }

    /// Something to adapt on and no classifier yet: adapted at once, before its
    /// records are scored.
    fn awaits_first_classifier(&self) -> bool {
        self.classifier.is_none() && self.adaptable()
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

    fn heap_bytes(&self) -> usize {
        self.positive.heap_bytes()
            + self.unlabeled.heap_bytes()
            + self.classifier.as_ref().map_or(0, |s| {
                4 * (s.z_p.len()
                    + s.z_u.len()
                    + s.w.len()
                    + s.draws.iter().map(|d| d.w.len() + 1).sum::<usize>())
            })
    }
}

/// A device's windows handed to adaptation: its known-normal rows and its unlabeled
/// window, or, to be adapted on draws, its newest records (`drawn_supports.rs`).
#[derive(Debug, Clone)]
pub struct AdaptJob {
    pub device: String,
    pub positive: SharedRows,
    pub unlabeled: SharedRows,
    /// Numbers the handovers of the whole table in order: a classifier adapted on
    /// older windows than the installed one is stale (the adapter thread can finish a
    /// job after an analyst's verdict re-adapted the device at once).
    pub handover: u64,
    /// The device's records so far: what its draws are seeded with, the same in a
    /// replay, under any batching and after a restart (its snapshot keeps the count).
    pub seen: u64,
    /// Adapted on draws (`unlabeled` then holds its newest records only), or on the
    /// windows themselves.
    pub drawn: bool,
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
    devices: HashMap<String, Device>,
    /// Which active devices were seen least recently, at most how many.
    recency: Recency,
    /// Windows handed to adaptation so far (see [`AdaptJob::handover`]).
    handovers: u64,
    /// Devices evicted or forgotten, for their incidents and snapshots.
    departed: Departed,
    /// Onboardings under way and ended.
    onboardings: Onboardings,
    /// The pipeline's time (Unix seconds) for onboarding spans: the wall clock in the
    /// daemon, the records' own in a replay of captures, as the pipeline last set it.
    time: Option<f64>,
    /// Which clock the monitor runs on, held here alone: on [`Clock::Event`] each device
    /// runs on its records' own clock ([`Device::clock`]) rather than [`Self::time`]:
    /// onboarding spans, incidents and adaptation follow capture time.
    clock: Clock,
    /// The input partitions' stream times: each device's time on the event clock
    /// ([`Self::now_of`]).
    streams: StreamClocks,
    /// What each kind's members shared (the kinds topic, read whole).
    kinds: Kinds,
    /// Shares of members held here, to publish on the kinds topic.
    shares: ShareQueue,
}

impl DeviceTable {
    /// The window sizes every device gets.
    fn sizes(&self) -> &WindowSizes {
        &self.sizes
    }

    pub fn new(dim: usize, sizes: WindowSizes, max_tracked: usize) -> Self {
        Self {
            dim,
            sizes,
            devices: HashMap::new(),
            recency: Recency::new(max_tracked),
            handovers: 0,
            departed: Departed::default(),
            onboardings: Onboardings::default(),
            time: None,
            clock: Clock::Service,
            streams: StreamClocks::default(),
            kinds: Kinds::default(),
            shares: ShareQueue::default(),
        }
    }

    /// The table on `clock` (the records' own: see [`Self::now_of`]), its partitions'
    /// stream times kept by `streams`.
    pub fn on_clock(mut self, clock: Clock, streams: StreamClocks) -> Self {
        (self.clock, self.streams) = (clock, streams);
        self
    }

    /// The clock the monitor runs on.
    fn clock(&self) -> Clock {
        self.clock
    }

    /// The input partitions' stream times, which the door stamps, holds and forgets.
    fn streams_mut(&mut self) -> &mut StreamClocks {
        &mut self.streams
    }

    fn len(&self) -> usize {
        self.devices.len()
    }

    fn dim(&self) -> usize {
        self.dim
    }

    /// The time onboarding spans are judged by from now on (see [`Self::time`]).
    fn set_time(&mut self, unix: f64) {
        self.time = Some(unix);
    }

    /// The pipeline's time as last set (0 before it is).
    fn time(&self) -> f64 {
        self.time.unwrap_or(0.0)
    }

    /// Now for one device at `service_ms` of the service's clock, between its records.
    /// Under the event clock: its partition's stream time (`stream_time.rs`), never
    /// before its own; only records move it, until the partition falls idle as a whole.
    /// So a service that lags behind live traffic (a busy machine) decides what a replay
    /// at any speed decides. Otherwise the table's time.
    fn now_of(&self, id: &str, service_ms: u64) -> Now {
        match self.devices.get(id).filter(|_| self.clock == Clock::Event) {
            Some(d) => {
                let stream =
                    d.last_source.as_ref().and_then(|s| self.streams.now(&s.topic, d.partition, service_ms));
                Now::event(stream.map_or(d.clock, |t| t.max(d.clock)))
            }
            None if self.clock == Clock::Event => Now::event(self.time()),
            None => Now { ms: service_ms, unix: self.time() },
        }
    }

    /// A device's adaptation point as the devices plan on it (a new device's: zero).
    fn adaptation_point(&self, id: &str) -> AdaptationPoint {
        self.devices.get(id).map_or_else(AdaptationPoint::default, |d| AdaptationPoint {
            clock: d.clock,
            next: d.next_adapt_ts,
            since: d.records_since_adaptation,
            rows: d.unlabeled.len(),
        })
    }

    /// A device's next adaptation point and records since its last, as a batch's plan
    /// left them.
    fn set_adaptation_point(&mut self, id: &str, next: f64, since: usize) {
        if let Some(d) = self.devices.get_mut(id) {
            d.next_adapt_ts = Some(next);
            d.records_since_adaptation = since;
        }
    }

    fn get(&self, id: &str) -> Option<&Device> {
        self.devices.get(id)
    }

    /// Seen now; an active device becomes the most recently seen (idle ones are not in
    /// the recency order: they hold no unlabeled window and do not count in
    /// `max_tracked`).
    fn touch(&mut self, id: &str, now_ms: u64) {
        let key = self.recency.next_key();
        if let Some(d) = self.devices.get_mut(id) {
            self.recency.remove(d.lru_key);
            d.lru_key = key;
            d.last_seen_ms = now_ms;
            if !d.idle {
                self.recency.insert(key, id);
            }
        }
    }

    /// Record one valid record of `id` that arrived from `source`.
    fn observe(
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
            while self.recency.full() {
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
        let event_clock = self.clock == Clock::Event;
        if let Some(d) = self.devices.get_mut(id) {
            d.clock = d.clock.max(clock);
            let now_unix = if event_clock { d.clock } else { table_time };
            out.replayed = d.last_source.as_ref().is_some_and(|last| {
                last.partition == source.partition
                    && last.topic == source.topic
                    && source.position() <= last.position()
            });
            d.idle = false;
            let onboarding = d.onboarding.as_ref().map(|o| o.active(now_unix));
            if onboarding == Some(false) {
                self.onboardings.finish(id, d);
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
                            self.shares.due(id);
                        }
                    }
                }
                if out.taken_as_normal {
                    let (first, _) = d.known_span.unwrap_or((d.clock, d.clock));
                    d.known_span = Some((first, d.clock));
                }
                d.unlabeled.push(features, now_unix);
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
}
