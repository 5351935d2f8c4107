//! The analyst's desk: what the console knows, folded from what the daemons publish
//! (incident events, prior updates, refused verdicts) and the verdicts it sent. The
//! one owner of that state; pages and the API only read it. No Kafka here: the feed
//! hands it messages, the tests and the bench call it directly.

use std::collections::{BTreeMap, HashMap, VecDeque};

use serde::Serialize;

use crate::monitor::devices::PriorUpdate;
use crate::monitor::feedback::FeedbackMessage;
use crate::monitor::incidents::behaviours::Dismissal;
use crate::monitor::incidents::incident_traffic::Severity;
use crate::monitor::incidents::{Feedback, Verdict};
use crate::monitor::output::{DeadLetter, IncidentEvent, IncidentReport};

/// Events kept per incident: its first ones and its newest (an incident open for a
/// week is updated thousands of times).
const EVENTS_KEPT: usize = 60;
/// Of those, its first ones (how it began); the rest are its newest.
pub const EVENTS_HEAD: usize = EVENTS_KEPT / 4;
/// Adaptation points kept per device for the plots around an incident.
const POINTS_KEPT: usize = 2_048;
/// Seconds in a day (alerts by day are by UTC day of the device's time).
pub const DAY_S: f64 = 86_400.0;

/// A day's date (`2021-03-08`), from its number of days since the epoch.
pub fn day_date(day: i64) -> String {
    crate::monitor::output::iso8601(day as f64 * DAY_S)[..10].to_string()
}

/// Where an incident stands, as the analyst reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Standing {
    /// Raised and not closed.
    Open,
    /// Recorded, not raised: of a behaviour dismissed or learned before.
    Suppressed,
    /// Recorded under a sibling's fleet incident.
    Joined,
    Closed,
}

/// One event of an incident, as its page lists it.
#[derive(Debug, Clone, Serialize)]
pub struct EventLine {
    pub event: &'static str,
    /// Unix seconds (the device's time on the event clock).
    pub time: f64,
    pub summary: String,
    pub severity: Severity,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub news: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub footprint: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resolution: Option<String>,
}

/// A verdict the daemon refused (its dead letter), or one the console sent that the
/// daemon has not answered yet.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct VerdictNote {
    pub verdict: Verdict,
    pub by: String,
    pub note: String,
    /// Unix seconds (the console's clock when sent, the daemon's when refused).
    pub time: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The verdict's id.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub id: String,
}

/// One incident, its events folded.
#[derive(Debug, Clone)]
pub struct Case {
    pub report: IncidentReport,
    pub standing: Standing,
    /// Its first event's name (`opened`, `suppressed`, `joined`).
    pub first_event: &'static str,
    /// When its newest event came (its time).
    pub last_time: f64,
    pub events: Vec<EventLine>,
    /// Events not kept in `events` (between its first and its newest).
    pub events_dropped: usize,
    pub sent: Vec<VerdictNote>,
    pub refused: Vec<VerdictNote>,
}

impl Case {
    /// The verdicts the daemon recorded on it (`feedback` of its newest event).
    pub fn verdicts(&self) -> &[Feedback] {
        &self.report.feedback
    }

    /// Sent from here and not answered yet (neither recorded nor refused).
    pub fn pending(&self) -> Vec<&VerdictNote> {
        let answered = |s: &VerdictNote| {
            self.verdicts().iter().any(|f| f.verdict == s.verdict && f.by == s.by)
                || self.refused.iter().any(|r| r.verdict == s.verdict && r.by == s.by && r.time >= s.time)
        };
        self.sent.iter().filter(|s| !answered(s)).collect()
    }

    /// The dismissal it was suppressed under, in words.
    pub fn suppressed_by(&self) -> Option<String> {
        let d = self.report.suppressed.as_ref()?;
        Some(if d.learned {
            format!("learned from incident {}", d.incident_id)
        } else {
            format!("dismissed in incident {} by {}", d.incident_id, d.by)
        })
    }

    /// Its span on a plot: from its first record to its last anomalous one (a quiet
    /// close on the device's clock can come hours later, at its next record).
    pub fn span(&self) -> (f64, f64) {
        let f = &self.report.figures;
        let from = f.opened_at.min(f.first_ts);
        (from, f.last_ts.max(from))
    }

