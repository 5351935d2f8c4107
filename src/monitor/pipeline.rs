//! The pipeline core: decoded records in, decisions out as plain values — scores,
//! alerts, incident events, prior updates, dead letters ([`Emitted`]). No Kafka here:
//! the daemon feeds it consumed messages and hands what it emits to the outbox, which
//! names the topics; the lab feeds it captures on their own clock ([`Clock::Event`])
//! and reads the same values. One implementation, so what the lab measures is what
//! the daemon does.

use std::collections::HashMap;

use super::clock::{Clock, Now};
use super::decode::{releasable_offsets, Consumed, PartitionOffset, Received};
use super::devices::engine::{Engine, Processed, RecordOutcome};
use super::devices::kinds::Share;
use super::devices::{Device, DeviceTable};
use super::feedback::{Applying, FeedbackMessage};
use super::incidents::behaviours::MemoryRules;
use super::incidents::explain::{feature_changes, FeatureChange};
use super::incidents::{Decision, Incident, IncidentRules, Transition};
use super::output::{self, Alert, DeadLetter, Emitted, IncidentEvent, IncidentReport, ScoreRecord};
use super::record::FeatureRecord;
use super::record::Source;
use super::telemetry::{Event, Eviction, FeedbackResult, ShareResult, Telemetry};
use crate::model::Model;

/// Which per-record outputs are built: both are off in production (incidents are what
/// an analyst reads), and building them costs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RecordOutputs {
    pub scores: bool,
    pub alerts: bool,
}

/// Stamp fresh records, in their partitions' order, with their partitions' stream time
/// (`stream_time.rs`), before any is deferred.
fn stamp_stream_time(engine: &mut Engine, fresh: &mut [Consumed], now: Now) {
    for c in fresh.iter_mut() {
        if let Ok(r) = &c.decoded {
            let s = &c.message.source;
            c.stamp = engine.devices_mut().streams_mut().stamp(&s.topic, s.partition, r.ts, now.ms, now.unix);
        }
    }
}

/// The earliest stamp among the deferred records of each partition.
fn earliest_deferred(deferred: &[Consumed]) -> HashMap<(&str, i32), f64> {
    let mut held: HashMap<(&str, i32), f64> = HashMap::new();
    for c in deferred {
        let s = &c.message.source;
        let t = held.entry((s.topic.as_str(), s.partition)).or_insert(c.stamp);
        *t = t.min(c.stamp);
    }
    held
}

/// A valid record, its outcome and its device's clock at it.
struct Decided<'a> {
    record: &'a FeatureRecord,
    source: &'a Source,
    outcome: RecordOutcome,
    clock: f64,
}

/// The incident rules, what per-record outputs to build, and the records deferred to the
/// next batch (the clock is the device table's).
pub struct Pipeline {
    pub rules: IncidentRules,
    /// Feedback reaches a closed incident this long after it closed (seconds).
    pub feedback_max_age_s: u64,
    pub outputs: RecordOutputs,
    /// Take a record's `"label": "normal"` as known-normal (`windows.trust_input_labels`);
    /// when false the label is dropped and counted.
    pub trust_input_labels: bool,
    /// The first ignored label was logged.
    told_labels_ignored: bool,
    /// Records over their device's share of a batch (`scoring.max_per_device`), oldest
    /// first: they lead the next batch.
    deferred: Vec<Consumed>,
    /// Deferred records held at most before the service stops consuming (backpressure).
    max_deferred: usize,
}

impl Pipeline {
    pub fn new(rules: IncidentRules, outputs: RecordOutputs, max_deferred: usize) -> Self {
        Self {
            rules,
            feedback_max_age_s: 86_400,
            outputs,
            trust_input_labels: true,
            told_labels_ignored: false,
            deferred: Vec::new(),
            max_deferred: max_deferred.max(1),
        }
    }

    /// Records wait for a later batch.
    pub fn has_deferred(&self) -> bool {
        !self.deferred.is_empty()
    }

    /// As many records wait as the pipeline holds: consume no more until they are scored.
    pub fn backlogged(&self) -> bool {
        self.deferred.len() >= self.max_deferred
    }

    /// Forget deferred records of partitions that moved away (their offsets were never
    /// committed: the new owner reads them).
    pub fn drop_deferred(&mut self, partitions: &[(String, i32)]) {
        self.deferred.retain(|c| {
            !partitions.iter().any(|(t, p)| *t == c.source().topic && *p == c.source().partition)
        });
    }

