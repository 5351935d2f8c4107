//! What the service publishes, and the input offsets that publishing releases: batch
//! outputs go through [`Deliveries`] and their offsets are stored once acknowledged
//! (for partitions still assigned); informational outputs (prior updates, unmonitored
//! devices) are sent without holding up scoring.

use std::sync::Arc;
use std::time::Duration;

use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::producer::{FutureProducer, FutureRecord, Producer};
use rdkafka::util::Timeout;

use super::delivery::{Deliveries, Output, PartitionOffset};
use super::events;
use super::health::Health;
use super::kafka::{Assignment, DaemonContext};
use super::metrics::Metrics;

/// Micro-batches whose outputs may await acknowledgement while the next are scored.
/// Bounds the outputs (and unreleased offsets) held when the brokers are slow.
const MAX_BATCHES_IN_FLIGHT: usize = 4;

pub(crate) struct Outbox {
    deliveries: Deliveries,
    producer: FutureProducer,
    assignment: Arc<Assignment>,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
}

impl Outbox {
    pub(crate) fn new(
        producer: FutureProducer,
        assignment: Arc<Assignment>,
        metrics: Arc<Metrics>,
        health: Arc<Health>,
    ) -> Self {
        let deliveries = Deliveries::new(producer.clone(), MAX_BATCHES_IN_FLIGHT);
        Self { deliveries, producer, assignment, metrics, health }
    }

    /// A micro-batch's outputs; its offsets are stored once every output is acknowledged.
    pub(crate) fn submit(&mut self, outputs: Vec<Output>, offsets: Vec<PartitionOffset>) {
        self.deliveries.submit(outputs, offsets);
    }

    /// Store the offsets of batches whose outputs are all acknowledged. With `all`,
    /// wait for every batch in flight (revocation, shutdown); otherwise wait only while
    /// too many are in flight.
    pub(crate) async fn settle(&mut self, consumer: &StreamConsumer<DaemonContext>, all: bool) {
        let settled = self.deliveries.poll();
        if settled.failed > 0 {
            events::deliveries_failed(&self.metrics, &self.health, settled.failed);
        }
        self.store_offsets(consumer, &settled.offsets);
        while self.deliveries.full() || (all && self.deliveries.in_flight() > 0) {
            let (metrics, health) = (&self.metrics, &self.health);
            let offsets =
                self.deliveries.wait_oldest(|n| events::deliveries_failed(metrics, health, n)).await;
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

    /// Send keyed values to `topic` in the background; failures are counted, not retried.
    pub(crate) fn send_detached(&self, topic: &str, records: Vec<(String, Vec<u8>)>) {
        if records.is_empty() {
            return;
        }
        let (producer, topic, metrics) =
            (self.producer.clone(), topic.to_string(), Arc::clone(&self.metrics));
        tokio::spawn(async move {
            let sends = records.iter().map(|(k, v)| {
                producer
                    .send(FutureRecord::to(&topic).key(k).payload(v), Timeout::After(Duration::from_secs(30)))
            });
            let failed = futures::future::join_all(sends).await.iter().filter(|r| r.is_err()).count();
            events::detached_failed(&metrics, &topic, failed);
        });
    }

    /// Wait (off the runtime) for everything the producer still holds, up to `limit`.
    pub(crate) async fn flush(&self, limit: Duration) {
        let producer = self.producer.clone();
        let _ = tokio::task::spawn_blocking(move || producer.flush(limit)).await;
    }
}
