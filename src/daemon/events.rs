//! The daemon's telemetry events: each one logs and counts in one place, so a log line
//! and its metric cannot drift apart.

use super::health::Health;
use super::metrics::Metrics;
use crate::monitor::incidents::Transition;
use crate::monitor::telemetry::{Event, Telemetry};

/// The core's events, logged and counted.
impl Telemetry for Metrics {
    fn event(&self, event: Event<'_>) {
        match event {
            Event::Batch { records } => self.batch_records.observe(records as f64),
            Event::Evicted { reason, count } => devices_evicted(self, reason, count),
            Event::Redelivered(n) => self.records_redelivered.inc_by(n as u64),
            Event::Unbatched(n) => self.records_consumed.inc_by(n as u64),
            Event::Adapted(n) => self.adaptations.inc_by(n as u64),
            Event::Deferred(n) => self.records_deferred.inc_by(n as u64),
            Event::LabelsIgnored(n) => self.records_label_ignored.inc_by(n),
            Event::Refused { kind } => record_refused(self, kind),
            Event::Unknown => self.records_unknown.inc(),
            Event::Scored { alert } => {
                self.records_scored.inc();
                if alert {
                    self.alerts.inc();
                }
            }
            Event::Prior(prior) => self.priors.observe(f64::from(prior)),
            Event::Incident { device, transition } => incident(self, device, transition),
            Event::IncidentsOpen(n) => self.incidents_open.set(n as i64),
            Event::Feedback { device, result } => feedback(self, device, result),
            Event::Unlearned { device, incident, by } => unlearned(self, device, incident, by),
            Event::Forgotten { device, known_normal, by } => forgotten(self, device, known_normal, by),
            Event::Onboarding { device, event, records, known_normal } => {
                onboarding(self, device, event, records, known_normal)
            }
            Event::KindShare { result } => kind_share(self, result),
            Event::Kinds(counts) => kinds(self, counts),
            Event::Tracked(n) => self.devices_tracked.set(n as i64),
            Event::AdaptationFinished { devices, seconds_per_batch } => {
                self.adaptation_seconds.observe(seconds_per_batch);
                self.adaptations.inc_by(devices as u64);
            }
            Event::Restored { devices, adapted } => state_restored(self, devices, adapted),
            Event::Parked(n) => self.state_parked.set(n as i64),
            Event::Unmonitored { total, new } => unmonitored(self, total, new),
            Event::StreamIdle(n) => stream_idle(self, n),
            Event::AdaptationWaits(n) => self.adaptation_waits.inc_by(n as u64),
        }
    }
}

/// Input partitions idle as a whole: the wall clock moves their time on.
fn stream_idle(metrics: &Metrics, partitions: usize) {
    if partitions > 0 {
        metrics.stream_idle.inc_by(partitions as u64);
        tracing::debug!(partitions, "input partitions idle: their stream time follows the wall clock");
    }
}

/// Outputs could not be delivered (they are sent again): counted, and
/// not ready until messages flow again.
pub(crate) fn deliveries_failed(metrics: &Metrics, health: &Health, failed: usize) {
    metrics.produce_errors.inc_by(failed as u64);
    tracing::warn!(failed, "deliveries failed; retrying");
    health.brokers_down();
}

/// State snapshots written and failed (the failed ones are written again later).
pub(crate) fn snapshots_sent(metrics: &Metrics, written: usize, bytes: u64, failed: usize) {
    metrics.snapshots.inc_by(written as u64);
    metrics.state_bytes.inc_by(bytes);
    if failed > 0 {
        metrics.produce_errors.inc_by(failed as u64);
        tracing::warn!(failed, "state snapshots failed; will retry");
    }
}

/// A record refused on decode: it goes to the dead-letter topic (not logged one by
/// one: a bad producer would flood the log).
pub(crate) fn record_refused(metrics: &Metrics, kind: &str) {
    metrics.records_invalid.with_label_values(&[kind]).inc();
}

pub(crate) fn consume_failed(error: &rdkafka::error::KafkaError) {
    tracing::warn!(%error, "consume");
}

pub(crate) fn model_reloaded(metrics: &Metrics, version: &str, features: usize, task_dim: i64) {
    tracing::info!(version, "model reloaded");
    metrics.set_model(version, features, task_dim);
    metrics.model_reloads.with_label_values(&["ok"]).inc();
}

pub(crate) fn model_reload_failed(metrics: &Metrics, reason: &dyn std::fmt::Display) {
    tracing::error!(%reason, "model reload failed; keeping the old one");
    metrics.model_reloads.with_label_values(&["error"]).inc();
}

/// Devices dropped from memory, by reason (`capacity`, `idle`, `revoked`).
fn devices_evicted(metrics: &Metrics, reason: &str, count: usize) {
    metrics.devices_evicted.with_label_values(&[reason]).inc_by(count as u64);
    if count > 0 && reason != "capacity" {
        tracing::debug!(reason, count, "devices evicted");
    }
}

/// The state topic read to its end on an assignment.
pub(crate) fn state_read(metrics: &Metrics, bytes: u64, seconds: f64) {
    metrics.state_restored_bytes.inc_by(bytes);
    metrics.state_restore_seconds.set(seconds);
    tracing::info!(bytes, seconds, "state topic read");
}

