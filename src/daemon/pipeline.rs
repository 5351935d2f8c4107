//! The batch pipeline: decode a micro-batch, score it, and build what it publishes
//! (alerts, scores, dead letters). Pure but for the engine's model: no Kafka here, the
//! service hands the outputs to delivery.

use std::collections::HashMap;
use std::time::Instant;

use rdkafka::message::{Message, OwnedMessage};

use super::config::KafkaConfig;
use super::delivery::{Output, PartitionOffset};
use super::engine::{Engine, Verdict};
use super::events;
use super::metrics::Metrics;
use super::output::{self, Alert, DeadLetter, ScoreRecord, Source};
use super::record::{self, FeatureRecord};

/// One consumed message with its decode result.
pub(crate) struct Consumed {
    pub(crate) source: Source,
    pub(crate) message: OwnedMessage,
    pub(crate) decoded: Result<FeatureRecord, record::InvalidRecord>,
}

impl Consumed {
    fn payload(&self) -> &[u8] {
        self.message.payload().unwrap_or_default()
    }
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

/// Highest offset per input partition of a micro-batch.
pub(crate) fn highest_offsets(batch: &[Consumed]) -> Vec<PartitionOffset> {
    let mut highest: HashMap<(&str, i32), i64> = HashMap::new();
    for c in batch {
        let e = highest.entry((c.source.topic.as_str(), c.source.partition)).or_insert(c.source.offset);
        *e = (*e).max(c.source.offset);
    }
    highest.into_iter().map(|((t, p), o)| (t.to_string(), p, o)).collect()
}

/// Where a batch's outputs go.
pub(crate) struct Pipeline {
    alerts_topic: String,
    deadletter_topic: String,
    /// `None` unless `kafka.publish_scores`.
    scores_topic: Option<String>,
    /// For the dead letter of a shed record (`scoring.max_per_device`).
    max_per_device: usize,
}

impl Pipeline {
    pub(crate) fn new(kafka: &KafkaConfig, max_per_device: usize) -> Self {
        Self {
            alerts_topic: kafka.alerts_topic.clone(),
            deadletter_topic: kafka.deadletter_topic.clone(),
            scores_topic: kafka.publish_scores.then(|| kafka.scores_topic.clone()),
            max_per_device,
        }
    }

    /// Score a decoded micro-batch and build its outputs, in input order.
    pub(crate) fn run(
        &self,
        engine: &mut Engine,
        batch: &[Consumed],
        now_ms: u64,
        model_version: &str,
        metrics: &Metrics,
    ) -> Vec<Output> {
        let started = Instant::now();
        let valid: Vec<(&FeatureRecord, &Source)> =
            batch.iter().filter_map(|c| c.decoded.as_ref().ok().map(|r| (r, &c.source))).collect();
        let processed = engine.process(&valid, now_ms);
        events::devices_evicted(metrics, "capacity", processed.evicted);
        metrics.records_redelivered.inc_by(processed.replayed as u64);
        metrics.scoring_seconds.observe(started.elapsed().as_secs_f64());
        metrics.batch_records.observe(batch.len() as f64);

        let mut outputs = Vec::new();
        let mut verdicts = processed.verdicts.into_iter();
        for c in batch {
            let refused = match &c.decoded {
                Ok(r) => match verdicts.next().expect("one verdict per valid record") {
                    Verdict::Shed => Some((
                        events::SHED,
                        format!("over {} records of one device in a batch", self.max_per_device),
                    )),
                    v => {
                        self.record_outputs(r, &c.source, v, model_version, metrics, &mut outputs);
                        None
                    }
                },
                Err(reason) => Some((reason.kind(), reason.to_string())),
            };
            if let Some((kind, reason)) = refused {
                events::record_refused(metrics, kind);
                outputs.push(self.dead_letter(c, kind, reason));
            }
        }
        outputs
    }

    fn dead_letter(&self, c: &Consumed, kind: &str, reason: String) -> Output {
        let letter = DeadLetter {
            reason,
            kind: kind.into(),
            source: c.source.clone(),
            payload: output::payload_excerpt(c.payload()),
            payload_bytes: c.payload().len(),
            time: output::unix_now(),
        };
        Output {
            topic: self.deadletter_topic.clone(),
            key: c.message.key().map(|k| String::from_utf8_lossy(k).into_owned()),
            value: serde_json::to_vec(&letter).expect("outputs serialise"),
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
            Verdict::Unknown | Verdict::Shed => {
                metrics.records_unknown.inc();
                (None, "unknown")
            }
            Verdict::Scored { posterior, anomalous, prior } => {
                metrics.records_scored.inc();
                if anomalous {
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
                    out.push(Output {
                        topic: self.alerts_topic.clone(),
                        key: Some(r.device.clone()),
                        value: serde_json::to_vec(&alert).expect("outputs serialise"),
                    });
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
            out.push(Output {
                topic: topic.clone(),
                key: Some(r.device.clone()),
                value: serde_json::to_vec(&s).expect("outputs serialise"),
            });
        }
    }
}