    /// The peers of its traffic, by name where the device looked one up.
    pub fn peers(&self) -> Vec<String> {
        let Some(t) = &self.report.traffic else { return Vec::new() };
        let mut peers: Vec<String> = Vec::with_capacity(t.top_peers.len());
        for p in &t.top_peers {
            let shown = p.name.clone().unwrap_or_else(|| p.value.clone());
            // A cloud's several addresses under its one name.
            if !peers.contains(&shown) {
                peers.push(shown);
            }
        }
        peers
    }
}

/// A device's adaptation point, as the plots read it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Point {
    /// The device's time (its newest record's `ts`).
    pub ts: f64,
    pub prior: f32,
    /// Records scored, and alerted, since the point before.
    pub scored: u64,
    pub alerted: u64,
}

/// A UTC day of the device's time.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Day {
    pub scored: u64,
    pub alerted: u64,
    pub prior_sum: f64,
    pub points: u64,
}

impl Day {
    pub fn alert_rate(&self) -> Option<f64> {
        (self.scored > 0).then(|| self.alerted as f64 / self.scored as f64)
    }

    pub fn mean_prior(&self) -> Option<f64> {
        (self.points > 0).then(|| self.prior_sum / self.points as f64)
    }
}

/// One device, as the daemons published it.
#[derive(Debug, Clone, Default)]
pub struct DeviceCase {
    pub latest: Option<PriorUpdate>,
    pub points: VecDeque<Point>,
    /// By UTC day (days since the epoch) of the device's time.
    pub days: BTreeMap<i64, Day>,
    /// The cumulative counters of the last update (a restart of its daemon begins them
    /// again).
    counted: (u64, u64),
    /// Its incidents, oldest first.
    pub incidents: Vec<String>,
    pub kind: Option<String>,
    /// When its known-normal records were taken (first, newest), as its daemon last
    /// said (a restarted daemon says nothing until it takes another).
    pub known_normal_span: Option<(f64, f64)>,
    /// The last onboarding: from, until (Unix seconds), who, and the known-normal
    /// records it left (once it ended).
    pub onboarding: Option<OnboardingHeard>,
    /// Sends traffic but has nothing known-normal (`unmonitored`), or was forgotten.
    pub unmonitored: Option<String>,
}

/// A device's last onboarding as the desk heard of it on the incidents topic (the
/// daemon's own state of one is `monitor::devices::onboarding::Onboarding`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OnboardingHeard {
    pub from: f64,
    pub until: f64,
    pub by: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub known_normal: Option<usize>,
}

impl DeviceCase {
    /// What it remembers, with expiry.
    pub fn remembered(&self) -> &[Dismissal] {
        self.latest.as_ref().map_or(&[], |p| &p.remembered)
    }

    fn add_prior(&mut self, p: PriorUpdate) {
        let ts = if p.ts > 0.0 { p.ts } else { p.time };
        let (scored, alerted) = if p.scored >= self.counted.0 && p.alerted >= self.counted.1 {
            (p.scored - self.counted.0, p.alerted - self.counted.1)
        } else {
            (p.scored, p.alerted) // counters begun again
        };
        self.counted = (p.scored, p.alerted);
        let day = self.days.entry((ts / DAY_S).floor() as i64).or_default();
        day.scored += scored;
        day.alerted += alerted;
        day.prior_sum += f64::from(p.prior);
        day.points += 1;
        if self.points.len() == POINTS_KEPT {
            self.points.pop_front();
        }
        self.points.push_back(Point { ts, prior: p.prior, scored, alerted });
        if p.kind.is_some() {
            self.kind.clone_from(&p.kind);
        }
        if p.known_normal_span.is_some() {
            self.known_normal_span = p.known_normal_span;
        }
        self.unmonitored = None;
        self.latest = Some(p);
    }
}

/// What the desk was told that it could not read (counted by the feed).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{topic}: {reason}")]
pub struct Unreadable {
    pub topic: &'static str,
    pub reason: String,
}

/// Why a verdict is not sent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerdictError {
    #[error("no incident {0} (unknown to this console)")]
    UnknownIncident(String),
    #[error("incident {incident} is of device {actual}, not {given}")]
    WrongDevice { incident: String, actual: String, given: String },
    #[error("incident {incident} already has the verdict {verdict} by {by}")]
    Replayed { incident: String, verdict: &'static str, by: String },
    #[error("a verdict says who gives it: `by` is empty")]
    Anonymous,
    #[error("verdict {0} was given before: a replay changes nothing")]
    ReplayedId(String),
}

pub fn verdict_name(v: Verdict) -> &'static str {
    match v {
        Verdict::FalsePositive => "false_positive",
        Verdict::Confirmed => "confirmed",
    }
}

