//! The pipeline core: decoded records in, decisions out as plain values — scores,
//! alerts, incident events, prior updates, dead letters ([`Emitted`]). No Kafka here:
//! the daemon feeds it consumed messages and hands what it emits to the outbox, which
//! names the topics; the lab feeds it captures on their own clock ([`Clock::Event`])
//! and reads the same values. One implementation, so what the lab measures is what
//! the daemon does.

use std::collections::HashMap;
use std::time::Instant;

pub use super::clock::{Clock, Now};
use super::devices::Device;
use super::engine::{Engine, Verdict};
use super::explain::{feature_changes, FeatureChange};
use super::feedback::{Feedback, FeedbackMessage, Forget, Onboard};
use super::incidents::{Applied, Decision, Incident, IncidentRules, Transition};
use super::kinds::Share;
use super::onboarding::Onboarding;
use super::output::{
    self, Alert, DeadLetter, IncidentEvent, IncidentReport, PriorUpdate, ScoreRecord, Source,
};
use super::record::{self, FeatureRecord};
use super::telemetry::{Event, Telemetry};
use crate::model::Model;

/// One input message: where it came from and its bytes (a Kafka message, or a
/// capture's record built in place).
#[derive(Debug, Clone)]
pub struct Received {
    pub source: Source,
    pub key: Option<Vec<u8>>,
    pub payload: Vec<u8>,
}

/// One input message with its decode result.
#[derive(Debug)]
pub struct Consumed {
    /// The message, its bytes kept for a dead letter (none for a record built in place).
    pub message: Received,
    pub decoded: Result<FeatureRecord, record::InvalidRecord>,
}

impl Consumed {
    /// A record that needs no decoding (the lab's captures, tests).
    pub fn record(record: FeatureRecord, source: Source) -> Self {
        Self { message: Received { source, key: None, payload: Vec::new() }, decoded: Ok(record) }
    }

    fn source(&self) -> &Source {
        &self.message.source
    }
}

/// What the pipeline emits, in the order it decided it. The daemon's outbox puts each
/// on its topic (key: the device, or the message's own key for a dead letter).
// An incident event (~376 bytes, with a fleet's members) is 224 bytes larger than a
// score record: over clippy's 200. Boxing it would touch every consumer of `Emitted`
// for the scores' sake, whose batches are short-lived; left for the One Monitor issue's
// output type.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum Emitted {
    /// Every record's decision (when scores are published).
    Score(ScoreRecord),
    /// An anomalous record (when alerts are published).
    Alert(Alert),
    Incident(IncidentEvent),
    Prior(PriorUpdate),
    /// What a member shares with its kind (the kinds topic, key `kind/device`).
    Share(Share),
    /// A refused message, under its own key.
    DeadLetter {
        key: Option<String>,
        letter: DeadLetter,
    },
}

/// Which per-record outputs are built: both are off in production (incidents are what
/// an analyst reads), and building them costs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RecordOutputs {
    pub scores: bool,
    pub alerts: bool,
}

/// Below this many messages a micro-batch is decoded on the service thread alone.
const PARALLEL_DECODE_FROM: usize = 512;

/// Decode a micro-batch, on two threads when it is large: decoding (JSON above all)
/// costs as much as scoring, and the scoring forward is not running meanwhile.
pub fn decode_batch(messages: Vec<Received>, dim: usize, max_bytes: usize) -> Vec<Consumed> {
    let decode_one = |message: Received| {
        let decoded = record::decode(message.key.as_deref(), &message.payload, dim, max_bytes);
        Consumed { message, decoded }
    };
    if messages.len() < PARALLEL_DECODE_FROM {
        return messages.into_iter().map(decode_one).collect();
    }
    let mut first = messages;
    let second = first.split_off(first.len() / 2);
    std::thread::scope(|s| {
        let other = s.spawn(|| second.into_iter().map(decode_one).collect::<Vec<_>>());
        let mut out: Vec<Consumed> = first.into_iter().map(decode_one).collect();
        // Decoding does not panic on any input (fuzzed). Should it, the panic goes on
        // as it would have on one thread, rather than half the batch going missing.
        out.extend(other.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic)));
        out
    })
}

