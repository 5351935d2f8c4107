//! `metapu run`: the streaming daemon. Kafka in; alerts, priors, dead letters and
//! (optionally) scores out; Prometheus metrics; systemd integration.
//!
//! The public surface: [`start`] a [`Daemon`] from a [`DaemonConfig`], [`record`]
//! (the input wire format clients write), [`Feedback`] (what analysts send back),
//! [`Snapshot`] (the state topic's format), [`kafka`] (client settings for tools),
//! [`engine`] (scoring and adaptation without Kafka, for the benchmarks) and
//! [`pipeline`], the core that decides — records in, scores, incident events, prior
//! updates and dead letters out, on the service's clock or the records' own
//! ([`clock`]) — which the daemon feeds from Kafka and the lab from captures, with
//! what it emits ([`output`], [`incidents`]). Every other part is the crate's own.
//!
//! Inside, one job per part, and no two parts that import each other:
//! - `handle` — start-up and the handle to a running daemon (`control`: what it takes
//!   and what it fails with)
//! - `service` — the main loop, which hands work to:
//!   - `pipeline` — decode and score a micro-batch; what it emits, as plain values
//!   - `outbox` — put each emitted value on its topic; store offsets after
//!     acknowledgement (`delivery`)
//!   - `detector` — the engine, the background `adapter`, model reloads
//!   - `state` — snapshots to and restore from the state topic (`snapshot` format)
//!   - `health` — readiness flag, gauge and broker state in one type
//! - `devices`, `windows` — per-device windows and the device table, the one owner of a
//!   device's state
//! - `kafka` — client configuration, rebalance callbacks, the changelog reader
//! - `config`, `secrets` — layered configuration; librdkafka secrets
//! - `record` — the input format and a record's source; `clock` — the pipeline's time
//! - `output` — what is published; `events` — telemetry that logs and counts in one place
//! - `metrics`, `http`, `notify` — operations

/// The background adaptation thread (benchmarks and tests run the daemon's own).
pub mod adapter;
pub mod behaviours;
pub mod clock;
pub mod config;
mod control;
pub mod core_settings;
mod delivery;
mod detector;
pub(crate) mod devices;
pub mod ecs;
pub mod engine;
mod events;
pub(crate) mod explain;
pub mod fanout;
pub mod feedback;
mod handle;
mod health;
pub(crate) mod http;
pub mod incident_traffic;
pub mod incidents;
pub mod kafka;
pub mod kinds;
pub(crate) mod metrics;
pub mod notify;
pub mod onboarding;
mod outbox;
pub mod output;
pub mod pipeline;
pub mod record;
mod secrets;
mod service;
pub mod sinks;
pub(crate) mod snapshot;
mod state;
pub(crate) mod windows;

pub use config::DaemonConfig;
/// What `metapu feedback` publishes to the feedback topic.
pub use feedback::{Feedback, FeedbackMessage, Verdict as FeedbackVerdict};
pub use handle::{start, Control, Daemon, DaemonError};
pub use metrics::Metrics;
pub use output::unix_now;
/// The state topic's record format (tests read a device's restored windows from it).
pub use snapshot::{Part as StatePart, Snapshot, SnapshotError, StateTopic};
