//! The [`Monitor`]: the core's one door. Whoever drives it — the daemon's service loop,
//! the lab, the tests, the benches — hands it one [`Input`] at a time with the time as
//! a value, and reads back an [`Output`]: what to publish, the input offsets that
//! releases once delivered, and [`Command`]s for the shell (windows to adapt on the
//! adapter thread, state records to write). Every decision that time drives is taken in
//! here, on the time it is given: adaptation on the service clock's schedule, idle
//! eviction, unmonitored reports, paced snapshots, restore-then-adapt, ends of
//! onboardings. What happened is told to a [`Telemetry`] watcher as it happens.

use std::collections::HashMap;

use super::clock::{Clock, Now};
use super::decode::{decode_batch, highest_offsets};
use super::decode::{Consumed, PartitionOffset, Received};
use super::devices::adapt_jobs::Adapted;
use super::devices::owner::{Devices, Writing};
use super::devices::snapshot::{Snapshot, StateRecord, WriteFailed};
use super::devices::solver::Solver;
use super::devices::AdaptJob;
use super::devices::DeviceView;
use super::gathering::Gathering;
use super::incidents::Incident;
use super::output::Emitted;
use super::output::IncidentEvent;
use super::record;
use super::settings::{CoreSettings, RecordOutputs, StateSchedule};
use super::telemetry::{Event, Eviction, Telemetry};
use crate::model::Model;

/// Everything the monitor is told. Each comes with the time (`Now`) it happens at.
pub enum Input {
    /// A consumed message (a record, or on the feedback topic a verdict, onboarding or
    /// forget), arrived at `at_ms` on the gathering's clock: gathered into the next
    /// micro-batch.
    Arrived { message: Received, at_ms: u64 },
    /// Run the next micro-batch: deferred records, then the gathered ones, then the
    /// gathered feedback. `Output::ran` says whether there was anything to run.
    Run,
    /// A feedback message applied at once, outside any batch (the lab's analyst).
    Feedback(Received),
    /// The kinds topic's messages.
    Shares(Vec<Received>),
    /// Time passes: incident updates and quiet closes, onboardings that end, and on
    /// their schedules adaptation (service clock), idle eviction and unmonitored reports
    /// (once a second), paced snapshots.
    Tick,
    /// Input partitions revoked; `gone` are no longer this member's at all.
    Revoked { partitions: Vec<(String, i32)>, gone: Vec<i32> },
    /// Snapshots read on an assignment, restored (and adapted) before any of their
    /// devices' records is scored.
    Restored(Restored),
    /// The adapter thread's results.
    Adapted { generation: u64, states: Vec<Adapted>, seconds_per_batch: f64 },
    /// State records the broker did not acknowledge.
    WritesFailed(Vec<WriteFailed>),
    /// A new model file (a reload): one copy scores, one goes to the adapter, one to
    /// each of the event clock's solver threads.
    Model { scoring: Box<Model>, adapting: Box<Model>, solving: Vec<Model>, version: String },
    /// Stopping: every device's unwritten state is written.
    Shutdown,
}

/// What a restore read.
pub struct Restored {
    pub snapshots: Vec<Restore>,
    /// The input topic's partition count now.
    pub input_partitions: u32,
    /// Input partitions were added: parked snapshots are read again.
    pub clear_parked: bool,
}

/// One snapshot read on an assignment, and where it goes.
pub struct Restore {
    pub device: String,
    /// The state partition it was read from.
    pub home: i32,
    pub snapshot: Snapshot,
    /// The input partition it is restored on; `None`: parked until its device sends a
    /// record here (its owner is not known).
    pub partition: Option<i32>,
}

/// What the monitor asks of the shell.
pub enum Command {
    /// Solve these windows on the adapter thread (`run_adaptation`), and give the result
    /// back as [`Input::Adapted`] with this generation.
    Adapt { generation: u64, jobs: Vec<AdaptJob> },
    /// The adapter's model from now on (after [`Input::Model`]).
    AdapterModel { generation: u64, model: Box<Model> },
    /// Write these to the state topic; failures come back as [`Input::WritesFailed`].
    /// `wait`: before going on (revocation, shutdown).
    WriteState { records: Vec<StateRecord>, wait: bool },
}