/// Device windows restored from the state topic (and adapted before any of their
/// records is scored).
fn state_restored(metrics: &Metrics, restored: usize, adapted: usize) {
    metrics.state_restored_devices.inc_by(restored as u64);
    metrics.adaptations.inc_by(adapted as u64);
    tracing::info!(restored, adapted, "device windows restored from the state topic");
}

/// A message consumed from an input or the feedback topic.
pub(crate) fn message_consumed(metrics: &Metrics) {
    metrics.records_consumed.inc();
}

/// A restore's read began (not ready until it is put in place).
pub(crate) fn restore_started(metrics: &Metrics, health: &Health) {
    metrics.state_restoring.set(1);
    health.restoring(true);
}

/// A restore's read put in place: ready again.
pub(crate) fn restore_finished(metrics: &Metrics, health: &Health) {
    metrics.state_restoring.set(0);
    health.restoring(false);
}

/// A micro-batch's time in the monitor (timed by the service around the call).
pub(crate) fn batch_scored(metrics: &Metrics, seconds: f64) {
    metrics.scoring_seconds.observe(seconds);
}

/// A restore could not read the state topic to its end: counted, and tried again
/// (the daemon stays not ready meanwhile).
pub(crate) fn state_restore_failed(metrics: &Metrics, reason: &str, retry_in: std::time::Duration) {
    metrics.state_restore_failures.inc();
    tracing::warn!(reason, retry_in_s = retry_in.as_secs(), "state restore incomplete; retrying");
}

/// A device forgotten on an operator's request.
pub(crate) fn forgotten(metrics: &Metrics, device: &str, known_normal: usize, by: &str) {
    metrics.incidents.with_label_values(&["forgotten"]).inc();
    tracing::info!(device, known_normal, by, "device forgotten");
}

/// A confirmed verdict made a device forget a remembered behaviour.
pub(crate) fn unlearned(metrics: &Metrics, device: &str, incident: &str, by: &str) {
    metrics.incidents.with_label_values(&["unlearned"]).inc();
    tracing::info!(device, incident, by, "remembered behaviour forgotten on a confirmed verdict");
}

/// An onboarding started or ended.
pub(crate) fn onboarding(metrics: &Metrics, device: &str, event: &str, records: u64, known_normal: usize) {
    metrics.incidents.with_label_values(&[event]).inc();
    tracing::info!(device, records, known_normal, "{event}");
}

/// An incident opened, updated or closed.
pub(crate) fn incident(metrics: &Metrics, device: &str, transition: &Transition) {
    metrics.incidents.with_label_values(&[transition.name()]).inc();
    match transition {
        Transition::Opened(i) => match &i.news {
            Some(news) => {
                tracing::info!(device, incident = %i.id, news = %news.why, "suppressed incident opened: news")
            }
            None => tracing::info!(device, incident = %i.id, "incident opened"),
        },
        Transition::Updated(_) | Transition::Reviewed(_) => {}
        Transition::Reopened(i) => {
            tracing::info!(device, incident = %i.id, reopened = i.reopened, "incident reopened");
        }
        Transition::Suppressed(i) => {
            let dismissed = i.suppressed.as_ref().map_or("", |d| d.incident_id.as_str());
            let on = i.suppressed.as_ref().and_then(|d| d.on.as_deref()).unwrap_or(device);
            tracing::info!(device, incident = %i.id, dismissed, on, "incident suppressed: a dismissed behaviour");
        }
        Transition::Joined(i) => {
            let fleet = i.fleet.as_ref().map_or("", |f| f.incident_id.as_str());
            let on = i.fleet.as_ref().map_or("", |f| f.device.as_str());
            tracing::info!(device, incident = %i.id, fleet, on, "incident joined a sibling's fleet incident");
        }
        Transition::Closed(i, resolution) => {
            metrics.incidents_closed.with_label_values(&[resolution.as_str()]).inc();
            tracing::info!(device, incident = %i.id, resolution = resolution.as_str(), records = i.figures.records, "incident closed");
        }
    }
}

/// Analyst feedback applied (`false_positive`, `confirmed`) or refused (`refused`, and
/// a dead letter says why).
pub(crate) fn feedback(metrics: &Metrics, device: &str, result: &str) {
    metrics.feedback.with_label_values(&[result]).inc();
    tracing::info!(device, result, "analyst feedback");
}

/// A share read on the kinds topic: `applied`, or `refused` (a dead letter says why).
pub(crate) fn kind_share(metrics: &Metrics, result: &str) {
    metrics.kind_shares.with_label_values(&[result]).inc();
    if result != "applied" {
        tracing::warn!(result, "kind share refused");
    }
}

/// The kinds known now, and how many members shared something in them.
pub(crate) fn kinds(metrics: &Metrics, counts: &[(String, usize)]) {
    metrics.kinds.set(counts.len() as i64);
    metrics.kind_members.set(counts.iter().map(|(_, n)| *n as i64).sum());
}

/// Devices newly found sending traffic with no known-normal record; the gauge holds all
/// such devices.
fn unmonitored(metrics: &Metrics, total: usize, new: &[(String, u64, u64)]) {
    metrics.devices_unmonitored.set(total as i64);
    for (device, records, since_ms) in new {
        metrics.incidents.with_label_values(&["unmonitored"]).inc();
        tracing::warn!(
            device,
            records,
            since_s = since_ms / 1000,
            "device unmonitored: no known-normal record"
        );
    }
}
