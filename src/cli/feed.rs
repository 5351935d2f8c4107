//! Producing feature records to Kafka for the replay, simulate and extract
//! commands: paced, with delivery failures counted rather than fatal.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use rdkafka::config::ClientConfig;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use rdkafka::ClientContext;

#[derive(Default)]
struct Counts {
    delivered: AtomicU64,
    failed: AtomicU64,
    /// The first failure's reason: said once, not once per record (a broker that is
    /// down fails every record).
    first_failure: std::sync::OnceLock<String>,
    /// Client errors (brokers unreachable): the first said, the rest counted.
    client_errors: AtomicU64,
    /// Counted and reported: what the producer purges as it closes is no news.
    reported: std::sync::atomic::AtomicBool,
}

#[derive(Clone, Default)]
struct Counting(Arc<Counts>);

impl ClientContext for Counting {
    // librdkafka logs every reconnect attempt (several lines a second while a broker is
    // down): for the debug log; what an operator reads is `error` below and the count.
    fn log(&self, level: RDKafkaLogLevel, fac: &str, message: &str) {
        tracing::debug!(?level, fac, message, "librdkafka");
    }

    fn error(&self, error: KafkaError, reason: &str) {
        if self.0.client_errors.fetch_add(1, Ordering::Relaxed) == 0 {
            tracing::warn!(%error, reason, "cannot reach the brokers yet; records wait for them (further errors counted)");
        }
    }
}

impl ProducerContext for Counting {
    type DeliveryOpaque = ();
    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        match result {
            Ok(_) => self.0.delivered.fetch_add(1, Ordering::Relaxed),
            Err((e, _)) => {
                if !self.0.reported.load(Ordering::Relaxed) && self.0.first_failure.set(e.to_string()).is_ok()
                {
                    tracing::warn!(error = %e, "records are not being delivered (counted; the total comes at the end)");
                }
                self.0.failed.fetch_add(1, Ordering::Relaxed)
            }
        };
    }
}

pub use metapu::monitor::record::Format;

pub struct Feed {
    producer: ThreadedProducer<Counting>,
    counts: Counting,
    topic: String,
}

/// What became of the records handed to a feed.
#[derive(Debug, Clone, Copy)]
pub struct Delivered {
    pub delivered: u64,
    pub failed: u64,
}

impl Feed {
    pub fn connect(brokers: &str, topic: &str) -> anyhow::Result<Self> {
        let counts = Counting::default();
        let producer = ClientConfig::new()
            .set("bootstrap.servers", brokers)
            .set("linger.ms", "5")
            .set("queue.buffering.max.messages", "200000")
            .set("message.timeout.ms", "30000")
            .create_with_context(counts.clone())
            .with_context(|| format!("connecting a producer to {brokers}"))?;
        Ok(Self { producer, counts, topic: topic.to_string() })
    }

    /// Queue one record; waits while librdkafka's queue is full.
    pub fn send(&self, key: &str, payload: &[u8]) -> anyhow::Result<()> {
        let mut record = BaseRecord::to(&self.topic).key(key).payload(payload);
        loop {
            match self.producer.send(record) {
                Ok(()) => return Ok(()),
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                    record = r;
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err((e, _)) => return Err(e).context("queueing a record"),
            }
        }
    }

    /// Wait (bounded) for outstanding deliveries, print the outcome as `what`, and
    /// fail if any record was not delivered: failed, or still waiting when `limit`
    /// passed.
    pub fn finish(self, what: &str, limit: Duration) -> anyhow::Result<Delivered> {
        let flushed = self.producer.flush(limit);
        let waiting = self.producer.in_flight_count().max(0) as u64;
        let c = &self.counts.0;
        let d = Delivered {
            delivered: c.delivered.load(Ordering::Relaxed),
            failed: c.failed.load(Ordering::Relaxed) + waiting,
        };
        println!("{what}: {} records delivered to {}, {} failed", d.delivered, self.topic, d.failed);
        c.reported.store(true, Ordering::Relaxed);
        let errors = c.client_errors.load(Ordering::Relaxed);
        if errors > 1 {
            tracing::warn!(errors, "client errors in all (the first is above)");
        }
        if d.failed > 0 {
            let why = match (c.first_failure.get(), flushed) {
                (Some(e), _) => format!(" (first failure: {e})"),
                (None, Err(e)) => format!(" (no broker acknowledged them within {} s: {e})", limit.as_secs()),
                (None, Ok(())) => String::new(),
            };
            bail!("{} records were not delivered to {}{why}", d.failed, self.topic);
        }
        Ok(d)
    }
}

/// Holds a sender to `rate` records per second (none: as fast as the broker takes).
pub struct Pacer {
    start: Instant,
    rate: Option<f64>,
    sent: u64,
}

impl Pacer {
    pub fn new(rate: Option<f64>) -> Self {
        Self { start: Instant::now(), rate: rate.filter(|r| *r > 0.0), sent: 0 }
    }

    pub fn elapsed(&self) -> f64 {
        self.start.elapsed().as_secs_f64()
    }

    pub fn wait_turn(&mut self) {
        if let Some(rate) = self.rate {
            let due = self.sent as f64 / rate;
            let now = self.elapsed();
            if due > now {
                std::thread::sleep(Duration::from_secs_f64(due - now));
            }
        }
        self.sent += 1;
    }
}