    /// Score the deferred records and then a decoded micro-batch; what it emits in input
    /// order (then the prior updates of devices adapted before scoring), and the input
    /// offsets it releases once delivered. `now` is the service's clock and the wall
    /// clock (the records' own time rules under [`Clock::Event`]).
    pub fn run(
        &mut self,
        engine: &mut Engine,
        fresh: Vec<Consumed>,
        now: Now,
        model_version: &str,
        telemetry: &dyn Telemetry,
    ) -> (Vec<Emitted>, Vec<PartitionOffset>) {
        let mut fresh = fresh;
        if !self.trust_input_labels {
            self.drop_input_labels(&mut fresh, telemetry);
        }
        stamp_stream_time(engine, &mut fresh, now);
        let mut batch = std::mem::take(&mut self.deferred);
        batch.extend(fresh);
        let processed = self.process(engine, &batch, now, telemetry);
        let mut out = Vec::new();
        let mut outcomes = processed.outcomes.into_iter().zip(processed.clocks);
        let mut done = Vec::with_capacity(batch.len());
        for c in batch {
            match &c.decoded {
                Ok(r) => match outcomes.next().expect("one outcome per valid record") {
                    (RecordOutcome::Deferred, _) => {
                        self.deferred.push(c);
                        continue;
                    }
                    (v, clock) => {
                        let decided = Decided { record: r, source: c.source(), outcome: v, clock };
                        self.decided(engine, decided, now, model_version, telemetry, &mut out)
                    }
                },
                Err(reason) => {
                    telemetry.event(Event::Refused { kind: reason.kind() });
                    out.push(dead_letter(&c.message, reason.kind(), reason.to_string(), now.unix));
                }
            }
            done.push(c);
        }
        telemetry.event(Event::Deferred(self.deferred.len()));
        engine.devices_mut().streams_mut().hold(&earliest_deferred(&self.deferred));
        out.extend(self.eviction_closes(engine, now, model_version));
        out.extend(prior_updates(engine, &processed.adapted, (model_version, &self.rules.memory), now));
        let offsets = releasable_offsets(&done, &self.deferred);
        (out, offsets)
    }

    /// The batch's valid records through the engine; on the event clock the device
    /// table's time follows the newest record's.
    fn process(
        &self,
        engine: &mut Engine,
        batch: &[Consumed],
        now: Now,
        telemetry: &dyn Telemetry,
    ) -> Processed {
        let (valid, stamps): (Vec<(&FeatureRecord, &Source)>, Vec<f64>) =
            batch.iter().filter_map(|c| c.decoded.as_ref().ok().map(|r| ((r, c.source()), c.stamp))).unzip();
        self.follow_service_clock(engine, now);
        let processed = engine.process(&valid, &stamps, now);
        if let (Clock::Event, Some(&latest)) = (
            engine.devices().clock(),
            processed.clocks.iter().filter(|c| !c.is_nan()).max_by(|a, b| a.total_cmp(b)),
        ) {
            engine.devices_mut().set_time(latest);
        }
        telemetry.event(Event::Evicted { reason: Eviction::Capacity, count: processed.evicted });
        telemetry.event(Event::Redelivered(processed.replayed));
        telemetry.event(Event::Adapted(processed.adapted.len()));
        telemetry.event(Event::AdaptationWaits(processed.waits));
        telemetry.event(Event::Batch { records: batch.len() });
        processed
    }

    /// A record decided: its alert and score record; a scored one moves its device's
    /// incident (on the event clock at the device's time, after what that time's passing
    /// closed or updated).
    fn decided(
        &self,
        engine: &mut Engine,
        d: Decided<'_>,
        now: Now,
        model_version: &str,
        telemetry: &dyn Telemetry,
        out: &mut Vec<Emitted>,
    ) {
        self.record_outputs(d.record, d.source, d.outcome, model_version, telemetry, out);
        let RecordOutcome::Scored { posterior, anomalous, prior, taken_as_normal } = d.outcome else {
            return;
        };
        let device = &d.record.device;
        let now = match engine.devices().clock() {
            Clock::Service => now,
            Clock::Event => {
                // On the records' clock an incident closes (or is updated) as the
                // device's time passes, at its records.
                let now = Now::event(d.clock);
                for t in engine.devices_mut().tick_incident(device, &self.rules, now) {
                    out.push(self.incident_output(engine, device, &t, model_version, now));
                }
                now
            }
        };
        let decision = Decision::of(d.record, d.source, posterior, anomalous, prior, taken_as_normal);
        for t in engine.devices_mut().observe_decision(device, decision, &self.rules, now) {
            out.push(self.incident_output(engine, device, &t, model_version, now));
        }
    }

