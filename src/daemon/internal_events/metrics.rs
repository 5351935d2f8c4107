//! Prometheus metrics: `metapu_` prefix, base units, `_total` counters, no per-device
//! labels (a fleet has too many devices for label cardinality). The fields are this
//! module's parent's alone: only an internal event counts.

use prometheus::{
    exponential_buckets, linear_buckets, Gauge, GaugeVec, Histogram, HistogramOpts, IntCounter,
    IntCounterVec, IntGauge, Opts, Registry,
};

use crate::endpoints::{register, render};
use crate::monitor::incidents::Resolution;
use crate::monitor::output::IncidentEvent;
use crate::monitor::telemetry::{Eviction, FeedbackResult, ShareResult};
use strum::VariantNames;

pub struct Metrics {
    pub(super) registry: Registry,
    pub(super) records_consumed: IntCounter,
    pub(super) records_scored: IntCounter,
    pub(super) records_unknown: IntCounter,
    pub(super) records_invalid: IntCounterVec,
    pub(super) records_deferred: IntCounter,
    pub(super) records_label_ignored: IntCounter,
    pub(super) records_redelivered: IntCounter,
    pub(super) alerts: IntCounter,
    pub(super) adaptations: IntCounter,
    pub(super) adaptation_seconds: Histogram,
    pub(super) scoring_seconds: Histogram,
    pub(super) batch_records: Histogram,
    pub(super) priors: Histogram,
    pub(super) devices_tracked: IntGauge,
    pub(super) devices_unmonitored: IntGauge,
    pub(super) incidents: IntCounterVec,
    pub(super) incidents_open: IntGauge,
    pub(super) feedback: IntCounterVec,
    pub(super) kind_shares: IntCounterVec,
    pub(super) kinds: IntGauge,
    pub(super) kind_members: IntGauge,
    pub(super) incidents_closed: IntCounterVec,
    pub(super) devices_evicted: IntCounterVec,
    pub(super) consumer_lag: IntGauge,
    pub(super) produce_errors: IntCounter,
    pub(super) model_info: GaugeVec,
    pub(super) model_reloads: IntCounterVec,
    pub(super) ready: Gauge,
    pub(super) state_restored_devices: IntCounter,
    pub(super) state_restored_bytes: IntCounter,
    pub(super) state_restore_failures: IntCounter,
    pub(super) state_restore_seconds: Gauge,
    pub(super) state_restoring: IntGauge,
    pub(super) snapshots: IntCounter,
    pub(super) state_bytes: IntCounter,
    pub(super) partitions_assigned: prometheus::IntGaugeVec,
    pub(super) rebalances: IntCounterVec,
    pub(super) state_parked: IntGauge,
    pub(super) stream_idle: IntCounter,
    pub(super) adaptation_waits: IntCounter,
    /// Incident events per sink (webhook, syslog) and result: `delivered`, `retried`
    /// (an attempt failed; sent again), `rejected` (refused for good: dead-lettered),
    /// `dropped` (the sink's queue was full: dead-lettered).
    pub(super) sink_events: IntCounterVec,
    /// Events waiting in each sink's queue.
    pub(super) sink_queued: prometheus::IntGaugeVec,
}

