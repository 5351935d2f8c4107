//! [`Devices`], the one owner of the devices: the model, the device table, the solver
//! and the incident rules. The door hands it a batch, a command or the time, and reads
//! back plain values: record outcomes, incident changes explained, prior updates. One
//! micro-batch of records updates the device windows and is scored in one forward;
//! adaptation jobs are cut from changed devices and their results installed. What it
//! does with a batch is `owner_batch.rs`, with the time `owner_ticks.rs`, with the
//! feedback and kinds topics `owner_commands.rs`, for the service's schedules
//! (restores, snapshots, idleness) `owner_service.rs`.

use std::collections::{HashMap, HashSet};

use crate::model::{Model, TaskState};

use super::adapt_jobs::run_adaptation;
use super::adapt_jobs::Adapted;

use super::snapshot::Snapshot;
use super::solver::{InlineSolver, Solved, Solver};
use super::{records_needed, AdaptationPoint};
use super::{AdaptJob, Classifiers, DeviceTable, DeviceView, Kept};
use crate::monitor::clock::Now;
use crate::monitor::incidents::{Incident, IncidentRules};
use crate::monitor::record::{FeatureRecord, Source};

/// Outcome for one record.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RecordOutcome {
    /// The device has no adapted classifier yet (no known-normal record so far).
    Unknown,
    Scored {
        posterior: f32,
        anomalous: bool,
        prior: f32,
        /// The record entered its device's windows as known-normal (see
        /// `Observed::taken_as_normal`): it never counts towards an incident.
        taken_as_normal: bool,
    },
    /// Over the device's share of this micro-batch (`scoring.max_per_device`): neither
    /// windowed nor scored, so a flooding device cannot crowd out the others. The
    /// caller holds it for a later batch.
    Deferred,
}

/// What one micro-batch did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Processed {
    /// One per input record, in order.
    pub outcomes: Vec<RecordOutcome>,
    /// Devices evicted to make room for new ones.
    pub evicted: usize,
    /// Redelivered records scored again but kept out of the windows.
    pub replayed: usize,
    /// Devices whose classifier changed in this batch, before scoring: they had a
    /// known-normal record but no classifier yet, or (with an [`EventCadence`]) reached
    /// an adaptation point and got the classifier of their last one.
    pub adapted: Vec<String>,
    /// One per input record: its device's clock at it (Unix seconds; NaN if deferred).
    pub clocks: Vec<f64>,
    /// Times scoring waited for the solver: a device reached its next adaptation point
    /// before the job of its last one was solved (backpressure).
    pub waits: usize,
}

/// A device's job handed over at its last adaptation point: installed at its next.
#[derive(Debug)]
struct Pending {
    handover: u64,
    state: Option<TaskState>,
}

/// Adaptation on the records' own clock (`Clock::Event`): a device is re-adapted once
/// its records' time is `interval_s` past its last adaptation point and it sent
/// `min_records` records since, or as soon as it sent `after_records`; both counted as
/// shares of a full unlabeled window (`records_needed`).
///
/// `min_records` keeps the cost per record bounded: a device that sends a record a
/// second would otherwise be re-adapted at every record, for a window that changed by
/// one row in 200. Counted as a share, a window still filling (a device just onboarded
/// or back from idleness) is re-adapted sooner: 10 records of 200 are 5 %, and so is
/// one of 20.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EventCadence {
    pub interval_s: f64,
    /// Records since the last point before the interval counts, for a full unlabeled
    /// window; in proportion for a window still filling (0 and 1: any).
    pub min_records: usize,
    /// 0 = time only.
    pub after_records: usize,
}

impl EventCadence {
    /// Whether a device whose clock is at `clock`, next due by time at `next`, with
    /// `since` records since its last point and `rows` of `capacity` in its unlabeled
    /// window, reaches a point before its next record.
    pub fn due(&self, clock: f64, next: f64, since: usize, rows: usize, capacity: usize) -> bool {
        let needed = |n| records_needed(n, rows, capacity);
        (clock >= next && since >= needed(self.min_records))
            || (self.after_records > 0 && since >= needed(self.after_records))
    }
}

