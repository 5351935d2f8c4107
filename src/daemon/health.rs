//! Whether the daemon is ready: one type for the readiness flag `/readyz` reads, its
//! `metapu_ready` gauge and what librdkafka says about the brokers, so the three never
//! disagree. Shared by the service loop, the HTTP server and the Kafka callbacks.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::internal_events::{LagMeasured, Readiness, Rebalanced};
use super::Metrics;

/// How long after librdkafka said every broker was down (or outputs failed) its
/// statistics cannot end the outage: the statistics interval (`statistics.interval.ms`),
/// since a snapshot gathered before the broker went may arrive just after it went.
pub(crate) const STATISTICS_INTERVAL: Duration = Duration::from_secs(5);

pub(crate) struct Health {
    ready: AtomicBool,
    brokers_down: AtomicBool,
    /// When an event (not a statistics snapshot) last said the brokers were down.
    down_said: Mutex<Option<Instant>>,
    /// Device windows are being restored from the state topic.
    restoring: AtomicBool,
    /// Partitions are being handed over (assigned or revoked: outputs settled, state
    /// written or read), which waits on the brokers.
    handing_over: AtomicBool,
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
            down_said: Mutex::new(None),
            restoring: AtomicBool::new(false),
            handing_over: AtomicBool::new(false),
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
        self.brokers_down_at(Instant::now());
    }

    fn brokers_down_at(&self, now: Instant) {
        *self.down_said.lock().unwrap_or_else(|p| p.into_inner()) = Some(now);
        self.outage();
    }

    fn outage(&self) {
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

    /// Partitions are being handed over: not ready until done (readiness returns at the
    /// next refresh after it ends). A group lost in a broker outage revokes every
    /// partition, and writing their state then waits out the producer's timeout with
    /// nothing consumed.
    pub(crate) fn handing_over(&self, on: bool) {
        self.handing_over.store(on, Ordering::Relaxed);
        if on {
            self.set_ready(false);
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

    /// librdkafka's statistics listed the brokers: `any_up`, whether one of them is
    /// connected. None up is an outage; one up ends it (readiness follows at the next
    /// refresh), unless an event said the brokers were down less than a statistics
    /// interval before: that snapshot may be older than the event (under load /readyz
    /// was 503 for a moment only, and a poll could miss the outage). A metadata request
    /// is no proof: during an outage librdkafka answered one (in the mock cluster's
    /// outage test) while it reported every broker down.
    pub(crate) fn brokers_seen(&self, any_up: bool) {
        self.brokers_seen_at(any_up, Instant::now());
    }

    fn brokers_seen_at(&self, any_up: bool, now: Instant) {
        if !any_up {
            return self.outage();
        }
        let said = *self.down_said.lock().unwrap_or_else(|p| p.into_inner());
        if said.is_none_or(|t| now.saturating_duration_since(t) >= STATISTICS_INTERVAL) {
            self.brokers_down.store(false, Ordering::Relaxed);
        }
    }

    /// Re-derive readiness.
    pub(crate) fn refresh(&self) {
        let down = self.brokers_down.load(Ordering::Relaxed);
        let restored = self.restored_once.load(Ordering::Relaxed) && !self.restoring.load(Ordering::Relaxed);
        self.set_ready(!down && restored && !self.handing_over.load(Ordering::Relaxed));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn a_message_or_a_broker_seen_up_ends_an_outage_at_the_next_refresh() {
        let metrics = Arc::new(Metrics::new());
        let health = Health::new(Arc::clone(&metrics));
        health.started();
        health.refresh();
        assert!(!health.is_ready(), "no assignment restored yet");
        health.restoring(false);
        health.brokers_down();
        health.message_received();
        health.refresh();
        assert!(health.is_ready());
        assert_eq!(gauge(&metrics), 1.0);
        health.brokers_seen(false);
        assert!(!health.is_ready(), "statistics with no broker up: an outage");
        health.refresh();
        assert!(!health.is_ready(), "still down at the next refresh");
        health.brokers_seen_at(true, Instant::now() + STATISTICS_INTERVAL);
        health.refresh();
        assert!(health.is_ready());
    }

    /// A snapshot that lists a broker up just after librdkafka said every broker was
    /// down may have been gathered before: it does not end the outage; one a statistics
    /// interval later does, and a message at once.
    #[test]
    fn statistics_just_after_an_outage_began_do_not_end_it() {
        let metrics = Arc::new(Metrics::new());
        let health = Health::new(Arc::clone(&metrics));
        health.restoring(false);
        health.started();
        let went = Instant::now();
        health.brokers_down_at(went);
        health.brokers_seen_at(true, went + Duration::from_millis(10));
        health.refresh();
        assert!(!health.is_ready(), "a stale snapshot ended the outage");
        health.brokers_seen_at(true, went + STATISTICS_INTERVAL);
        health.refresh();
        assert!(health.is_ready());
        health.brokers_down();
        health.message_received();
        health.refresh();
        assert!(health.is_ready(), "a message ends it at once");
    }

    /// A hand-over (a group lost in an outage revokes every partition, and writing their
    /// state waits on the brokers) keeps it unready, whatever the statistics say.
    #[test]
    fn a_hand_over_keeps_it_unready_until_done() {
        let metrics = Arc::new(Metrics::new());
        let health = Health::new(Arc::clone(&metrics));
        health.restoring(false);
        health.started();
        assert!(health.is_ready());
        health.handing_over(true);
        assert!(!health.is_ready());
        health.brokers_seen(true);
        health.refresh();
        assert!(!health.is_ready(), "ready while its loop waits on the brokers");
        health.handing_over(false);
        health.refresh();
        assert!(health.is_ready());
    }

    /// While device windows are restored the daemon is not ready, brokers up or not;
    /// readiness returns at the first refresh after.
    #[test]
    fn a_restore_keeps_it_unready_until_done() {
        let metrics = Arc::new(Metrics::new());
        let health = Health::new(Arc::clone(&metrics));
        health.started();
        health.restoring(true);
        assert!(!health.is_ready());
        health.refresh();
        assert!(!health.is_ready(), "not ready while restoring");
        health.restoring(false);
        health.refresh();
        assert!(health.is_ready());
        assert_eq!(gauge(&metrics), 1.0);
    }
}