impl Metrics {
    pub fn new() -> Self {
        let r = Registry::new();
        let counter =
            |name: &str, help: &str| register(&r, IntCounter::new(name, help).expect("valid metric"));
        let histogram = |name: &str, help: &str, buckets: Vec<f64>| {
            register(
                &r,
                Histogram::with_opts(HistogramOpts::new(name, help).buckets(buckets)).expect("valid metric"),
            )
        };
        let latency = exponential_buckets(0.0001, 2.0, 18).expect("valid buckets");
        Self {
            records_consumed: counter("metapu_records_consumed_total", "Records read from the input topics (each of a batch message)."),
            records_scored: counter("metapu_records_scored_total", "Records scored by an adapted classifier."),
            records_unknown: counter(
                "metapu_records_unknown_total",
                "Valid records of devices without a classifier yet (no known-normal record).",
            ),
            records_invalid: register(
                &r,
                IntCounterVec::new(
                    Opts::new("metapu_records_invalid_total", "Records refused and sent to the dead-letter topic."),
                    &["reason"],
                )
                .expect("valid metric"),
            ),
            records_label_ignored: counter(
                "metapu_records_label_ignored_total",
                "Records labeled normal on the input topic, scored as unlabeled (windows.trust_input_labels = false).",
            ),
            records_deferred: counter(
                "metapu_records_deferred_total",
                "Deferrals of records over their device's share of a micro-batch (scoring.max_per_device) to the next.",
            ),
            records_redelivered: counter(
                "metapu_records_redelivered_total",
                "Redelivered records (already in their device's windows): scored again, not re-added.",
            ),
            alerts: counter("metapu_alerts_total", "Alerts published (records below the threshold)."),
            adaptations: counter("metapu_adaptations_total", "Device classifiers re-adapted."),
            adaptation_seconds: histogram(
                "metapu_adaptation_duration_seconds",
                "Time to re-adapt one batch of devices (embedding + batched solve).",
                latency.clone(),
            ),
            scoring_seconds: histogram(
                "metapu_scoring_duration_seconds",
                "Time to score one micro-batch (window update + forward).",
                latency,
            ),
            batch_records: histogram(
                "metapu_batch_records",
                "Records per scored micro-batch.",
                exponential_buckets(1.0, 4.0, 9).expect("valid buckets"),
            ),
            priors: histogram(
                "metapu_prior_estimate",
                "Estimated share of normal traffic, one observation per adapted device.",
                linear_buckets(0.1, 0.1, 10).expect("valid buckets"),
            ),
            devices_tracked: register(
                &r,
                IntGauge::new("metapu_devices_tracked", "Devices with windows in memory.").expect("valid metric"),
            ),
            devices_unmonitored: register(
                &r,
                IntGauge::new(
                    "metapu_devices_unmonitored",
                    "Devices sending traffic for incidents.unmonitored_after_s without a known-normal record (not scored).",
                )
                .expect("valid metric"),
            ),
            incidents: register(
                &r,
                IntCounterVec::new(
                    Opts::new("metapu_incident_events_total", "Events published on the incidents topic."),
                    &["event"],
                )
                .expect("valid metric"),
            ),
            incidents_open: register(
                &r,
                IntGauge::new("metapu_incidents_open", "Incidents open now.").expect("valid metric"),
            ),
            feedback: register(
                &r,
                IntCounterVec::new(
                    Opts::new("metapu_feedback_total", "Analyst feedback on incidents, by result."),
                    &["result"],
                )
                .expect("valid metric"),
            ),
            kind_shares: register(
                &r,
                IntCounterVec::new(
                    Opts::new(
                        "metapu_kind_shares_total",
                        "Shares read on the kinds topic (what one member of a kind accepted), by result.",
                    ),
                    &["result"],
                )
                .expect("valid metric"),
            ),
            kinds: register(
                &r,
                IntGauge::new("metapu_kinds", "Device kinds with something shared.").expect("valid metric"),
            ),
            kind_members: register(
                &r,
                IntGauge::new("metapu_kind_members", "Members of all kinds that shared something.")
                    .expect("valid metric"),
            ),
            incidents_closed: register(
                &r,
                IntCounterVec::new(
                    Opts::new("metapu_incidents_closed_total", "Incidents closed, by resolution."),
                    &["resolution"],
                )
                .expect("valid metric"),
            ),
            devices_evicted: register(
                &r,
                IntCounterVec::new(
                    Opts::new(
                        "metapu_devices_evicted_total",
                        "Devices dropped from memory (capacity, revoked), or gone idle (idle: windows but the known-normal one freed).",
                    ),
                    &["reason"],
                )
                .expect("valid metric"),
            ),
            consumer_lag: register(
                &r,
                IntGauge::new(
                    "metapu_consumer_lag",
                    "Records behind the high watermark, summed over assigned partitions (librdkafka statistics).",
                )
                .expect("valid metric"),
            ),
            produce_errors: counter("metapu_produce_errors_total", "Failed deliveries to output topics (retried)."),
            model_info: register(
                &r,
                GaugeVec::new(
                    Opts::new("metapu_model_info", "The model in use (value 1)."),
                    &["version", "features", "task_dim"],
                )
                .expect("valid metric"),
            ),
            model_reloads: register(
                &r,
                IntCounterVec::new(Opts::new("metapu_model_reloads_total", "SIGHUP model reloads."), &["result"])
                    .expect("valid metric"),
            ),
            ready: register(
                &r,
                Gauge::new("metapu_ready", "1 when the daemon is consuming, 0 otherwise.").expect("valid metric"),
            ),
            state_restored_devices: counter(
                "metapu_state_restored_devices_total",
                "Device windows restored from the state topic.",
            ),
            state_restored_bytes: counter(
                "metapu_state_restored_bytes_total",
                "Bytes of snapshots read from the state topic by restores.",
            ),
            state_restore_failures: counter(
                "metapu_state_restore_failures_total",
                "Restores of the state topic that could not read it to its end (each is retried).",
            ),
            state_restore_seconds: register(
                &r,
                Gauge::new("metapu_state_restore_seconds", "How long the last restore took, reading included.")
                    .expect("valid metric"),
            ),
            state_restoring: register(
                &r,
                IntGauge::new("metapu_state_restoring", "1 while partitions' device windows are being restored.")
                    .expect("valid metric"),
            ),
            sink_events: register(
                &r,
                IntCounterVec::new(
                    Opts::new("metapu_sink_events_total", "Incident events handed to a sink, by sink and result."),
                    &["sink", "result"],
                )
                .expect("valid metric"),
            ),
            sink_queued: register(
                &r,
                prometheus::IntGaugeVec::new(
                    Opts::new("metapu_sink_queued", "Incident events waiting for a sink."),
                    &["sink"],
                )
                .expect("valid metric"),
            ),
            snapshots: counter(
                "metapu_state_snapshots_total",
                "Records written to the state topic: devices' main records, their rows and deletions.",
            ),
            state_bytes: counter("metapu_state_bytes_total", "Bytes written to the state topic."),
            partitions_assigned: register(
                &r,
                prometheus::IntGaugeVec::new(
                    Opts::new("metapu_partitions_assigned", "Partitions assigned to this daemon now, by topic."),
                    &["topic"],
                )
                .expect("valid metric"),
            ),
            rebalances: register(
                &r,
                IntCounterVec::new(
                    Opts::new(
                        "metapu_rebalances_total",
                        "Partitions assigned to or revoked from this daemon by its consumer group, by change.",
                    ),
                    &["change"],
                )
                .expect("valid metric"),
            ),
            state_parked: register(
                &r,
                IntGauge::new(
                    "metapu_state_parked_devices",
                    "Snapshots held for devices whose owner is not known since input partitions were added; \
                     restored when their device sends.",
                )
                .expect("valid metric"),
            ),
            stream_idle: register(
                &r,
                IntCounter::new(
                    "metapu_stream_idle_partitions_total",
                    "Times an input partition fell idle as a whole (nothing arrived for time.idle_after_s): \
                     its stream time then follows the wall clock, the only place the wall clock moves the \
                     event clock.",
                )
                .expect("valid metric"),
            ),
            adaptation_waits: register(
                &r,
                IntCounter::new(
                    "metapu_adaptation_waits_total",
                    "Times scoring waited for the adaptation solver: a device reached its next adaptation point \
                     before the classifier of its last one was solved (backpressure; never a different decision).",
                )
                .expect("valid metric"),
            ),
            registry: r,
        }
        .init_labels()
    }

