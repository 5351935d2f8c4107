//! What the API answers and the pages list, read off the desk: an incident's row, a
//! device's figures, and the filter both take.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use super::desk::{
    day_date, verdict_name, Case, Day, Desk, DeviceCase, EventLine, OnboardingHeard, Point, Standing,
    VerdictNote,
};
use crate::monitor::devices::PriorUpdate;
use crate::monitor::incidents::behaviours::Dismissal;
use crate::monitor::incidents::fanout::RaisedBy;
use crate::monitor::incidents::incident_traffic::Severity;
use crate::monitor::incidents::{Feedback, Verdict};
use crate::monitor::output::{iso8601, IncidentReport};
use strum::VariantNames;

/// Which incidents to list, as a query or the page's form gives it: text, an empty field
/// meaning any. [`Self::checked`] makes it an [`IncidentFilter`] or says which value is
/// unknown.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Filter {
    pub device: Option<String>,
    /// What raised it (a [`RaisedBy`] name).
    pub kind: Option<String>,
    pub severity: Option<String>,
    /// `open` (open ones only) or `all` (the default).
    pub state: Option<String>,
    /// Only incidents with an event at or after this time (Unix seconds).
    pub since: Option<f64>,
    pub limit: Option<usize>,
}

/// Which incidents to list, typed: each value one the incidents can have.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct IncidentFilter {
    pub device: Option<String>,
    pub raised_by: Option<RaisedBy>,
    pub severity: Option<Severity>,
    pub open_only: bool,
    pub since: Option<f64>,
    pub limit: Option<usize>,
}

impl Filter {
    fn given(v: &Option<String>) -> Option<&str> {
        v.as_deref().map(str::trim).filter(|s| !s.is_empty())
    }

    /// Typed: empty fields gone, unknown values refused with the ones there are.
    pub fn checked(&self) -> Result<IncidentFilter, String> {
        let raised_by = Self::given(&self.kind)
            .map(|k| {
                k.parse().map_err(|_| format!("unknown kind {k:?}: one of {}", RaisedBy::VARIANTS.join(", ")))
            })
            .transpose()?;
        let severity = Self::given(&self.severity)
            .map(|s| {
                s.parse().map_err(|_| format!("unknown severity {s:?}: {}", Severity::VARIANTS.join(", ")))
            })
            .transpose()?;
        let open_only = match Self::given(&self.state) {
            None | Some("all") => false,
            Some("open") => true,
            Some(s) => return Err(format!("unknown state {s:?}: open or all")),
        };
        Ok(IncidentFilter {
            device: Self::given(&self.device).map(str::to_string),
            raised_by,
            severity,
            open_only,
            since: self.since,
            limit: self.limit,
        })
    }
}

impl IncidentFilter {
    fn admits(&self, r: &IncidentRow) -> bool {
        self.device.as_deref().is_none_or(|d| r.device == d)
            && self.raised_by.is_none_or(|k| r.raised_by == k)
            && self.severity.is_none_or(|s| r.severity == s)
            && (!self.open_only || r.standing == Standing::Open)
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
    pub severity: Severity,
    pub raised_by: RaisedBy,
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
            severity: r.severity,
            raised_by: r.raised_by,
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
    pub fn list(desk: &Desk, filter: &IncidentFilter, limit: usize) -> Vec<Self> {
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
    pub onboarding: Option<&'a OnboardingHeard>,
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

    /// A filter's values are the incidents' own: every name `raised_by` and `severity`
    /// publish is accepted, and an unknown one is refused with the list.
    #[test]
    fn a_filter_takes_the_names_incidents_publish_and_refuses_others() {
        for k in RaisedBy::VARIANTS {
            let parsed: RaisedBy = serde_json::from_value(serde_json::json!(k)).expect(k);
            let f = Filter { kind: Some(k.to_string()), ..Filter::default() }.checked().unwrap();
            assert_eq!((f.raised_by, <&str>::from(parsed)), (Some(parsed), *k));
        }
        for s in Severity::VARIANTS {
            let f = Filter { severity: Some(format!(" {s} ")), ..Filter::default() }.checked().unwrap();
            assert_eq!(f.severity.map(Severity::as_str), Some(*s));
        }
        let empty = Filter { kind: Some(String::new()), state: Some("all".into()), ..Filter::default() };
        assert_eq!(empty.checked(), Ok(IncidentFilter::default()));
        let err = Filter { kind: Some("worm".into()), ..Filter::default() }.checked().unwrap_err();
        assert!(err.contains("port_scan") && err.contains("\"worm\""), "{err}");
        assert!(Filter { severity: Some("urgent".into()), ..Filter::default() }.checked().is_err());
        assert!(Filter { state: Some("closed".into()), ..Filter::default() }.checked().is_err());
    }
}
