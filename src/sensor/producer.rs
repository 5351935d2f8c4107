//! Records to Kafka without ever holding up the capture: up to
//! `sensor.max_queued_records` records wait for the brokers; past that a message's
//! records are dropped and counted. An outage is one warning and then a line a minute
//! with the counts, never a line per record. A message may carry a batch of records
//! (`batch.rs`): every count here is of records, each message's travelling with it.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::config::{ClientConfig, RDKafkaLogLevel};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use rdkafka::ClientContext;

use super::metrics::SensorMetrics;

/// At most one outage line per this long.
const REPORT_EVERY: Duration = Duration::from_secs(60);

struct Reporting {
    metrics: Arc<SensorMetrics>,
    /// Set by an error, cleared by the next delivery: an outage is in progress.
    failing: AtomicBool,
    errors: AtomicU64,
    /// Records handed to the client and not yet delivered or failed.
    queued: AtomicU64,
    max_queued: u64,
    last_report: Mutex<Option<Instant>>,
}

impl Reporting {
    /// Say it now if nothing was said within [`REPORT_EVERY`].
    fn report(&self, what: &str, reason: &str) {
        let mut last = self.last_report.lock().unwrap_or_else(|p| p.into_inner());
        if last.is_some_and(|t| t.elapsed() < REPORT_EVERY) {
            return;
        }
        *last = Some(Instant::now());
        let m = &self.metrics;
        tracing::warn!(
            reason,
            errors = self.errors.load(Ordering::Relaxed),
            queued = self.queued.load(Ordering::Relaxed),
            dropped_queue_full = m.records_dropped.with_label_values(&["queue_full"]).get(),
            undelivered = m.records_dropped.with_label_values(&["undelivered"]).get(),
            "{what}; capturing goes on, records wait (up to sensor.max_queued_records) and then are dropped"
        );
    }
}

#[derive(Clone)]
struct Context(Arc<Reporting>);

impl ClientContext for Context {
    // librdkafka logs each reconnect attempt: the debug log's business.
    fn log(&self, level: RDKafkaLogLevel, fac: &str, message: &str) {
        tracing::debug!(?level, fac, message, "librdkafka");
    }

    fn error(&self, error: KafkaError, reason: &str) {
        let r = &self.0;
        r.metrics.producer_errors.inc();
        r.errors.fetch_add(1, Ordering::Relaxed);
        r.failing.store(true, Ordering::Relaxed);
        r.report(&format!("cannot reach the brokers ({error})"), reason);
    }
}

impl ProducerContext for Context {
    /// The message's record count.
    type DeliveryOpaque = usize;
    fn delivery(&self, result: &DeliveryResult<'_>, records: usize) {
        let r = &self.0;
        let records = records as u64;
        r.queued.fetch_sub(records, Ordering::Relaxed);
        match result {
            Ok(_) => {
                r.metrics.records_produced.inc_by(records);
                if r.failing.swap(false, Ordering::Relaxed) {
                    tracing::info!(
                        errors = r.errors.load(Ordering::Relaxed),
                        "the brokers take records again"
                    );
                    *r.last_report.lock().unwrap_or_else(|p| p.into_inner()) = None;
                }
            }
            Err((e, _)) => {
                r.metrics.records_dropped.with_label_values(&["undelivered"]).inc_by(records);
                r.failing.store(true, Ordering::Relaxed);
                r.report("records are not being delivered", &e.to_string());
            }
        }
    }
}

/// Where the sensor's records go: the Kafka producer, or (benchmarks) nowhere. A
/// message holds `records` records (a batch, or one).
pub trait RecordSink {
    fn send(&self, device: &str, payload: &[u8], records: u32);
}

#[derive(Debug, thiserror::Error)]
#[error("creating the Kafka producer: {0}")]
pub struct ProducerError(#[from] KafkaError);

pub struct RecordProducer {
    producer: ThreadedProducer<Context>,
    topic: String,
    metrics: Arc<SensorMetrics>,
}

/// What became of the records at the end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Flushed {
    /// Still waiting for the brokers when the flush limit passed (counted as dropped).
    pub unsent: u64,
}

impl RecordProducer {
    /// `client` carries the brokers and `[kafka.options]` (TLS, SASL, secrets) and the
    /// producer options; the queue bound is the sensor's own.
    pub fn new(
        mut client: ClientConfig,
        topic: &str,
        max_queued: usize,
        metrics: Arc<SensorMetrics>,
    ) -> Result<Self, ProducerError> {
        // The bound is the sensor's, in records; the client's own (in messages) is never
        // the nearer, since a message holds at least one record.
        client.set("queue.buffering.max.messages", max_queued.to_string());
        let context = Context(Arc::new(Reporting {
            metrics: metrics.clone(),
            failing: AtomicBool::new(false),
            errors: AtomicU64::new(0),
            queued: AtomicU64::new(0),
            max_queued: max_queued as u64,
            last_report: Mutex::new(None),
        }));
        let producer = client.create_with_context(context)?;
        Ok(Self { producer, topic: topic.to_string(), metrics })
    }
}

impl RecordSink for RecordProducer {
    /// Queue one message keyed by its device; a full queue drops its records (counted).
    fn send(&self, device: &str, payload: &[u8], records: u32) {
        let r = &self.producer.context().0;
        let n = u64::from(records);
        // Counted before the client may deliver it (its callback subtracts).
        if r.queued.fetch_add(n, Ordering::Relaxed) + n > r.max_queued {
            r.queued.fetch_sub(n, Ordering::Relaxed);
            self.metrics.records_dropped.with_label_values(&["queue_full"]).inc_by(n);
            r.report("the record queue is full", "sensor.max_queued_records reached");
            return;
        }
        let message = BaseRecord::with_opaque_to(&self.topic, records as usize).key(device).payload(payload);
        if let Err((e, _)) = self.producer.send(message) {
            r.queued.fetch_sub(n, Ordering::Relaxed);
            let reason = match e {
                KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull) => "queue_full",
                // Too large, unknown topic on a broker that refuses creation, …: the
                // records are lost, the capture is not.
                _ => "undelivered",
            };
            self.metrics.records_dropped.with_label_values(&[reason]).inc_by(n);
            r.report("records could not be queued", &e.to_string());
        }
    }
}

impl RecordProducer {
    /// Records waiting for the brokers (the gauge is set from it).
    pub fn queued(&self) -> u64 {
        let n = self.producer.context().0.queued.load(Ordering::Relaxed);
        self.metrics.records_queued.set(n as i64);
        n
    }

    /// Wait up to `limit` for the queued records; those still waiting are dropped.
    pub fn finish(self, limit: Duration) -> Flushed {
        let _ = self.producer.flush(limit);
        let unsent = self.queued();
        if unsent > 0 {
            self.metrics.records_dropped.with_label_values(&["undelivered"]).inc_by(unsent);
        }
        Flushed { unsent }
    }
}