    /// Export every known label value from the start (as 0), so dashboards and alerts
    /// see the series before the first event.
    fn init_labels(self) -> Self {
        for kind in crate::monitor::record::InvalidRecord::KINDS {
            self.records_invalid.with_label_values(&[kind]);
        }
        for change in ["assigned", "revoked"] {
            self.rebalances.with_label_values(&[change]);
        }
        // Each list is its enum's variants, so a new value is registered where it is added.
        for reason in Eviction::VARIANTS {
            self.devices_evicted.with_label_values(&[reason]);
        }
        for event in IncidentEvent::VARIANTS {
            self.incidents.with_label_values(&[event]);
        }
        for resolution in Resolution::VARIANTS {
            self.incidents_closed.with_label_values(&[resolution]);
        }
        for result in FeedbackResult::VARIANTS {
            self.feedback.with_label_values(&[result]);
        }
        for result in ShareResult::VARIANTS {
            self.kind_shares.with_label_values(&[result]);
        }
        for result in ["ok", "error"] {
            self.model_reloads.with_label_values(&[result]);
        }
        self
    }

    pub(super) fn set_model(&self, version: &str, features: usize, task_dim: i64) {
        self.model_info.reset();
        self.model_info.with_label_values(&[version, &features.to_string(), &task_dim.to_string()]).set(1.0);
    }

    /// Readings for what runs the daemon in its own process (benchmarks, tests):
    /// nothing decides on them.
    pub fn records_consumed(&self) -> u64 {
        self.records_consumed.get()
    }

    pub fn adaptations(&self) -> u64 {
        self.adaptations.get()
    }

    pub fn incidents_opened(&self) -> u64 {
        self.incidents.with_label_values(&["opened"]).get()
    }

    pub fn snapshots(&self) -> u64 {
        self.snapshots.get()
    }

    pub fn state_bytes(&self) -> u64 {
        self.state_bytes.get()
    }

    pub fn state_restored_devices(&self) -> u64 {
        self.state_restored_devices.get()
    }

    pub fn state_restoring(&self) -> bool {
        self.state_restoring.get() != 0
    }

    pub fn state_restore_seconds(&self) -> f64 {
        self.state_restore_seconds.get()
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        render(&self.registry)
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every value of a labelled counter is on /metrics before its first event, from the
    /// enum that names it (a dashboard's series exist from the start).
    #[test]
    fn every_label_value_is_exported_from_the_start() {
        let body = Metrics::new().render();
        let lists: [(&str, &str, &[&str]); 5] = [
            ("metapu_incident_events_total", "event", IncidentEvent::VARIANTS),
            ("metapu_incidents_closed_total", "resolution", Resolution::VARIANTS),
            ("metapu_devices_evicted_total", "reason", Eviction::VARIANTS),
            ("metapu_feedback_total", "result", FeedbackResult::VARIANTS),
            ("metapu_kind_shares_total", "result", ShareResult::VARIANTS),
        ];
        for (metric, label, values) in lists {
            assert!(values.len() >= 2, "{metric}: {values:?}");
            for value in values {
                let series = format!("{metric}{{{label}=\"{value}\"}} 0");
                assert!(body.contains(&series), "{series} is not on /metrics:\n{body}");
            }
        }
    }
}
