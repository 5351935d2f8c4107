//! What the monitor publishes of a batch, of the feedback and kinds topics' messages
//! and of the time's passing: the devices (`devices::owner`) decide, and give back
//! plain values; here they become outputs, dead letters and telemetry. The lab feeds
//! the same door captures on their own clock ([`Clock::Event`]) and reads the same
//! values: one implementation, so what the lab measures is what the daemon does.

use super::*;
use crate::monitor::decode::releasable_offsets;
use crate::monitor::devices::kinds::Share;
use crate::monitor::devices::owner::{BatchRecord, RecordOutcome};
use crate::monitor::feedback::FeedbackMessage;
use crate::monitor::output::{self, Alert, DeadLetter, ScoreRecord};
use crate::monitor::record::{FeatureRecord, Source};
use crate::monitor::telemetry::{FeedbackResult, ShareResult};

impl Monitor {
    /// Score the deferred records and then a decoded micro-batch; what it emits in input
    /// order (then the incidents of devices evicted meanwhile and the prior updates of
    /// devices adapted before scoring), and the input offsets it releases once
    /// delivered.
    pub(super) fn run_batch(
        &mut self,
        mut fresh: Vec<Consumed>,
        now: Now,
        telemetry: &dyn Telemetry,
    ) -> (Vec<Emitted>, Vec<PartitionOffset>) {
        if !self.trust_input_labels {
            self.drop_input_labels(&mut fresh, telemetry);
        }
        let mut batch = std::mem::take(&mut self.deferred);
        let stamped = batch.len();
        batch.extend(fresh);
        let valid: Vec<BatchRecord<'_>> = (batch.iter().enumerate())
            .filter_map(|(i, c)| {
                let record = c.decoded.as_ref().ok()?;
                Some(BatchRecord { record, source: c.source(), stamp: (i < stamped).then_some(c.stamp) })
            })
            .collect();
        let ran = self.devices.run(&valid, now);
        telemetry.event(Event::Evicted { reason: Eviction::Capacity, count: ran.evicted });
        telemetry.event(Event::Redelivered(ran.replayed));
        telemetry.event(Event::Adapted(ran.adapted));
        telemetry.event(Event::AdaptationWaits(ran.waits));
        telemetry.event(Event::Batch { records: batch.len() });
        let version = self.devices.version().to_string();
        let mut out = Vec::new();
        let mut records = ran.records.into_iter();
        let mut done = Vec::with_capacity(batch.len());
        for mut c in batch {
            match &c.decoded {
                Ok(r) => {
                    let this = records.next().expect("one result per valid record");
                    c.stamp = this.stamp;
                    if this.outcome == RecordOutcome::Deferred {
                        self.deferred.push(c);
                        continue;
                    }
                    self.record_outputs(r, c.source(), this.outcome, &version, telemetry, &mut out);
                    out.extend(this.changes.into_iter().map(|t| Emitted::incident(t, &version)));
                }
                Err(reason) => {
                    telemetry.event(Event::Refused { kind: reason.kind() });
                    out.push(dead_letter(&c.message, reason.kind(), reason.to_string(), now.unix));
                }
            }
            done.push(c);
        }
        telemetry.event(Event::Deferred(self.deferred.len()));
        out.extend(ran.closes.into_iter().map(|t| Emitted::incident(t, &version)));
        out.extend(ran.priors.into_iter().map(Emitted::Prior));
        let offsets = releasable_offsets(&done, &self.deferred);
        (out, offsets)
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
    pub(super) fn feedback(
        &mut self,
        messages: &[Received],
        now: Now,
        telemetry: &dyn Telemetry,
    ) -> Vec<Emitted> {
        let mut out = Vec::new();
        for m in messages {
            match FeedbackMessage::decode(&m.payload).and_then(|f| f.apply(&mut self.devices, now, telemetry))
            {
                Ok(emitted) => out.extend(emitted),
                Err(reason) => {
                    telemetry.event(Event::Feedback { device: "", result: FeedbackResult::Refused });
                    out.push(dead_letter(m, "bad_feedback", reason, now.unix));
                }
            }
        }
        out.extend(self.devices.take_shares(now).into_iter().map(Emitted::Share));
        out
    }

    /// Apply the kinds topic's messages (every daemon reads all of them); a share that
    /// cannot be read is a dead letter.
    pub(super) fn shares(
        &mut self,
        messages: &[Received],
        now: Now,
        telemetry: &dyn Telemetry,
    ) -> Vec<Emitted> {
        let shares = (messages.iter())
            .map(|m| {
                serde_json::from_slice::<Share>(&m.payload).map_err(|e| format!("malformed kind share: {e}"))
            })
            .collect();
        let version = self.devices.version().to_string();
        let mut out = Vec::new();
        for (m, applied) in messages.iter().zip(self.devices.apply_shares(shares, now)) {
            match applied {
                Ok(changes) => {
                    telemetry.event(Event::KindShare { result: ShareResult::Applied });
                    out.extend(changes.into_iter().map(|t| Emitted::incident(t, &version)));
                }
                Err(reason) => {
                    telemetry.event(Event::KindShare { result: ShareResult::Refused });
                    out.push(dead_letter(m, "bad_share", reason, now.unix));
                }
            }
        }
        telemetry.event(Event::Kinds(&self.devices.kind_counts()));
        out
    }

    /// Updates and quiet closes due at `now`, onboardings that ended, and the shares
    /// they made, as outputs (partitions newly idle and incidents open are counted).
    pub(super) fn incident_ticks(&mut self, now: Now, telemetry: &dyn Telemetry) -> Vec<Emitted> {
        let ticked = self.devices.tick(now);
        let version = self.devices.version();
        let mut out: Vec<Emitted> =
            ticked.closes.into_iter().map(|t| Emitted::incident(t, version)).collect();
        if let Some(idle) = ticked.newly_idle {
            telemetry.event(Event::StreamIdle(idle));
        }
        out.extend(ticked.onboarded.into_iter().map(|o| {
            Emitted::Incident(IncidentEvent::Onboarded {
                device: o.device,
                from: o.onboarding.from,
                until: o.onboarding.until,
                records: o.onboarding.records,
                known_normal: o.known_normal,
                by: o.onboarding.by,
                note: o.onboarding.note,
                time: o.time,
            })
        }));
        out.extend(ticked.shares.into_iter().map(Emitted::Share));
        out.extend(ticked.changes.into_iter().map(|t| Emitted::incident(t, version)));
        telemetry.event(Event::IncidentsOpen(ticked.open));
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

#[cfg(test)]
#[path = "api_batch_tests.rs"]
mod tests;