/// What one input gave.
#[derive(Default)]
pub struct Output {
    /// To publish, in the order it was decided.
    pub emitted: Vec<Emitted>,
    /// Input offsets released once `emitted` is delivered.
    pub offsets: Vec<PartitionOffset>,
    pub commands: Vec<Command>,
    /// A micro-batch was run ([`Input::Run`]).
    pub ran: bool,
}

/// Once a second: jobs that scan every device.
const SWEEP_EVERY_MS: u64 = 1_000;

/// Snapshots per pass at least, however small the fleet.
const MIN_SNAPSHOTS_PER_PASS: usize = 16;

/// The core: the devices, the batch being gathered and the records deferred to the
/// next, and the books its schedules keep.
pub struct Monitor {
    devices: Devices,
    gathering: Gathering<Received>,
    /// Records over their device's share of a batch (`scoring.max_per_device`), oldest
    /// first: they lead the next batch.
    deferred: Vec<Consumed>,
    /// Deferred records held at most before the service stops consuming (backpressure).
    max_deferred: usize,
    /// Which per-record outputs are built.
    outputs: RecordOutputs,
    /// Take a record's `"label": "normal"` as known-normal (`windows.trust_input_labels`);
    /// when false the label is dropped and counted.
    trust_input_labels: bool,
    /// The first ignored label was logged.
    told_labels_ignored: bool,
    /// Messages on this topic are the feedback topic's (verdicts, onboardings, forgets).
    feedback_topic: String,
    max_message_bytes: usize,
    /// A job was handed to the adapter and its result is not back.
    adapting: bool,
    schedule: Schedule,
    /// Snapshots whose owner is not known, with their home state partition: restored
    /// when their device sends a record here.
    parked: HashMap<String, (i32, Snapshot)>,
    /// The input topic's partition count, written into each snapshot.
    input_partitions: u32,
}

/// The time-driven jobs' settings and when each last ran (ms on the service clock).
struct Schedule {
    adapt_interval_ms: u64,
    adapt_min_records: usize,
    adapt_after_records: usize,
    last_adapt_ms: u64,
    idle_timeout_ms: u64,
    unmonitored_after_ms: u64,
    last_sweep_ms: u64,
    state: Option<StateSchedule>,
    last_snapshot_ms: u64,
}

impl Monitor {
    /// The monitor these settings give, scoring with `model` of `version`.
    pub fn new(settings: &CoreSettings, model: Model, version: &str) -> Self {
        Self::with_devices(settings, settings.devices(model, version))
    }

    /// The monitor these settings give around `devices` (the door's tests bring small
    /// devices of their own).
    fn with_devices(settings: &CoreSettings, devices: Devices) -> Self {
        let cadence = settings.cadence;
        Self {
            devices,
            gathering: Gathering::new(settings.max_batch, settings.max_wait_ms),
            deferred: Vec::new(),
            max_deferred: settings.max_batch.max(1),
            outputs: settings.outputs,
            trust_input_labels: settings.trust_input_labels,
            told_labels_ignored: false,
            feedback_topic: settings.feedback_topic.clone(),
            max_message_bytes: settings.max_message_bytes,
            adapting: false,
            schedule: Schedule {
                adapt_interval_ms: (cadence.interval_s * 1000.0).round().max(1.0) as u64,
                adapt_min_records: cadence.min_records,
                adapt_after_records: cadence.after_records,
                last_adapt_ms: 0,
                idle_timeout_ms: settings.idle_timeout_ms,
                unmonitored_after_ms: settings.unmonitored_after_ms,
                last_sweep_ms: 0,
                state: settings.state,
                last_snapshot_ms: 0,
            },
            parked: HashMap::new(),
            input_partitions: settings.state.map_or(0, |s| s.input_partitions),
        }
    }

    /// Solve the event clock's adaptation jobs with `solver` (by default on the scoring
    /// thread, when a result is needed: `solver.rs`).
    pub fn set_solver(&mut self, solver: Box<dyn Solver>) {
        self.devices.set_solver(solver);
    }

