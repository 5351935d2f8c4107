//! An analyst's verdict on an incident (`metapu feedback`, the console): a false
//! positive closes the incident and its behaviour is remembered (`behaviours.rs`); the
//! device's classifier is left as it was, so a verdict cannot make the device noisier.
//! A confirmed attack is recorded on the incident, and what was remembered of its
//! behaviour is forgotten.

use super::Applying;
use crate::monitor::incidents::{Applied, Feedback};
use crate::monitor::output::Emitted;
use crate::monitor::output::IncidentEvent;
use crate::monitor::telemetry::{Event, FeedbackResult};

impl Feedback {
    pub(super) fn apply(self, to: &mut dyn Applying) -> Result<(), String> {
        let (at, max_age_s, memory) = (to.time(&self.device), to.feedback_max_age_s(), to.memory());
        let applied = to.devices().apply_feedback(&self, at, max_age_s, &memory)?;
        let (transition, result) = match applied {
            Applied::Confirmed(t) => (t, FeedbackResult::Confirmed),
            Applied::Dismissed(t) => (t, FeedbackResult::FalsePositive),
            Applied::Unlearned => {
                to.telemetry()
                    .event(Event::Feedback { device: &self.device, result: FeedbackResult::Confirmed });
                to.emit(Emitted::Incident(IncidentEvent::Unlearned {
                    time: to.time(&self.device),
                    device: self.device,
                    incident_id: self.incident_id,
                    by: self.by,
                    note: self.note,
                }));
                return Ok(());
            }
        };
        to.telemetry().event(Event::Feedback { device: &self.device, result });
        to.incident(&self.device, &transition);
        Ok(())
    }
}
