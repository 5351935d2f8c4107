//! The daemon's internal events, as vector has them: each observable thing is one
//! struct whose [`InternalEvent::emit`] writes its own log line and counts its own
//! metric, so the two cannot drift apart and a new event is one new struct. The
//! [`Metrics`]' fields are private to this module: the service loop, health, the
//! state store, the outbox and the sinks all count through an event.
//!
//! - `core` — what the monitor reports (`monitor::telemetry::Event`, the one list), one arm each
//! - `kafka` — consuming, delivering, rebalances, lag, readiness
//! - `state` — the state topic: restores and snapshots
//! - `model` — the model loaded and reloaded
//! - `sinks` — incident events forwarded to webhooks and syslog

mod core;
mod kafka;
mod metrics;
mod model;
mod sinks;
mod state;

pub(crate) use kafka::*;
pub use metrics::Metrics;
pub(crate) use model::*;
pub(crate) use sinks::*;
pub(crate) use state::*;

/// One observable thing: logged and counted in one place.
pub(crate) trait InternalEvent {
    fn emit(self, metrics: &Metrics);
}

impl Metrics {
    /// Log and count `event`.
    pub(crate) fn emit(&self, event: impl InternalEvent) {
        event.emit(self)
    }
}
