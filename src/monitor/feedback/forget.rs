//! An operator's request to forget a device (`metapu forget`): its known-normal
//! records, windows, classifier and snapshot go, and an incident it had open closes.

use serde::{Deserialize, Serialize};

use crate::monitor::clock::Now;
use crate::monitor::devices::owner::Devices;
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
    pub(super) fn apply(self, devices: &mut Devices, now: Now) -> Result<Vec<Emitted>, String> {
        let (known_normal, closes) = devices
            .forget(&self.device, now)
            .ok_or_else(|| format!("unknown device {}: not tracked by this daemon", self.device))?;
        let version = devices.version();
        let mut out: Vec<Emitted> = closes.into_iter().map(|c| Emitted::incident(c, version)).collect();
        out.push(Emitted::Incident(IncidentEvent::Forgotten {
            device: self.device,
            known_normal,
            by: self.by,
            note: self.note,
            time: now.unix,
        }));
        Ok(out)
    }
}
