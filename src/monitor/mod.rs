//! The monitor: the decisions the daemon makes, without Kafka, Prometheus or the
//! daemon's shell, and without reading a clock. Three layers, each a part you can name:
//!
//! 1. **The door** (here): [`Monitor`] takes one [`Input`] at a time (records, feedback,
//!    kind shares, ticks, assignments, restored snapshots, finished adaptations) with the
//!    time as a value, and gives an [`Output`] back (what to publish, offsets released,
//!    [`Command`]s for the shell). It owns the time-driven schedules (`api`), gathers
//!    micro-batches (`gathering`), decodes them (`decode`), runs a batch to its outputs
//!    (`pipeline`) and carries out the feedback topic's commands (`feedback/`, one file
//!    a kind).
//! 2. **The devices** (`devices/`): the device table, the one owner of a device's state,
//!    and the engine that scores records and adapts devices.
//! 3. **Incidents** (`incidents/`): each device's incident tracker, what analysts
//!    dismissed, and the looks on packets beside the model.
//!
//! The topics' formats sit at the door: `record` (input), `output` (what is published),
//! `snapshot` (the state topic), `feedback` (verdicts, onboardings, forgets). What
//! happened is told to a [`telemetry`] watcher. The daemon (`crate::daemon`) feeds the
//! door from Kafka; the lab, the tests and the benches through [`TestDriver`]; each
//! builds it from one [`settings`] value.

mod api;
pub mod clock;
mod decode;
mod devices;
pub mod feedback;
mod gathering;
pub mod incidents;
pub mod output;
mod pipeline;
pub mod record;
pub mod settings;
pub mod telemetry;
mod test_driver;

pub use adapt_jobs::{run_adaptation, run_adaptation_cached, Adapted};
pub use adapt_worker::{AdaptWorker, Finished, WorkerSettings};
pub use api::{Command, Input, Monitor, Output, Restore, Restored};
pub use devices::{AdaptJob, DeviceView, WindowSizes};
pub use engine::EventCadence;
// The layers' modules under the names the crate has always used for them.
pub use decode::{Consumed, PartitionOffset, Received};
use devices::{adapt_jobs, adapt_worker, engine, stream_time};
pub use devices::{kinds, onboarding, snapshot, solver, span_window};
pub(crate) use incidents::explain;
pub use incidents::{behaviours, fanout, fanout_usual, footprint, incident_traffic, logins, spoofing};
pub use output::Emitted;
pub use pipeline::RecordOutputs;
pub use settings::StateSchedule;
pub use test_driver::TestDriver;
