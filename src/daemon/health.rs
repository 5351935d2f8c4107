//! Whether the daemon is ready: one type for the readiness flag `/readyz` reads, its
//! `metapu_ready` gauge and what librdkafka says about the brokers, so the three never
//! disagree. Shared by the service loop, the HTTP server and the Kafka callbacks.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::producer::{FutureProducer, Producer};

use super::internal_events::{LagMeasured, Readiness, Rebalanced};
use super::Metrics;

pub(crate) struct Health {
    ready: AtomicBool,
    brokers_down: AtomicBool,
    /// Device windows are being restored from the state topic.
    restoring: AtomicBool,
    /// The consumer group's first assignment has been restored: before it the daemon
    /// scores nothing, and a device's first records would wait.
    restored_once: AtomicBool,
    metrics: Arc<Metrics>,
}

impl Health {
    /// Not ready until the service loop starts consuming.
    pub(crate) fn new(metrics: Arc<Metrics>) -> Self {
        metrics.emit(Readiness(false));
        Self {
            ready: AtomicBool::new(false),
            brokers_down: AtomicBool::new(false),
            restoring: AtomicBool::new(false),
            restored_once: AtomicBool::new(false),
            metrics,
        }
    }

    /// The consumer group assigned or revoked partitions; `assigned`: what this daemon
    /// holds now (topic, partition).
    pub(crate) fn rebalanced(&self, change: &str, assigned: &[(String, i32)]) {
        self.metrics.emit(Rebalanced { change, assigned });
    }

    pub(crate) fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Relaxed)
    }

    fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::Relaxed);
        self.metrics.emit(Readiness(ready));
    }

    /// The service loop is consuming: ready once its first assignment is restored.
    pub(crate) fn started(&self) {
        self.set_ready(self.restored_once.load(Ordering::Relaxed));
    }

    /// The service is shutting down: not ready, whatever the brokers say.
    pub(crate) fn stopping(&self) {
        self.set_ready(false);
    }

    /// librdkafka reports every broker down, or outputs could not be delivered:
    /// not ready until messages flow again or the brokers answer.
    pub(crate) fn brokers_down(&self) {
        self.brokers_down.store(true, Ordering::Relaxed);
        self.set_ready(false);
    }

    /// Restoring device windows: not ready until they are all in place (readiness
    /// returns at the next refresh after it ends).
    pub(crate) fn restoring(&self, on: bool) {
        self.restoring.store(on, Ordering::Relaxed);
        if on {
            self.set_ready(false);
        } else {
            self.restored_once.store(true, Ordering::Relaxed);
        }
    }

    /// A message arrived: the brokers are up (readiness follows at the next refresh).
    pub(crate) fn message_received(&self) {
        self.brokers_down.store(false, Ordering::Relaxed);
    }

    /// The consumer lag from librdkafka's statistics.
    pub(crate) fn set_lag(&self, lag: i64) {
        self.metrics.emit(LagMeasured(lag));
    }

    /// Re-derive readiness. With the brokers reported down and no message for a second
    /// to prove them back, ask for metadata (a blocking call, run off the runtime).
    pub(crate) async fn refresh(&self, last_message: Instant, producer: &FutureProducer) {
        let mut down = self.brokers_down.load(Ordering::Relaxed);
        if down && last_message.elapsed() > Duration::from_secs(1) {
            let producer = producer.clone();
            let answered = tokio::task::spawn_blocking(move || {
                producer.client().fetch_metadata(None, Duration::from_millis(500)).is_ok()
            })
            .await
            .unwrap_or(false);
            if answered {
                self.brokers_down.store(false, Ordering::Relaxed);
                down = false;
            }
        }
        let restored = self.restored_once.load(Ordering::Relaxed) && !self.restoring.load(Ordering::Relaxed);
        self.set_ready(!down && restored);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A producer whose broker does not exist (creating one needs no broker).
    fn unreachable_producer() -> FutureProducer {
        rdkafka::ClientConfig::new().set("bootstrap.servers", "127.0.0.1:1").create().expect("a producer")
    }

    /// `metapu_ready` as /metrics exports it.
    fn gauge(m: &Metrics) -> f64 {
        let line = m.render().lines().find(|l| l.starts_with("metapu_ready ")).map(str::to_string);
        line.and_then(|l| l["metapu_ready ".len()..].trim().parse().ok()).expect("metapu_ready is exported")
    }

    #[test]
    fn flag_and_gauge_move_together() {
        let metrics = Arc::new(Metrics::new());
        let health = Health::new(Arc::clone(&metrics));
        assert!(!health.is_ready());
        assert_eq!(gauge(&metrics), 0.0);
        health.started();
        assert!(!health.is_ready(), "consuming, but its first assignment not restored");
        health.restoring(true);
        health.restoring(false);
        health.started();
        assert!(health.is_ready());
        assert_eq!(gauge(&metrics), 1.0);
        health.brokers_down();
        assert!(!health.is_ready());
        assert_eq!(gauge(&metrics), 0.0);
        health.message_received();
        assert!(!health.is_ready(), "readiness returns at the next refresh, not on one message");
        health.started();
        health.stopping();
        assert!(!health.is_ready());
        assert_eq!(gauge(&metrics), 0.0);
    }

    #[tokio::test]
    async fn refresh_after_a_message_makes_ready_without_asking_the_brokers() {
        let metrics = Arc::new(Metrics::new());
        let health = Health::new(Arc::clone(&metrics));
        let producer = unreachable_producer();
        health.started();
        health.refresh(Instant::now(), &producer).await;
        assert!(!health.is_ready(), "no assignment restored yet");
        health.restoring(false);
        health.brokers_down();
        health.message_received();
        // No broker listens here; with a message just received, refresh must not ask.
        health.refresh(Instant::now(), &producer).await;
        assert!(health.is_ready());
        assert_eq!(gauge(&metrics), 1.0);
    }

    /// While device windows are restored the daemon is not ready, brokers up or not;
    /// readiness returns at the first refresh after.
    #[tokio::test]
    async fn a_restore_keeps_it_unready_until_done() {
        let metrics = Arc::new(Metrics::new());
        let health = Health::new(Arc::clone(&metrics));
        health.started();
        health.restoring(true);
        assert!(!health.is_ready());
        let producer = unreachable_producer();
        health.refresh(Instant::now(), &producer).await;
        assert!(!health.is_ready(), "not ready while restoring");
        health.restoring(false);
        health.refresh(Instant::now(), &producer).await;
        assert!(health.is_ready());
        assert_eq!(gauge(&metrics), 1.0);
    }

    #[tokio::test]
    async fn brokers_still_down_keep_it_unready() {
        let metrics = Arc::new(Metrics::new());
        let health = Health::new(Arc::clone(&metrics));
        health.started();
        health.restoring(false);
        health.brokers_down();
        let producer = unreachable_producer();
        health.refresh(Instant::now() - Duration::from_secs(5), &producer).await;
        assert!(!health.is_ready());
        assert_eq!(gauge(&metrics), 0.0);
    }
}