    /// An incident's transition as an event, with the features that moved.
    pub fn incident_output(
        &self,
        engine: &Engine,
        device: &str,
        t: &Transition,
        version: &str,
        now: Now,
    ) -> Emitted {
        self.incident_event(engine.model(), device, engine.devices().get(device), t, version, now)
    }

    /// [`Self::incident_output`] for a device that may no longer be tracked.
    fn incident_event(
        &self,
        model: &Model,
        device: &str,
        d: Option<&Device>,
        t: &Transition,
        version: &str,
        now: Now,
    ) -> Emitted {
        let (i, resolution) = match t {
            Transition::Opened(i)
            | Transition::Updated(i)
            | Transition::Reopened(i)
            | Transition::Suppressed(i)
            | Transition::Reviewed(i)
            | Transition::Joined(i) => (i, None),
            Transition::Closed(i, r) => (i, Some(r.as_str())),
        };
        let top = d.map(|d| self.explain(model, d, i)).unwrap_or_default();
        let report = IncidentReport::of(device, i, resolution, version, top, now.unix);
        Emitted::Incident(match t {
            Transition::Opened(_) => IncidentEvent::Opened(report),
            Transition::Updated(_) => IncidentEvent::Updated(report),
            Transition::Reopened(_) => IncidentEvent::Reopened(report),
            Transition::Suppressed(_) => IncidentEvent::Suppressed(report),
            Transition::Closed(..) => IncidentEvent::Closed(report),
            Transition::Reviewed(_) => IncidentEvent::Reviewed(report),
            Transition::Joined(_) => IncidentEvent::Joined(report),
        })
    }

    /// On the service clock the device table's time (onboarding spans, kind shares) is
    /// the wall clock of the call that acts on it; on the event clock the records set it.
    fn follow_service_clock(&self, engine: &mut Engine, now: Now) {
        if engine.devices().clock() == Clock::Service {
            engine.devices_mut().set_time(now.unix);
        }
    }

    /// Now for `device` on the pipeline's clock, Unix seconds: the wall clock, or on the
    /// event clock the device's own (an analyst's verdict or an onboarding takes effect
    /// at its newest record).
    pub(super) fn time(&self, engine: &Engine, device: &str, now: Now) -> f64 {
        match engine.devices().clock() {
            Clock::Service => now.unix,
            Clock::Event => {
                engine.devices().get(device).map_or_else(|| engine.devices().time(), |d| d.clock())
            }
        }
    }

    /// Labels on the input topic are anyone's who may write it: unless the operator
    /// trusts them, a record labeled normal is scored as any other (known-normal traffic
    /// comes from `metapu onboard`, verdicts, and `windows.bootstrap_positives`).
    fn drop_input_labels(&mut self, fresh: &mut [Consumed], telemetry: &dyn Telemetry) {
        let mut dropped = 0;
        for c in fresh {
            if let Ok(r) = &mut c.decoded {
                dropped += u64::from(std::mem::take(&mut r.known_normal));
            }
        }
        if dropped > 0 {
            telemetry.event(Event::LabelsIgnored(dropped));
            if !std::mem::replace(&mut self.told_labels_ignored, true) {
                tracing::warn!(
                    "records labeled \"normal\" on the input topic are scored as unlabeled \
                     (windows.trust_input_labels = false; onboard devices with `metapu onboard`); counted in \
                     metapu_records_label_ignored_total"
                );
            }
        }
    }

    /// Apply the feedback topic's messages, each a command of its own (`feedback/`):
    /// what an accepted one did is emitted as incident events, a refused one is a dead
    /// letter with the reason.
    pub fn feedback(
        &self,
        engine: &mut Engine,
        messages: &[Received],
        now: Now,
        model_version: &str,
        telemetry: &dyn Telemetry,
    ) -> Vec<Emitted> {
        self.follow_service_clock(engine, now);
        let mut out = Vec::new();
        for m in messages {
            let mut to =
                Commands { pipeline: self, engine, now, version: model_version, telemetry, out: &mut out };
            if let Err(reason) = FeedbackMessage::decode(&m.payload).and_then(|f| f.apply(&mut to)) {
                telemetry.event(Event::Feedback { device: "", result: FeedbackResult::Refused });
                out.push(dead_letter(m, "bad_feedback", reason, now.unix));
            }
        }
        out.extend(engine.devices_mut().take_shares().into_iter().map(Emitted::Share));
        out
    }