/// A batch's rounds (kept records by plan index), cut on the cadence's points. With a
/// cadence, a device that gets its first classifier in this batch moves its later
/// records one round on, from the record `observe` admits that gives it something to
/// adapt on (not as a plan might guess); without one, the batch is one round, adapted
/// before it is scored.
struct Rounds<'a> {
    rounds: Vec<Vec<usize>>,
    moved: Vec<bool>,
    first_classifier: HashSet<&'a str>,
}

impl<'a> Rounds<'a> {
    fn of(plan: &[Planned]) -> Self {
        let mut rounds: Vec<Vec<usize>> = Vec::new();
        for (k, p) in plan.iter().enumerate() {
            if rounds.len() <= p.round {
                rounds.resize_with(p.round + 1, Vec::new);
            }
            rounds[p.round].push(k);
        }
        Self { rounds, moved: vec![false; plan.len()], first_classifier: HashSet::new() }
    }

    /// Round `round`'s records in input order; `None` past the last round.
    fn take(&mut self, round: usize) -> Option<Vec<usize>> {
        let mut here = std::mem::take(self.rounds.get_mut(round)?);
        here.sort_unstable();
        Some(here)
    }

    /// Whether record `k` of `device` moves a round on (its device got its first
    /// classifier earlier in this round); each record moves at most once.
    fn moves_on(&mut self, k: usize, device: &str, round: usize) -> bool {
        if std::mem::replace(&mut self.moved[k], true) || !self.first_classifier.contains(device) {
            return false;
        }
        if self.rounds.len() <= round + 1 {
            self.rounds.resize_with(round + 2, Vec::new);
        }
        self.rounds[round + 1].push(k);
        true
    }
}

/// A kept record's place in [`Devices::process`].
#[derive(Debug, Clone, Copy)]
struct Planned {
    clock: f64,
    round: usize,
}

/// The devices, owned in one place: scoring and adaptation over the device table, the
/// incidents it moves, and the model version it names. Its settings are given at
/// construction ([`Scheduling`], [`IncidentRules`]); nobody outside `devices/`
/// reaches the table.
pub struct Devices {
    model: Model,
    /// The scoring model's version, named in what is published.
    version: String,
    table: DeviceTable,
    threshold: f32,
    rules: IncidentRules,
    /// Feedback reaches a closed incident this long after it closed (seconds).
    feedback_max_age_s: u64,
    scheduling: Scheduling,
    /// Solves the jobs of the cadence's points (`solver.rs`).
    solver: Box<dyn Solver>,
    /// Each device's job of its last point, until its next.
    pending: HashMap<String, Pending>,
    /// Bumped with each model: results of an older one are dropped.
    generation: u64,
}

/// How the devices take a batch and when they adapt.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Scheduling {
    /// Records of one device taken per micro-batch (0 = no limit).
    pub max_per_device: usize,
    /// Devices per batched solve when devices are adapted before scoring.
    pub adaptation_batch: usize,
    /// Re-adapt devices on their records' clock, in [`Devices::process`]; `None`: the
    /// service schedules adaptation on its own clock.
    pub cadence: Option<EventCadence>,
}

impl Default for Scheduling {
    fn default() -> Self {
        Self { max_per_device: 0, adaptation_batch: 32, cadence: None }
    }
}

impl Devices {
    /// Devices scored with `model` over `table`, adapted on the scoring thread until
    /// [`Self::set_solver`] says otherwise, their incidents moved under `rules`.
    pub fn new(
        model: Model,
        table: DeviceTable,
        threshold: f32,
        scheduling: Scheduling,
        rules: IncidentRules,
    ) -> Self {
        Self {
            model,
            version: String::new(),
            table,
            threshold,
            rules,
            feedback_max_age_s: 86_400,
            scheduling,
            solver: Box::new(InlineSolver::new(scheduling.adaptation_batch)),
            pending: HashMap::new(),
            generation: 0,
        }
    }

    /// New batch and adaptation settings, as a restart with another configuration
    /// would bring (the tests' restarts).
    #[cfg(test)]
    pub(crate) fn set_scheduling(&mut self, scheduling: Scheduling) {
        self.scheduling = scheduling;
    }

    /// Solve the cadence's jobs with `solver` (`solver.rs`).
    pub fn set_solver(&mut self, solver: Box<dyn Solver>) {
        self.solver = solver;
    }

    /// How long after its close an incident takes feedback (seconds).
    pub fn with_feedback_max_age_s(mut self, seconds: u64) -> Self {
        self.feedback_max_age_s = seconds;
        self
    }

