//! Incidents: one per attack, not one alert per record. Per device, a small state
//! machine over its scored records — open when `k` of the last `n` decisions are
//! anomalous; update while open, at most every `update_interval`; close after `quiet`
//! with no anomalous decision. Pure: no Kafka, no clock of its own (times come in).

pub mod behaviours;
pub(crate) mod explain;
pub mod fanout;
pub mod fanout_usual;
pub mod footprint;
mod incident;
pub mod incident_traffic;
pub mod logins;
pub mod remote_peers;
pub mod spoofing;
mod tracker;

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::record::FeatureRecord;
use super::record::Source;
use crate::traffic::context::Context;
use behaviours::{Behaviour, Beyond, Dismissal, Memory, MemoryRules, News, LEARNED_BY};
use fanout::{FanOut, FanOutRules, Finding};
use footprint::{Footprint, History};
use incident_traffic::{Severity, Traffic};

/// Opening, updating and closing rules (`[incidents]`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct IncidentRules {
    /// Open when `open_k` of the last `open_n` decisions are anomalous (`open_n` ≤ 64).
    pub open_k: u32,
    pub open_n: u32,
    pub update_interval_ms: u64,
    pub quiet_ms: u64,
    /// An incident that closed quietly this recently (device time) opens again, under
    /// its id, instead of a new one: to an analyst a behaviour that pauses for a few
    /// minutes and resumes is one incident. 0 = never.
    pub reopen_ms: u64,
    /// Anomalous records kept per open incident (for feedback and explanations).
    pub keep_records: usize,
    /// What analysts dismissed, remembered (`behaviours.rs`).
    pub memory: MemoryRules,
    /// The second look on the records' packets (`fanout.rs`).
    pub fan_out: FanOutRules,
    /// An incident of the same behaviour as one a sibling of its kind raised at most
    /// this long before (device time) joins it: one fleet incident (`kinds.rs`). 0 = never.
    pub fleet_ms: u64,
}

/// The tests' rules: open on 3 of 5 anomalous decisions, nothing remembered, no second
/// look, no fleets.
#[cfg(test)]
pub(crate) const TEST_RULES: IncidentRules = IncidentRules {
    open_k: 3,
    open_n: 5,
    update_interval_ms: 1_000,
    quiet_ms: 10_000,
    reopen_ms: 0,
    keep_records: 2,
    memory: MemoryRules::OFF,
    fan_out: FanOutRules::OFF,
    fleet_ms: 0,
};

pub use incident::{fleet_note, Fleet, Incident, IncidentFigures, Raised, Resolution};
pub use tracker::{incident_id, IncidentTracker, LEARNING_NOTE, VERDICT_IDS_KEPT};

/// An analyst's verdict on an incident, as the feedback topic carries it (`metapu
/// feedback`, the console; applied by `feedback/verdict.rs`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Feedback {
    pub device: String,
    pub incident_id: String,
    pub verdict: Verdict,
    #[serde(default)]
    pub by: String,
    #[serde(default)]
    pub note: String,
    /// The verdict's own id: a device takes an id once, so a replayed message changes
    /// nothing (the ids are kept in its state). Empty: a message from before ids.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub id: String,
    /// When it was given (Unix seconds, the giver's clock); 0: not said.
    #[serde(default, skip_serializing_if = "is_unset")]
    pub at: f64,
    /// Where it was given: `console 10.0.0.7` (the analyst's address as the console saw
    /// it), `cli ops-host`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub from: String,
}

fn is_unset(t: &f64) -> bool {
    *t == 0.0
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Normal behaviour: the incident closes and its behaviour is remembered, so that its
    /// returns are suppressed; the device's known-normal records stay as they were.
    FalsePositive,
    /// A real attack: recorded on the incident; what the daemon remembered of its
    /// behaviour (learned, or dismissed before) is forgotten.
    Confirmed,
}

/// Feedback that cannot be applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FeedbackError {
    #[error("no incident {incident} on device {device} (unknown, or closed more than {max_age_s} s ago)")]
    UnknownIncident { device: String, incident: String, max_age_s: u64 },
    #[error("incident {0} was already dismissed")]
    AlreadyDismissed(String),
    #[error("verdict {0} was taken before: a replay changes nothing")]
    Replayed(String),
}

/// What applying feedback did.
#[derive(Debug, Clone, PartialEq)]
pub enum Applied {
    /// A false positive: its behaviour is remembered; the transition closes the
    /// incident as dismissed (or, for one already closed, reports the verdict).
    Dismissed(Transition),
    /// Recorded on the incident.
    Confirmed(Transition),
    /// A `confirmed` verdict on an incident no longer at hand (closed long ago, or not the
    /// last) whose behaviour is remembered: it is forgotten (its returns are raised again).
    Unlearned,
}

/// What happened to a device's incident.
#[derive(Debug, Clone, PartialEq)]
pub enum Transition {
    Opened(Incident),
    Updated(Incident),
    /// It had closed quietly a moment ago (`IncidentRules::reopen_ms`) and is open again.
    Reopened(Incident),
    /// It opened, and is of a behaviour an analyst dismissed: recorded, not raised
    /// (its updates are not sent; its close is, and a record beyond the behaviour opens
    /// it for the analyst as news).
    Suppressed(Incident),
    Closed(Incident, Resolution),
    /// An analyst's verdict on an incident that had already closed.
    Reviewed(Incident),
    /// It opened, of the same behaviour as an incident a sibling of its kind raised a
    /// moment before, and joined it: recorded under that fleet incident, not raised (a
    /// record beyond that behaviour raises it as news).
    Joined(Incident),
}

impl Transition {
    /// The incident as it is after the change.
    pub fn incident(&self) -> &Incident {
        match self {
            Self::Opened(i)
            | Self::Updated(i)
            | Self::Reopened(i)
            | Self::Suppressed(i)
            | Self::Reviewed(i)
            | Self::Joined(i)
            | Self::Closed(i, _) => i,
        }
    }
}

/// One scored record, as the tracker sees it.
#[derive(Debug, Clone, Copy)]
pub struct Decision<'a> {
    pub anomalous: bool,
    /// Posterior probability of normal traffic.
    pub posterior: f32,
    pub prior: f32,
    pub ts: f64,
    pub source: &'a Source,
    pub features: &'a [f32],
    pub context: Option<&'a Context>,
    /// The model judged it (it was not labeled normal or taken as normal): the first
    /// such record starts the device's learning period.
    pub judged: bool,
}

impl<'a> Decision<'a> {
    /// A scored record's decision. A record labeled normal, or taken as known-normal by
    /// the daemon (`taken_as_normal`: a new device's first records, an onboarding span's),
    /// never counts towards an incident: the operator said what it is, and it is being
    /// learned as normal.
    pub fn of(
        record: &'a FeatureRecord,
        source: &'a Source,
        posterior: f32,
        anomalous: bool,
        prior: f32,
        taken_as_normal: bool,
    ) -> Self {
        Self {
            anomalous: anomalous && !record.known_normal && !taken_as_normal,
            posterior,
            prior,
            ts: record.ts,
            source,
            features: &record.features,
            context: record.context.as_ref(),
            judged: !record.known_normal && !taken_as_normal,
        }
    }
}

fn is_zero<T: Default + PartialEq>(n: &T) -> bool {
    *n == T::default()
}

#[cfg(test)]
#[path = "tracker_tests.rs"]
mod tests;