    /// Take one input at `now`.
    pub fn handle(&mut self, input: Input, now: Now, telemetry: &dyn Telemetry) -> Output {
        let mut out = Output::default();
        match input {
            Input::Arrived { message, at_ms } => {
                // A batch message holds up to sensor.batch_records records: counted as
                // messages, one micro-batch would hold that many times max_batch.
                let records = record::records_in(&message.payload);
                self.gathering.push(message, records, at_ms);
            }
            Input::Run => self.run(now, telemetry, &mut out),
            Input::Feedback(message) => out.emitted = self.feedback(&[message], now, telemetry),
            Input::Shares(messages) => out.emitted = self.shares(&messages, now, telemetry),
            Input::Tick => self.tick(now, telemetry, &mut out),
            Input::Revoked { partitions, gone } => self.revoked(&partitions, &gone, now, telemetry, &mut out),
            Input::Restored(restored) => self.restored(restored, now, telemetry),
            Input::Adapted { generation, states, seconds_per_batch } => {
                self.installed(generation, states, seconds_per_batch, now, telemetry, &mut out)
            }
            Input::WritesFailed(failed) => self.devices.writes_failed(failed),
            Input::Model { scoring, adapting, solving, version } => {
                self.devices.replace_model(*scoring, &version, Some(solving));
                out.commands
                    .push(Command::AdapterModel { generation: self.devices.generation(), model: adapting });
                self.schedule_adaptation(1, &mut out);
            }
            Input::Shutdown => {
                let ids = self.devices.unsnapshotted();
                let records = self.state_records(&ids, now.ms, true);
                if !records.is_empty() {
                    out.commands.push(Command::WriteState { records, wait: true });
                }
            }
        }
        // Each published fact is said once, here, as the output that carries it.
        for e in &out.emitted {
            telemetry.event(Event::Published(e));
        }
        out
    }

    /// The next micro-batch, with parked windows of its devices placed first.
    fn run(&mut self, now: Now, telemetry: &dyn Telemetry, out: &mut Output) {
        let messages = self.gathering.take();
        if messages.is_empty() && self.deferred.is_empty() {
            return;
        }
        let (feedback, records): (Vec<_>, Vec<_>) =
            messages.into_iter().partition(|m| m.source.topic == self.feedback_topic);
        let batch = decode_batch(records, self.devices.dim(), self.max_message_bytes);
        let unbatched = batch.iter().filter(|c| c.message.source.index > 0).count();
        if unbatched > 0 {
            telemetry.event(Event::Unbatched(unbatched));
        }
        if !self.parked.is_empty() {
            let arrived: Vec<(String, i32)> = batch
                .iter()
                .filter_map(|c| {
                    c.decoded.as_ref().ok().map(|r| (r.device.clone(), c.message.source.partition))
                })
                .collect();
            self.promote(&arrived, now, telemetry);
        }
        // The records first, then the feedback gathered with them. Feedback alone is no
        // batch of records: it goes straight to its commands.
        let (mut emitted, mut offsets) = if batch.is_empty() && self.deferred.is_empty() {
            (Vec::new(), Vec::new())
        } else {
            self.run_batch(batch, now, telemetry)
        };
        if !feedback.is_empty() {
            emitted.extend(self.feedback(&feedback, now, telemetry));
            offsets.extend(highest_offsets(feedback.iter().map(|m| &m.source)));
        }
        (out.emitted, out.offsets, out.ran) = (emitted, offsets, true);
    }

    fn tick(&mut self, now: Now, telemetry: &dyn Telemetry, out: &mut Output) {
        if self.devices.clock() == Clock::Service {
            self.adapt_on_schedule(now, out);
        }
        if let Some(state) = self.schedule.state {
            self.snapshots_due(state, now, out);
        }
        if now.ms.saturating_sub(self.schedule.last_sweep_ms) >= SWEEP_EVERY_MS {
            self.schedule.last_sweep_ms = now.ms;
            self.evict_idle(now, telemetry);
            self.report_unmonitored(now, telemetry, out);
        }
        out.emitted.extend(self.incident_ticks(now, telemetry));
        telemetry.event(Event::Tracked(self.devices.tracked()));
    }

    /// On the service clock, changed devices go to the adapter every
    /// `adaptation.interval_ms` (those with `min_records` new records), and between
    /// rounds as soon as `after_records` arrived. (On the event clock the devices adapt
    /// as the records' time passes.)
    fn adapt_on_schedule(&mut self, now: Now, out: &mut Output) {
        let s = &self.schedule;
        let interval_due = now.ms.saturating_sub(s.last_adapt_ms) >= s.adapt_interval_ms;
        if !interval_due && s.adapt_after_records == 0 {
            return;
        }
        let min_changed = if interval_due { s.adapt_min_records } else { s.adapt_after_records };
        if self.schedule_adaptation(min_changed, out) || interval_due {
            self.schedule.last_adapt_ms = now.ms;
        }
    }