    /// The scoring model's version.
    pub fn with_version(mut self, version: &str) -> Self {
        self.version = version.to_string();
        self
    }

    /// The scoring model's version.
    pub fn version(&self) -> &str {
        &self.version
    }

    /// A device as tests and benches look at it (nothing decides on it).
    pub fn view(&self, id: &str) -> Option<DeviceView> {
        self.table.get(id).map(|d| d.view())
    }

    /// A device's open incident, as its tracker holds it.
    pub fn open_incident(&self, id: &str) -> Option<&Incident> {
        self.table.get(id)?.incidents().open()
    }

    /// Devices tracked.
    pub fn tracked(&self) -> usize {
        self.table.len()
    }

    /// The feature count the model takes.
    pub fn dim(&self) -> usize {
        self.model.dim()
    }

    /// Add records to their devices' windows, adapt the devices that have a known-normal
    /// record but no classifier yet, then score every record in one forward. A burst
    /// after onboarding or a backlog after downtime is so scored, not left `unknown`
    /// until the next adaptation round. A device's records beyond `max_per_device` in
    /// this batch are deferred.
    ///
    /// With an [`EventCadence`] a device is also re-adapted here, on its records' own
    /// clock: the records before its adaptation point are scored by the old classifier,
    /// the ones after it by the new one, however the records were cut into batches. So
    /// a capture replayed at any speed gets the same scores as it did live. `stamps`:
    /// each record's partition stream time (`stream_time.rs`), its device's time at it.
    pub fn process(&mut self, records: &[BatchRecord<'_>], stamps: &[f64], now: Now) -> Processed {
        let kept = self.within_share(records);
        let (plan, devices) = self.plan(records, stamps, &kept);
        let mut out = Processed {
            outcomes: vec![RecordOutcome::Deferred; records.len()],
            clocks: vec![f64::NAN; records.len()],
            ..Processed::default()
        };
        let mut rounds = Rounds::of(&plan);
        let mut round = 0;
        while let Some(here) = rounds.take(round) {
            if round > 0 {
                let installed = self.adapt_at_points(records, &kept, &here, &mut out);
                out.adapted.extend(installed);
            }
            let admitted = self.admit(records, &kept, &plan, &here, &mut rounds, round, now, &mut out);
            self.score_round(records, &kept, admitted, &mut out);
            round += 1;
        }
        self.keep_points(devices);
        out
    }

    /// The records within their device's share of the batch (`max_per_device`; 0: all),
    /// by index; the rest are deferred.
    fn within_share(&self, records: &[BatchRecord<'_>]) -> Vec<usize> {
        let mut taken: HashMap<&str, usize> = HashMap::new();
        let mut kept = Vec::with_capacity(records.len());
        for (i, b) in records.iter().enumerate() {
            let n = taken.entry(b.record.device.as_str()).or_insert(0);
            *n += 1;
            if self.scheduling.max_per_device == 0 || *n <= self.scheduling.max_per_device {
                kept.push(i);
            }
        }
        kept
    }

    /// Restore a device from its snapshot; whether it is to be adapted now (it kept no
    /// classifiers of this model). A kept classifier for its next point is installed
    /// there, as its job's result would have been.
    pub fn restore(&mut self, id: &str, snapshot: &Snapshot, partition: i32, home: i32, now_ms: u64) -> bool {
        self.pending.remove(id);
        match self.table.restore(id, snapshot, partition, home, now_ms, &self.version) {
            Kept::Nothing => true,
            Kept::Scoring => false,
            Kept::Next { handover, state } => {
                self.pending.insert(id.to_string(), Pending { handover, state: Some(state) });
                false
            }
        }
    }

    /// Results of the current model, each kept for its device's next point if it is
    /// the device's job still pending.
    fn keep_solved(&mut self, solved: Solved) {
        if solved.generation != self.generation {
            return;
        }
        for Adapted { device, handover, state } in solved.states {
            if let Some(p) = self.pending.get_mut(&device).filter(|p| p.handover == handover) {
                p.state = Some(state);
            }
        }
    }

    /// A round's records into their devices' windows, in order; with a cadence, the
    /// records of a device that just got something to adapt on move a round on. The
    /// admitted ones, and whether each was taken as known-normal.
    #[allow(clippy::too_many_arguments)]
    fn admit<'a>(
        &mut self,
        records: &[BatchRecord<'a>],
        kept: &[usize],
        plan: &[Planned],
        here: &[usize],
        rounds: &mut Rounds<'a>,
        round: usize,
        now: Now,
        out: &mut Processed,
    ) -> Vec<(usize, bool)> {
        let mut admitted = Vec::with_capacity(here.len());
        for &k in here {
            let BatchRecord { record: r, source, .. } = records[kept[k]];
            let device = r.device.as_str();
            if rounds.moves_on(k, device, round) {
                continue;
            }
            let seen = self.table.observe(device, &r.features, r.known_normal, source, plan[k].clock, now.ms);
            out.evicted += seen.evicted;
            out.replayed += usize::from(seen.replayed);
            admitted.push((k, seen.taken_as_normal));
            out.clocks[kept[k]] = plan[k].clock;
            if self.scheduling.cadence.is_some()
                && self.table.get(device).is_some_and(|d| d.awaits_first_classifier())
            {
                rounds.first_classifier.insert(device);
            }
        }
        admitted
    }

    /// Adapt the admitted records' devices that await their first classifier, then score
    /// the round in one forward.
    fn score_round(
        &mut self,
        records: &[BatchRecord<'_>],
        kept: &[usize],
        admitted: Vec<(usize, bool)>,
        out: &mut Processed,
    ) {
        out.adapted.extend(
            self.adapt_unready(admitted.iter().map(|&(k, _)| records[kept[k]].record.device.as_str())),
        );
        let scored = self.score(admitted.iter().map(|&(k, _)| records[kept[k]].record));
        for (&(k, taken), mut v) in admitted.iter().zip(scored) {
            if let RecordOutcome::Scored { taken_as_normal, .. } = &mut v {
                *taken_as_normal = taken;
            }
            out.outcomes[kept[k]] = v;
        }
    }

    /// Each device's next adaptation point and records since its last, as the plan left
    /// them.
    fn keep_points(&mut self, devices: HashMap<&str, (AdaptationPoint, usize)>) {
        for (device, (s, _)) in devices {
            if let Some(next) = s.next {
                self.table.set_adaptation_point(device, next, s.since);
            }
        }
    }

    /// Each kept record's clock (its device's: its stamp, monotone) and round: a
    /// device's records after its adaptation point come one round after those before
    /// it. With each device's state after its last record (its next adaptation point and
    /// records since the last).
    fn plan<'a>(
        &self,
        records: &[BatchRecord<'a>],
        stamps: &[f64],
        kept: &[usize],
    ) -> (Vec<Planned>, HashMap<&'a str, (AdaptationPoint, usize)>) {
        let capacity = self.table.sizes().unlabeled;
        // Per device: its adaptation point as the plan moves it, and its round.
        let mut devices: HashMap<&'a str, (AdaptationPoint, usize)> = HashMap::new();
        let planned = kept
            .iter()
            .map(|&i| {
                let r = records[i].record;
                let (s, round) = devices
                    .entry(r.device.as_str())
                    .or_insert_with(|| (self.table.adaptation_point(&r.device), 0));
                s.clock = s.clock.max(stamps[i]);
                let Some(c) = self.scheduling.cadence else {
                    return Planned { clock: s.clock, round: 0 };
                };
                let next = *s.next.get_or_insert(s.clock + c.interval_s);
                if c.due(s.clock, next, s.since, s.rows, capacity) {
                    *round += 1;
                    s.next = Some(s.clock + c.interval_s);
                    s.since = 0;
                }
                s.since += 1;
                s.rows = (s.rows + 1).min(capacity);
                Planned { clock: s.clock, round: *round }
            })
            .collect();
        (planned, devices)
    }

    /// Adapt, on the scoring model, the given devices that await their first
    /// classifier. Returns the devices adapted.
    fn adapt_unready<'a>(&mut self, devices: impl Iterator<Item = &'a str>) -> Vec<String> {
        let unready: Vec<&str> =
            devices.filter(|id| self.table.get(id).is_some_and(|d| d.awaits_first_classifier())).collect();
        self.adapt_now(unready)
    }

    /// Adapt the given devices now, on the scoring model (those without a known-normal
    /// record, or without recent records — an idle device — are skipped). Returns the
    /// devices adapted.
    pub fn adapt_now<'a>(&mut self, devices: impl IntoIterator<Item = &'a str>) -> Vec<String> {
        let mut ids: Vec<&str> =
            devices.into_iter().filter(|id| self.table.get(id).is_some_and(|d| d.adaptable())).collect();
        ids.sort_unstable();
        ids.dedup();
        let jobs: Vec<AdaptJob> =
            ids.into_iter().filter_map(|device| self.table.take_windows(device)).collect();
        let states = run_adaptation(&self.model, &jobs, self.scheduling.adaptation_batch);
        let adapted = states.iter().map(|a| a.device.clone()).collect();
        self.install(states);
        adapted
    }

    /// Score records under their devices' current classifiers.
    pub fn score<'a>(&self, records: impl Iterator<Item = &'a FeatureRecord>) -> Vec<RecordOutcome> {
        let mut slot: HashMap<&str, usize> = HashMap::new();
        let mut states: Vec<&TaskState> = Vec::new();
        let mut task = Vec::new();
        let mut rows = Vec::new();
        let mut outcomes = Vec::new();
        let mut scored_at = Vec::new();
        for (i, r) in records.enumerate() {
            outcomes.push(RecordOutcome::Unknown);
            let Some(state) = self.table.get(&r.device).and_then(|d| d.classifier()) else { continue };
            let next = states.len();
            let s = *slot.entry(r.device.as_str()).or_insert_with(|| {
                states.push(state);
                next
            });
            task.push(s);
            rows.extend_from_slice(&r.features);
            scored_at.push(i);
        }
        if scored_at.is_empty() {
            return outcomes;
        }
        match self.model.score(&states, &task, &rows, self.threshold) {
            Ok(scores) => {
                for ((&i, &posterior), &t) in scored_at.iter().zip(&scores.posterior).zip(&task) {
                    outcomes[i] = RecordOutcome::Scored {
                        posterior,
                        anomalous: posterior < self.threshold,
                        prior: states[t].prior,
                        // `process` sets it: it knows what entered the windows.
                        taken_as_normal: false,
                    };
                }
            }
            // Records were validated on decode; a failure here is a state/model mismatch
            // (e.g. just after a reload) and leaves the records unknown.
            Err(e) => tracing::warn!(error = %e, "scoring failed; records left unknown"),
        }
        outcomes
    }

