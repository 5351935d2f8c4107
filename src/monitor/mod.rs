//! The monitor: the decisions the daemon makes, without Kafka, Prometheus or the
//! daemon's shell, and without reading a clock. Three layers, each a part you can name:
//!
//! 1. **The door** (here): [`Monitor`] takes one [`Input`] at a time (records, feedback,
//!    kind shares, ticks, assignments, restored snapshots, finished adaptations) with the
//!    time as a value, and gives an [`Output`] back (what to publish, offsets released,
//!    [`Command`]s for the shell). It owns the time-driven schedules (`api`), gathers
//!    micro-batches (`gathering`), decodes them (`decode`), publishes what the devices
//!    decide (`api_batch`) and carries out the feedback topic's commands (`feedback/`,
//!    one file a kind).
//! 2. **The devices** (`devices/`): `Devices`, their one owner (`owner.rs`: the model,
//!    the device table, the solver and the incident rules), scores a batch, adapts the
//!    devices and moves their incidents, and gives back plain values.
//! 3. **Incidents** (`incidents/`): each device's incident tracker, what analysts
//!    dismissed, and the looks on packets beside the model.
//!
//! Below the layers sit plain values: `record` (the input format and a record's
//! `Source`) and `clock`. `output` (what is published) and `feedback` (the feedback
//! topic's messages) are the door's; a fact a layer makes is defined in it (a device's
//! prior update, the state topic's `snapshot`, a verdict) and imported from there.
//! `scripts/import_directions.py` holds the directions. What
//! happened is told to a [`telemetry`] watcher. The daemon (`crate::daemon`) feeds the
//! door from Kafka; the lab, the tests and the benches through [`TestDriver`]; each
//! builds it from one [`settings`] value.

mod api;
pub mod clock;
mod decode;
pub mod devices;
pub mod feedback;
mod gathering;
pub mod incidents;
pub mod output;
pub mod record;
pub mod settings;
pub mod telemetry;
mod test_driver;

pub use api::{Command, Input, Monitor, Output, Restore, Restored};
pub use decode::{Consumed, PartitionOffset, Received};
pub use devices::adapt_jobs::{run_adaptation, run_adaptation_cached, Adapted};
pub use devices::adapt_worker::{AdaptWorker, Finished, WorkerSettings};
pub use devices::owner::EventCadence;
pub use devices::{AdaptJob, DeviceView, WindowSizes};
pub use output::Emitted;
pub use settings::{RecordOutputs, StateSchedule};
pub use test_driver::TestDriver;
