//! What the API answers and the pages list, read off the desk: an incident's row, a
//! device's figures, and the filter both take.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use super::desk::{
    day_date, verdict_name, Case, Day, Desk, DeviceCase, EventLine, Onboarding, Point, Standing, VerdictNote,
};
use crate::monitor::devices::PriorUpdate;
use crate::monitor::incidents::behaviours::Dismissal;
use crate::monitor::incidents::incident_traffic::Severity;
use crate::monitor::incidents::{Feedback, Verdict};
use crate::monitor::output::{iso8601, IncidentReport};

/// What can raise an incident (`raised_by`): the model, or one of the looks.
pub const RAISED_BY: &[&str] = &[
    "model",
    "address_scan",
    "port_scan",
    "flood",
    "stealth_scan",
    "arp_sweep",
    "login_guessing",
    "spoofed_sources",
    "data_to_stranger",
    "far_above_usual",
];

/// Severities, least first, as incidents name them.
pub const SEVERITIES: [&str; 4] =
    [Severity::Low.as_str(), Severity::Medium.as_str(), Severity::High.as_str(), Severity::Critical.as_str()];

/// Which incidents to list. An empty field (a form's) means any.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Filter {
    pub device: Option<String>,
    /// What raised it ([`RAISED_BY`]).
    pub kind: Option<String>,
    pub severity: Option<String>,
    /// `open` (open ones only) or `all` (the default).
    pub state: Option<String>,
    /// Only incidents with an event at or after this time (Unix seconds).
    pub since: Option<f64>,
    pub limit: Option<usize>,
}

impl Filter {
    fn given(v: &Option<String>) -> Option<&str> {
        v.as_deref().map(str::trim).filter(|s| !s.is_empty())
    }

    /// Normalised: empty fields gone, unknown values refused.
    pub fn checked(mut self) -> Result<Self, String> {
        self.device = Self::given(&self.device).map(str::to_string);
        self.kind = Self::given(&self.kind).map(str::to_string);
        self.severity = Self::given(&self.severity).map(str::to_string);
        self.state = Self::given(&self.state).map(str::to_string);
        if let Some(k) = self.kind.as_deref().filter(|k| !RAISED_BY.contains(k)) {
            return Err(format!("unknown kind {k:?}: one of {}", RAISED_BY.join(", ")));
        }
        if let Some(s) = self.severity.as_deref().filter(|s| !SEVERITIES.contains(s)) {
            return Err(format!("unknown severity {s:?}: low, medium, high or critical"));
        }
        if let Some(s) = self.state.as_deref().filter(|s| !["open", "all"].contains(s)) {
            return Err(format!("unknown state {s:?}: open or all"));
        }
        Ok(self)
    }

    fn admits(&self, r: &IncidentRow) -> bool {
        self.device.as_deref().is_none_or(|d| r.device == d)
            && self.kind.as_deref().is_none_or(|k| r.raised_by == k)
            && self.severity.as_deref().is_none_or(|s| r.severity == s)
            && (self.state.as_deref() != Some("open") || r.standing == Standing::Open)
            && self.since.is_none_or(|t| r.last_time >= t)
    }
}

/// An incident as a list shows it, and as the API lists it.
#[derive(Debug, Clone, Serialize)]
pub struct IncidentRow {
    pub incident_id: String,
    pub device: String,
    pub standing: Standing,
    /// Its newest event's name is in `events` of its page; this is its first.
    pub first_event: &'static str,
    pub severity: String,
    pub raised_by: String,
    pub opened_at: f64,
    pub opened: String,
    /// Its newest event's time.
    pub last_time: f64,
    /// What it is, in one sentence (its newest event's summary).
    pub sentence: String,
    /// Its peers, by the name the device looked each up by where it did.
    pub peers: Vec<String>,
    /// A fleet incident's members.
    pub members: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub suppressed_by: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resolution: Option<String>,
    /// The verdict's result in words: `dismissed by ana`, `confirmed by bo`, `sent by
    /// ana, waiting`, `refused: …`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verdict: Option<String>,
    pub verdicts: Vec<Feedback>,
    pub pending: Vec<VerdictNote>,
    pub refused: Vec<VerdictNote>,
}

fn text_of<T: Serialize>(v: &T) -> String {
    serde_json::to_value(v).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default()
}