    /// Up to `max` devices whose windows changed by at least `min_changed` records.
    pub fn adaptation_jobs(&mut self, min_changed: usize, max: usize) -> Vec<AdaptJob> {
        let due = self.table.due_for_adaptation(min_changed);
        due.into_iter().take(max).filter_map(|device| self.table.take_windows(&device)).collect()
    }

    /// Install adapted classifiers of devices still tracked, unless one adapted on
    /// newer windows is already there. Returns the devices whose classifier changed.
    pub fn install(&mut self, results: Vec<Adapted>) -> Vec<String> {
        let mut installed = Vec::with_capacity(results.len());
        for Adapted { device, handover, state } in results {
            if self.table.install(&device, handover, state) {
                installed.push(device);
            }
        }
        installed
    }

    /// The model's generation, bumped with each model: what was adapted under an older
    /// one is dropped (the devices' own solver, and the door's adapter thread alike).
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Swap in a new model; adapted states belong to the old one and are dropped,
    /// windows stay and every device is re-adapted at the next opportunity.
    /// `solving`: the solver's copies (the inline solver solves on the scoring model).
    pub fn replace_model(&mut self, model: Model, version: &str, solving: Option<Vec<Model>>) {
        self.model = model;
        self.version = version.to_string();
        self.table.invalidate_states();
        self.generation += 1;
        self.pending.clear();
        if let Some(m) = solving {
            self.solver.replace_model(m, self.generation);
        }
    }
}

// The owner's parts, in files of their own (child modules: they reach its private
// parts).
#[path = "owner_batch.rs"]
mod batch;
#[path = "owner_commands.rs"]
mod commands;
#[path = "owner_points.rs"]
mod points;
#[path = "owner_service.rs"]
mod service;
#[path = "owner_ticks.rs"]
mod ticks;

pub use batch::BatchRecord;
pub use commands::Verdicted;
pub use service::Writing;

#[cfg(test)]
#[path = "owner_tests.rs"]
mod tests;