    /// Apply the kinds topic's messages (every daemon reads all of them): each member's
    /// share replaces its last, and the kind's members held here are offered what the
    /// kind now holds; fleet incidents name the siblings that joined them, and joined
    /// incidents take the verdict given on theirs. A share that cannot be read is a dead
    /// letter.
    pub fn shares(
        &self,
        engine: &mut Engine,
        messages: &[Received],
        now: Now,
        model_version: &str,
        telemetry: &dyn Telemetry,
    ) -> Vec<Emitted> {
        self.follow_service_clock(engine, now);
        let mut out = Vec::new();
        for m in messages {
            let applied = serde_json::from_slice::<Share>(&m.payload)
                .map_err(|e| format!("malformed kind share: {e}"))
                .and_then(|share| {
                    engine.devices_mut().apply_share(share, &self.rules.memory).map_err(|e| e.to_string())
                });
            match applied {
                Ok(transitions) => {
                    telemetry.event(Event::KindShare { result: ShareResult::Applied });
                    for (device, t) in transitions {
                        out.push(self.incident_output(engine, &device, &t, model_version, now));
                    }
                }
                Err(reason) => {
                    telemetry.event(Event::KindShare { result: ShareResult::Refused });
                    out.push(dead_letter(m, "bad_share", reason, now.unix));
                }
            }
        }
        telemetry.event(Event::Kinds(&engine.devices().kind_counts()));
        out
    }

    /// The incident's anomalous records against the device's known-normal window. Until
    /// it holds `open_k` kept records, the device's newest `open_n` records stand in for
    /// them (at least `open_k` of those were anomalous, so their medians are).
    fn explain(&self, model: &Model, d: &Device, i: &Incident) -> Vec<FeatureChange> {
        let dim = model.dim();
        let newest;
        let unusual = if i.kept.len() >= self.rules.open_k as usize * dim {
            &i.kept
        } else {
            newest = d.newest_rows(self.rules.open_n as usize);
            &newest
        };
        feature_changes(model, d.own_known_normal_rows(), unusual)
    }

    /// Devices evicted (capacity or idle) with an incident open: each incident closes
    /// as `evicted`, explained on the windows the device left with, so that no incident
    /// an analyst sees opened stays open for ever.
    pub fn eviction_closes(&self, engine: &mut Engine, now: Now, version: &str) -> Vec<Emitted> {
        let mut out = Vec::new();
        for (device, mut d) in engine.devices_mut().take_evicted_with_incidents() {
            if let Some(t) = d.close_evicted_incident(now.unix) {
                out.push(self.incident_event(engine.model(), &device, Some(&d), &t, version, now));
            }
        }
        out
    }

    /// Updates and quiet closes due at `now` (the service's clock and the wall's), as events:
    /// each device's time is the wall clock, or on the event clock its partition's
    /// stream time (`DeviceTable::now_of`; partitions newly idle are counted).
    pub fn incident_ticks(
        &self,
        engine: &mut Engine,
        now: Now,
        version: &str,
        telemetry: &dyn Telemetry,
    ) -> Vec<Emitted> {
        let mut out = self.eviction_closes(engine, now, version);
        self.follow_service_clock(engine, now);
        if engine.devices().clock() == Clock::Event {
            telemetry.event(Event::StreamIdle(engine.devices_mut().streams_mut().newly_idle(now.ms)));
        }
        engine.devices_mut().end_onboarding_due(now.ms);
        for (device, o, known_normal) in engine.devices_mut().take_onboarded() {
            let time = engine.devices().now_of(&device, now.ms).unix;
            out.push(Emitted::Incident(IncidentEvent::Onboarded {
                device,
                from: o.from,
                until: o.until,
                records: o.records,
                known_normal,
                by: o.by,
                note: o.note,
                time,
            }));
        }
        out.extend(engine.devices_mut().take_shares().into_iter().map(Emitted::Share));
        let open = engine.devices().with_open_incidents();
        for device in &open {
            let at = match engine.devices().clock() {
                Clock::Service => now,
                Clock::Event => engine.devices().now_of(device, now.ms),
            };
            for t in engine.devices_mut().tick_incident(device, &self.rules, at) {
                out.push(self.incident_output(engine, device, &t, version, now));
            }
        }
        let still = open
            .iter()
            .filter(|d| engine.devices().get(d).is_some_and(|d| d.incidents().open().is_some()))
            .count();
        telemetry.event(Event::IncidentsOpen(still));
        out
    }

