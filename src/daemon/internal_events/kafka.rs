//! Consuming and delivering: messages in, outputs that failed, rebalances, lag and
//! readiness.

use super::{InternalEvent, Metrics};

/// A message consumed from an input topic (a batch message's further records are
/// counted by the monitor's `Unbatched`).
pub(crate) struct MessageConsumed;

impl InternalEvent for MessageConsumed {
    fn emit(self, m: &Metrics) {
        m.records_consumed.inc();
    }
}

/// The consumer returned an error (it goes on consuming).
pub(crate) struct ConsumeFailed<'a>(pub &'a rdkafka::error::KafkaError);

impl InternalEvent for ConsumeFailed<'_> {
    fn emit(self, _: &Metrics) {
        tracing::warn!(error = %self.0, "consume");
    }
}

/// Outputs could not be delivered (they are sent again); the caller marks the brokers
/// down until messages flow again.
pub(crate) struct DeliveriesFailed(pub usize);

impl InternalEvent for DeliveriesFailed {
    fn emit(self, m: &Metrics) {
        m.produce_errors.inc_by(self.0 as u64);
        tracing::warn!(failed = self.0, "deliveries failed; retrying");
    }
}

/// A micro-batch's time in the monitor (timed by the service around the call).
pub(crate) struct BatchScored {
    pub seconds: f64,
}

impl InternalEvent for BatchScored {
    fn emit(self, m: &Metrics) {
        m.scoring_seconds.observe(self.seconds);
    }
}

/// The consumer group assigned or revoked partitions; `assigned`: what this daemon
/// holds now (topic, partition).
pub(crate) struct Rebalanced<'a> {
    pub change: &'a str,
    pub assigned: &'a [(String, i32)],
}

impl InternalEvent for Rebalanced<'_> {
    fn emit(self, m: &Metrics) {
        m.rebalances.with_label_values(&[self.change]).inc();
        // Topics no longer held read 0, not their last count.
        m.partitions_assigned.reset();
        for (topic, _) in self.assigned {
            m.partitions_assigned.with_label_values(&[topic]).inc();
        }
    }
}

/// The consumer lag from librdkafka's statistics.
pub(crate) struct LagMeasured(pub i64);

impl InternalEvent for LagMeasured {
    fn emit(self, m: &Metrics) {
        m.consumer_lag.set(self.0);
    }
}

/// Readiness as `/readyz` answers it now.
pub(crate) struct Readiness(pub bool);

impl InternalEvent for Readiness {
    fn emit(self, m: &Metrics) {
        m.ready.set(if self.0 { 1.0 } else { 0.0 });
    }
}
