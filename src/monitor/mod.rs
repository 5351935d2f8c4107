//! The monitor: the decisions the daemon makes, without Kafka, Prometheus or the
//! daemon's shell — decoded records in; scores, incident events, prior updates, dead
//! letters and kind shares out, as plain values; time given as a value (the service's
//! clock, or the records' own: [`clock`]); what happened told to a [`telemetry`]
//! watcher, not to a metrics registry. The daemon (`crate::daemon`) feeds it from Kafka,
//! the lab from captures, the tests directly; each builds it from one [`settings`]
//! value.
//!
//! Inside, one job per part:
//! - `driver` — the one way in: micro-batches cut by size and wait, deferred records
//!   run again, feedback after records, time passing
//! - `pipeline` — one micro-batch, feedback, kind shares and the passing of time, to
//!   what is emitted (`output`)
//! - `engine` — windows in, verdicts out: admission, adaptation on the event clock's
//!   cadence, batched scoring
//! - `devices`, `windows` — the device table, the one owner of a device's state;
//!   `onboarding`, `kinds` — known-normal traffic an operator gives a device or its kind
//! - `incidents`, `behaviours`, `footprint`, `fanout`, `incident_traffic`, `explain` —
//!   incidents, what analysts dismissed (and what the daemon may never learn by
//!   itself), the second look on packets, what an incident changed
//! - `record`, `feedback` — the input and feedback topics' formats; `snapshot` — the
//!   state topic's
//! - `telemetry` — the events the core reports; `settings` — what it decides with

pub mod behaviours;
pub mod clock;
pub(crate) mod devices;
pub mod driver;
pub mod engine;
pub(crate) mod explain;
pub mod fanout;
pub mod feedback;
pub mod footprint;
pub mod incident_traffic;
pub mod incidents;
pub mod kinds;
pub mod onboarding;
pub mod output;
pub mod pipeline;
pub mod record;
pub mod settings;
pub(crate) mod snapshot;
pub mod telemetry;
pub(crate) mod windows;
