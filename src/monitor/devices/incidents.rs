//! Routing to a device's incident tracker: its decisions, time passing, verdicts.

use super::*;

impl DeviceTable {
    /// Devices with an open incident.
    pub fn with_open_incidents(&self) -> Vec<String> {
        self.devices.iter().filter(|(_, d)| d.incidents.open.is_some()).map(|(id, _)| id.clone()).collect()
    }

    /// A scored record's decision moves the device's incident state; the transition,
    /// if it opened one.
    pub fn observe_decision(
        &mut self,
        id: &str,
        decision: Decision<'_>,
        rules: &IncidentRules,
        now: Now,
    ) -> Option<Transition> {
        let d = self.devices.get_mut(id)?;
        // Traffic declared normal while it is onboarded raises nothing.
        if d.onboarding.is_some() {
            return None;
        }
        let kind = d.kind.as_deref().and_then(|k| self.kinds.memory(k));
        d.incidents.observe(id, decision, rules, kind, now.ms, now.unix)
    }

    /// Time passes for the device's open incident: an update or a quiet close, if due.
    pub fn tick_incident(&mut self, id: &str, rules: &IncidentRules, now: Now) -> Option<Transition> {
        self.devices.get_mut(id)?.incidents.tick(rules, self.dim, now.ms, now.unix)
    }

    /// An analyst's verdict on one of the device's incidents.
    pub fn apply_feedback(
        &mut self,
        fb: &Feedback,
        now_unix: f64,
        max_age_s: u64,
        memory: &MemoryRules,
    ) -> Result<Applied, String> {
        let d = self
            .devices
            .get_mut(&fb.device)
            .ok_or_else(|| format!("unknown device {}: not tracked by this daemon", fb.device))?;
        let applied =
            d.incidents.feedback(fb, now_unix, max_age_s, memory, self.dim).map_err(|e| e.to_string())?;
        // The verdict, and what it made the device remember, are its state: snapshotted
        // at the next round, not only when the device next sends.
        d.unsnapshotted = true;
        // Any verdict may change what it remembers (a confirmed one forgets): its kind hears.
        if memory.remember_ms > 0 {
            self.share(&fb.device);
        }
        Ok(applied)
    }
}
