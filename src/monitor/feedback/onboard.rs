//! An operator's onboarding (`metapu onboard`): the device's traffic for the next
//! `onboard_for_s` seconds is its known-normal traffic (`onboarding.rs`), offered to
//! its kind's siblings when it names one.

use serde::{Deserialize, Serialize};

use crate::monitor::clock::Now;
use crate::monitor::devices::owner::Devices;
use crate::monitor::output::Emitted;
use crate::monitor::output::IncidentEvent;

/// An operator's onboarding (`metapu onboard`, on the feedback topic): the device's
/// traffic for the next `onboard_for_s` seconds is its known-normal traffic
/// (`onboarding.rs`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Onboard {
    pub device: String,
    pub onboard_for_s: f64,
    /// The device's kind (`kinds.rs`): its siblings are offered what it is onboarded on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(default)]
    pub by: String,
    #[serde(default)]
    pub note: String,
}

impl Onboard {
    pub(super) fn apply(self, devices: &mut Devices, now: Now) -> Result<Vec<Emitted>, String> {
        let by_note = (self.by.clone(), self.note.clone());
        let o = devices.onboard(&self.device, self.onboard_for_s, self.kind.as_deref(), by_note, now)?;
        Ok(vec![Emitted::Incident(IncidentEvent::Onboarding {
            device: self.device,
            kind: self.kind,
            from: o.from,
            until: o.until,
            by: o.by,
            note: o.note,
            time: now.unix,
        })])
    }
}