/// Highest offset per partition of fully processed messages.
pub fn highest_offsets<'a>(sources: impl IntoIterator<Item = &'a Source>) -> Vec<PartitionOffset> {
    let mut highest: HashMap<(&str, i32), i64> = HashMap::new();
    for s in sources {
        let e = highest.entry((s.topic.as_str(), s.partition)).or_insert(s.offset);
        *e = (*e).max(s.offset);
    }
    highest.into_iter().map(|((t, p), o)| (t.to_string(), p, o)).collect()
}

/// The offsets a processed micro-batch releases: per input partition its highest
/// offset, but below every record still deferred on that partition (a deferred record
/// is scored by a later batch, and its offset must not be committed before).
pub fn releasable_offsets(batch: &[Consumed], deferred: &[Consumed]) -> Vec<PartitionOffset> {
    let mut offsets = highest_offsets(batch.iter().map(Consumed::source));
    for (topic, partition, offset) in &mut offsets {
        for c in
            deferred.iter().map(Consumed::source).filter(|c| c.topic == *topic && c.partition == *partition)
        {
            *offset = (*offset).min(c.offset - 1);
        }
    }
    offsets.retain(|(_, _, o)| *o >= 0);
    offsets
}

/// Highest consumed offset of one input partition in a batch.
pub type PartitionOffset = (String, i32, i64);

