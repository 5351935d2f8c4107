//! Routing to a device's incident tracker: its decisions, time passing, verdicts.

use super::*;

impl DeviceTable {
    /// Devices with an open incident, or with a closed one that joined a fleet incident
    /// and awaits its verdict (a silent device's time still passes for it).
    pub(super) fn with_open_incidents(&self) -> Vec<String> {
        let awaits =
            |d: &Device| d.incidents.open().is_some() || d.incidents.awaiting_fleet_verdict().is_some();
        self.devices.iter().filter(|(_, d)| awaits(d)).map(|(id, _)| id.clone()).collect()
    }

    /// A scored record's decision moves the device's incident state; the transitions
    /// (an incident that ended as a new behaviour began, and the new one; or one).
    pub(super) fn observe_decision(
        &mut self,
        id: &str,
        decision: Decision<'_>,
        rules: &IncidentRules,
        now: Now,
    ) -> Vec<Transition> {
        let Some(d) = self.devices.get_mut(id) else { return Vec::new() };
        d.scored += 1;
        d.alerted += u64::from(decision.anomalous);
        // Traffic declared normal while it is onboarded raises nothing.
        if d.onboarding.is_some() {
            return Vec::new();
        }
        let memory = d.kind.as_deref().and_then(|k| self.kinds.memory(k));
        let siblings = d.kind.as_deref().map_or(&[][..], |k| self.kinds.raised(k));
        let t = d.incidents.observe(id, decision, rules, memory, siblings, now.ms, now.unix);
        // A raise, or a join, is its kind's to hear (the fleet incident and its members):
        // its siblings here at once, the others through its share.
        for raised in t.iter().filter(|t| matches!(t, Transition::Opened(_) | Transition::Joined(_))) {
            let (Some(kind), Transition::Opened(i) | Transition::Joined(i)) = (&d.kind, raised) else {
                continue;
            };
            if let Some(r) = super::kind_membership::raised(id, i, self.dim) {
                self.kinds.hear_raised(kind, r);
            }
            self.shares.due(id);
        }
        t
    }

    /// Time passes for the device: the verdict on a fleet incident it joined, once given
    /// on its clock ([`IncidentTracker::answer_from_fleet`]); its open incident's update
    /// or quiet close, if due.
    pub(super) fn tick_incident(&mut self, id: &str, rules: &IncidentRules, now: Now) -> Vec<Transition> {
        let answered = self.answer_from_fleet(id, &rules.memory, now.unix);
        let Some(d) = self.devices.get_mut(id) else { return Vec::new() };
        answered.into_iter().chain(d.incidents.tick(rules, self.dim, now.ms, now.unix)).collect()
    }

    /// The fleet incident the device's incident joined was dismissed on its sibling: the
    /// verdict answers the device's too, and what it remembers now its kind hears.
    pub(super) fn answer_from_fleet(
        &mut self,
        id: &str,
        memory: &MemoryRules,
        now_unix: f64,
    ) -> Option<Transition> {
        let d = self.devices.get_mut(id)?;
        // Called at every scored record: nothing to look up for most devices.
        d.incidents.awaiting_fleet_verdict()?;
        let kind = d.kind.as_deref().and_then(|k| self.kinds.memory(k));
        let t = d.incidents.answer_from_fleet(id, kind, now_unix, memory, self.dim)?;
        d.unsnapshotted = true;
        if memory.remember_ms > 0 {
            self.shares.due(id);
        }
        Some(t)
    }

    /// An analyst's verdict on one of the device's incidents.
    pub(super) fn apply_feedback(
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
