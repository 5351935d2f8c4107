//! Time passing over the devices: evicted devices' incidents close, onboardings end,
//! open incidents are updated or close quietly; and how an incident's change is
//! explained for the door.

use super::*;
use crate::monitor::clock::Clock;
use crate::monitor::devices::incident_change::explain;
use crate::monitor::devices::kinds::Share;
use crate::monitor::devices::onboarding::Onboarding;
use crate::monitor::devices::{Device, IncidentChange};
use crate::monitor::incidents::Transition;

/// An onboarding that ended, and the known-normal records it left.
#[derive(Debug, Clone, PartialEq)]
pub struct Onboarded {
    pub device: String,
    pub onboarding: Onboarding,
    pub known_normal: usize,
    /// The device's time at its end (Unix seconds).
    pub time: f64,
}

/// What time's passing did, in the order it is published.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Ticked {
    /// Incidents of devices evicted meanwhile, closed as evicted.
    pub closes: Vec<IncidentChange>,
    /// On the event clock: input partitions newly idle.
    pub newly_idle: Option<usize>,
    pub onboarded: Vec<Onboarded>,
    /// Shares for the kinds topic.
    pub shares: Vec<Share>,
    /// Updates and quiet closes.
    pub changes: Vec<IncidentChange>,
    /// Devices with an incident still open.
    pub open: usize,
}

impl Devices {
    /// Updates and quiet closes due at `now` (the service's clock and the wall's): each
    /// device's time is the wall clock, or on the event clock its partition's stream
    /// time (`DeviceTable::now_of`).
    pub fn tick(&mut self, now: Now) -> Ticked {
        let closes = self.eviction_closes(now);
        self.follow_service_clock(now);
        let newly_idle =
            (self.table.clock() == Clock::Event).then(|| self.table.streams_mut().newly_idle(now.ms));
        self.table.end_onboarding_due(now.ms);
        let onboarded = (self.table.take_onboarded().into_iter())
            .map(|(device, onboarding, known_normal)| {
                let time = self.table.now_of(&device, now.ms).unix;
                Onboarded { device, onboarding, known_normal, time }
            })
            .collect();
        let shares = self.table.take_shares();
        let open = self.table.with_open_incidents();
        let mut changes = Vec::new();
        for device in &open {
            let at = match self.table.clock() {
                Clock::Service => now,
                Clock::Event => self.table.now_of(device, now.ms),
            };
            for t in self.table.tick_incident(device, &self.rules, at) {
                changes.push(self.change(device, t, now.unix));
            }
        }
        let open = open.iter().filter(|d| self.open_incident(d).is_some()).count();
        Ticked { closes, newly_idle, onboarded, shares, changes, open }
    }

    /// Devices evicted (capacity or idle) with an incident open: each incident closes
    /// as `evicted`, explained on the windows the device left with, so that no incident
    /// an analyst sees opened stays open for ever.
    pub(super) fn eviction_closes(&mut self, now: Now) -> Vec<IncidentChange> {
        let mut out = Vec::new();
        for (device, mut d) in self.table.take_evicted_with_incidents() {
            if let Some(t) = d.close_evicted_incident(now.unix) {
                out.push(self.change_of(device, Some(&d), t, now.unix));
            }
        }
        out
    }

    /// A tracked device's incident change, explained.
    pub(super) fn change(&self, device: &str, t: Transition, time: f64) -> IncidentChange {
        self.change_of(device.to_string(), self.table.get(device), t, time)
    }

    /// [`Self::change`] for a device that may no longer be tracked.
    fn change_of(
        &self,
        device: String,
        d: Option<&Device>,
        transition: Transition,
        time: f64,
    ) -> IncidentChange {
        let top = d.map(|d| explain(&self.model, &self.rules, d, transition.incident())).unwrap_or_default();
        IncidentChange { device, transition, top, time }
    }
}
