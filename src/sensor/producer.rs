//! Records to Kafka without ever holding up the capture: librdkafka queues up to
//! `sensor.max_queued_records`; past that a record is dropped and counted. An outage
//! is one warning and then a line a minute with the counts, never a line per record.

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
            queued = m.records_queued.get(),
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
    type DeliveryOpaque = ();
    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        let r = &self.0;
        match result {
            Ok(_) => {
                r.metrics.records_produced.inc();
                if r.failing.swap(false, Ordering::Relaxed) {
                    tracing::info!(
                        errors = r.errors.load(Ordering::Relaxed),
                        "the brokers take records again"
                    );
                    *r.last_report.lock().unwrap_or_else(|p| p.into_inner()) = None;
                }
            }
            Err((e, _)) => {
                r.metrics.records_dropped.with_label_values(&["undelivered"]).inc();
                r.failing.store(true, Ordering::Relaxed);
                r.report("records are not being delivered", &e.to_string());
            }
        }
    }
}

/// Where the sensor's records go: the Kafka producer, or (benchmarks) nowhere.
pub trait RecordSink {
    fn send(&self, device: &str, payload: &[u8]);
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
        client.set("queue.buffering.max.messages", max_queued.to_string());
        let context = Context(Arc::new(Reporting {
            metrics: metrics.clone(),
            failing: AtomicBool::new(false),
            errors: AtomicU64::new(0),
            last_report: Mutex::new(None),
        }));
        let producer = client.create_with_context(context)?;
        Ok(Self { producer, topic: topic.to_string(), metrics })
    }
}

impl RecordSink for RecordProducer {
    /// Queue one record keyed by its device; a full queue drops it (counted).
    fn send(&self, device: &str, payload: &[u8]) {
        let record = BaseRecord::to(&self.topic).key(device).payload(payload);
        match self.producer.send(record) {
            Ok(()) => {}
            Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), _)) => {
                self.metrics.records_dropped.with_label_values(&["queue_full"]).inc();
                self.producer
                    .context()
                    .0
                    .report("the record queue is full", "sensor.max_queued_records reached");
            }
            Err((e, _)) => {
                // Too large, unknown topic on a broker that refuses creation, …: the record
                // is lost, the capture is not.
                self.metrics.records_dropped.with_label_values(&["undelivered"]).inc();
                self.producer.context().0.report("a record could not be queued", &e.to_string());
            }
        }
    }
}

impl RecordProducer {
    /// Records waiting for the brokers (the gauge is set from it).
    pub fn queued(&self) -> u64 {
        let n = self.producer.in_flight_count().max(0) as u64;
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