impl IncidentRow {
    pub fn of(c: &Case) -> Self {
        let r = &c.report;
        let by = |v: Verdict| c.verdicts().iter().rev().find(|f| f.verdict == v).map(|f| f.by.clone());
        let pending: Vec<VerdictNote> = c.pending().into_iter().cloned().collect();
        let verdict = if r.resolution.as_deref() == Some("dismissed") {
            Some(format!("dismissed by {}", by(Verdict::FalsePositive).unwrap_or_default()))
        } else if let Some(b) = by(Verdict::Confirmed) {
            Some(format!("confirmed by {b}"))
        } else if let Some(b) = by(Verdict::FalsePositive) {
            Some(format!("reviewed: false positive by {b}"))
        } else if let Some(p) = pending.last() {
            Some(format!("{} sent by {}, waiting for the daemon", verdict_name(p.verdict), p.by))
        } else {
            c.refused.last().map(|n| format!("refused: {}", n.reason.clone().unwrap_or_default()))
        };
        Self {
            incident_id: r.incident_id.clone(),
            device: r.device.clone(),
            standing: c.standing,
            first_event: c.first_event,
            severity: r.severity.as_str().to_string(),
            raised_by: text_of(&r.raised_by),
            opened_at: r.figures.opened_at,
            opened: iso8601(r.figures.opened_at),
            last_time: c.last_time,
            sentence: r.summary.clone(),
            peers: c.peers(),
            members: r.members.iter().cloned().collect(),
            suppressed_by: c.suppressed_by(),
            resolution: r.resolution.clone(),
            verdict,
            verdicts: r.feedback.clone(),
            pending,
            refused: c.refused.clone(),
        }
    }

    /// Those `filter` admits, open ones first, then newest first; at most `limit` (or
    /// the filter's, if smaller).
    pub fn list(desk: &Desk, filter: &Filter, limit: usize) -> Vec<Self> {
        let mut rows: Vec<Self> = desk.cases().map(Self::of).filter(|r| filter.admits(r)).collect();
        rows.sort_by(|a, b| {
            (b.standing == Standing::Open)
                .cmp(&(a.standing == Standing::Open))
                .then(b.last_time.total_cmp(&a.last_time))
                .then_with(|| a.incident_id.cmp(&b.incident_id))
        });
        rows.truncate(filter.limit.unwrap_or(limit).min(limit));
        rows
    }
}

/// An incident with its events, as `GET /api/incidents/{id}` answers.
#[derive(Debug, Serialize)]
pub struct IncidentDetail<'a> {
    #[serde(flatten)]
    pub row: IncidentRow,
    pub events: &'a [EventLine],
    pub events_not_kept: usize,
    /// Its newest event as the daemon published it.
    pub report: &'a IncidentReport,
}

impl<'a> IncidentDetail<'a> {
    pub fn of(c: &'a Case) -> Self {
        Self {
            row: IncidentRow::of(c),
            events: &c.events,
            events_not_kept: c.events_dropped,
            report: &c.report,
        }
    }
}

/// A device, as `GET /api/devices/{id}` answers.
#[derive(Debug, Serialize)]
pub struct DeviceDetail<'a> {
    pub device: &'a str,
    pub kind: Option<&'a str>,
    pub siblings: Vec<&'a str>,
    /// Its newest prior update as published.
    pub latest: Option<&'a PriorUpdate>,
    pub days: Vec<DayRow>,
    pub points: &'a VecDeque<Point>,
    pub remembered: &'a [Dismissal],
    pub onboarding: Option<&'a Onboarding>,
    /// When its known-normal records were taken: first, newest.
    pub known_normal_span: Option<(f64, f64)>,
    pub unmonitored: Option<&'a str>,
    pub incidents: &'a [String],
}

#[derive(Debug, Serialize)]
pub struct DayRow {
    pub day: String,
    pub scored: u64,
    pub alerted: u64,
    pub alert_rate: Option<f64>,
    pub mean_prior: Option<f64>,
}

impl<'a> DeviceDetail<'a> {
    pub fn of(desk: &'a Desk, id: &'a str, d: &'a DeviceCase) -> Self {
        let days = d
            .days
            .iter()
            .map(|(k, day): (&i64, &Day)| DayRow {
                day: day_date(*k),
                scored: day.scored,
                alerted: day.alerted,
                alert_rate: day.alert_rate(),
                mean_prior: day.mean_prior(),
            })
            .collect();
        Self {
            device: id,
            kind: d.kind.as_deref(),
            siblings: d.kind.as_deref().map(|k| desk.siblings(id, k)).unwrap_or_default(),
            latest: d.latest.as_ref(),
            days,
            points: &d.points,
            remembered: d.remembered(),
            onboarding: d.onboarding.as_ref(),
            known_normal_span: d.known_normal_span,
            unmonitored: d.unmonitored.as_deref(),
            incidents: &d.incidents,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::monitor::incidents::fanout::RaisedBy;

    /// The filter's list names what `raised_by` can say, each once.
    #[test]
    fn every_kind_a_filter_offers_is_one_an_incident_can_be_raised_by() {
        for k in RAISED_BY {
            let parsed: RaisedBy = serde_json::from_value(serde_json::json!(k)).expect(k);
            assert_eq!(text_of(&parsed), *k);
        }
        let distinct: std::collections::BTreeSet<_> = RAISED_BY.iter().collect();
        assert_eq!(distinct.len(), RAISED_BY.len());
    }
}
