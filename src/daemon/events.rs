//! The daemon's telemetry events: each one logs and counts in one place, so a log line
//! and its metric cannot drift apart.

use super::health::Health;
use super::metrics::Metrics;

/// Outputs of a micro-batch could not be delivered (they are sent again): counted, and
/// not ready until messages flow again.
pub(crate) fn deliveries_failed(metrics: &Metrics, health: &Health, failed: usize) {
    metrics.produce_errors.inc_by(failed as u64);
    tracing::warn!(failed, "deliveries failed; retrying");
    health.brokers_down();
}

/// Informational outputs (prior updates) that were not delivered; not sent again.
pub(crate) fn priors_failed(metrics: &Metrics, failed: usize) {
    if failed > 0 {
        metrics.produce_errors.inc_by(failed as u64);
        tracing::warn!(failed, "prior updates not delivered");
    }
}

/// State snapshots written and failed (the failed ones are written again later).
pub(crate) fn snapshots_sent(metrics: &Metrics, written: usize, failed: usize) {
    metrics.snapshots.inc_by(written as u64);
    if failed > 0 {
        metrics.produce_errors.inc_by(failed as u64);
        tracing::warn!(failed, "state snapshots failed; will retry");
    }
}

/// A record refused on decode, or shed over its device's share of a batch: it goes to
/// the dead-letter topic (not logged one by one: a bad producer would flood the log).
pub(crate) fn record_refused(metrics: &Metrics, kind: &str) {
    if kind == SHED {
        metrics.records_shed.inc();
    } else {
        metrics.records_invalid.with_label_values(&[kind]).inc();
    }
}

/// The dead-letter kind of a record shed over its device's share of a batch.
pub(crate) const SHED: &str = "device_over_budget";

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
pub(crate) fn devices_evicted(metrics: &Metrics, reason: &str, count: usize) {
    metrics.devices_evicted.with_label_values(&[reason]).inc_by(count as u64);
    if count > 0 && reason != "capacity" {
        tracing::debug!(reason, count, "devices evicted");
    }
}

/// Device windows read back from the state topic (and adapted before any of their
/// records is scored).
pub(crate) fn state_restored(metrics: &Metrics, restored: usize, adapted: usize, seconds: f64) {
    metrics.state_restored_devices.inc_by(restored as u64);
    metrics.adaptations.inc_by(adapted as u64);
    tracing::info!(restored, adapted, seconds, "device windows restored from the state topic");
}

pub(crate) fn state_restore_failed(reason: &str) {
    tracing::warn!(reason, "state restore failed; devices start empty");
}
