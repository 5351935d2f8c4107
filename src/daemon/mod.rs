//! `metapu run`: the streaming daemon, the shell around the monitor
//! ([`crate::monitor`], which decides). Kafka in; alerts, priors, dead letters and
//! (optionally) scores out; the state topic; sinks; Prometheus metrics; systemd.
//!
//! The public surface: [`start`] a [`Daemon`] from a [`DaemonConfig`], [`Feedback`]
//! (what analysts send back), [`Snapshot`] (the state topic's format), [`kafka`]
//! (client settings for tools). Every other part is the crate's own.
//!
//! Inside, one job per part, and no two parts that import each other:
//! - `handle` — start-up and the handle to a running daemon (`control`: what it takes
//!   and what it fails with)
//! - `service` — the main loop, which hands each micro-batch to the monitor's pipeline
//!   and its work to:
//!   - `outbox` — put each emitted value on its topic; store offsets after
//!     acknowledgement (`delivery`); `sinks` — webhook and syslog copies
//!   - `model_host` — the engine, the background `adapter`, model reloads
//!   - `state` — snapshots to and restore from the state topic
//!   - `health` — readiness flag, gauge and broker state in one type
//! - `kafka` — client configuration, rebalance callbacks, the changelog reader
//! - `config`, `secrets` — layered configuration; librdkafka secrets
//! - `events` — telemetry that logs and counts in one place (the monitor's events too)
//! - `metrics`, `http`, `notify` — operations

/// The background adaptation thread (benchmarks and tests run the daemon's own).
pub mod adapter;
pub mod config;
mod control;
mod delivery;
mod handle;
mod health;
pub(crate) mod http;
mod internal_events;
pub mod kafka;
mod model_host;
pub mod notify;
mod outbox;
mod secrets;
mod service;
pub mod sinks;
mod state;

/// The state topic's record format (tests read a device's restored windows from it).
pub use crate::monitor::devices::snapshot::{Part as StatePart, Snapshot, SnapshotError, StateTopic};
/// What `metapu feedback` publishes to the feedback topic.
pub use crate::monitor::feedback::FeedbackMessage;
pub use crate::monitor::incidents::{Feedback, Verdict as FeedbackVerdict};
pub use crate::wall_clock::unix_now;
pub use config::DaemonConfig;
pub use handle::{start, use_one_torch_thread, Control, Daemon, DaemonError};
pub use internal_events::Metrics;
