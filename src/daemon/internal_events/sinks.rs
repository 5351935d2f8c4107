//! Incident events forwarded to the sinks (webhook, syslog): queued, then delivered,
//! retried, refused for good, or dropped on a full queue.

use super::{InternalEvent, Metrics};

/// An event taken into a sink's queue.
pub(crate) struct SinkQueued<'a>(pub &'a str);

impl InternalEvent for SinkQueued<'_> {
    fn emit(self, m: &Metrics) {
        m.sink_queued.with_label_values(&[self.0]).inc();
    }
}

/// A sink's queue was full: the event is dead-lettered.
pub(crate) struct SinkDropped<'a>(pub &'a str);

impl InternalEvent for SinkDropped<'_> {
    fn emit(self, m: &Metrics) {
        m.sink_events.with_label_values(&[self.0, "dropped"]).inc();
    }
}

/// The receiver took an event; `recovered`: it had been unreachable.
pub(crate) struct SinkDelivered<'a> {
    pub sink: &'a str,
    pub recovered: bool,
}

impl InternalEvent for SinkDelivered<'_> {
    fn emit(self, m: &Metrics) {
        m.sink_events.with_label_values(&[self.sink, "delivered"]).inc();
        if self.recovered {
            tracing::info!(sink = self.sink, "sink delivers again");
        }
    }
}

/// The receiver refused an event for good: it is dead-lettered.
pub(crate) struct SinkRejected<'a> {
    pub sink: &'a str,
    pub reason: &'a str,
}

impl InternalEvent for SinkRejected<'_> {
    fn emit(self, m: &Metrics) {
        m.sink_events.with_label_values(&[self.sink, "rejected"]).inc();
        tracing::warn!(sink = self.sink, reason = %self.reason, "sink refused an incident event; dead-lettered");
    }
}

/// An attempt failed and the event is sent again; `first`: the first failure since
/// the sink last delivered (told once, not at every retry).
pub(crate) struct SinkRetried<'a> {
    pub sink: &'a str,
    pub reason: &'a str,
    pub first: bool,
}

impl InternalEvent for SinkRetried<'_> {
    fn emit(self, m: &Metrics) {
        m.sink_events.with_label_values(&[self.sink, "retried"]).inc();
        if self.first {
            tracing::warn!(sink = self.sink, reason = %self.reason, "sink unreachable; retrying with backoff");
        }
    }
}

/// An event left a sink's queue (delivered or not).
pub(crate) struct SinkDequeued<'a>(pub &'a str);

impl InternalEvent for SinkDequeued<'_> {
    fn emit(self, m: &Metrics) {
        m.sink_queued.with_label_values(&[self.0]).dec();
    }
}
