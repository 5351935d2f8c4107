//! The console's own metrics (`/metrics`): verdicts by result, messages read by topic
//! and whether the desk could read them, incidents held.

use prometheus::{IntCounterVec, IntGauge, Opts, Registry};

use crate::endpoints::register;

pub struct ConsoleMetrics {
    registry: Registry,
    /// `sent`, `denied` (token, read-only, another site), `malformed`, `refused`
    /// (unknown incident, replayed, anonymous), `undelivered` (Kafka).
    pub verdicts: IntCounterVec,
    /// Requests refused before they were read, by `reason` (`no_token`, `wrong_token`,
    /// `throttled`, `read_role`, `read_only`, `not_json`, `cross_site`).
    pub denied: IntCounterVec,
    /// By topic (`incidents`, `priors`, `dead_letters`) and `result` (`read`,
    /// `unreadable`).
    pub messages: IntCounterVec,
    pub incidents: IntGauge,
}

impl Default for ConsoleMetrics {
    fn default() -> Self {
        let registry = Registry::new();
        let verdicts = register(
            &registry,
            IntCounterVec::new(
                Opts::new("metapu_console_verdicts_total", "Verdicts posted, by result"),
                &["result"],
            )
            .expect("valid metric"),
        );
        let denied = register(
            &registry,
            IntCounterVec::new(
                Opts::new("metapu_console_denied_total", "Requests refused before they were read, by reason"),
                &["reason"],
            )
            .expect("valid metric"),
        );
        let messages = register(
            &registry,
            IntCounterVec::new(
                Opts::new(
                    "metapu_console_messages_total",
                    "Messages read, by topic and whether they could be read",
                ),
                &["topic", "result"],
            )
            .expect("valid metric"),
        );
        let incidents = register(
            &registry,
            IntGauge::new("metapu_console_incidents", "Incidents the console holds").expect("valid metric"),
        );
        Self { registry, verdicts, denied, messages, incidents }
    }
}

impl ConsoleMetrics {
    pub fn render(&self) -> String {
        crate::endpoints::render(&self.registry)
    }
}