    /// Hand the devices whose windows changed by `min_changed` records to the adapter,
    /// unless a job is in flight. Returns whether one was handed over.
    fn schedule_adaptation(&mut self, min_changed: usize, out: &mut Output) -> bool {
        if self.adapting {
            return false;
        }
        let jobs = self.devices.adaptation_jobs(min_changed, usize::MAX);
        if jobs.is_empty() {
            return false;
        }
        self.adapting = true;
        out.commands.push(Command::Adapt { generation: self.devices.generation(), jobs });
        true
    }

    /// An adaptation result of the current model installed; its prior updates.
    fn installed(
        &mut self,
        generation: u64,
        states: Vec<Adapted>,
        seconds_per_batch: f64,
        now: Now,
        telemetry: &dyn Telemetry,
        out: &mut Output,
    ) {
        self.adapting = false;
        if generation != self.devices.generation() {
            return; // adapted under a model that was replaced meanwhile
        }
        telemetry.event(Event::AdaptationFinished { devices: states.len(), seconds_per_batch });
        out.emitted.extend(self.devices.install_adapted(states, now).into_iter().map(Emitted::Prior));
    }

    /// One pass's share of the paced background snapshots: changed devices whose last
    /// snapshot is `snapshot_interval` old, at most the fleet's size spread over the
    /// interval (twice over, to catch up). Writing every window at once would stall
    /// consumption for seconds on a large fleet.
    fn snapshots_due(&mut self, state: StateSchedule, now: Now, out: &mut Output) {
        let since = now.ms.saturating_sub(self.schedule.last_snapshot_ms).max(1);
        self.schedule.last_snapshot_ms = now.ms;
        let budget = (2 * self.devices.tracked() as u64 * since).div_ceil(state.interval_ms.max(1));
        let budget = (budget as usize).max(MIN_SNAPSHOTS_PER_PASS);
        let writing = self.writing(false);
        let records = self.devices.snapshots_due(now.ms, state.interval_ms, budget, writing);
        if !records.is_empty() {
            out.commands.push(Command::WriteState { records, wait: false });
        }
    }

    fn state_records(&mut self, ids: &[String], now_ms: u64, all_rows: bool) -> Vec<StateRecord> {
        self.devices.state_records(ids, now_ms, self.writing(all_rows))
    }

    /// How state records are written now.
    fn writing(&self, all_rows: bool) -> Writing {
        Writing {
            all_rows,
            unlabeled_interval_ms: self.schedule.state.map_or(0, |s| s.unlabeled_interval_ms),
            input_partitions: self.input_partitions,
        }
    }

    fn evict_idle(&mut self, now: Now, telemetry: &dyn Telemetry) {
        if self.schedule.idle_timeout_ms > 0 {
            let count = self.devices.evict_idle(now.ms, self.schedule.idle_timeout_ms);
            telemetry.event(Event::Evicted { reason: Eviction::Idle, count });
        }
    }

    /// Devices sending traffic without any known-normal record are not scored: each is
    /// reported once on the incidents topic, and all are counted.
    fn report_unmonitored(&mut self, now: Now, telemetry: &dyn Telemetry, out: &mut Output) {
        let after_ms = self.schedule.unmonitored_after_ms;
        if after_ms == 0 {
            return;
        }
        let (total, new) = self.devices.unmonitored(now.ms, after_ms);
        telemetry.event(Event::Unmonitored(total));
        out.emitted.extend(new.into_iter().map(|(device, records, since_ms)| {
            let since_s = since_ms as f64 / 1000.0;
            let message = format!(
                "device {device} sent {records} records in {since_s:.0} s and none is labeled normal: \
                 it is not scored until some of its traffic is onboarded as known-normal"
            );
            Emitted::Incident(IncidentEvent::Unmonitored {
                device,
                records,
                since_s,
                time: now.unix,
                message,
            })
        }));
    }

    /// Revoked partitions: their deferred records go (the new owner reads them), and
    /// the devices of partitions no longer ours are written to the state topic (awaited)
    /// and dropped.
    fn revoked(
        &mut self,
        partitions: &[(String, i32)],
        gone: &[i32],
        now: Now,
        telemetry: &dyn Telemetry,
        out: &mut Output,
    ) {
        // Their deferred records' offsets were never committed: the new owner reads them.
        self.deferred.retain(|c| {
            !partitions.iter().any(|(t, p)| *t == c.source().topic && *p == c.source().partition)
        });
        let (count, records) = self.devices.leave(partitions, gone, now.ms, self.writing(true));
        telemetry.event(Event::Evicted { reason: Eviction::Revoked, count });
        if !records.is_empty() {
            out.commands.push(Command::WriteState { records, wait: true });
        }
    }

