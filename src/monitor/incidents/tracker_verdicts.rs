//! A device's verdicts: an analyst's (`metapu feedback`, the console) on its incident,
//! and a fleet incident's answered for each of its members.

use super::*;

impl IncidentTracker {
    /// The incident at hand (open, or the last closed) that joined a fleet incident and
    /// has no verdict yet, and that fleet incident.
    pub fn awaiting_fleet_verdict(&self) -> Option<(&Incident, &Fleet)> {
        [&self.open, &self.last_closed]
            .into_iter()
            .flatten()
            .filter(|i| i.feedback.is_empty())
            .find_map(|i| Some((i, i.fleet.as_ref()?)))
    }

    /// The incident at hand (open, or the last closed) joined a fleet incident that an
    /// analyst has since dismissed on its sibling (`kind`: the dismissals the kind
    /// shares, taken from when they were given, on this device's clock): the same
    /// verdict answers it.
    pub fn answer_from_fleet(
        &mut self,
        device: &str,
        kind: Option<&Memory>,
        now_unix: f64,
        memory: &MemoryRules,
        dim: usize,
    ) -> Option<Transition> {
        let (incident, fleet) = self.awaiting_fleet_verdict()?;
        let verdict = kind?
            .find(&fleet.incident_id)
            .map(|b| &b.dismissal)
            .filter(|d| !d.learned && d.at <= now_unix && d.on.as_deref() == Some(fleet.device.as_str()))?;
        let fb = Feedback {
            device: device.to_string(),
            incident_id: incident.id.clone(),
            verdict: Verdict::FalsePositive,
            by: verdict.by.clone(),
            note: fleet_note(fleet),
            id: String::new(),
            at: 0.0,
            from: String::new(),
        };
        match self.feedback(&fb, now_unix, u64::MAX, memory, dim) {
            Ok(Applied::Dismissed(t)) => Some(t),
            Ok(other) => unreachable!("a dismissal gives a dismissal, not {other:?}"),
            Err(e) => unreachable!("the incident at hand takes a first verdict: {e}"),
        }
    }

    /// Apply an analyst's verdict on the open incident, or on the last closed one if it
    /// closed less than `max_age_s` ago.
    /// A false positive's behaviour is remembered (`memory`; rows of `dim` features).
    pub fn feedback(
        &mut self,
        fb: &Feedback,
        now_unix: f64,
        max_age_s: u64,
        memory: &MemoryRules,
        dim: usize,
    ) -> Result<Applied, FeedbackError> {
        if !fb.id.is_empty() && self.verdict_ids.contains(&fb.id) {
            return Err(FeedbackError::Replayed(fb.id.clone()));
        }
        let applied = self.take_verdict(fb, now_unix, max_age_s, memory, dim)?;
        if !fb.id.is_empty() {
            if self.verdict_ids.len() == VERDICT_IDS_KEPT {
                self.verdict_ids.pop_front();
            }
            self.verdict_ids.push_back(fb.id.clone());
        }
        Ok(applied)
    }

    fn take_verdict(
        &mut self,
        fb: &Feedback,
        now_unix: f64,
        max_age_s: u64,
        memory: &MemoryRules,
        dim: usize,
    ) -> Result<Applied, FeedbackError> {
        let is_open = self.open.as_ref().is_some_and(|i| i.id == fb.incident_id);
        let recent_closed = self.last_closed.as_ref().is_some_and(|i| {
            i.id == fb.incident_id && i.closed_at.is_some_and(|t| now_unix - t <= max_age_s as f64)
        });
        let unknown = || FeedbackError::UnknownIncident {
            device: fb.device.clone(),
            incident: fb.incident_id.clone(),
            max_age_s,
        };
        if !is_open
            && !recent_closed
            && fb.verdict == Verdict::Confirmed
            && self.memory.forget(&fb.incident_id)
        {
            return Ok(Applied::Unlearned);
        }
        let incident = if is_open {
            self.open.as_mut()
        } else if recent_closed {
            self.last_closed.as_mut()
        } else {
            None
        }
        .ok_or_else(unknown)?;
        let dismissed = incident.feedback.iter().any(|f| f.verdict == Verdict::FalsePositive);
        if dismissed && fb.verdict == Verdict::FalsePositive {
            return Err(FeedbackError::AlreadyDismissed(fb.incident_id.clone()));
        }
        incident.feedback.push(fb.clone());
        incident.news_fresh = false;
        // Its peers: a stranger dismissed is the device's now; a confirmed attack's
        // peers are forgotten.
        match fb.verdict {
            Verdict::FalsePositive => {
                self.history.remote.dismissed(&incident.traffic, incident.figures.last_ts)
            }
            Verdict::Confirmed => self.history.remote.confirmed(&incident.traffic, incident.figures.first_ts),
        }
        if fb.verdict == Verdict::Confirmed && self.memory.forget(&fb.incident_id) {
            // An attack after all: what was remembered of it (learned or dismissed) goes.
            incident.learned = false;
        }
        match (fb.verdict, is_open) {
            (Verdict::Confirmed, true) => Ok(Applied::Confirmed(Transition::Updated(incident.clone()))),
            (Verdict::Confirmed, false) => Ok(Applied::Confirmed(Transition::Reviewed(incident.clone()))),
            (Verdict::FalsePositive, open) => {
                let dismissal = Dismissal {
                    incident_id: fb.incident_id.clone(),
                    by: fb.by.clone(),
                    note: fb.note.clone(),
                    at: now_unix,
                    on: None,
                    learned: false,
                    expires_at: None,
                };
                let behaviour = Behaviour::of(
                    &incident.traffic,
                    incident.figures.anomalous,
                    &incident.kept,
                    dim,
                    dismissal,
                );
                incident.kept = Vec::new();
                let transition = if open {
                    self.close(Resolution::Dismissed, now_unix).expect("an open incident")
                } else {
                    Transition::Reviewed(incident.clone())
                };
                if memory.remember_ms > 0 {
                    self.memory.remember(behaviour);
                }
                Ok(Applied::Dismissed(transition))
            }
        }
    }
}