    /// A scored record's alert (when anomalous) and score record (when published).
    fn record_outputs(
        &self,
        r: &FeatureRecord,
        source: &Source,
        outcome: RecordOutcome,
        model_version: &str,
        telemetry: &dyn Telemetry,
        out: &mut Vec<Emitted>,
    ) {
        let (score, decision) = match outcome {
            RecordOutcome::Unknown | RecordOutcome::Deferred => {
                telemetry.event(Event::Unknown);
                (None, "unknown")
            }
            RecordOutcome::Scored { posterior, anomalous, prior, .. } => {
                telemetry.event(Event::Scored { alert: anomalous && self.outputs.alerts });
                if anomalous && self.outputs.alerts {
                    out.push(Emitted::Alert(Alert {
                        alert_id: output::alert_id(source),
                        device: r.device.clone(),
                        ts: r.ts,
                        score: posterior,
                        prior,
                        model_version: model_version.to_string(),
                        source: source.clone(),
                    }));
                }
                (Some(posterior), if anomalous { "anomalous" } else { "normal" })
            }
        };
        if self.outputs.scores {
            out.push(Emitted::Score(ScoreRecord {
                device: r.device.clone(),
                ts: r.ts,
                score,
                decision: decision.into(),
                source: source.clone(),
            }));
        }
    }
}

/// What the feedback topic's commands act on (`feedback/`): the engine's device table,
/// this pipeline's rules and clock, and the batch's outputs.
struct Commands<'a> {
    pipeline: &'a Pipeline,
    engine: &'a mut Engine,
    now: Now,
    version: &'a str,
    telemetry: &'a dyn Telemetry,
    out: &'a mut Vec<Emitted>,
}

impl Applying for Commands<'_> {
    fn devices(&mut self) -> &mut DeviceTable {
        self.engine.devices_mut()
    }

    fn now(&self) -> Now {
        self.now
    }

    fn time(&self, device: &str) -> f64 {
        self.pipeline.time(self.engine, device, self.now)
    }

    fn feedback_max_age_s(&self) -> u64 {
        self.pipeline.feedback_max_age_s
    }

    fn memory(&self) -> MemoryRules {
        self.pipeline.rules.memory
    }

    fn telemetry(&self) -> &dyn Telemetry {
        self.telemetry
    }

    fn incident(&mut self, device: &str, transition: &Transition) {
        self.out.push(self.pipeline.incident_output(self.engine, device, transition, self.version, self.now));
    }

    fn eviction_closes(&mut self) {
        let closes = self.pipeline.eviction_closes(self.engine, self.now, self.version);
        self.out.extend(closes);
    }

    fn emit(&mut self, emitted: Emitted) {
        self.out.push(emitted);
    }
}

/// A refused message (record or feedback) as a dead letter, under its own key.
fn dead_letter(m: &Received, kind: &str, reason: String, time: f64) -> Emitted {
    let letter = DeadLetter {
        reason,
        kind: kind.into(),
        source: m.source.clone(),
        payload: output::payload_excerpt(&m.payload),
        payload_bytes: m.payload.len(),
        time,
    };
    let key = m.key.as_deref().map(|k| String::from_utf8_lossy(k).into_owned());
    Emitted::DeadLetter { key, letter }
}

/// The prior updates of devices just adapted (before scoring, after feedback).
fn prior_updates(
    engine: &Engine,
    devices: &[String],
    (model_version, memory): (&str, &MemoryRules),
    now: Now,
) -> Vec<Emitted> {
    let prior = |device: &String| {
        let d = engine.devices().get(device)?;
        d.prior_update(device, model_version, now.unix, memory).map(Emitted::Prior)
    };
    devices.iter().filter_map(prior).collect()
}

#[cfg(test)]
#[path = "pipeline_tests.rs"]
mod tests;
