//! What the service publishes, and the input offsets that publishing releases: batch
//! outputs go through [`Deliveries`] and their offsets are stored once acknowledged
//! (for partitions still assigned); informational outputs (prior updates, unmonitored
//! devices) are sent without holding up scoring.

use std::sync::Arc;
use std::time::Duration;

use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::producer::{FutureProducer, FutureRecord, Producer};
use tokio::sync::mpsc;

use super::config::KafkaConfig;
use super::delivery::{send_all, Deliveries, Output, PartitionOffset};
use super::events;
use super::health::Health;
use super::kafka::{Assignment, DaemonContext};
use super::metrics::Metrics;
use super::pipeline::Emitted;

/// Where each kind of emitted value is published.
#[derive(Debug, Clone)]
pub(crate) struct Topics {
    incidents: String,
    priors: String,
    deadletter: String,
    alerts: String,
    scores: String,
}

impl Topics {
    pub(crate) fn of(kafka: &KafkaConfig) -> Self {
        Self {
            incidents: kafka.incidents_topic.clone(),
            priors: kafka.priors_topic.clone(),
            deadletter: kafka.deadletter_topic.clone(),
            alerts: kafka.alerts_topic.clone(),
            scores: kafka.scores_topic.clone(),
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
    /// Keys of reports sent with [`Self::send_reports`] that were not delivered.
    unsent: (mpsc::UnboundedSender<Vec<String>>, mpsc::UnboundedReceiver<Vec<String>>),
}

impl Outbox {
    pub(crate) fn new(
        topics: Topics,
        producer: FutureProducer,
        assignment: Arc<Assignment>,
        metrics: Arc<Metrics>,
        health: Arc<Health>,
    ) -> Self {
        let deliveries = Deliveries::new(producer.clone(), MAX_BATCHES_IN_FLIGHT);
        Self { topics, deliveries, producer, assignment, metrics, health, unsent: mpsc::unbounded_channel() }
    }

    /// What a micro-batch emitted; its offsets are stored once every output is
    /// acknowledged.
    pub(crate) fn submit(&mut self, emitted: &[Emitted], offsets: Vec<PartitionOffset>) {
        self.deliveries.submit(self.topics.outputs(emitted), offsets);
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

    /// Send in the background; failures are counted, not retried (prior updates: the
    /// next one supersedes a lost one).
    pub(crate) fn send_detached(&self, emitted: &[Emitted]) {
        self.send_in_background(self.topics.outputs(emitted), None);
    }

    /// Send one-off reports keyed by device in the background; the keys of those not
    /// delivered come back from [`Self::take_unsent_reports`], to be reported again (a
    /// report lost in a broker outage would otherwise never reach an analyst).
    pub(crate) fn send_reports(&self, emitted: &[Emitted]) {
        self.send_in_background(self.topics.outputs(emitted), Some(self.unsent.0.clone()));
    }

    /// Keys of reports not delivered since the last call.
    pub(crate) fn take_unsent_reports(&mut self) -> Vec<String> {
        let mut keys = Vec::new();
        while let Ok(more) = self.unsent.1.try_recv() {
            keys.extend(more);
        }
        keys
    }

    fn send_in_background(&self, outputs: Vec<Output>, unsent: Option<mpsc::UnboundedSender<Vec<String>>>) {
        if outputs.is_empty() {
            return;
        }
        let (producer, metrics) = (self.producer.clone(), Arc::clone(&self.metrics));
        tokio::spawn(async move {
            let failed = send_all(&producer, &outputs, |o| {
                let record = FutureRecord::to(&o.topic).payload(&o.value);
                match &o.key {
                    Some(k) => record.key(k),
                    None => record,
                }
            })
            .await;
            let mut per_topic = std::collections::BTreeMap::<&str, usize>::new();
            for o in &failed {
                *per_topic.entry(o.topic.as_str()).or_default() += 1;
            }
            for (topic, n) in per_topic {
                events::detached_failed(&metrics, topic, n);
            }
            let keys: Vec<String> = failed.iter().filter_map(|o| o.key.clone()).collect();
            if let Some(unsent) = unsent.filter(|_| !keys.is_empty()) {
                // The service may be gone (shutdown): nothing is left to report then.
                let _ = unsent.send(keys);
            }
        });
    }

    /// Wait (off the runtime) for everything the producer still holds, up to `limit`.
    pub(crate) async fn flush(&self, limit: Duration) {
        let producer = self.producer.clone();
        let _ = tokio::task::spawn_blocking(move || producer.flush(limit)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::daemon::config::DaemonConfig;
    use crate::daemon::output::{IncidentEvent, PriorUpdate};

    fn prior(device: &str) -> Emitted {
        Emitted::Prior(PriorUpdate {
            device: device.into(),
            prior: 0.9,
            attack_share: 0.1,
            positive_window: 1,
            unlabeled_window: 1,
            time: 0.0,
            model_version: "v".into(),
        })
    }

    fn unmonitored(device: &str) -> Emitted {
        Emitted::Incident(IncidentEvent::Unmonitored {
            device: device.into(),
            records: 1,
            since_s: 1.0,
            time: 0.0,
            message: String::new(),
        })
    }

    /// A report the broker never acknowledges comes back to be sent again; a prior
    /// update does not.
    #[tokio::test]
    async fn undelivered_reports_come_back_and_prior_updates_do_not() {
        let producer: FutureProducer = rdkafka::ClientConfig::new()
            .set("bootstrap.servers", "127.0.0.1:1")
            .set("message.timeout.ms", "200")
            .create()
            .expect("a producer");
        let metrics = Arc::new(Metrics::new());
        let health = Arc::new(Health::new(Arc::clone(&metrics)));
        let topics = Topics::of(&DaemonConfig::defaults().kafka);
        let mut outbox = Outbox::new(topics, producer, Arc::default(), Arc::clone(&metrics), health);
        outbox.send_detached(&[prior("cam")]);
        outbox.send_reports(&[unmonitored("plug"), unmonitored("hub")]);
        let mut unsent = Vec::new();
        for _ in 0..100 {
            unsent.extend(outbox.take_unsent_reports());
            if metrics.produce_errors.get() >= 3 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        unsent.extend(outbox.take_unsent_reports());
        assert_eq!(metrics.produce_errors.get(), 3, "every undelivered output counted");
        unsent.sort();
        assert_eq!(unsent, ["hub", "plug"]);
    }
}