/// Everything the console shows.
#[derive(Debug, Default)]
pub struct Desk {
    cases: HashMap<String, Case>,
    devices: BTreeMap<String, DeviceCase>,
    /// Incidents by the time they were first seen, oldest first: the oldest closed ones
    /// go first past `max_incidents`.
    arrival: VecDeque<String>,
    max_incidents: usize,
}

impl Desk {
    pub fn new(max_incidents: usize) -> Self {
        Self { max_incidents: max_incidents.max(1), ..Self::default() }
    }

    pub fn case(&self, id: &str) -> Option<&Case> {
        self.cases.get(id)
    }

    pub fn device(&self, id: &str) -> Option<&DeviceCase> {
        self.devices.get(id)
    }

    pub fn devices(&self) -> impl Iterator<Item = (&String, &DeviceCase)> {
        self.devices.iter()
    }

    pub fn cases(&self) -> impl Iterator<Item = &Case> {
        self.cases.values()
    }

    pub fn incident_count(&self) -> usize {
        self.cases.len()
    }

    /// Devices of `kind` other than `device`.
    pub fn siblings(&self, device: &str, kind: &str) -> Vec<&str> {
        self.devices
            .iter()
            .filter(|(id, d)| id.as_str() != device && d.kind.as_deref() == Some(kind))
            .map(|(id, _)| id.as_str())
            .collect()
    }

    /// An event of the incidents topic.
    pub fn incident_event(&mut self, payload: &[u8]) -> Result<(), Unreadable> {
        let event: IncidentEvent = serde_json::from_slice(payload)
            .map_err(|e| Unreadable { topic: "incidents", reason: format!("not an incident event: {e}") })?;
        let name = event.name();
        let device = self.devices.entry(event.device().to_string()).or_default();
        match event {
            IncidentEvent::Opened(r)
            | IncidentEvent::Updated(r)
            | IncidentEvent::Reopened(r)
            | IncidentEvent::Suppressed(r)
            | IncidentEvent::Closed(r)
            | IncidentEvent::Reviewed(r)
            | IncidentEvent::Joined(r) => self.fold(name, r),
            IncidentEvent::Onboarding { kind, from, until, by, .. } => {
                if kind.is_some() {
                    device.kind = kind;
                }
                device.onboarding = Some(OnboardingHeard { from, until, by, known_normal: None });
                device.unmonitored = None;
            }
            IncidentEvent::KindJoined { kind, .. } => device.kind = Some(kind),
            IncidentEvent::Onboarded { from, until, by, known_normal, .. } => {
                device.onboarding =
                    Some(OnboardingHeard { from, until, by, known_normal: Some(known_normal) });
            }
            IncidentEvent::Unmonitored { message, .. } => device.unmonitored = Some(message),
            IncidentEvent::Forgotten { by, .. } => {
                device.unmonitored = Some(format!("forgotten by {by}: unmonitored until onboarded again"));
            }
            IncidentEvent::Unlearned { .. } => {}
        }
        Ok(())
    }

    fn fold(&mut self, name: &'static str, r: IncidentReport) {
        let line = EventLine {
            event: name,
            time: r.time,
            summary: r.summary.clone(),
            severity: r.severity,
            news: r.news.as_ref().map(|n| n.why.clone()),
            footprint: r.footprint.as_ref().map(|f| f.words()),
            resolution: r.resolution.clone(),
        };
        let standing = match name {
            "closed" | "reviewed" => Standing::Closed,
            _ if r.fleet.is_some() => Standing::Joined,
            _ if r.suppressed.is_some() => Standing::Suppressed,
            _ => Standing::Open,
        };
        let id = r.incident_id.clone();
        let device = r.device.clone();
        match self.cases.get_mut(&id) {
            Some(case) => {
                if case.events.len() == EVENTS_KEPT {
                    // Keep the first few (how it began) and the newest.
                    case.events.remove(EVENTS_HEAD);
                    case.events_dropped += 1;
                }
                case.events.push(line);
                case.last_time = case.last_time.max(r.time);
                // A reopening after a close opens it again; a late update of a
                // closed one (another daemon's) does not.
                if name != "updated" || case.standing != Standing::Closed {
                    case.standing = standing;
                }
                case.report = r;
            }
            None => {
                let case = Case {
                    standing,
                    first_event: name,
                    last_time: r.time,
                    events: vec![line],
                    events_dropped: 0,
                    sent: Vec::new(),
                    refused: Vec::new(),
                    report: r,
                };
                self.cases.insert(id.clone(), case);
                self.arrival.push_back(id.clone());
                self.devices.entry(device).or_default().incidents.push(id);
                self.trim();
            }
        }
    }

