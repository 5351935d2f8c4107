//! An operator's naming of a device's kind (`metapu kind`): the device joins the kind
//! (its make and model, say) without a new onboarding, so what it was onboarded on and
//! what analysts dismissed on it is offered to its siblings, and theirs to it. The same
//! join as `metapu onboard --kind`, for a device onboarded before its kind was named.

use serde::{Deserialize, Serialize};

use crate::monitor::clock::Now;
use crate::monitor::devices::owner::Devices;
use crate::monitor::output::{Emitted, IncidentEvent};

/// An operator's naming of a device's kind (`metapu kind`, on the feedback topic).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Kind {
    pub device: String,
    pub kind: String,
    #[serde(default)]
    pub by: String,
    #[serde(default)]
    pub note: String,
}

impl Kind {
    pub(super) fn apply(self, devices: &mut Devices, now: Now) -> Result<Vec<Emitted>, String> {
        devices.join_kind(&self.device, &self.kind, now)?;
        Ok(vec![Emitted::Incident(IncidentEvent::KindJoined {
            device: self.device,
            kind: self.kind,
            by: self.by,
            note: self.note,
            time: now.unix,
        })])
    }
}
