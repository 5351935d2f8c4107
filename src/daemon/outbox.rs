//! The one way out: everything the pipeline and the service emit (scores, alerts,
//! incident events, prior updates, dead letters, unmonitored devices) is put on its
//! topic ([`Topics`]) and goes through [`Deliveries`] to the sink — sent again until
//! acknowledged — and a micro-batch's input offsets are stored once all of its outputs
//! are (for partitions still assigned). State snapshots go their own way
//! (`state.rs`): they are written per state partition, and retried per device.

use std::sync::Arc;
use std::time::Duration;

use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::producer::{FutureProducer, Producer};

use super::config::KafkaConfig;
use super::delivery::{Deliveries, KafkaSink, Output, PartitionOffset};
use super::health::Health;
use super::internal_events::DeliveriesFailed;
use super::kafka::{Assignment, DaemonContext};
use super::sinks::Sinks;
use super::Metrics;
use crate::monitor::Emitted;

/// Where each kind of emitted value is published.
#[derive(Debug, Clone)]
pub(crate) struct Topics {
    incidents: String,
    priors: String,
    deadletter: String,
    alerts: String,
    scores: String,
    kinds: String,
}

impl Topics {
    pub(crate) fn of(kafka: &KafkaConfig) -> Self {
        Self {
            incidents: kafka.incidents_topic.clone(),
            priors: kafka.priors_topic.clone(),
            deadletter: kafka.deadletter_topic.clone(),
            alerts: kafka.alerts_topic.clone(),
            scores: kafka.scores_topic.clone(),
            kinds: kafka.kinds_topic.clone(),
        }
    }

    /// The record that publishes `e`: keyed by its device, a dead letter by the
    /// refused message's own key.
    pub(crate) fn output(&self, e: &Emitted) -> Output {
        match e {
            Emitted::Score(s) => Output::json(&self.scores, Some(&s.device), s),
            Emitted::Alert(a) => Output::json(&self.alerts, Some(&a.device), a),
            Emitted::Incident(i) => Output::json(&self.incidents, Some(i.device()), i),
            Emitted::Prior(p) => Output::json(&self.priors, Some(&p.device), p),
            Emitted::Share(s) => Output::json(&self.kinds, Some(&s.key()), s),
            Emitted::DeadLetter { key, letter } => Output::json(&self.deadletter, key.as_deref(), letter),
        }
    }

    fn outputs(&self, emitted: &[Emitted]) -> Vec<Output> {
        emitted.iter().map(|e| self.output(e)).collect()
    }
}

/// Micro-batches whose outputs may await acknowledgement while the next are scored.
/// Bounds the outputs (and unreleased offsets) held when the brokers are slow.
const MAX_BATCHES_IN_FLIGHT: usize = 4;

pub(crate) struct Outbox {
    topics: Topics,
    deliveries: Deliveries,
    producer: FutureProducer,
    assignment: Arc<Assignment>,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
    /// Emitted outside a micro-batch (prior updates of background adaptations,
    /// unmonitored devices): they ride with the next batch, or go alone once no batch
    /// is in flight.
    pending: Vec<Output>,
    /// Incident events also go to the configured sinks (webhook, syslog).
    sinks: Sinks,
}

impl Outbox {
    pub(crate) fn new(
        topics: Topics,
        producer: FutureProducer,
        assignment: Arc<Assignment>,
        metrics: Arc<Metrics>,
        health: Arc<Health>,
        sinks: Sinks,
    ) -> Self {
        let deliveries = Deliveries::new(Box::new(KafkaSink(producer.clone())), MAX_BATCHES_IN_FLIGHT);
        Self { topics, deliveries, producer, assignment, metrics, health, pending: Vec::new(), sinks }
    }

    /// What a micro-batch emitted (and whatever is pending); its offsets are stored once
    /// every output is acknowledged.
    pub(crate) fn submit(&mut self, emitted: &[Emitted], offsets: Vec<PartitionOffset>) {
        self.sinks.offer(emitted);
        let mut outputs = std::mem::take(&mut self.pending);
        outputs.extend(self.topics.outputs(&self.sinks.dead_letters()));
        outputs.extend(self.topics.outputs(emitted));
        if !outputs.is_empty() || !offsets.is_empty() {
            self.deliveries.submit(outputs, offsets);
        }
    }

    /// Emitted outside a micro-batch: delivered with the next one, with the same
    /// guarantee (sent again until acknowledged).
    pub(crate) fn add(&mut self, emitted: &[Emitted]) {
        self.sinks.offer(emitted);
        self.pending.extend(self.topics.outputs(emitted));
    }

    /// Store the offsets of batches whose outputs are all acknowledged, and send what is
    /// pending. With `all`, wait for every batch in flight (revocation, shutdown);
    /// otherwise wait only while too many are in flight.
    pub(crate) async fn settle(&mut self, consumer: &StreamConsumer<DaemonContext>, all: bool) {
        let dead = self.sinks.dead_letters();
        self.pending.extend(self.topics.outputs(&dead));
        // Under load pending outputs ride with the next batch; alone they would add
        // batches in flight, and the loop would wait on their acknowledgements.
        if !self.pending.is_empty() && (all || self.deliveries.in_flight() == 0) {
            self.submit(&[], Vec::new());
        }
        let settled = self.deliveries.poll();
        if settled.failed > 0 {
            self.metrics.emit(DeliveriesFailed(settled.failed));
            self.health.brokers_down();
        }
        self.store_offsets(consumer, &settled.offsets);
        while self.deliveries.full() || (all && self.deliveries.in_flight() > 0) {
            let (metrics, health) = (&self.metrics, &self.health);
            let offsets = self
                .deliveries
                .wait_oldest(|n| {
                    metrics.emit(DeliveriesFailed(n));
                    health.brokers_down();
                })
                .await;
            self.store_offsets(consumer, &offsets);
        }
    }

    fn store_offsets(&self, consumer: &StreamConsumer<DaemonContext>, offsets: &[PartitionOffset]) {
        for (topic, partition, offset) in offsets {
            // Never store offsets of partitions that moved away meanwhile.
            if !self.assignment.contains(topic, *partition) {
                continue;
            }
            if let Err(e) = consumer.store_offset(topic, *partition, *offset) {
                tracing::debug!(error = %e, topic, partition, "store offset");
            }
        }
    }

    /// Wait (off the runtime) for everything the producer still holds, up to `limit`.
    /// Give the sinks up to `limit` to deliver what they hold; their dead letters then
    /// join the outputs still to flush.
    pub(crate) async fn drain_sinks(&mut self, limit: Duration) {
        let dead = self.sinks.drain(limit).await;
        let outputs = self.topics.outputs(&dead);
        if !outputs.is_empty() {
            self.deliveries.submit(outputs, Vec::new());
        }
    }

    pub(crate) async fn flush(&self, limit: Duration) {
        let producer = self.producer.clone();
        let _ = tokio::task::spawn_blocking(move || producer.flush(limit)).await;
    }
}
