//! The batch pipeline: decode a micro-batch, score it, and build what it publishes
//! (alerts, scores, dead letters). Pure but for the engine's model: no Kafka here, the
//! service hands the outputs to delivery.

use std::collections::HashMap;
use std::time::Instant;

use rdkafka::message::{Message, OwnedMessage};

use super::config::KafkaConfig;
use super::delivery::{Output, PartitionOffset};
use super::devices::Device;
use super::engine::{Engine, Verdict};
use super::events;
use super::explain::{feature_changes, FeatureChange};
use super::incidents::{Applied, Decision, Feedback, Incident, IncidentRules, Transition};
use super::metrics::Metrics;
use super::output::{
    self, Alert, DeadLetter, IncidentEvent, IncidentReport, PriorUpdate, ScoreRecord, Source,
};
use super::record::{self, FeatureRecord};
use crate::model::Model;

/// One consumed message with its decode result.
pub(crate) struct Consumed {
    pub(crate) source: Source,
    pub(crate) message: OwnedMessage,
    pub(crate) decoded: Result<FeatureRecord, record::InvalidRecord>,
}

/// Below this many messages a micro-batch is decoded on the service thread alone.
const PARALLEL_DECODE_FROM: usize = 512;

/// Decode a micro-batch, on two threads when it is large: decoding (JSON above all)
/// costs as much as scoring, and the scoring forward is not running meanwhile.
pub(crate) fn decode_batch(messages: Vec<OwnedMessage>, dim: usize, max_bytes: usize) -> Vec<Consumed> {
    let decode_one = |m: OwnedMessage| {
        let source = Source { topic: m.topic().to_string(), partition: m.partition(), offset: m.offset() };
        let decoded = record::decode(m.key(), m.payload().unwrap_or_default(), dim, max_bytes);
        Consumed { source, message: m, decoded }
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
pub(crate) fn highest_offsets<'a>(
    messages: impl IntoIterator<Item = &'a OwnedMessage>,
) -> Vec<PartitionOffset> {
    let mut highest: HashMap<(&str, i32), i64> = HashMap::new();
    for m in messages {
        let e = highest.entry((m.topic(), m.partition())).or_insert(m.offset());
        *e = (*e).max(m.offset());
    }
    highest.into_iter().map(|((t, p), o)| (t.to_string(), p, o)).collect()
}

/// The offsets a processed micro-batch releases: per input partition its highest
/// offset, but below every record still deferred on that partition (a deferred record
/// is scored by a later batch, and its offset must not be committed before).
pub(crate) fn releasable_offsets(batch: &[Consumed], deferred: &[Consumed]) -> Vec<PartitionOffset> {
    let mut offsets = highest_offsets(batch.iter().map(|c| &c.message));
    for (topic, partition, offset) in &mut offsets {
        for c in deferred.iter().filter(|c| c.source.topic == *topic && c.source.partition == *partition) {
            *offset = (*offset).min(c.source.offset - 1);
        }
    }
    offsets.retain(|(_, _, o)| *o >= 0);
    offsets
}

/// Where a batch's outputs go, the incident rules, and the records deferred to the
/// next batch.
pub(crate) struct Pipeline {
    /// `None` unless `kafka.publish_alerts`.
    alerts_topic: Option<String>,
    incidents_topic: String,
    pub(crate) rules: IncidentRules,
    /// Feedback reaches a closed incident this long after it closed (seconds).
    pub(crate) feedback_max_age_s: u64,
    priors_topic: String,
    deadletter_topic: String,
    /// `None` unless `kafka.publish_scores`.
    scores_topic: Option<String>,
    /// Records over their device's share of a batch (`scoring.max_per_device`), oldest
    /// first: they lead the next batch.
    deferred: Vec<Consumed>,
    /// Deferred records held at most before the service stops consuming (backpressure).
    max_deferred: usize,
}

impl Pipeline {
    pub(crate) fn new(kafka: &KafkaConfig, rules: IncidentRules, max_deferred: usize) -> Self {
        Self {
            feedback_max_age_s: 86_400,
            alerts_topic: kafka.publish_alerts.then(|| kafka.alerts_topic.clone()),
            incidents_topic: kafka.incidents_topic.clone(),
            rules,
            priors_topic: kafka.priors_topic.clone(),
            deadletter_topic: kafka.deadletter_topic.clone(),
            scores_topic: kafka.publish_scores.then(|| kafka.scores_topic.clone()),
            deferred: Vec::new(),
            max_deferred: max_deferred.max(1),
        }
    }

    /// Records wait for a later batch.
    pub(crate) fn has_deferred(&self) -> bool {
        !self.deferred.is_empty()
    }

    /// As many records wait as the pipeline holds: consume no more until they are scored.
    pub(crate) fn backlogged(&self) -> bool {
        self.deferred.len() >= self.max_deferred
    }

    /// Forget deferred records of partitions that moved away (their offsets were never
    /// committed: the new owner reads them).
    pub(crate) fn drop_deferred(&mut self, partitions: &[(String, i32)]) {
        self.deferred
            .retain(|c| !partitions.iter().any(|(t, p)| *t == c.source.topic && *p == c.source.partition));
    }

    /// Score the deferred records and then a decoded micro-batch; its outputs in input
    /// order (then the prior updates of devices adapted before scoring), and the input
    /// offsets they release once acknowledged.
    pub(crate) fn run(
        &mut self,
        engine: &mut Engine,
        fresh: Vec<Consumed>,
        now_ms: u64,
        model_version: &str,
        metrics: &Metrics,
    ) -> (Vec<Output>, Vec<PartitionOffset>) {
        let started = Instant::now();
        let mut batch = std::mem::take(&mut self.deferred);
        batch.extend(fresh);
        let valid: Vec<(&FeatureRecord, &Source)> =
            batch.iter().filter_map(|c| c.decoded.as_ref().ok().map(|r| (r, &c.source))).collect();
        let processed = engine.process(&valid, now_ms);
        events::devices_evicted(metrics, "capacity", processed.evicted);
        metrics.records_redelivered.inc_by(processed.replayed as u64);
        metrics.adaptations.inc_by(processed.adapted.len() as u64);
        metrics.scoring_seconds.observe(started.elapsed().as_secs_f64());
        metrics.batch_records.observe(batch.len() as f64);

        let mut outputs = Vec::new();
        let mut verdicts = processed.verdicts.into_iter();
        let mut done = Vec::with_capacity(batch.len());
        for c in batch {
            match &c.decoded {
                Ok(r) => match verdicts.next().expect("one verdict per valid record") {
                    Verdict::Deferred => {
                        self.deferred.push(c);
                        continue;
                    }
                    v => {
                        self.record_outputs(r, &c.source, v, model_version, metrics, &mut outputs);
                        if let Verdict::Scored { posterior, anomalous, prior, taken_as_normal } = v {
                            let decision =
                                Decision::of(r, &c.source, posterior, anomalous, prior, taken_as_normal);
                            let tracker = engine.devices.get_mut(&r.device).map(|d| &mut d.incidents);
                            if let Some(t) = tracker.and_then(|t| {
                                t.observe(&r.device, decision, &self.rules, now_ms, output::unix_now())
                            }) {
                                events::incident(metrics, &r.device, &t);
                                outputs.push(self.incident_output(engine, &r.device, &t, model_version));
                            }
                        }
                    }
                },
                Err(reason) => {
                    events::record_refused(metrics, reason.kind());
                    outputs.push(self.dead_letter(
                        &c.message,
                        c.source.clone(),
                        reason.kind(),
                        reason.to_string(),
                    ));
                }
            }
            done.push(c);
        }
        metrics.records_deferred.inc_by(self.deferred.len() as u64);
        outputs.extend(self.eviction_closes(engine, model_version, metrics));
        self.prior_updates(engine, &processed.adapted, model_version, metrics, &mut outputs);
        let offsets = releasable_offsets(&done, &self.deferred);
        (outputs, offsets)
    }

    /// An incident's transition as an event on the incidents topic, with the features
    /// that moved.
    pub(crate) fn incident_output(
        &self,
        engine: &Engine,
        device: &str,
        t: &Transition,
        version: &str,
    ) -> Output {
        self.incident_event(&engine.model, device, engine.devices.get(device), t, version)
    }

    /// [`Self::incident_output`] for a device that may no longer be tracked.
    fn incident_event(
        &self,
        model: &Model,
        device: &str,
        d: Option<&Device>,
        t: &Transition,
        version: &str,
    ) -> Output {
        let (i, resolution) = match t {
            Transition::Opened(i) | Transition::Updated(i) | Transition::Reviewed(i) => (i, None),
            Transition::Closed(i, r) => (i, Some(r.as_str())),
        };
        let top = d.map(|d| self.explain(model, d, i)).unwrap_or_default();
        let report = IncidentReport::of(device, i, resolution, version, top);
        let event = match t {
            Transition::Opened(_) => IncidentEvent::Opened(report),
            Transition::Updated(_) => IncidentEvent::Updated(report),
            Transition::Closed(..) => IncidentEvent::Closed(report),
            Transition::Reviewed(_) => IncidentEvent::Reviewed(report),
        };
        Output::json(&self.incidents_topic, Some(device), &event)
    }

    /// Apply analysts' verdicts (messages of the feedback topic): a false positive's
    /// kept records enter the device's positive window, and so do its next records for a
    /// while (see [`Device::learn_after_dismissal`]); the device is re-adapted at once.
    /// Every accepted verdict is published on the incidents topic, a refused one goes to
    /// the dead-letter topic with the reason.
    pub(crate) fn feedback(
        &self,
        engine: &mut Engine,
        messages: &[OwnedMessage],
        model_version: &str,
        metrics: &Metrics,
    ) -> Vec<Output> {
        let mut outputs = Vec::new();
        for m in messages {
            let source =
                Source { topic: m.topic().to_string(), partition: m.partition(), offset: m.offset() };
            match self.apply_feedback(engine, m.payload().unwrap_or_default()) {
                Ok((fb, applied)) => {
                    let (transition, result) = match applied {
                        Applied::Confirmed(t) => (t, "confirmed"),
                        Applied::Dismissed { rows, transition } => {
                            let dim = engine.model.dim();
                            let d = engine
                                .devices
                                .get_mut(&fb.device)
                                .expect("feedback applied to a tracked device");
                            for row in rows.chunks_exact(dim) {
                                d.positive.push(row);
                            }
                            d.learn_after_dismissal();
                            d.changed += 1;
                            d.unsnapshotted = true;
                            let adapted = engine.adapt_now([fb.device.as_str()]);
                            metrics.adaptations.inc_by(adapted.len() as u64);
                            self.prior_updates(engine, &adapted, model_version, metrics, &mut outputs);
                            (transition, "false_positive")
                        }
                    };
                    events::feedback(metrics, &fb.device, result);
                    events::incident(metrics, &fb.device, &transition);
                    outputs.push(self.incident_output(engine, &fb.device, &transition, model_version));
                }
                Err(reason) => {
                    events::feedback(metrics, "", "refused");
                    outputs.push(self.dead_letter(m, source, "bad_feedback", reason));
                }
            }
        }
        outputs
    }

    fn apply_feedback(&self, engine: &mut Engine, payload: &[u8]) -> Result<(Feedback, Applied), String> {
        const LIMIT: usize = 64 * 1024;
        if payload.len() > LIMIT {
            return Err(format!("feedback is {} bytes, over the {LIMIT}-byte limit", payload.len()));
        }
        let fb: Feedback = serde_json::from_slice(payload).map_err(|e| format!("malformed feedback: {e}"))?;
        let d = engine
            .devices
            .get_mut(&fb.device)
            .ok_or_else(|| format!("unknown device {}: not tracked by this daemon", fb.device))?;
        let applied = d
            .incidents
            .feedback(&fb, output::unix_now(), self.feedback_max_age_s)
            .map_err(|e| e.to_string())?;
        Ok((fb, applied))
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
    pub(crate) fn eviction_closes(
        &self,
        engine: &mut Engine,
        version: &str,
        metrics: &Metrics,
    ) -> Vec<Output> {
        let now = output::unix_now();
        let mut outputs = Vec::new();
        for (device, mut d) in engine.devices.take_evicted_with_incidents() {
            if let Some(t) = d.incidents.close_evicted(now) {
                events::incident(metrics, &device, &t);
                outputs.push(self.incident_event(&engine.model, &device, Some(&d), &t, version));
            }
        }
        outputs
    }

    /// Updates and quiet closes due at `now_ms`, as events to publish.
    pub(crate) fn incident_ticks(
        &self,
        engine: &mut Engine,
        now_ms: u64,
        version: &str,
        metrics: &Metrics,
    ) -> Vec<Output> {
        let mut outputs = self.eviction_closes(engine, version, metrics);
        let open = engine.devices.with_open_incidents();
        for device in &open {
            let tracker = engine.devices.get_mut(device).map(|d| &mut d.incidents);
            if let Some(t) = tracker.and_then(|t| t.tick(&self.rules, now_ms, output::unix_now())) {
                events::incident(metrics, device, &t);
                outputs.push(self.incident_output(engine, device, &t, version));
            }
        }
        let still =
            open.iter().filter(|d| engine.devices.get(d).is_some_and(|d| d.incidents.open.is_some())).count();
        metrics.incidents_open.set(still as i64);
        outputs
    }

    /// A refused message (record or feedback) on the dead-letter topic, under its key.
    fn dead_letter(&self, m: &OwnedMessage, source: Source, kind: &str, reason: String) -> Output {
        let payload = m.payload().unwrap_or_default();
        let letter = DeadLetter {
            reason,
            kind: kind.into(),
            source,
            payload: output::payload_excerpt(payload),
            payload_bytes: payload.len(),
            time: output::unix_now(),
        };
        let key = m.key().map(String::from_utf8_lossy);
        Output::json(&self.deadletter_topic, key.as_deref(), &letter)
    }

    /// The prior updates of devices just adapted here (before scoring, after feedback).
    fn prior_updates(
        &self,
        engine: &Engine,
        devices: &[String],
        model_version: &str,
        metrics: &Metrics,
        out: &mut Vec<Output>,
    ) {
        for device in devices {
            if let Some(update) =
                engine.devices.get(device).and_then(|d| PriorUpdate::of(device, d, model_version))
            {
                metrics.priors.observe(f64::from(update.prior));
                out.push(Output::json(&self.priors_topic, Some(device), &update));
            }
        }
    }

    /// A scored record's alert (when anomalous) and score record (when published).
    fn record_outputs(
        &self,
        r: &FeatureRecord,
        source: &Source,
        verdict: Verdict,
        model_version: &str,
        metrics: &Metrics,
        out: &mut Vec<Output>,
    ) {
        let (score, decision) = match verdict {
            Verdict::Unknown | Verdict::Deferred => {
                metrics.records_unknown.inc();
                (None, "unknown")
            }
            Verdict::Scored { posterior, anomalous, prior, .. } => {
                metrics.records_scored.inc();
                if let (true, Some(topic)) = (anomalous, &self.alerts_topic) {
                    metrics.alerts.inc();
                    let alert = Alert {
                        alert_id: output::alert_id(source),
                        device: r.device.clone(),
                        ts: r.ts,
                        score: posterior,
                        prior,
                        model_version: model_version.to_string(),
                        source: source.clone(),
                    };
                    out.push(Output::json(topic, Some(&r.device), &alert));
                }
                (Some(posterior), if anomalous { "anomalous" } else { "normal" })
            }
        };
        if let Some(topic) = &self.scores_topic {
            let s = ScoreRecord {
                device: r.device.clone(),
                ts: r.ts,
                score,
                decision: decision.into(),
                source: source.clone(),
            };
            out.push(Output::json(topic, Some(&r.device), &s));
        }
    }
}

#[cfg(test)]
mod tests {
    use rdkafka::Timestamp;

    use super::*;
    use crate::daemon::config::DaemonConfig;
    use crate::daemon::devices::{DeviceTable, WindowSizes};
    use crate::model::{MetaPuNet, Model, NetConfig, PreprocessKind, Preprocessor, Provenance};

    fn engine(max_per_device: usize) -> Engine {
        tch::manual_seed(1);
        let model = Model {
            net: MetaPuNet::new(NetConfig::paper(2, 8), tch::Device::Cpu),
            preprocess: Preprocessor::identity(PreprocessKind::None, 2),
            feature_names: vec!["a".into(), "b".into()],
            provenance: Provenance::default(),
        };
        let sizes = WindowSizes { positive: 5, unlabeled: 10, bootstrap_positives: 0 };
        let mut e = Engine::new(model, sizes, 10, 0.5);
        e.max_per_device = max_per_device;
        e
    }

    fn message(partition: i32, offset: i64, payload: &[u8]) -> OwnedMessage {
        OwnedMessage::new(
            Some(payload.to_vec()),
            None,
            "in".into(),
            Timestamp::NotAvailable,
            partition,
            offset,
            None,
        )
    }

    fn consumed(messages: Vec<OwnedMessage>) -> Vec<Consumed> {
        decode_batch(messages, 2, 1024)
    }

    fn pipeline() -> Pipeline {
        let mut kafka = DaemonConfig::defaults().kafka;
        kafka.publish_scores = true;
        let rules =
            IncidentRules { open_k: 2, open_n: 3, update_interval_ms: 1000, quiet_ms: 5000, keep_records: 3 };
        Pipeline::new(&kafka, rules, 100)
    }

    fn record(device: &str, offset: i64, normal: bool) -> OwnedMessage {
        let label = if normal { r#", "label": "normal""# } else { "" };
        let json = format!(r#"{{"device": "{device}", "ts": {offset}, "features": [0.1, 0.2]{label}}}"#);
        message(0, offset, json.as_bytes())
    }

    fn topics(outputs: &[Output]) -> Vec<&str> {
        outputs.iter().map(|o| o.topic.as_str()).collect()
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
        let metrics = Metrics::new();
        let (mut engine, mut pipeline) = (engine(2), pipeline());
        let fresh = consumed((0..5).map(|o| record("a", o, o == 0)).collect());
        let (outputs, offsets) = pipeline.run(&mut engine, fresh, 0, "v", &metrics);
        assert_eq!(topics(&outputs), ["metapu.scores", "metapu.scores", "metapu.priors"]);
        assert_eq!(offsets, vec![("in".to_string(), 0, 1)]);
        assert!(pipeline.has_deferred());
        let (outputs, offsets) = pipeline.run(&mut engine, Vec::new(), 0, "v", &metrics);
        assert_eq!((outputs.len(), offsets), (2, vec![("in".to_string(), 0, 3)]));
        let (outputs, offsets) =
            pipeline.run(&mut engine, consumed(vec![record("b", 5, false)]), 0, "v", &metrics);
        assert_eq!((outputs.len(), offsets), (2, vec![("in".to_string(), 0, 5)]));
        assert!(!pipeline.has_deferred());
        assert_eq!(metrics.records_deferred.get(), 3 + 1, "deferrals counted per batch");
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
        let metrics = Metrics::new();
        let (mut engine, mut pipeline) = (engine(0), pipeline());
        let mut messages: Vec<OwnedMessage> = (0..4).map(|o| record("a", o, o == 0)).collect();
        messages.push(record("c", 4, false));
        messages.push(message(0, 5, b"{not json"));
        let (outputs, _) = pipeline.run(&mut engine, consumed(messages), 0, "v", &metrics);
        let decisions: Vec<String> = outputs
            .iter()
            .filter(|o| o.topic == "metapu.scores")
            .map(|o| serde_json::from_slice::<ScoreRecord>(&o.value).expect("a score record").decision)
            .collect();
        assert!(decisions[..4].iter().all(|d| d != "unknown"), "{decisions:?}");
        assert_eq!(decisions[4], "unknown", "a device with no known-normal record cannot be scored");
        assert_eq!(topics(&outputs)[5..], ["metapu.deadletter", "metapu.priors"]);
        let update: PriorUpdate = serde_json::from_slice(&outputs[6].value).expect("a prior update");
        assert_eq!((update.device.as_str(), update.positive_window, update.unlabeled_window), ("a", 1, 4));
        assert_eq!(metrics.adaptations.get(), 1);
        assert_eq!(metrics.records_invalid.with_label_values(&["malformed"]).get(), 1);
    }

    /// Records taken as known-normal (here a new device's first three) are being learned
    /// as normal: however they score, they open no incident; the records after them do.
    #[test]
    fn records_taken_as_normal_open_no_incident() {
        let metrics = Metrics::new();
        let (mut engine, mut pipeline) = (engine(0), pipeline());
        engine.threshold = 1.1; // every record scores anomalous
        engine.devices =
            DeviceTable::new(2, WindowSizes { positive: 5, unlabeled: 10, bootstrap_positives: 3 }, 10);
        let opened = |outputs: &[Output]| outputs.iter().filter(|o| o.topic == "metapu.incidents").count();
        let mut run = |offsets: std::ops::Range<i64>| {
            let fresh = consumed(offsets.map(|o| record("a", o, false)).collect());
            pipeline.run(&mut engine, fresh, 0, "v", &metrics).0
        };
        let outputs = run(0..3);
        assert_eq!(opened(&outputs), 0, "bootstrap records are learned as normal: no incident");
        let anomalous = outputs
            .iter()
            .filter(|o| o.topic == "metapu.scores")
            .filter(|o| {
                serde_json::from_slice::<ScoreRecord>(&o.value).expect("a score record").decision
                    == "anomalous"
            })
            .count();
        assert_eq!(anomalous, 3, "yet scored anomalous");
        let outputs = run(3..5);
        assert_eq!(opened(&outputs), 1, "2 of the last 3 decisions anomalous");
    }
}
