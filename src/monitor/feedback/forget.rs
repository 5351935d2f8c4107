//! An operator's request to forget a device (`metapu forget`): its known-normal
//! records, windows, classifier and snapshot go, and an incident it had open closes.

use serde::{Deserialize, Serialize};

use super::Applying;
use crate::monitor::output::Emitted;
use crate::monitor::output::IncidentEvent;

/// An operator's request to forget a device (`metapu forget`, on the feedback topic):
/// its known-normal records, windows, classifier and snapshot go. The one way a device
/// onboarded is forgotten besides `devices.max_tracked`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Forget {
    pub device: String,
    #[serde(default)]
    pub by: String,
    #[serde(default)]
    pub note: String,
}

impl Forget {
    pub(super) fn apply(self, to: &mut dyn Applying) -> Result<(), String> {
        let known_normal = to
            .devices()
            .forget(&self.device)
            .ok_or_else(|| format!("unknown device {}: not tracked by this daemon", self.device))?;
        to.eviction_closes();
        to.emit(Emitted::Incident(IncidentEvent::Forgotten {
            device: self.device,
            known_normal,
            by: self.by,
            note: self.note,
            time: to.now().unix,
        }));
        Ok(())
    }
}
