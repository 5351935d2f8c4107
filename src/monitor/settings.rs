//! The settings that shape what the core decides, derived once from the daemon's
//! configuration (`DaemonConfig::core_settings`), and the devices built from them. The
//! daemon, the lab and the tests' core harness all start here, so a record meets the
//! same windows, threshold, per-device cap, clock, adaptation schedule and incident
//! rules whichever drives it. The clock is held by the device table alone (the door
//! asks the devices for it); the adaptation cadence exists only on the event clock.

use super::clock::Clock;
use super::devices::owner::{Devices, EventCadence, Scheduling};
use super::devices::stream_time::StreamClocks;
use super::devices::DeviceTable;
use super::devices::WindowSizes;
use super::incidents::IncidentRules;
use crate::model::Model;

/// Which per-record outputs are built: both are off in production (incidents are what
/// an analyst reads), and building them costs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RecordOutputs {
    pub scores: bool,
    pub alerts: bool,
}

#[derive(Debug, Clone)]
pub struct CoreSettings {
    pub sizes: WindowSizes,
    /// Devices tracked at most (`devices.max_tracked`).
    pub max_tracked: usize,
    pub threshold: f32,
    /// Records of one device scored per micro-batch; the rest are deferred.
    pub max_per_device: usize,
    /// Records per micro-batch, deferred ones included.
    pub max_batch: usize,
    /// How long a started micro-batch waits for more, ms.
    pub max_wait_ms: u64,
    /// A message larger than this is refused (a dead letter).
    pub max_message_bytes: usize,
    /// The topic whose messages are feedback (verdicts, onboardings, forgets).
    pub feedback_topic: String,
    /// Devices adapted in one batched solve.
    pub adaptation_batch: usize,
    /// How far ahead of the host's clock a record's time is believed.
    pub max_ahead_s: f64,
    /// On the event clock, how long an input partition is silent as a whole (the
    /// service's time) before that silence moves its time on (`stream_time.rs`).
    pub idle_after_ms: u64,
    pub clock: Clock,
    /// When a device is re-adapted on its own time (used on the event clock).
    pub cadence: EventCadence,
    pub incidents: IncidentRules,
    pub outputs: RecordOutputs,
    pub feedback_max_age_s: u64,
    pub trust_input_labels: bool,
    /// A device silent this long goes idle (`devices.idle_timeout_s`; 0: never).
    pub idle_timeout_ms: u64,
    /// A device sending traffic this long with no known-normal record is reported
    /// (`incidents.unmonitored_after_s`; 0: never).
    pub unmonitored_after_ms: u64,
    /// Paced snapshots for the state topic (none: the lab and the tests keep no state).
    pub state: Option<StateSchedule>,
}

/// When devices are written to the state topic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StateSchedule {
    /// A changed device is written this long after its last snapshot.
    pub interval_ms: u64,
    /// Its unlabeled rows at most this often.
    pub unlabeled_interval_ms: u64,
    /// The input topic's partition count at start (each snapshot records it).
    pub input_partitions: u32,
}

impl CoreSettings {
    /// The devices these settings give, scored with `model` of `version`.
    pub(super) fn devices(&self, model: Model, version: &str) -> Devices {
        let event_clock = self.clock == Clock::Event;
        let streams = StreamClocks::new(self.idle_after_ms, self.max_ahead_s);
        let table = DeviceTable::new(model.dim(), self.sizes, self.max_tracked).on_clock(self.clock, streams);
        let scheduling = Scheduling {
            max_per_device: self.max_per_device,
            adaptation_batch: self.adaptation_batch,
            cadence: event_clock.then_some(self.cadence),
        };
        Devices::new(model, table, self.threshold, scheduling, self.incidents)
            .with_feedback_max_age_s(self.feedback_max_age_s)
            .with_version(version)
    }
}