/// The incident rules, what per-record outputs to build, the clock, and the records
/// deferred to the next batch.
pub struct Pipeline {
    pub rules: IncidentRules,
    /// Feedback reaches a closed incident this long after it closed (seconds).
    pub feedback_max_age_s: u64,
    pub outputs: RecordOutputs,
    pub clock: Clock,
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
    pub fn new(rules: IncidentRules, outputs: RecordOutputs, clock: Clock, max_deferred: usize) -> Self {
        Self {
            rules,
            feedback_max_age_s: 86_400,
            outputs,
            clock,
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
        let started = Instant::now();
        let mut fresh = fresh;
        if !self.trust_input_labels {
            self.drop_input_labels(&mut fresh, telemetry);
        }
        let mut batch = std::mem::take(&mut self.deferred);
        batch.extend(fresh);
        let valid: Vec<(&FeatureRecord, &Source)> =
            batch.iter().filter_map(|c| c.decoded.as_ref().ok().map(|r| (r, c.source()))).collect();
        self.follow_service_clock(engine, now);
        let processed = engine.process(&valid, now);
        if let (Clock::Event, Some(&latest)) =
            (self.clock, processed.clocks.iter().filter(|c| !c.is_nan()).max_by(|a, b| a.total_cmp(b)))
        {
            engine.devices.set_time(latest);
        }
        telemetry.event(Event::Evicted { reason: "capacity", count: processed.evicted });
        telemetry.event(Event::Redelivered(processed.replayed));
        telemetry.event(Event::Adapted(processed.adapted.len()));
        telemetry.event(Event::Batch { records: batch.len(), seconds: started.elapsed().as_secs_f64() });

        let mut out = Vec::new();
        let mut verdicts = processed.verdicts.into_iter().zip(processed.clocks);
        let mut done = Vec::with_capacity(batch.len());
        for c in batch {
            match &c.decoded {
                Ok(r) => match verdicts.next().expect("one verdict per valid record") {
                    (Verdict::Deferred, _) => {
                        self.deferred.push(c);
                        continue;
                    }
                    (v, clock) => {
                        self.record_outputs(r, c.source(), v, model_version, telemetry, &mut out);
                        if let Verdict::Scored { posterior, anomalous, prior, taken_as_normal } = v {
                            let now = match self.clock {
                                Clock::Service => now,
                                Clock::Event => {
                                    // On the records' clock an incident closes (or is
                                    // updated) as the device's time passes, at its records.
                                    let now = Now::event(clock);
                                    for t in engine.devices.tick_incident(&r.device, &self.rules, now) {
                                        telemetry
                                            .event(Event::Incident { device: &r.device, transition: &t });
                                        out.push(self.incident_output(
                                            engine,
                                            &r.device,
                                            &t,
                                            model_version,
                                            now,
                                        ));
                                    }
                                    now
                                }
                            };
                            let decision =
                                Decision::of(r, c.source(), posterior, anomalous, prior, taken_as_normal);
                            if let Some(t) =
                                engine.devices.observe_decision(&r.device, decision, &self.rules, now)
                            {
                                telemetry.event(Event::Incident { device: &r.device, transition: &t });
                                out.push(self.incident_output(engine, &r.device, &t, model_version, now));
                            }
                        }
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
        out.extend(self.eviction_closes(engine, now, model_version, telemetry));
        prior_updates(engine, &processed.adapted, model_version, now, telemetry, &mut out);
        let offsets = releasable_offsets(&done, &self.deferred);
        (out, offsets)
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
        self.incident_event(&engine.model, device, engine.devices.get(device), t, version, now)
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
        if self.clock == Clock::Service {
            engine.devices.set_time(now.unix);
        }
    }

    /// Now for `device` on the pipeline's clock, Unix seconds: the wall clock, or on the
    /// event clock the device's own (an analyst's verdict or an onboarding takes effect
    /// at its newest record).
    fn time(&self, engine: &Engine, device: &str, now: Now) -> f64 {
        match self.clock {
            Clock::Service => now.unix,
            Clock::Event => engine.devices.get(device).map_or_else(|| engine.devices.time(), |d| d.clock),
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

    /// Apply the feedback topic's messages. An analyst's verdict: a false positive closes
    /// the incident and its behaviour is remembered (`behaviours.rs`); the device's
    /// classifier is left as it was, so a verdict cannot make the device noisier.
    /// An operator's request to forget a device: it goes, snapshot and all. Every
    /// accepted message is emitted as an incident event, a refused one as a dead letter
    /// with the reason.
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
            match self.apply_feedback(engine, &m.payload, now) {
                Ok(Accepted::Forgot(f, known_normal)) => {
                    telemetry.event(Event::Forgotten { device: &f.device, known_normal, by: &f.by });
                    out.extend(self.eviction_closes(engine, now, model_version, telemetry));
                    out.push(Emitted::Incident(IncidentEvent::Forgotten {
                        device: f.device,
                        known_normal,
                        by: f.by,
                        note: f.note,
                        time: now.unix,
                    }));
                }
                Ok(Accepted::Onboarding(request, o)) => {
                    telemetry.event(Event::Onboarding {
                        device: &request.device,
                        event: "onboarding",
                        records: 0,
                        known_normal: 0,
                    });
                    out.push(Emitted::Incident(IncidentEvent::Onboarding {
                        device: request.device,
                        kind: request.kind,
                        from: o.from,
                        until: o.until,
                        by: o.by,
                        note: o.note,
                        time: now.unix,
                    }));
                }
                Ok(Accepted::Verdict(fb, applied)) => {
                    let (transition, result) = match *applied {
                        Applied::Confirmed(t) => (t, "confirmed"),
                        Applied::Dismissed(t) => (t, "false_positive"),
                        Applied::Unlearned => {
                            telemetry.event(Event::Feedback { device: &fb.device, result: "confirmed" });
                            telemetry.event(Event::Unlearned {
                                device: &fb.device,
                                incident: &fb.incident_id,
                                by: &fb.by,
                            });
                            out.push(Emitted::Incident(IncidentEvent::Unlearned {
                                time: self.time(engine, &fb.device, now),
                                device: fb.device,
                                incident_id: fb.incident_id,
                                by: fb.by,
                                note: fb.note,
                            }));
                            continue;
                        }
                    };
                    telemetry.event(Event::Feedback { device: &fb.device, result });
                    telemetry.event(Event::Incident { device: &fb.device, transition: &transition });
                    out.push(self.incident_output(engine, &fb.device, &transition, model_version, now));
                }
                Err(reason) => {
                    telemetry.event(Event::Feedback { device: "", result: "refused" });
                    out.push(dead_letter(m, "bad_feedback", reason, now.unix));
                }
            }
        }
        out.extend(engine.devices.take_shares().into_iter().map(Emitted::Share));
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
                    engine.devices.apply_share(share, &self.rules.memory).map_err(|e| e.to_string())
                });
            match applied {
                Ok(transitions) => {
                    telemetry.event(Event::KindShare { result: "applied" });
                    for (device, t) in transitions {
                        telemetry.event(Event::Incident { device: &device, transition: &t });
                        out.push(self.incident_output(engine, &device, &t, model_version, now));
                    }
                }
                Err(reason) => {
                    telemetry.event(Event::KindShare { result: "refused" });
                    out.push(dead_letter(m, "bad_share", reason, now.unix));
                }
            }
        }
        telemetry.event(Event::Kinds(&engine.devices.kind_counts()));
        out
    }

    fn apply_feedback(&self, engine: &mut Engine, payload: &[u8], now: Now) -> Result<Accepted, String> {
        match FeedbackMessage::decode(payload)? {
            FeedbackMessage::Onboard(request) => {
                let o = engine.devices.start_onboarding(
                    &request.device,
                    request.onboard_for_s,
                    request.kind.as_deref(),
                    request.by.clone(),
                    request.note.clone(),
                    self.time(engine, &request.device, now),
                )?;
                Ok(Accepted::Onboarding(request, o))
            }
            FeedbackMessage::Forget(f) => {
                let known_normal = engine
                    .devices
                    .forget(&f.device)
                    .ok_or_else(|| format!("unknown device {}: not tracked by this daemon", f.device))?;
                Ok(Accepted::Forgot(f, known_normal))
            }
            FeedbackMessage::Verdict(fb) => {
                let at = self.time(engine, &fb.device, now);
                let applied =
                    engine.devices.apply_feedback(&fb, at, self.feedback_max_age_s, &self.rules.memory)?;
                Ok(Accepted::Verdict(fb, Box::new(applied)))
            }
        }
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
            newest = d.unlabeled.newest(self.rules.open_n as usize);
            &newest
        };
        feature_changes(model, d.positive.rows(), unusual)
    }

    /// Devices evicted (capacity or idle) with an incident open: each incident closes
    /// as `evicted`, explained on the windows the device left with, so that no incident
    /// an analyst sees opened stays open for ever.
    pub fn eviction_closes(
        &self,
        engine: &mut Engine,
        now: Now,
        version: &str,
        telemetry: &dyn Telemetry,
    ) -> Vec<Emitted> {
        let mut out = Vec::new();
        for (device, mut d) in engine.devices.take_evicted_with_incidents() {
            if let Some(t) = d.incidents.close_evicted(now.unix) {
                telemetry.event(Event::Incident { device: &device, transition: &t });
                out.push(self.incident_event(&engine.model, &device, Some(&d), &t, version, now));
            }
        }
        out
    }

    /// Updates and quiet closes due at `now` (the service's clock and the wall's), as events:
    /// each device's time is the wall clock, or on the event clock its records' time
    /// plus the service time since its last record ([`DeviceTable::now_of`]).
    pub fn incident_ticks(
        &self,
        engine: &mut Engine,
        now: Now,
        version: &str,
        telemetry: &dyn Telemetry,
    ) -> Vec<Emitted> {
        let mut out = self.eviction_closes(engine, now, version, telemetry);
        self.follow_service_clock(engine, now);
        engine.devices.end_onboarding_due(now.ms);
        for (device, o, known_normal) in engine.devices.take_onboarded() {
            telemetry.event(Event::Onboarding {
                device: &device,
                event: "onboarded",
                records: o.records,
                known_normal,
            });
            let time = engine.devices.now_of(&device, now.ms).unix;
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
        out.extend(engine.devices.take_shares().into_iter().map(Emitted::Share));
        let open = engine.devices.with_open_incidents();
        for device in &open {
            let at = match self.clock {
                Clock::Service => now,
                Clock::Event => engine.devices.now_of(device, now.ms),
            };
            for t in engine.devices.tick_incident(device, &self.rules, at) {
                telemetry.event(Event::Incident { device, transition: &t });
                out.push(self.incident_output(engine, device, &t, version, now));
            }
        }
        let still =
            open.iter().filter(|d| engine.devices.get(d).is_some_and(|d| d.incidents.open.is_some())).count();
        telemetry.event(Event::IncidentsOpen(still));
        out
    }

    /// A scored record's alert (when anomalous) and score record (when published).
    fn record_outputs(
        &self,
        r: &FeatureRecord,
        source: &Source,
        verdict: Verdict,
        model_version: &str,
        telemetry: &dyn Telemetry,
        out: &mut Vec<Emitted>,
    ) {
        let (score, decision) = match verdict {
            Verdict::Unknown | Verdict::Deferred => {
                telemetry.event(Event::Unknown);
                (None, "unknown")
            }
            Verdict::Scored { posterior, anomalous, prior, .. } => {
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

/// A feedback-topic message applied.
enum Accepted {
    Verdict(Feedback, Box<Applied>),
    /// A device forgotten, with the known-normal records it had.
    Forgot(Forget, usize),
    Onboarding(Onboard, Onboarding),
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
pub fn prior_updates(
    engine: &Engine,
    devices: &[String],
    model_version: &str,
    now: Now,
    telemetry: &dyn Telemetry,
    out: &mut Vec<Emitted>,
) {
    for device in devices {
        if let Some(update) =
            engine.devices.get(device).and_then(|d| d.prior_update(device, model_version, now.unix))
        {
            telemetry.event(Event::Prior(update.prior));
            out.push(Emitted::Prior(update));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{MetaPuNet, Model, NetConfig, PreprocessKind, Preprocessor, Provenance};
    use crate::monitor::devices::{DeviceTable, WindowSizes};
    use crate::monitor::telemetry::Tally;

    /// Held while a test's network is drawn: torch's generator is the process's, and two
    /// of these tests seeding and drawing at once got other weights (and other scores).
    static DRAWING: std::sync::Mutex<()> = std::sync::Mutex::new(());

    fn engine(max_per_device: usize) -> Engine {
        let net = {
            let _drawing = DRAWING.lock().unwrap_or_else(|e| e.into_inner());
            tch::manual_seed(1);
            MetaPuNet::new(NetConfig::paper(2, 8), tch::Device::Cpu)
        };
        let model = Model {
            net,
            preprocess: Preprocessor::identity(PreprocessKind::None, 2),
            feature_names: vec!["a".into(), "b".into()],
            provenance: Provenance::default(),
        };
        let sizes = WindowSizes { positive: 5, unlabeled: 10, bootstrap_positives: 0 };
        let mut e = Engine::new(model, sizes, 10, 0.5);
        e.max_per_device = max_per_device;
        e
    }

    fn message(partition: i32, offset: i64, payload: &[u8]) -> Received {
        Received {
            source: Source { topic: "in".into(), partition, offset },
            key: None,
            payload: payload.to_vec(),
        }
    }

    fn consumed(messages: Vec<Received>) -> Vec<Consumed> {
        decode_batch(messages, 2, 1024)
    }

    fn pipeline() -> Pipeline {
        let rules = IncidentRules {
            open_k: 2,
            open_n: 3,
            update_interval_ms: 1000,
            quiet_ms: 5000,
            reopen_ms: 0,
            keep_records: 3,
            memory: crate::monitor::behaviours::MemoryRules::OFF,
            fan_out: crate::monitor::fanout::FanOutRules::OFF,
            fleet_ms: 0,
        };
        Pipeline::new(rules, RecordOutputs { scores: true, alerts: false }, Clock::Service, 100)
    }

    fn record(device: &str, offset: i64, normal: bool) -> Received {
        let label = if normal { r#", "label": "normal""# } else { "" };
        let json = format!(r#"{{"device": "{device}", "ts": {offset}, "features": [0.1, 0.2]{label}}}"#);
        message(0, offset, json.as_bytes())
    }

    fn kinds(emitted: &[Emitted]) -> Vec<&'static str> {
        emitted
            .iter()
            .map(|e| match e {
                Emitted::Score(_) => "score",
                Emitted::Alert(_) => "alert",
                Emitted::Incident(_) => "incident",
                Emitted::Prior(_) => "prior",
                Emitted::Share(_) => "share",
                Emitted::DeadLetter { .. } => "dead letter",
            })
            .collect()
    }

    fn decisions(emitted: &[Emitted]) -> Vec<&str> {
        emitted
            .iter()
            .filter_map(|e| match e {
                Emitted::Score(s) => Some(s.decision.as_str()),
                _ => None,
            })
            .collect()
    }

    /// Two devices on the event clock: benign records, then a burst of others, then
    /// benign again, a record every 0.3 s of capture time.
    fn capture() -> Vec<Received> {
        (0..240i64)
            .map(|o| {
                let device = if o % 2 == 0 { "cam" } else { "lock" };
                let i = o / 2;
                let x = if (60..90).contains(&i) { 3.0 + (i % 5) as f32 * 0.1 } else { 0.1 * (i % 3) as f32 };
                let label = if i < 4 { r#", "label": "normal""# } else { "" };
                let json = format!(
                    r#"{{"device": "{device}", "ts": {}, "features": [{x}, {}]{label}}}"#,
                    0.3 * i as f64,
                    -x
                );
                message(0, o, json.as_bytes())
            })
            .collect()
    }

    /// Every record's decision (by offset), and the incidents opened and closed.
    type Replayed = (Vec<(i64, String)>, Vec<String>);

    /// What a replay decided: every record's decision, and the incidents opened and
    /// closed (id, records, anomalous), by device.
    fn replay(batch_sizes: &[usize], service_ms_step: u64) -> Replayed {
        replay_with(batch_sizes, service_ms_step, 1).0
    }

    /// [`replay`] with `adaptation.min_records`; also the adaptations it made.
    fn replay_with(batch_sizes: &[usize], service_ms_step: u64, min_records: usize) -> (Replayed, u64) {
        let tally = Tally::default();
        let mut engine = engine(0);
        engine.threshold = 0.9; // the burst scores 0.75-0.85, the rest over 0.9
        engine.cadence =
            Some(crate::monitor::engine::EventCadence { interval_s: 1.0, min_records, after_records: 0 });
        engine.devices.event_clock = true;
        let rules = IncidentRules {
            open_k: 3,
            open_n: 5,
            update_interval_ms: 2_000,
            quiet_ms: 3_000,
            reopen_ms: 0,
            keep_records: 3,
            memory: crate::monitor::behaviours::MemoryRules::OFF,
            fan_out: crate::monitor::fanout::FanOutRules::OFF,
            fleet_ms: 0,
        };
        let mut pipeline =
            Pipeline::new(rules, RecordOutputs { scores: true, alerts: false }, Clock::Event, 100);
        let mut messages = capture().into_iter().peekable();
        let (mut decisions, mut incidents) = (Vec::new(), Vec::new());
        let mut service_ms = 0;
        for &size in batch_sizes.iter().cycle() {
            if messages.peek().is_none() {
                break;
            }
            let batch: Vec<Received> = messages.by_ref().take(size).collect();
            let (mut out, _) =
                pipeline.run(&mut engine, consumed(batch), Now::service(service_ms), "v", &tally);
            out.extend(pipeline.incident_ticks(&mut engine, Now::service(service_ms), "v", &tally));
            service_ms += service_ms_step;
            for e in out {
                match e {
                    Emitted::Score(s) => decisions.push((s.source.offset, s.decision)),
                    Emitted::Incident(IncidentEvent::Opened(r)) => {
                        incidents.push(format!("opened {} {} {}", r.device, r.incident_id, r.figures.records))
                    }
                    Emitted::Incident(IncidentEvent::Closed(r)) => incidents.push(format!(
                        "closed {} {} {} {}",
                        r.device, r.incident_id, r.figures.records, r.figures.anomalous
                    )),
                    _ => {}
                }
            }
        }
        decisions.sort();
        incidents.sort();
        ((decisions, incidents), tally.get("adapted"))
    }

    /// On the event clock, adaptation and incidents follow the records' time: the same
    /// capture cut into batches of any size, arriving at any speed, gets the same
    /// decisions and the same incidents.
    #[test]
    fn on_the_event_clock_batching_and_speed_change_nothing() {
        let whole = replay(&[240], 0);
        assert!(
            whole.1.iter().any(|i| i.starts_with("opened cam")),
            "the burst opens an incident: {:?}",
            whole.1
        );
        assert!(whole.1.iter().any(|i| i.starts_with("closed cam")), "and it closes: {:?}", whole.1);
        assert_eq!(replay(&[1], 0), whole, "one record per batch");
        assert_eq!(replay(&[7, 1, 30], 0), whole, "batches of 7, 1, 30");
        assert_eq!(replay(&[1], 300), whole, "one record per batch, live speed");
        assert_eq!(replay(&[5], 1), whole, "1,500 times faster than live");
    }

    /// With `min_records`, a device that sends a few records a second is re-adapted
    /// every `min_records` records, not every second of its time; still on the records'
    /// time alone: any batching and speed give the same decisions and incidents.
    #[test]
    fn min_records_spaces_adaptations_and_keeps_replays_alike() {
        let (every, every_n) = replay_with(&[240], 0, 1);
        let (spaced, spaced_n) = replay_with(&[240], 0, 10);
        // 120 records a device, 0.3 s apart: a point every 4 records, or, once the window
        // of 10 is full, every 10 (sooner while it fills).
        assert!(every_n >= 50, "every second of each device's time: {every_n}");
        assert!((20..=26).contains(&spaced_n), "every 10 records of each device: {spaced_n}");
        assert!(
            spaced.1.iter().any(|i| i.starts_with("opened cam")),
            "the burst still opens an incident: {:?}",
            spaced.1
        );
        assert_eq!(spaced.1, every.1, "the same incidents here");
        for (sizes, step) in [(&[1usize][..], 0), (&[7, 1, 30][..], 0), (&[1][..], 300), (&[5][..], 1)] {
            assert_eq!(
                replay_with(sizes, step, 10),
                (spaced.clone(), spaced_n),
                "batches {sizes:?}, {step} ms"
            );
        }
    }

    /// An engine and pipeline on the event clock that call every record anomalous, and
    /// five records of device `a` (the first known-normal), one a second of a capture's
    /// time years ago, run at 1 s of the service's clock: its incident is open.
    fn silent_after_an_incident(idle_after_ms: u64, tally: &Tally) -> (Engine, Pipeline) {
        let (mut engine, mut pipeline) = (self::engine(0), self::pipeline());
        engine.threshold = 1.1; // every record scores anomalous
        engine.devices.event_clock = true;
        engine.devices.idle_after_ms = idle_after_ms;
        pipeline.clock = Clock::Event;
        let old = 1.5e9;
        let messages: Vec<Received> = (0..5)
            .map(|o| {
                let label = if o == 0 { r#", "label": "normal""# } else { "" };
                let json =
                    format!(r#"{{"device": "a", "ts": {}, "features": [0.1, 0.2]{label}}}"#, old + o as f64);
                message(0, o, json.as_bytes())
            })
            .collect();
        let (out, _) = pipeline.run(&mut engine, consumed(messages), Now::service(1_000), "v", tally);
        assert!(out.iter().any(|e| matches!(e, Emitted::Incident(IncidentEvent::Opened(_)))));
        (engine, pipeline)
    }

    fn closed(out: &[Emitted]) -> bool {
        out.iter().any(|e| matches!(e, Emitted::Incident(IncidentEvent::Closed(_))))
    }

    /// On the event clock a device that falls silent still sees time pass: its open
    /// incident closes `quiet` after its last record, on the service's clock.
    #[test]
    fn a_silent_device_s_incident_closes_on_the_wall_clock() {
        let tally = Tally::default();
        let (mut engine, pipeline) = silent_after_an_incident(0, &tally);
        assert!(
            !closed(&pipeline.incident_ticks(&mut engine, Now::service(5_000), "v", &tally)),
            "4 s of quiet < 5 s"
        );
        let out = pipeline.incident_ticks(&mut engine, Now::service(6_100), "v", &tally);
        assert!(closed(&out), "5.1 s after its last record: closed");
    }

    /// Silent for less than idle_after: the service's lag moves no device's time, so a
    /// tick between two records of live traffic decides what a replay decides.
    #[test]
    fn a_lagging_service_moves_no_device_s_time_until_it_is_silent_for_idle_after() {
        let tally = Tally::default();
        let (mut engine, pipeline) = silent_after_an_incident(10_000, &tally);
        assert!(
            !closed(&pipeline.incident_ticks(&mut engine, Now::service(10_900), "v", &tally)),
            "9.9 s silent: its time stands at its last record's"
        );
        let out = pipeline.incident_ticks(&mut engine, Now::service(11_000), "v", &tally);
        assert!(closed(&out), "10 s silent: moved on by all of it, past quiet");
    }

    #[test]
    fn released_offsets_stop_below_a_deferred_record() {
        let batch = consumed((10..=20).map(|o| message(0, o, b"x")).chain([message(1, 7, b"x")]).collect());
        let deferred = consumed(vec![message(0, 15, b"x"), message(0, 18, b"x"), message(2, 0, b"x")]);
        let mut released = releasable_offsets(&batch, &deferred);
        released.sort();
        assert_eq!(released, vec![("in".to_string(), 0, 14), ("in".to_string(), 1, 7)]);
        let first_deferred = consumed(vec![message(0, 0, b"x")]);
        assert!(releasable_offsets(&consumed(vec![message(0, 3, b"x")]), &first_deferred).is_empty());
    }

    /// A device over its share of a batch: the rest lead the next batches, in order, and
    /// the batch releases offsets only below them; every record is scored in the end.
    #[test]
    fn records_over_a_share_wait_for_the_next_batch_and_hold_back_offsets() {
        let tally = Tally::default();
        let (mut engine, mut pipeline) = (engine(2), pipeline());
        let fresh = consumed((0..5).map(|o| record("a", o, o == 0)).collect());
        let (outputs, offsets) = pipeline.run(&mut engine, fresh, Now::service(0), "v", &tally);
        assert_eq!(kinds(&outputs), ["score", "score", "prior"]);
        assert_eq!(offsets, vec![("in".to_string(), 0, 1)]);
        assert!(pipeline.has_deferred());
        let (outputs, offsets) = pipeline.run(&mut engine, Vec::new(), Now::service(0), "v", &tally);
        assert_eq!((outputs.len(), offsets), (2, vec![("in".to_string(), 0, 3)]));
        let (outputs, offsets) =
            pipeline.run(&mut engine, consumed(vec![record("b", 5, false)]), Now::service(0), "v", &tally);
        assert_eq!((outputs.len(), offsets), (2, vec![("in".to_string(), 0, 5)]));
        assert!(!pipeline.has_deferred());
        assert_eq!(tally.get("deferred"), 3 + 1, "deferrals counted per batch");
        assert_eq!(
            engine.devices.get("a").map(|d| d.seen),
            Some(5),
            "every record of a entered its windows once"
        );
    }

    /// The first records of a device with a known-normal record are scored, not
    /// `unknown`: it is adapted before scoring. Bad input becomes a dead letter.
    #[test]
    fn a_new_device_is_adapted_before_scoring_and_bad_input_is_dead_lettered() {
        let tally = Tally::default();
        let (mut engine, mut pipeline) = (engine(0), pipeline());
        let mut messages: Vec<Received> = (0..4).map(|o| record("a", o, o == 0)).collect();
        messages.push(record("c", 4, false));
        messages.push(message(0, 5, b"{not json"));
        let (outputs, _) = pipeline.run(&mut engine, consumed(messages), Now::service(0), "v", &tally);
        let decisions = decisions(&outputs);
        assert!(decisions[..4].iter().all(|d| *d != "unknown"), "{decisions:?}");
        assert_eq!(decisions[4], "unknown", "a device with no known-normal record cannot be scored");
        assert_eq!(kinds(&outputs)[5..], ["dead letter", "prior"]);
        let Emitted::Prior(update) = &outputs[6] else { panic!("a prior update: {:?}", outputs[6]) };
        assert_eq!((update.device.as_str(), update.positive_window, update.unlabeled_window), ("a", 1, 4));
        assert_eq!(tally.get("adapted"), 1);
        assert_eq!(tally.get("refused/malformed"), 1);
    }

    /// Records taken as known-normal (here a new device's first three) are being learned
    /// as normal: however they score, they open no incident; the records after them do.
    #[test]
    fn records_taken_as_normal_open_no_incident() {
        let tally = Tally::default();
        let (mut engine, mut pipeline) = (engine(0), pipeline());
        engine.threshold = 1.1; // every record scores anomalous
        engine.devices =
            DeviceTable::new(2, WindowSizes { positive: 5, unlabeled: 10, bootstrap_positives: 3 }, 10);
        let opened =
            |outputs: &[Emitted]| outputs.iter().filter(|o| matches!(o, Emitted::Incident(_))).count();
        let mut run = |offsets: std::ops::Range<i64>| {
            let fresh = consumed(offsets.map(|o| record("a", o, false)).collect());
            pipeline.run(&mut engine, fresh, Now::service(0), "v", &tally).0
        };
        let outputs = run(0..3);
        assert_eq!(opened(&outputs), 0, "bootstrap records are learned as normal: no incident");
        let anomalous = decisions(&outputs).iter().filter(|d| **d == "anomalous").count();
        assert_eq!(anomalous, 3, "yet scored anomalous");
        let outputs = run(3..5);
        assert_eq!(opened(&outputs), 1, "2 of the last 3 decisions anomalous");
    }
}