    /// A restore's snapshots put in place: windows restored where none is in memory (ours
    /// are newer), those of unknown owners parked, and the restored devices adapted here,
    /// before any of their records is scored: a restart must not leave them `unknown`
    /// until the next adaptation round.
    fn restored(&mut self, restored: Restored, now: Now, telemetry: &dyn Telemetry) {
        self.input_partitions = restored.input_partitions;
        if restored.clear_parked {
            self.parked.clear();
        }
        let mut placed = Vec::new();
        for Restore { device, home, snapshot, partition } in restored.snapshots {
            if !self.devices.takes_snapshot(&device, &snapshot) {
                continue;
            }
            match partition {
                Some(p) => {
                    let adapt = self.devices.restore(&device, &snapshot, p, home, now.ms);
                    placed.push((device, adapt));
                }
                None => {
                    self.parked.insert(device, (home, snapshot));
                }
            }
        }
        self.adapt_restored(&placed, telemetry);
    }

    /// Restore (and adapt) the parked snapshots of devices that just sent a record here,
    /// on the partition it came on, before the record is scored.
    fn promote(&mut self, arrived: &[(String, i32)], now: Now, telemetry: &dyn Telemetry) {
        let mut promoted = Vec::new();
        for (device, partition) in arrived {
            if let Some((home, s)) = self.parked.remove(device) {
                let adapt = self.devices.restore(device, &s, *partition, home, now.ms);
                promoted.push((device.clone(), adapt));
            }
        }
        if !promoted.is_empty() {
            self.adapt_restored(&promoted, telemetry);
        }
    }

    /// Devices just restored: those that kept no classifiers of this model (`true`)
    /// adapted at once; what is still parked is counted.
    fn adapt_restored(&mut self, devices: &[(String, bool)], telemetry: &dyn Telemetry) {
        telemetry.event(Event::Parked(self.parked.len()));
        let adapt = devices.iter().filter(|(_, adapt)| *adapt).map(|(id, _)| id.as_str());
        let adapted = self.devices.adapt_now(adapt).len();
        telemetry.event(Event::Restored { devices: devices.len(), adapted });
    }

    /// When the gathered batch is due (ms on the gathering's clock): at its deadline, at
    /// once when it is full or deferred records wait; never when nothing waits.
    pub fn due_ms(&self, now_ms: u64) -> Option<u64> {
        if self.gathering.full() {
            return Some(now_ms);
        }
        self.gathering.deadline_ms().or_else(|| (!self.deferred.is_empty()).then_some(now_ms))
    }

    /// The gathered batch holds as many messages as a batch does.
    pub fn batch_full(&self) -> bool {
        self.gathering.full()
    }

    /// Whether a message arriving at `at_ms` comes after the started batch's wait: a
    /// driver with no timer of its own (the lab) runs that batch first.
    pub fn expired(&self, at_ms: u64) -> bool {
        self.gathering.deadline_ms().is_some_and(|d| at_ms > d)
    }

    /// As many records wait as a batch holds: take no more messages until they ran.
    pub fn backlogged(&self) -> bool {
        self.deferred.len() >= self.max_deferred
    }

    /// Records or messages wait to be run.
    pub fn has_work(&self) -> bool {
        self.due_ms(0).is_some()
    }

    /// The feature count the model takes.
    pub fn dim(&self) -> usize {
        self.devices.dim()
    }

    /// The version of the model scoring now.
    pub fn version(&self) -> &str {
        self.devices.version()
    }

    /// A device's open incident, as its tracker holds it.
    pub fn open_incident(&self, device: &str) -> Option<&Incident> {
        self.devices.open_incident(device)
    }

    /// What a device holds now (tests and benches look; nothing decides on it).
    pub fn device(&self, id: &str) -> Option<DeviceView> {
        self.devices.view(id)
    }
}

// Turning a batch, the feedback and kinds topics' messages and the time's passing
// into outputs, in a file of their own (a child module: it reaches the monitor's
// fields).
#[path = "api_batch.rs"]
mod batch;
