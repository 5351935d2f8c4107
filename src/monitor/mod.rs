//! The monitor: the decisions the daemon makes, without Kafka, Prometheus or the
//! daemon's shell, and without reading a clock. One door, [`Monitor`]: an [`Input`] at a
//! time (records, feedback, kind shares, ticks, assignments, restored snapshots,
//! finished adaptations) with the time as a value; an [`Output`] back (what to publish,
//! offsets released, [`Command`]s for the shell); what happened told to a
//! [`telemetry`] watcher. The daemon (`crate::daemon`) feeds it from Kafka, the lab
//! from captures, the tests and benches directly; each builds it from one [`settings`]
//! value.
//!
//! Inside, one job per part:
//! - `api` — the `Monitor`: the inputs, every time-driven decision, the commands
//! - `driver` — micro-batches cut by size and wait, feedback after records
//! - `pipeline` — one micro-batch, feedback, kind shares and the passing of time, to
//!   what is emitted (`output`)
//! - `engine` — windows in, verdicts out: admission, adaptation on the event clock's
//!   cadence, batched scoring
//! - `devices`, `windows`, `span_window` — the device table, the one owner of a device's state (its
//!   snapshot books too); `onboarding`, `kinds` — known-normal traffic an operator gives
//!   a device or its kind
//! - `incidents`, `behaviours`, `footprint`, `fanout`, `incident_traffic`, `explain` —
//!   incidents, what analysts dismissed (and what the daemon may never learn by
//!   itself), the second look on packets, what an incident changed
//! - `record`, `feedback` — the input and feedback topics' formats; `snapshot` — the
//!   state topic's
//! - `adapt_jobs` — a device's windows to its classifier, in batched solves;
//!   `solver` — where the event clock's adaptation jobs are solved (inline, or on a
//!   thread of their own while scoring goes on)
//! - `stream_time` — each input partition's time, the event clock's
//! - `telemetry` — the events the core reports; `settings` — what it decides with

mod adapt_jobs;
mod api;
pub mod behaviours;
pub mod clock;
mod devices;
mod driver;
mod engine;
pub(crate) mod explain;
pub mod fanout;
pub mod fanout_usual;
pub mod feedback;
pub mod footprint;
pub mod incident_traffic;
pub mod incidents;
pub mod kinds;
pub mod logins;
pub mod onboarding;
pub mod output;
mod pipeline;
pub mod record;
pub mod settings;
pub mod snapshot;
pub mod solver;
pub mod span_window;
pub mod spoofing;
mod stream_time;
pub mod telemetry;
mod windows;

pub use adapt_jobs::{run_adaptation, run_adaptation_cached, Adapted};
pub use api::{Command, Input, Monitor, Output, Restore, Restored};
pub use devices::{AdaptJob, DeviceView, WindowSizes};
pub use engine::EventCadence;
pub use pipeline::{Consumed, Emitted, PartitionOffset, Received, RecordOutputs};
pub use settings::StateSchedule;