    /// Past `max_incidents`, the oldest closed incidents go (open ones stay).
    fn trim(&mut self) {
        let mut scanned = 0;
        while self.cases.len() > self.max_incidents && scanned < self.arrival.len() {
            let Some(id) = self.arrival.pop_front() else { break };
            match self.cases.get(&id) {
                Some(c) if c.standing == Standing::Open => {
                    self.arrival.push_back(id);
                    scanned += 1;
                }
                Some(c) => {
                    let device = c.report.device.clone();
                    self.cases.remove(&id);
                    if let Some(d) = self.devices.get_mut(&device) {
                        d.incidents.retain(|i| *i != id);
                    }
                }
                None => {}
            }
        }
    }

    /// An update of the priors topic.
    pub fn prior_update(&mut self, payload: &[u8]) -> Result<(), Unreadable> {
        let p: PriorUpdate = serde_json::from_slice(payload)
            .map_err(|e| Unreadable { topic: "priors", reason: format!("not a prior update: {e}") })?;
        self.devices.entry(p.device.clone()).or_default().add_prior(p);
        Ok(())
    }

    /// A dead letter: a refused verdict is noted on its incident; other letters are not
    /// the desk's.
    pub fn dead_letter(&mut self, payload: &[u8]) -> Result<(), Unreadable> {
        let letter: DeadLetter = serde_json::from_slice(payload)
            .map_err(|e| Unreadable { topic: "dead letters", reason: format!("not a dead letter: {e}") })?;
        if letter.kind != "bad_feedback" {
            return Ok(());
        }
        let Ok(FeedbackMessage::Verdict(fb)) = serde_json::from_str::<FeedbackMessage>(&letter.payload)
        else {
            return Ok(());
        };
        if let Some(case) = self.cases.get_mut(&fb.incident_id) {
            case.refused.push(VerdictNote {
                verdict: fb.verdict,
                by: fb.by,
                note: fb.note,
                time: letter.time,
                reason: Some(letter.reason),
                id: fb.id,
            });
        }
        Ok(())
    }

    /// Check a verdict before it is sent: the incident is known, of that device, and
    /// has no such verdict already (given, or sent and not answered). The feedback to
    /// send.
    pub fn check_verdict(
        &self,
        incident: &str,
        device: Option<&str>,
        verdict: Verdict,
        by: &str,
        note: &str,
        id: &str,
    ) -> Result<Feedback, VerdictError> {
        if by.trim().is_empty() {
            return Err(VerdictError::Anonymous);
        }
        let case = self.cases.get(incident).ok_or_else(|| VerdictError::UnknownIncident(incident.into()))?;
        let seen = |i: &str| !id.is_empty() && i == id;
        if case.verdicts().iter().any(|f| seen(&f.id))
            || case.sent.iter().chain(&case.refused).any(|n| seen(&n.id))
        {
            return Err(VerdictError::ReplayedId(id.into()));
        }
        let actual = &case.report.device;
        if let Some(given) = device.filter(|d| *d != actual) {
            return Err(VerdictError::WrongDevice {
                incident: incident.into(),
                actual: actual.clone(),
                given: given.into(),
            });
        }
        let given = case.verdicts().iter().find(|f| f.verdict == verdict).map(|f| f.by.clone());
        let sent = case.pending().into_iter().find(|s| s.verdict == verdict).map(|s| s.by.clone());
        if let Some(by) = given.or(sent) {
            return Err(VerdictError::Replayed {
                incident: incident.into(),
                verdict: verdict_name(verdict),
                by,
            });
        }
        Ok(Feedback {
            device: actual.clone(),
            incident_id: incident.into(),
            verdict,
            by: by.trim().into(),
            note: note.into(),
            id: id.into(),
            at: 0.0,
            from: String::new(),
        })
    }

    /// A verdict was written to the feedback topic at `time`.
    pub fn sent(&mut self, fb: &Feedback, time: f64) {
        if let Some(case) = self.cases.get_mut(&fb.incident_id) {
            case.sent.push(VerdictNote {
                verdict: fb.verdict,
                by: fb.by.clone(),
                note: fb.note.clone(),
                time,
                reason: None,
                id: fb.id.clone(),
            });
        }
    }
}

#[cfg(test)]
#[path = "desk_tests.rs"]
mod tests;
