//! An analyst's verdict on an incident (`metapu feedback`, the console): a false
//! positive closes the incident and its behaviour is remembered (`behaviours.rs`); the
//! device's classifier is left as it was, so a verdict cannot make the device noisier.
//! A confirmed attack is recorded on the incident, and what was remembered of its
//! behaviour is forgotten.

use crate::monitor::clock::Now;
use crate::monitor::devices::owner::{Devices, Verdicted};
use crate::monitor::incidents::Feedback;
use crate::monitor::output::Emitted;
use crate::monitor::output::IncidentEvent;
use crate::monitor::telemetry::{Event, FeedbackResult, Telemetry};

impl Feedback {
    pub(super) fn apply(
        self,
        devices: &mut Devices,
        now: Now,
        telemetry: &dyn Telemetry,
    ) -> Result<Vec<Emitted>, String> {
        let (change, result) = match devices.verdict(&self, now)? {
            Verdicted::Confirmed(c) => (c, FeedbackResult::Confirmed),
            Verdicted::Dismissed(c) => (c, FeedbackResult::FalsePositive),
            Verdicted::Unlearned { time } => {
                telemetry.event(Event::Feedback { device: &self.device, result: FeedbackResult::Confirmed });
                return Ok(vec![Emitted::Incident(IncidentEvent::Unlearned {
                    time,
                    device: self.device,
                    incident_id: self.incident_id,
                    by: self.by,
                    note: self.note,
                })]);
            }
        };
        telemetry.event(Event::Feedback { device: &self.device, result });
        Ok(vec![Emitted::incident(change, devices.version())])
    }
}
