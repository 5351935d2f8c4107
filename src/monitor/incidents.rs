//! Incidents: one per attack, not one alert per record. Per device, a small state
//! machine over its scored records — open when `k` of the last `n` decisions are
//! anomalous; update while open, at most every `update_interval`; close after `quiet`
//! with no anomalous decision. Pure: no Kafka, no clock of its own (times come in).

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::behaviours::{Behaviour, Beyond, Dismissal, Memory, MemoryRules, News, LEARNED_BY};
use super::fanout::{FanOut, FanOutRules, Finding};
use super::feedback::{Feedback, Verdict};
use super::footprint::{self, Footprint, History};
use super::incident_traffic::{Severity, Traffic};
use super::kinds::Raised;
use super::record::FeatureRecord;
use super::record::Source;
use crate::traffic::context::Context;

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

/// An open incident of one device. Part of the device's snapshot; the service-clock
/// fields are not (they restart at restore).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Incident {
    /// Deterministic: the device and the source of the record that opened it, so a
    /// redelivered record never opens a second incident.
    pub id: String,
    pub opened_by: Source,
    #[serde(flatten)]
    pub figures: IncidentFigures,
    /// Sum of the anomalous records' anomaly scores (for their mean).
    pub score_sum: f64,
    /// The device's estimated attack share (1 − π̂) at its last record.
    pub attack_share: f32,
    /// Service clock (ms) of the last anomalous decision and of the last update sent.
    #[serde(skip)]
    pub last_anomalous_ms: u64,
    #[serde(skip)]
    pub last_update_ms: u64,
    /// Records came in since the last event.
    #[serde(skip)]
    pub changed: bool,
    /// Feature rows of up to `keep_records` anomalous records, the first ones.
    pub kept: Vec<f32>,
    /// Analysts' verdicts on it, oldest first.
    #[serde(default)]
    pub feedback: Vec<Feedback>,
    /// The packets behind its anomalous records (when the records carried context).
    #[serde(default)]
    pub traffic: Traffic,
    /// Unix seconds when it closed (closed incidents kept for late feedback only).
    #[serde(default)]
    pub closed_at: Option<f64>,
    /// Times it closed quietly and opened again (`IncidentRules::reopen_ms`), and the
    /// record that reopened it last.
    #[serde(default)]
    pub reopened: u32,
    #[serde(default)]
    pub reopened_by: Option<Source>,
    /// Of a behaviour an analyst dismissed (`behaviours.rs`): recorded, not raised.
    #[serde(default)]
    pub suppressed: Option<Dismissal>,
    /// It was suppressed and then went beyond the dismissed behaviour: why, in words,
    /// and the record that did.
    #[serde(default)]
    pub news: Option<News>,
    /// Raised by the fan-out look (`fanout.rs`), not by the model's decisions: which
    /// look, why, and the record.
    #[serde(default)]
    pub look: Option<Finding>,
    /// It closed quietly without a verdict and its behaviour was remembered
    /// (`MemoryRules::learn_quiet`).
    #[serde(default)]
    pub learned: bool,
    /// What it showed of an attack's footprint (`footprint.rs`), from the record that
    /// first did: never learned without a verdict, and news in a return of what was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub footprint: Option<Footprint>,
    /// The kinds of footprint it has shown (bit `1 << weight`): a raised incident that
    /// shows a new kind on the device tells the analyst at once.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub shown: u8,
    /// It joined a sibling's incident (`IncidentRules::fleet_ms`): recorded under it, not
    /// raised, and answered by the verdict on it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fleet: Option<Fleet>,
    /// Siblings whose incidents joined this one: its fleet.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub members: BTreeSet<String>,
}

fn is_zero(n: &u8) -> bool {
    *n == 0
}

/// The sibling's incident one joined.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Fleet {
    pub incident_id: String,
    pub device: String,
}

/// The note of a verdict a joined incident takes from its fleet incident's.
pub fn fleet_note(fleet: &Fleet) -> String {
    format!("answered on fleet incident {} ({})", fleet.incident_id, fleet.device)
}

impl Incident {
    /// Held by the device's learning period: suppressed as itself
    /// ([`IncidentTracker::learning_hold`]), not as a remembered behaviour.
    pub fn held(&self) -> bool {
        self.suppressed.as_ref().is_some_and(|d| d.incident_id == self.id)
    }

    pub fn mean_score(&self) -> f32 {
        (self.score_sum / self.figures.anomalous.max(1) as f64) as f32
    }

    /// An open incident with these counts, for other modules' tests.
    #[cfg(test)]
    pub(crate) fn sample(records: u64, anomalous: u64) -> Self {
        Self {
            id: "0123456789abcdef0123456789abcdef".into(),
            opened_by: Source { topic: "iot.features".into(), partition: 0, offset: 311 },
            figures: IncidentFigures { records, anomalous, peak_score: 0.9, ..IncidentFigures::default() },
            score_sum: 0.9 * anomalous as f64,
            attack_share: 0.0,
            last_anomalous_ms: 0,
            last_update_ms: 0,
            changed: false,
            kept: Vec::new(),
            feedback: Vec::new(),
            closed_at: None,
            traffic: Traffic::default(),
            reopened: 0,
            reopened_by: None,
            suppressed: None,
            news: None,
            look: None,
            learned: false,
            footprint: None,
            shown: 0,
            fleet: None,
            members: BTreeSet::new(),
        }
    }

    /// Not raised to an analyst by itself: suppressed (or held), or joined to a
    /// sibling's fleet incident. Its updates are not sent.
    pub fn quiet(&self) -> bool {
        self.suppressed.is_some() || self.fleet.is_some()
    }

    /// Something new for the analyst, said at once (its event goes out now; the next
    /// update waits its interval from here).
    fn tell(&mut self, news: News, now_ms: u64) {
        self.news = Some(news);
        self.changed = false;
        self.last_update_ms = now_ms;
    }

    /// Its severity by the fixed rule on its figures and traffic so far.
    pub fn severity(&self) -> Severity {
        let f = &self.figures;
        Severity::of(f.anomalous, f.records, f.last_ts - f.first_ts, &self.traffic)
    }

    /// One more anomalous record while open; `history`: what the device's normal traffic
    /// had, for the footprint.
    /// An attack's footprint on the device of a kind it had not shown, if this record
    /// showed one.
    fn add_anomalous(
        &mut self,
        d: &Decision<'_>,
        rules: &IncidentRules,
        now_ms: u64,
        history: &History,
    ) -> Option<Footprint> {
        let anomaly = 1.0 - d.posterior;
        self.figures.anomalous += 1;
        self.figures.peak_score = self.figures.peak_score.max(anomaly);
        self.score_sum += f64::from(anomaly);
        self.figures.last_ts = d.ts;
        self.last_anomalous_ms = now_ms;
        if self.kept.len() < rules.keep_records * d.features.len() {
            self.kept.extend_from_slice(d.features);
        }
        if let Some(c) = d.context {
            self.traffic.add(c, d.ts);
        }
        self.note_footprint(d.context, history)
    }

    /// The weightiest footprint it has shown is kept (`footprint.rs`): a sweep's first
    /// who-has is a new local peer, its eighth a scan. Returns one on the device of a
    /// kind the incident had not shown (`shown`).
    fn note_footprint(&mut self, c: Option<&Context>, history: &History) -> Option<Footprint> {
        let found = footprint::of_record(c, &self.traffic, self.severity(), history)?;
        let bit = 1u8 << found.weight();
        let new_kind = self.shown & bit == 0;
        self.shown |= bit;
        let told = (new_kind && found.on_the_device()).then(|| found.clone());
        if self.footprint.as_ref().is_none_or(|kept| found.weight() > kept.weight()) {
            self.footprint = Some(found);
        }
        told
    }
}

/// What an incident counts: the same in the tracker's state and in every event an
/// analyst receives (`output::IncidentReport`), under the same names.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct IncidentFigures {
    /// Unix seconds at opening.
    pub opened_at: f64,
    /// Record timestamps (`ts`) of the opening and of the last anomalous record.
    pub first_ts: f64,
    pub last_ts: f64,
    /// Records scored while it was open, and how many of them were anomalous.
    pub records: u64,
    pub anomalous: u64,
    /// Anomaly score (1 − posterior of normal traffic) of the anomalous records: the
    /// highest.
    pub peak_score: f32,
}

/// Why an incident closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resolution {
    /// `quiet` passed with no anomalous decision.
    Quiet,
    /// An analyst called it a false positive.
    Dismissed,
    /// The daemon stopped tracking the device (`devices.max_tracked` reached) or it went
    /// idle (`devices.idle_timeout_s`): nobody watches the incident any more.
    Evicted,
}

impl Resolution {
    pub fn as_str(self) -> &'static str {
        match self {
            Resolution::Quiet => "quiet",
            Resolution::Dismissed => "dismissed",
            Resolution::Evicted => "evicted",
        }
    }
}

/// Feedback that cannot be applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FeedbackError {
    #[error("no incident {incident} on device {device} (unknown, or closed more than {max_age_s} s ago)")]
    UnknownIncident { device: String, incident: String, max_age_s: u64 },
    #[error("incident {0} was already dismissed")]
    AlreadyDismissed(String),
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
    /// What happened, in a word (`opened`, `updated`, `reopened`, `suppressed`,
    /// `closed`, `reviewed`).
    pub fn name(&self) -> &'static str {
        match self {
            Self::Opened(_) => "opened",
            Self::Updated(_) => "updated",
            Self::Reopened(_) => "reopened",
            Self::Suppressed(_) => "suppressed",
            Self::Closed(..) => "closed",
            Self::Reviewed(_) => "reviewed",
            Self::Joined(_) => "joined",
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

/// A device's incident state: its last decisions and its open incident.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct IncidentTracker {
    /// The last decisions, newest in bit 0 (1 = anomalous).
    pub recent: u64,
    pub open: Option<Incident>,
    /// The newest record seen (partition, offset): a redelivered one is not counted twice.
    pub last_seen: Option<(i32, i64)>,
    /// The last closed incident, for feedback that comes after it closed.
    #[serde(default)]
    pub last_closed: Option<Incident>,
    /// The last closed incident closed quietly (not dismissed or evicted): it may reopen.
    #[serde(default)]
    pub closed_quietly: bool,
    /// Behaviours analysts dismissed on this device.
    #[serde(default)]
    pub memory: Memory,
    /// The fan-out look's window (in memory only).
    #[serde(skip)]
    pub fan_out: FanOut,
    /// What the device's normal traffic had (local peers, served ports): what an
    /// incident's footprint is judged against.
    #[serde(default)]
    pub history: History,
    /// Unix seconds (device time) at which the device's learning period ends
    /// (`MemoryRules::learning_ms`); `None` until the model judges its first record. A
    /// snapshot from before learning periods reads as long over.
    #[serde(default = "learning_long_over")]
    pub learning_until: Option<f64>,
}

fn learning_long_over() -> Option<f64> {
    Some(0.0)
}

/// The note of what a device's learning period holds and learns.
pub const LEARNING_NOTE: &str = "the device's learning period";

pub fn incident_id(device: &str, source: &Source) -> String {
    let text = format!("{device}\u{0}{}\u{0}{}\u{0}{}", source.topic, source.partition, source.offset);
    Sha256::digest(text)[..16].iter().map(|b| format!("{b:02x}")).collect()
}

impl IncidentTracker {
    /// Take one scored record; the incident opened, if it did. `kind`: the behaviours
    /// dismissed on the device's siblings (`kinds.rs`), recognised as its own are;
    /// `siblings`: the incidents they raised, which one of the same behaviour joins.
    #[allow(clippy::too_many_arguments)]
    pub fn observe(
        &mut self,
        device: &str,
        d: Decision<'_>,
        rules: &IncidentRules,
        kind: Option<&Memory>,
        siblings: &[Raised],
        now_ms: u64,
        now_unix: f64,
    ) -> Option<Transition> {
        let here = (d.source.partition, d.source.offset);
        if self.last_seen.is_some_and(|(p, o)| p == here.0 && o >= here.1) {
            return None; // redelivered: already counted
        }
        self.last_seen = Some(here);
        if d.judged && self.learning_until.is_none() {
            self.learning_until = Some(now_unix + rules.memory.learning_ms as f64 / 1000.0);
        }
        let finding = d.context.and_then(|c| self.fan_out.observe(c, d.ts, d.source, &rules.fan_out));
        // Attempts after a finding are the look's anomalies, whatever the model said.
        let mut d = d;
        d.anomalous |= d.context.is_some_and(|c| self.fan_out.is_hot(c, d.ts));
        if let (false, None, Some(c)) = (d.anomalous, &self.open, d.context) {
            // Normal traffic outside any incident: what the device does.
            self.history.observe(c, d.ts);
        }
        let n = rules.open_n.clamp(1, 64);
        let mask = if n == 64 { u64::MAX } else { (1u64 << n) - 1 };
        self.recent = ((self.recent << 1) | u64::from(d.anomalous)) & mask;
        if let Some(open) = &mut self.open {
            open.figures.records += 1;
            open.attack_share = 1.0 - d.prior;
            open.changed = true;
            let shown = if d.anomalous { open.add_anomalous(&d, rules, now_ms, &self.history) } else { None };
            if let Some(f) = finding {
                // Something else during an open incident: the analyst is told at once.
                let was_quiet = open.quiet();
                open.suppressed = None;
                open.fleet = None;
                open.tell(News { why: f.why, by: f.by }, now_ms);
                return Some(if was_quiet {
                    Transition::Opened(open.clone())
                } else {
                    Transition::Updated(open.clone())
                });
            }
            if d.anomalous && Self::becomes_news(open, &self.memory, kind, &d, rules, (now_ms, now_unix)) {
                // News a sibling raised a moment before joins it as a new incident does.
                open.fleet = Self::fleet_to_join(open, device, siblings, &d, rules, now_unix);
                return Some(Self::raised(open.clone()));
            }
            if d.anomalous && Self::leaves_fleet(open, siblings, &d, now_ms) {
                return Some(Transition::Opened(open.clone()));
            }
            if let Some(f) = shown.filter(|_| !open.quiet()) {
                // An attack inside an incident already raised (a false one, maybe):
                // what it shows of an attack is told at once, not at the next update.
                open.tell(News { why: format!("it now shows {}", f.words()), by: d.source.clone() }, now_ms);
                return Some(Transition::Updated(open.clone()));
            }
            return None;
        }
        if finding.is_none() && (!d.anomalous || self.recent.count_ones() < rules.open_k.max(1)) {
            return None;
        }
        if finding.is_none() && self.may_reopen(rules, now_unix) {
            let mut incident = self.last_closed.take().expect("a closed incident");
            incident.closed_at = None;
            incident.reopened += 1;
            incident.reopened_by = Some(d.source.clone());
            incident.figures.records += 1;
            incident.attack_share = 1.0 - d.prior;
            incident.last_update_ms = now_ms;
            incident.changed = false;
            // Reopened, it is before the analyst again: what it shows is in that event.
            incident.add_anomalous(&d, rules, now_ms, &self.history);
            let news = Self::becomes_news(&mut incident, &self.memory, kind, &d, rules, (now_ms, now_unix));
            if news {
                incident.fleet = Self::fleet_to_join(&incident, device, siblings, &d, rules, now_unix);
            }
            self.open = Some(incident.clone());
            return Some(if news { Self::raised(incident) } else { Transition::Reopened(incident) });
        }
        let anomaly = 1.0 - d.posterior;
        let mut incident = Incident {
            id: incident_id(device, d.source),
            opened_by: d.source.clone(),
            figures: IncidentFigures {
                opened_at: now_unix,
                first_ts: d.ts,
                last_ts: d.ts,
                records: 1,
                anomalous: 1,
                peak_score: anomaly,
            },
            score_sum: f64::from(anomaly),
            attack_share: 1.0 - d.prior,
            last_anomalous_ms: now_ms,
            last_update_ms: now_ms,
            changed: false,
            kept: if rules.keep_records > 0 { d.features.to_vec() } else { Vec::new() },
            feedback: Vec::new(),
            closed_at: None,
            traffic: Traffic::default(),
            reopened: 0,
            reopened_by: None,
            suppressed: None,
            news: None,
            look: finding,
            learned: false,
            footprint: None,
            shown: 0,
            fleet: None,
            members: BTreeSet::new(),
        };
        if let Some(c) = d.context {
            incident.traffic.add(c, d.ts);
        }
        incident.note_footprint(d.context, &self.history);
        // A look's finding is raised whatever was dismissed: a scan is no behaviour.
        if rules.memory.remember_ms > 0 && incident.look.is_none() {
            self.memory.expire(&rules.memory, now_unix);
            let (m, c, f) = (&rules.memory, d.context, d.features);
            incident.suppressed = self
                .memory
                .recognise(c, f, m, now_unix)
                .or_else(|| kind?.recognise(c, f, m, now_unix))
                // What the daemon learned never quiets an attack's footprint.
                .filter(|b| !(b.dismissal.learned && incident.footprint.is_some()))
                .map(|b| b.dismissal.clone());
            if let Some(id) =
                incident.suppressed.as_ref().filter(|d| d.learned).map(|d| d.incident_id.clone())
            {
                // Seen again: it holds on, and the suppression says until when.
                incident.suppressed = self.memory.renew(&id, m, now_unix).cloned();
            }
            // Only what carries its packets is held: without them no footprint can show.
            let judgeable = incident.traffic.packets > 0;
            if incident.suppressed.is_none() && incident.footprint.is_none() && judgeable && m.learned_ms > 0
            {
                incident.suppressed = self.learning_hold(&incident.id, now_unix);
            }
        }
        if incident.suppressed.is_none() {
            incident.fleet = Self::fleet_to_join(&incident, device, siblings, &d, rules, now_unix);
        }
        self.open = Some(incident.clone());
        Some(match incident.suppressed {
            Some(_) => Transition::Suppressed(incident),
            None => Self::raised(incident),
        })
    }

    /// An incident now before the analyst: opened, or joined to a sibling's.
    fn raised(incident: Incident) -> Transition {
        match incident.fleet {
            Some(_) => Transition::Joined(incident),
            None => Transition::Opened(incident),
        }
    }

    /// The sibling's incident a new one joins: the newest raised (not itself joined)
    /// at most `fleet_ms` before, whose behaviour its opening record is of. What a look
    /// raised, or what shows an attack's footprint on the device (a scan, repeated
    /// attempts, a new local peer or served port), joins nothing: it is raised on its
    /// own device.
    fn fleet_to_join(
        incident: &Incident,
        device: &str,
        siblings: &[Raised],
        d: &Decision<'_>,
        rules: &IncidentRules,
        now_unix: f64,
    ) -> Option<Fleet> {
        let on_the_device = incident.footprint.as_ref().is_some_and(Footprint::on_the_device);
        if rules.fleet_ms == 0 || incident.look.is_some() || on_the_device {
            return None;
        }
        let within = rules.fleet_ms as f64 / 1000.0;
        siblings
            .iter()
            .rev()
            .filter(|r| r.device != device && r.joined.is_none())
            // Heard of before now on the member's own clock, and recently.
            .filter(|r| r.at <= now_unix && now_unix - r.at <= within)
            .find(|r| r.behaviour.admits(d.context, d.features).is_none())
            .map(|r| Fleet { incident_id: r.incident_id.clone(), device: r.device.clone() })
    }

    /// A joined incident's newest anomalous record (`d`) went to a peer, port or
    /// transport the fleet incident's behaviour never had, or it shows an attack's
    /// footprint on the device: it is raised on its own, as news, and leaves the fleet.
    /// Its severity alone does not: that is the size of the behaviour its fleet
    /// incident, raised, shows.
    fn leaves_fleet(open: &mut Incident, siblings: &[Raised], d: &Decision<'_>, now_ms: u64) -> bool {
        let Some(fleet) = &open.fleet else { return false };
        let head = siblings.iter().find(|r| r.incident_id == fleet.incident_id);
        let beyond = match (open.footprint.as_ref().filter(|f| f.on_the_device()), head) {
            (Some(f), _) => Some(format!("it shows what is never learned: {}", f.words())),
            // The fleet incident's conversation answered (its peer, on its port) is
            // still it: only a new peer, port or transport is something else.
            (None, Some(head)) => head
                .behaviour
                .admits(d.context, d.features)
                .filter(|b| !matches!(b, Beyond::Direction(_)))
                .map(|b| format!("with {}", b.what())),
            // The fleet incident is no longer heard of: the member stays with it.
            (None, None) => None,
        };
        let Some(beyond) = beyond else { return false };
        let why =
            format!("joined fleet incident {} raised on {}, but {beyond}", fleet.incident_id, fleet.device);
        open.fleet = None;
        open.tell(News { why, by: d.source.clone() }, now_ms);
        true
    }

    /// In the device's learning period at `now_unix`: the hold for an incident it opens
    /// (a dismissal by the daemon of the incident itself, until the period ends).
    fn learning_hold(&self, incident_id: &str, now_unix: f64) -> Option<Dismissal> {
        let until = self.learning_until.filter(|&until| now_unix < until)?;
        Some(Dismissal {
            incident_id: incident_id.to_string(),
            by: LEARNED_BY.into(),
            note: LEARNING_NOTE.into(),
            at: now_unix,
            on: None,
            learned: true,
            expires_at: Some(until),
        })
    }

    /// A suppressed incident's newest anomalous record (`d`) went beyond the behaviour
    /// it was suppressed as, and beyond everything else the device and its kind remember
    /// (or that behaviour was forgotten): it is news, and no longer suppressed. Only a
    /// verdict's behaviour admits a record of an incident that shows an attack's
    /// footprint.
    fn becomes_news(
        open: &mut Incident,
        memory: &Memory,
        kind: Option<&Memory>,
        d: &Decision<'_>,
        rules: &IncidentRules,
        now: (u64, f64),
    ) -> bool {
        let (now_ms, now_unix) = now;
        let held = open.held();
        let Some(dismissal) = &open.suppressed else { return false };
        let id = &dismissal.incident_id;
        let beyond = match memory.find(id).or_else(|| kind?.find(id)) {
            // Held by the learning period: raised once it shows what is never learned.
            None if held => open.footprint.as_ref().map(|f| {
                format!("in the device's learning period, but it shows what is never learned: {}", f.words())
            }),
            // Only a verdict quiets what an attack leaves.
            Some(_) if dismissal.learned && open.footprint.is_some() => open.footprint.as_ref().map(|f| {
                format!(
                    "like the behaviour learned from incident {id}, which closed quietly without a verdict, \
                     but it shows what is never learned: {}",
                    f.words()
                )
            }),
            Some(b) => {
                let (c, f, m) = (d.context, d.features, &rules.memory);
                let footprint = open.footprint.is_some();
                let elsewhere = || {
                    memory
                        .recognise(c, f, m, now_unix)
                        .or_else(|| kind?.recognise(c, f, m, now_unix))
                        .is_some_and(|other| !(footprint && other.dismissal.learned))
                };
                b.admits(c, f)
                    .filter(|_| !elsewhere())
                    .or_else(|| b.admits_volume(&open.traffic, open.figures.anomalous, m.volume_factor))
                    .map(|why| why.words(dismissal))
            }
            None => Some(format!(
                "the behaviour dismissed in incident {} is no longer remembered",
                dismissal.incident_id
            )),
        };
        let Some(why) = beyond else { return false };
        open.suppressed = None;
        open.tell(News { why, by: d.source.clone() }, now_ms);
        true
    }

    /// The last incident closed quietly within `reopen_ms` of `now_unix` and nobody
    /// called it a false positive (a dismissed behaviour that comes back is news).
    fn may_reopen(&self, rules: &IncidentRules, now_unix: f64) -> bool {
        let Some(closed) = &self.last_closed else { return false };
        self.closed_quietly
            && rules.reopen_ms > 0
            && closed.closed_at.is_some_and(|t| (now_unix - t) * 1000.0 <= rules.reopen_ms as f64)
            && !closed.feedback.iter().any(|f| f.verdict == Verdict::FalsePositive)
    }

    /// Restored from a snapshot at `now_ms` of this process's clock: the open incident's
    /// quiet period and update interval start again.
    pub fn restored(mut self, now_ms: u64) -> Self {
        if let Some(open) = &mut self.open {
            open.last_anomalous_ms = now_ms;
            open.last_update_ms = now_ms;
        }
        self
    }

    /// The device leaves this daemon's memory with its open incident, if any.
    pub fn close_evicted(&mut self, now_unix: f64) -> Option<Transition> {
        self.close(Resolution::Evicted, now_unix)
    }

    /// Close the open incident (kept for late feedback).
    fn close(&mut self, resolution: Resolution, now_unix: f64) -> Option<Transition> {
        let mut closed = self.open.take()?;
        closed.closed_at = Some(now_unix);
        // What the learning period held is learned as it closes; its return is judged
        // against that (a new incident), never reopened unseen.
        let held = closed.held();
        if let Some(d) = &closed.suppressed {
            // Suppressed to its end, never news: the behaviour it was grows to it.
            self.memory.grow(&d.incident_id, &closed.traffic, closed.figures.anomalous);
        }
        self.recent = 0;
        // Nor does one that joined a fleet incident: its return joins again or is raised.
        self.closed_quietly = resolution == Resolution::Quiet && !held && closed.fleet.is_none();
        self.last_closed = Some(closed.clone());
        Some(Transition::Closed(closed, resolution))
    }

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

    /// Time passes: an update is due, or the incident has been quiet long enough (rows
    /// of `dim` features: what a quiet close leaves in the memory).
    pub fn tick(
        &mut self,
        rules: &IncidentRules,
        dim: usize,
        now_ms: u64,
        now_unix: f64,
    ) -> Option<Transition> {
        let open = self.open.as_mut()?;
        let quiet_for = now_ms.saturating_sub(open.last_anomalous_ms);
        if quiet_for >= rules.quiet_ms {
            // It closed when the quiet ran out. On the event clock a device's time moves
            // with its records only until the service ticks it, so a replay can see a
            // silent device's close late; its time is the same either way.
            let closed_at = now_unix - (quiet_for - rules.quiet_ms) as f64 / 1000.0;
            let m = &rules.memory;
            // Nobody said anything and it went away: what the device does now and then,
            // unless it left an attack's footprint. A look's finding is never a
            // behaviour; a suppressed one is remembered already, unless the learning
            // period held it.
            let held = open.held();
            if (held || (m.learn_quiet && open.suppressed.is_none()))
                && m.remember_ms > 0
                && m.learned_ms > 0
                && open.look.is_none()
                && open.footprint.is_none()
                && open.feedback.is_empty()
            {
                let mut dismissal = Dismissal {
                    incident_id: open.id.clone(),
                    by: LEARNED_BY.into(),
                    note: if held { LEARNING_NOTE } else { "closed quietly without a verdict" }.into(),
                    at: closed_at,
                    on: None,
                    learned: true,
                    expires_at: None,
                };
                dismissal.expires_at = Some(dismissal.expires(m));
                open.learned = true;
                let behaviour =
                    Behaviour::of(&open.traffic, open.figures.anomalous, &open.kept, dim, dismissal);
                self.memory.expire(m, closed_at);
                self.memory.remember(behaviour);
            }
            return self.close(Resolution::Quiet, closed_at);
        }
        // A suppressed or joined incident is recorded, not followed: its updates are not sent.
        if !open.quiet()
            && open.changed
            && now_ms.saturating_sub(open.last_update_ms) >= rules.update_interval_ms
        {
            open.changed = false;
            open.last_update_ms = now_ms;
            return Some(Transition::Updated(open.clone()));
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::monitor::output::IncidentReport;

    const RULES: IncidentRules = IncidentRules {
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

    fn source(offset: i64) -> Source {
        Source { topic: "in".into(), partition: 0, offset }
    }

    /// Feed decisions (true = anomalous) at offsets from `first`, one per 100 ms.
    fn feed(t: &mut IncidentTracker, decisions: &[bool], first: i64) -> Vec<Transition> {
        let mut out = Vec::new();
        for (i, &anomalous) in decisions.iter().enumerate() {
            let offset = first + i as i64;
            let s = source(offset);
            let posterior = if anomalous { 0.1 } else { 0.9 };
            let d = Decision {
                anomalous,
                posterior,
                prior: 0.7,
                ts: offset as f64,
                source: &s,
                features: &[1.0, 2.0],
                context: None,
                judged: true,
            };
            out.extend(t.observe("cam", d, &RULES, None, &[], offset as u64 * 100, 0.0));
        }
        out
    }

    #[test]
    fn opens_on_k_of_n_and_not_before() {
        let mut t = IncidentTracker::default();
        assert!(feed(&mut t, &[true, false, false, true, false, false, false], 0).is_empty(), "2 of 5 never");
        let opened = feed(&mut t, &[true, true, true], 7);
        let [Transition::Opened(i)] = opened.as_slice() else { panic!("{opened:?}") };
        assert_eq!(i.opened_by.offset, 9, "opened by the third anomalous record of five");
        assert_eq!(i.id, incident_id("cam", &source(9)));
        assert!((i.attack_share - 0.3).abs() < 1e-6 && (i.figures.peak_score - 0.9).abs() < 1e-6);
    }

    #[test]
    fn counts_while_open_updates_at_most_every_interval_and_closes_when_quiet() {
        let mut t = IncidentTracker::default();
        feed(&mut t, &[true, true, true], 0);
        assert!(t.tick(&RULES, 2, 250, 0.0).is_none(), "nothing new since opening");
        feed(&mut t, &[true, false, true, true], 3);
        assert!(t.tick(&RULES, 2, 1_199, 0.0).is_none(), "an update within the interval after opening");
        let Some(Transition::Updated(u)) = t.tick(&RULES, 2, 1_200, 0.0) else { panic!("no update") };
        assert_eq!((u.figures.records, u.figures.anomalous, u.figures.last_ts), (5, 4, 6.0));
        assert_eq!(u.kept, [1.0, 2.0, 1.0, 2.0], "two records kept");
        assert!(t.tick(&RULES, 2, 2_500, 0.0).is_none(), "no new records: no update");
        assert!(t.tick(&RULES, 2, 600 + 9_999, 0.0).is_none(), "quiet not yet over");
        let Some(Transition::Closed(c, Resolution::Quiet)) = t.tick(&RULES, 2, 600 + 10_000, 0.0) else {
            panic!()
        };
        assert_eq!(c.id, u.id);
        assert!(t.open.is_none() && t.recent == 0);
        // A fresh incident needs k new anomalous decisions.
        assert!(feed(&mut t, &[true, true], 200).is_empty());
        assert!(matches!(feed(&mut t, &[true], 202).as_slice(), [Transition::Opened(_)]));
    }

    #[test]
    fn a_redelivered_record_is_not_counted_twice_and_opens_nothing_new() {
        let mut t = IncidentTracker::default();
        let first = feed(&mut t, &[true, true, true], 0);
        let again = feed(&mut t, &[true, true, true], 0);
        assert_eq!(first.len(), 1);
        assert!(again.is_empty());
        assert_eq!(t.open.as_ref().map(|i| i.figures.records), Some(1));
        // The same records on a restored tracker without the incident: the same id.
        let mut restored = IncidentTracker::default();
        let reopened = feed(&mut restored, &[true, true, true], 0);
        let [Transition::Opened(i)] = reopened.as_slice() else { panic!("{reopened:?}") };
        assert_eq!(Some(&i.id), t.open.as_ref().map(|o| &o.id));
    }

    fn verdict(t: &IncidentTracker, verdict: Verdict) -> Feedback {
        let incident_id =
            t.open.as_ref().or(t.last_closed.as_ref()).map(|i| i.id.clone()).unwrap_or_default();
        Feedback {
            device: "cam".into(),
            incident_id,
            verdict,
            by: "ana".into(),
            note: "firmware update".into(),
        }
    }

    #[test]
    fn a_false_positive_hands_over_its_records_and_closes_as_dismissed() {
        let mut t = IncidentTracker::default();
        feed(&mut t, &[true, true, true, true], 0);
        let confirmed = t.feedback(&verdict(&t, Verdict::Confirmed), 10.0, 60, &RULES.memory, 2);
        let Ok(Applied::Confirmed(Transition::Updated(i))) = confirmed else { panic!("{confirmed:?}") };
        assert_eq!(i.feedback.len(), 1);
        let dismissed = t.feedback(&verdict(&t, Verdict::FalsePositive), 10.0, 60, &RULES.memory, 2);
        let Ok(Applied::Dismissed(Transition::Closed(i, Resolution::Dismissed))) = dismissed else {
            panic!("{dismissed:?}")
        };
        assert_eq!((i.feedback.len(), i.feedback[1].by.as_str()), (2, "ana"));
        assert!(t.open.is_none());
        let again = t.feedback(&verdict(&t, Verdict::FalsePositive), 11.0, 60, &RULES.memory, 2);
        assert_eq!(again, Err(FeedbackError::AlreadyDismissed(i.id.clone())));
    }

    /// Feed decisions as `feed` does, on the device clock `now_unix` (seconds).
    fn feed_at(
        t: &mut IncidentTracker,
        rules: &IncidentRules,
        decisions: &[bool],
        first: i64,
        now_unix: f64,
    ) -> Vec<Transition> {
        let mut out = Vec::new();
        for (i, &anomalous) in decisions.iter().enumerate() {
            let offset = first + i as i64;
            let s = source(offset);
            let features = [offset as f32, 0.0];
            let d = Decision {
                anomalous,
                posterior: if anomalous { 0.1 } else { 0.9 },
                prior: 0.7,
                ts: now_unix,
                source: &s,
                features: &features,
                context: None,
                judged: true,
            };
            out.extend(t.observe("cam", d, rules, None, &[], offset as u64 * 100, now_unix));
        }
        out
    }

    #[test]
    fn a_quiet_close_reopens_within_the_window_under_its_id_and_a_dismissed_one_never() {
        let rules = IncidentRules { reopen_ms: 600_000, ..RULES };
        let mut t = IncidentTracker::default();
        let opened = feed_at(&mut t, &rules, &[true, true, true], 0, 1_000.0);
        let [Transition::Opened(first)] = opened.as_slice() else { panic!("{opened:?}") };
        // Seen 89.8 s after the quiet ran out (the last anomalous record at 200 ms):
        // closed when it ran out.
        let Some(Transition::Closed(c, Resolution::Quiet)) = t.tick(&rules, 2, 100_000, 1_100.0) else {
            panic!()
        };
        assert!((c.closed_at.unwrap() - 1_010.2).abs() < 1e-6, "{:?}", c.closed_at);
        // Eight minutes later (device time), three anomalous of five again: the same incident.
        let again = feed_at(&mut t, &rules, &[true, true, true], 10, 1_500.0);
        let [Transition::Reopened(i)] = again.as_slice() else { panic!("{again:?}") };
        assert_eq!((i.id.as_str(), i.reopened, i.closed_at), (first.id.as_str(), 1, None));
        assert_eq!(i.reopened_by.as_ref().map(|s| s.offset), Some(12));
        assert_eq!(
            (i.figures.records, i.figures.anomalous),
            (2, 2),
            "counted while open: its first and the reopening record"
        );
        assert!(t.last_closed.is_none() && t.open.is_some());
        // Closed again (at 1,800 − 188.8 s), and past the window: a new incident.
        t.tick(&rules, 2, 200_000, 1_800.0).expect("closed");
        let later = feed_at(&mut t, &rules, &[true, true, true], 20, 1_611.2 + 601.0);
        assert!(matches!(later.as_slice(), [Transition::Opened(i)] if i.id != first.id), "{later:?}");
        // Dismissed, then back within the window: news, so a new incident.
        let fb = verdict(&t, Verdict::FalsePositive);
        assert!(t.feedback(&fb, 2_402.0, 60, &RULES.memory, 2).is_ok());
        let after_verdict = feed_at(&mut t, &rules, &[true, true, true], 30, 2_410.0);
        assert!(matches!(after_verdict.as_slice(), [Transition::Opened(_)]), "{after_verdict:?}");
        // Dismissed after a quiet close: the same.
        t.tick(&rules, 2, 400_000, 2_500.0).expect("closed");
        let fb = verdict(&t, Verdict::FalsePositive);
        assert!(t.feedback(&fb, 2_501.0, 3_600, &RULES.memory, 2).is_ok());
        assert!(matches!(
            feed_at(&mut t, &rules, &[true, true, true], 40, 2_510.0).as_slice(),
            [Transition::Opened(_)]
        ));
    }

    #[test]
    fn late_feedback_reaches_a_recently_closed_incident_and_no_other() {
        let mut t = IncidentTracker::default();
        feed(&mut t, &[true, true, true], 0);
        t.tick(&RULES, 2, 10_200, 1_000.0).expect("closed when quiet");
        let fb = verdict(&t, Verdict::FalsePositive);
        let Ok(Applied::Dismissed(Transition::Reviewed(i))) =
            t.clone().feedback(&fb, 1_050.0, 60, &RULES.memory, 2)
        else {
            panic!()
        };
        assert_eq!(i.feedback.len(), 1);
        let late = t.clone().feedback(&fb, 1_061.0, 60, &RULES.memory, 2);
        assert!(matches!(late, Err(FeedbackError::UnknownIncident { .. })), "{late:?}");
        let wrong = Feedback { incident_id: "nope".into(), ..fb };
        assert!(matches!(
            t.feedback(&wrong, 1_001.0, 60, &RULES.memory, 2),
            Err(FeedbackError::UnknownIncident { .. })
        ));
    }

    /// An outbound TCP packet (ACK, PSH) of `bytes` from the device to `peer`:`port`.
    fn packet(peer: &str, port: u16, bytes: u32) -> Context {
        Context::outbound(peer, port, 6, 0x18, bytes)
    }

    /// Anomalous records of packets `c`, one per second of device time from `t0`.
    fn feed_packets(
        t: &mut IncidentTracker,
        rules: &IncidentRules,
        c: &Context,
        n: usize,
        first: i64,
        t0: f64,
    ) -> Vec<Transition> {
        feed_beside(t, rules, c, (n, first, t0), &[])
    }

    /// [`feed_packets`] beside siblings that raised `siblings`.
    fn feed_beside(
        t: &mut IncidentTracker,
        rules: &IncidentRules,
        c: &Context,
        (n, first, t0): (usize, i64, f64),
        siblings: &[Raised],
    ) -> Vec<Transition> {
        let mut out = Vec::new();
        for i in 0..n {
            let offset = first + i as i64;
            let s = source(offset);
            let now = t0 + i as f64;
            let d = Decision {
                anomalous: true,
                posterior: 0.1,
                prior: 0.7,
                ts: now,
                source: &s,
                features: &[1.0, 2.0],
                context: Some(c),
                judged: true,
            };
            out.extend(t.observe("cam", d, rules, None, siblings, (now * 1000.0) as u64, now));
        }
        out
    }

    /// What sibling `device` raised at `at`: an incident of `c`'s behaviour.
    fn raised_on(device: &str, c: &Context, at: f64) -> Raised {
        let mut traffic = Traffic::default();
        traffic.add(c, at);
        let itself = Dismissal {
            incident_id: format!("{device}-1"),
            by: String::new(),
            note: String::new(),
            at,
            on: Some(device.into()),
            learned: false,
            expires_at: None,
        };
        Raised {
            device: device.into(),
            incident_id: format!("{device}-1"),
            at,
            behaviour: Behaviour::of(&traffic, 1, &[], 2, itself),
            joined: None,
        }
    }

    #[test]
    fn an_attack_inside_a_raised_incident_is_told_at_its_footprint() {
        let rules = IncidentRules { open_k: 1, open_n: 1, ..RULES };
        let mut t = IncidentTracker::default();
        let opened = feed_packets(&mut t, &rules, &packet("52.1.2.3", 443, 900), 2, 0, 1_000.0);
        assert!(matches!(opened.as_slice(), [Transition::Opened(_)]), "{opened:?}");
        let mut out = Vec::new();
        for h in 1..=9u8 {
            let syn = Context::outbound(&format!("52.9.9.{h}"), 23, 6, 0x02, 60);
            out.extend(feed_packets(&mut t, &rules, &syn, 1, 10 + i64::from(h), 1_002.0 + f64::from(h)));
        }
        // Told once, at the eighth host; nothing at the ninth.
        let [Transition::Updated(i)] = out.as_slice() else { panic!("{out:?}") };
        let news = i.news.as_ref().expect("news");
        assert!(news.why.starts_with("it now shows a scan"), "{}", news.why);
        assert_eq!(news.by.offset, 18);
    }

    #[test]
    fn an_incident_joins_a_siblings_of_its_behaviour_and_leaves_for_what_that_one_never_did() {
        let rules = IncidentRules { open_k: 1, open_n: 1, fleet_ms: 600_000, ..RULES };
        let upload = packet("52.1.2.3", 443, 900);
        let siblings = [raised_on("cam-a", &upload, 1_000.0)];
        let mut t = IncidentTracker::default();
        let joined = feed_beside(&mut t, &rules, &upload, (3, 0, 1_005.0), &siblings);
        let [Transition::Joined(j)] = joined.as_slice() else { panic!("{joined:?}") };
        assert_eq!(j.fleet, Some(Fleet { incident_id: "cam-a-1".into(), device: "cam-a".into() }));
        assert!(IncidentReport::of("cam", j, None, "v", vec![], 0.0)
            .summary
            .contains("joined fleet incident cam-a-1"));
        // No updates while joined; a new peer raises it on its own.
        assert!(t.tick(&rules, 2, 1_008_500, 1_008.5).is_none());
        let other = feed_beside(&mut t, &rules, &packet("52.7.7.7", 443, 900), (1, 10, 1_009.0), &siblings);
        let [Transition::Opened(news)] = other.as_slice() else { panic!("{other:?}") };
        assert!(news.fleet.is_none());
        assert_eq!(
            news.news.as_ref().map(|n| n.why.as_str()),
            Some("joined fleet incident cam-a-1 raised on cam-a, but with a new peer, 52.7.7.7")
        );
        // Too long after the sibling's, or on its own clock before it: raised.
        for at in [1_000.0 + 601.0, 999.0] {
            let mut t = IncidentTracker::default();
            let own = feed_beside(&mut t, &rules, &upload, (1, 0, at), &siblings);
            assert!(matches!(own.as_slice(), [Transition::Opened(_)]), "at {at}: {own:?}");
        }
        // What shows an attack's footprint (a local peer its normal traffic never had)
        // is raised on each device, whatever a sibling raised.
        let local = packet("192.168.1.9", 443, 900);
        let mut t = IncidentTracker::default();
        let own =
            feed_beside(&mut t, &rules, &local, (1, 0, 1_005.0), &[raised_on("cam-a", &local, 1_000.0)]);
        let [Transition::Opened(i)] = own.as_slice() else { panic!("{own:?}") };
        assert!(i.footprint.is_some() && i.fleet.is_none());
    }

    #[test]
    fn a_dismissed_behaviour_that_returns_is_suppressed_until_it_goes_beyond() {
        let rules = remembering();
        let upload = packet("52.1.2.3", 443, 1_000);
        let mut t = IncidentTracker::default();
        let opened = feed_packets(&mut t, &rules, &upload, 10, 0, 1_000.0);
        assert!(matches!(opened.as_slice(), [Transition::Opened(_)]), "{opened:?}");
        let fb = verdict(&t, Verdict::FalsePositive);
        assert!(t.feedback(&fb, 1_010.0, 60, &rules.memory, 2).is_ok());
        assert_eq!(t.memory.len(), 1);
        // The next evening: the same upload, a little larger. Suppressed, and no updates.
        let again = feed_packets(&mut t, &rules, &upload, 20, 100, 80_000.0);
        let [Transition::Suppressed(i)] = again.as_slice() else { panic!("{again:?}") };
        assert_eq!(
            i.suppressed.as_ref().map(|d| (d.incident_id.as_str(), d.by.as_str())),
            Some((fb.incident_id.as_str(), "ana"))
        );
        assert!(t.tick(&rules, 2, 80_025_000, 80_025.0).is_none(), "no update of a suppressed incident");
        // It closes, and is recorded as it was.
        let Some(Transition::Closed(c, Resolution::Quiet)) = t.tick(&rules, 2, 80_200_000, 80_200.0) else {
            panic!()
        };
        assert!(c.suppressed.is_some());
        // Suppressed to its end, it grew the behaviour: 18 packets (from its third record
        // on), 18,000 bytes where the dismissed incident had 8,000.
        assert_eq!((t.memory.behaviours[0].bytes, t.memory.behaviours[0].first_bytes), (18_000, 8_000));
        // Far more to the same peer: news at the record that passed 3× the grown bound.
        let exfil = feed_packets(&mut t, &rules, &upload, 100, 1_000, 90_000.0);
        let [Transition::Suppressed(_), Transition::Opened(news)] = exfil.as_slice() else {
            panic!("{exfil:?}")
        };
        let n = news.news.as_ref().expect("news");
        assert_eq!(n.by.offset, 1_002 + 54, "its 55th packet passed 3× 18,000 bytes");
        assert!(n.why.contains("bytes") && news.suppressed.is_none(), "{}", n.why);
        t.tick(&rules, 2, 90_400_000, 90_400.0).expect("closed");
        // A new peer during a suppressed incident: news at once.
        feed_packets(&mut t, &rules, &upload, 5, 2_000, 100_000.0);
        let other = feed_packets(&mut t, &rules, &packet("203.0.113.9", 443, 60), 1, 2_005, 100_005.0);
        let [Transition::Opened(news)] = other.as_slice() else { panic!("{other:?}") };
        assert!(news.news.as_ref().unwrap().why.contains("a new peer, 203.0.113.9"), "{news:?}");
        t.tick(&rules, 2, 100_400_000, 100_400.0).expect("closed");
        // Past the memory's expiry: an incident again.
        let later = feed_packets(&mut t, &rules, &upload, 10, 3_000, 1_010.0 + 200_001.0);
        assert!(matches!(later.as_slice(), [Transition::Opened(i)] if i.news.is_none()), "{later:?}");
        assert!(t.memory.is_empty());
    }

    /// Without an analyst: an incident that closes quietly, unanswered, is remembered as
    /// the daemon's own dismissal (said on its close); its return is suppressed; a new
    /// peer is news; a `confirmed` verdict undoes what was learned; a look's finding and
    /// an incident with a verdict are never learned, nor anything with the rule off.
    #[test]
    fn an_unanswered_quiet_close_is_learned_and_a_confirmed_verdict_undoes_it() {
        let memory = MemoryRules {
            remember_ms: 200_000_000,
            volume_factor: 3.0,
            learn_quiet: true,
            learned_ms: 200_000_000,
            learning_ms: 0,
        };
        let rules = IncidentRules { memory, keep_records: 2, ..RULES };
        let upload = packet("52.1.2.3", 443, 1_000);
        let mut t = IncidentTracker::default();
        feed_packets(&mut t, &rules, &upload, 10, 0, 1_000.0);
        let Some(Transition::Closed(c, Resolution::Quiet)) = t.tick(&rules, 2, 1_200_000, 1_200.0) else {
            panic!()
        };
        assert!(c.learned);
        let learned = &t.memory.behaviours[0].dismissal;
        assert!(learned.learned && learned.by == LEARNED_BY && learned.incident_id == c.id);
        // The next evening: suppressed, as the daemon's own dismissal.
        let again = feed_packets(&mut t, &rules, &upload, 10, 100, 80_000.0);
        let [Transition::Suppressed(i)] = again.as_slice() else { panic!("{again:?}") };
        assert_eq!(i.suppressed.as_ref().map(|d| d.incident_id.as_str()), Some(c.id.as_str()));
        // A suppressed incident closing adds nothing; a new peer in it is news.
        let other = feed_packets(&mut t, &rules, &packet("203.0.113.9", 443, 60), 1, 110, 80_010.0);
        assert!(matches!(other.as_slice(), [Transition::Opened(n)] if n.news.is_some()), "{other:?}");
        let Some(Transition::Closed(news, Resolution::Quiet)) = t.tick(&rules, 2, 80_400_000, 80_400.0)
        else {
            panic!()
        };
        // The news closed quietly too: learned in its turn (two behaviours now).
        assert!(news.learned && t.memory.len() == 2);
        // An analyst confirms it was an attack: what was learned of it goes.
        let confirmed = verdict(&t, Verdict::Confirmed);
        let Ok(Applied::Confirmed(Transition::Reviewed(r))) =
            t.feedback(&confirmed, 80_030.0, 60, &rules.memory, 2)
        else {
            panic!()
        };
        assert!(!r.learned && t.memory.find(&news.id).is_none() && t.memory.len() == 1);
        // The first incident is long gone (another closed since): a confirmed verdict on it
        // still makes the device forget what it learned of it.
        let first = Feedback { incident_id: c.id.clone(), ..confirmed.clone() };
        assert_eq!(t.feedback(&first, 90_000.0, 60, &rules.memory, 2), Ok(Applied::Unlearned));
        assert!(t.memory.is_empty());
        let unknown = t.feedback(&first, 90_001.0, 60, &rules.memory, 2);
        assert!(matches!(unknown, Err(FeedbackError::UnknownIncident { .. })), "{unknown:?}");

        // Rule off: nothing learned.
        let off = IncidentRules { memory: MemoryRules { learn_quiet: false, ..memory }, ..rules };
        let mut t = IncidentTracker::default();
        feed_packets(&mut t, &off, &upload, 10, 0, 1_000.0);
        let Some(Transition::Closed(c, _)) = t.tick(&off, 2, 1_200_000, 1_200.0) else { panic!() };
        assert!(!c.learned && t.memory.is_empty());
    }

    /// Anomalous records of `packets` in turn, one per second of device time from `t0`.
    fn feed_each(
        t: &mut IncidentTracker,
        rules: &IncidentRules,
        packets: &[Context],
        first: i64,
        t0: f64,
    ) -> Vec<Transition> {
        let mut out = Vec::new();
        for (i, c) in packets.iter().enumerate() {
            out.extend(feed_packets(t, rules, c, 1, first + i as i64, t0 + i as f64));
        }
        out
    }

    /// What analysts dismiss is remembered; nothing is learned without them.
    fn remembering() -> IncidentRules {
        let memory = MemoryRules {
            remember_ms: 200_000_000,
            volume_factor: 3.0,
            learn_quiet: false,
            learned_ms: 0,
            learning_ms: 0,
        };
        IncidentRules { memory, keep_records: 2, ..RULES }
    }

    /// Learning on, as deployed: what closes quietly unanswered is learned for a day.
    fn learning() -> IncidentRules {
        let memory = MemoryRules {
            remember_ms: 2_592_000_000,
            volume_factor: 3.0,
            learn_quiet: true,
            learned_ms: 86_400_000,
            learning_ms: 0,
        };
        IncidentRules { memory, keep_records: 2, ..RULES }
    }

    /// A new device's first hour: what the model raises is held and learned as it
    /// closes; a return after the hour is suppressed as learned; a scan in the hour is
    /// raised at the record that makes it one; after the hour the model raises again.
    #[test]
    fn the_learning_period_holds_and_learns_but_never_an_attacks_footprint() {
        let rules = IncidentRules {
            memory: MemoryRules { learning_ms: 3_600_000, ..learning().memory },
            ..learning()
        };
        let upload = packet("52.1.2.3", 443, 1_000);
        let mut t = IncidentTracker::default();
        let held = feed_packets(&mut t, &rules, &upload, 10, 0, 1_000.0);
        let [Transition::Suppressed(i)] = held.as_slice() else { panic!("{held:?}") };
        let hold = i.suppressed.as_ref().unwrap();
        assert_eq!(
            (hold.incident_id.as_str(), hold.by.as_str(), hold.note.as_str()),
            (i.id.as_str(), LEARNED_BY, LEARNING_NOTE)
        );
        assert_eq!(hold.expires_at, Some(4_600.0), "the hour from the first judged record");
        let Some(Transition::Closed(c, Resolution::Quiet)) = t.tick(&rules, 2, 1_100_000, 1_100.0) else {
            panic!()
        };
        assert!(c.learned && t.memory.find(&c.id).is_some_and(|b| b.dismissal.note == LEARNING_NOTE));
        // Its return hours later, the hour long over: suppressed as what was learned.
        let back = feed_packets(&mut t, &rules, &upload, 10, 100, 50_000.0);
        let [Transition::Suppressed(s)] = back.as_slice() else { panic!("{back:?}") };
        assert_eq!(s.suppressed.as_ref().map(|d| d.incident_id.as_str()), Some(c.id.as_str()));
        // A scan of the internet in the hour (a local host would be a footprint at
        // once), its first packets held: raised at its eighth host.
        let mut t = IncidentTracker::default();
        let mut out = Vec::new();
        for h in 1..=12u8 {
            let (c, at) =
                (Context::outbound(&format!("52.9.9.{h}"), 23, 6, 0x02, 60), 1_000.0 + f64::from(h));
            let s = source(i64::from(h));
            let d = Decision {
                anomalous: true,
                posterior: 0.1,
                prior: 0.7,
                ts: at,
                source: &s,
                features: &[1.0, 2.0],
                context: Some(&c),
                judged: true,
            };
            out.extend(t.observe("cam", d, &rules, None, &[], (at * 1000.0) as u64, at));
        }
        let [Transition::Suppressed(_), Transition::Opened(news)] = out.as_slice() else { panic!("{out:?}") };
        let why = &news.news.as_ref().unwrap().why;
        assert!(
            why.starts_with("in the device's learning period, but it shows what is never learned: a scan"),
            "{why}"
        );
        // After the hour, the model's incident is raised.
        let mut t = IncidentTracker::default();
        feed_packets(&mut t, &rules, &packet("52.1.2.3", 80, 60), 1, 0, 1_000.0);
        let later = feed_packets(&mut t, &rules, &upload, 10, 10, 5_000.0);
        assert!(matches!(later.as_slice(), [Transition::Opened(_)]), "{later:?}");
        // A snapshot from before learning periods: long over.
        let old: IncidentTracker = serde_json::from_str(
            &serde_json::to_string(&IncidentTracker::default())
                .unwrap()
                .replace(r#","learning_until":null"#, ""),
        )
        .unwrap();
        assert_eq!(old.learning_until, Some(0.0));
    }

    /// Closed quietly at `at` (device seconds) of the tracker's open incident.
    fn close_quietly(t: &mut IncidentTracker, rules: &IncidentRules, at: f64) -> Incident {
        match t.tick(rules, 2, (at * 1000.0) as u64, at) {
            Some(Transition::Closed(c, Resolution::Quiet)) => c,
            other => panic!("{other:?}"),
        }
    }

    /// A scan, connection attempts on one service and traffic with a local host the
    /// device's normal traffic never had close quietly unanswered and are not learned,
    /// saying why; each comes back as an incident of its own.
    #[test]
    fn a_learned_scan_is_impossible_and_its_second_wave_is_raised() {
        let rules = learning();
        let scan: Vec<Context> =
            (1..=10).map(|h| Context::outbound(&format!("52.0.0.{h}"), 23, 6, 0x02, 60)).collect();
        let sweep: Vec<Context> =
            (1..=10).map(|h| Context::arp_request(&format!("10.0.0.{}", 100 + h))).collect();
        let guesses: Vec<Context> = (0..12).map(|_| Context::outbound("52.0.0.9", 22, 6, 0x02, 74)).collect();
        let neighbour: Vec<Context> =
            (0..6).map(|_| Context::outbound("10.0.0.77", 8080, 6, 0x18, 400)).collect();
        for (name, wave, kind) in [
            ("a TCP scan", &scan, "scan"),
            ("an ARP sweep", &sweep, "scan"),
            ("a password guesser", &guesses, "repeated_attempts"),
            ("a new neighbour", &neighbour, "new_local_peer"),
        ] {
            let mut t = IncidentTracker::default();
            // A day of normal traffic with its gateway: its history.
            let gateway = Context::outbound("10.0.0.1", 53, 17, 0, 80);
            for i in 0..5 {
                let s = source(i);
                let d = Decision {
                    anomalous: false,
                    posterior: 0.9,
                    prior: 0.7,
                    ts: 500.0,
                    source: &s,
                    features: &[1.0, 2.0],
                    context: Some(&gateway),
                    judged: true,
                };
                t.observe("cam", d, &rules, None, &[], 500_000, 500.0);
            }
            let first = feed_each(&mut t, &rules, wave, 10, 1_000.0);
            // Raised, and told at once when its footprint shows after its first record.
            assert!(matches!(first.first(), Some(Transition::Opened(_))), "{name}: {first:?}");
            assert!(
                first[1..].iter().all(|t| matches!(t, Transition::Updated(i) if i.news.is_some())),
                "{name}: {first:?}"
            );
            let c = close_quietly(&mut t, &rules, 1_200.0);
            let footprint = serde_json::to_value(&c.footprint).unwrap();
            assert!(!c.learned && t.memory.is_empty(), "{name} learned: {footprint}");
            assert_eq!(footprint["kind"], kind, "{name}");
            let words = IncidentReport::of("cam", &c, Some("quiet"), "v", Vec::new(), 1_200.0).summary;
            assert!(words.contains("never learned without a verdict: it showed"), "{name}: {words}");
            // The next day, nobody having answered: raised again.
            let second = feed_each(&mut t, &rules, wave, 100, 90_000.0);
            assert!(
                matches!(second.first(), Some(Transition::Opened(i)) if i.suppressed.is_none()),
                "{name}: {second:?}"
            );
        }
    }

    /// What the daemon learned holds a day after its last return: a return it suppresses
    /// renews it (the suppression says until when); one that stops coming back lapses and
    /// is raised again.
    #[test]
    fn a_learned_upload_expires_unless_seen_again() {
        let rules = learning();
        let upload = packet("52.1.2.3", 443, 1_000);
        let mut t = IncidentTracker::default();
        feed_packets(&mut t, &rules, &upload, 10, 0, 1_000.0);
        let learned = close_quietly(&mut t, &rules, 1_200.0);
        assert!(learned.learned);
        let until = t.memory.behaviours[0].dismissal.expires_at.expect("an expiry");
        assert!((until - (1_019.0 + 86_400.0)).abs() < 1e-6, "closed at 1,019, held a day: {until}");
        // Twenty hours later: suppressed, and renewed from then.
        let again = feed_packets(&mut t, &rules, &upload, 10, 100, 73_000.0);
        let [Transition::Suppressed(s)] = again.as_slice() else { panic!("{again:?}") };
        let renewed = t.memory.behaviours[0].dismissal.expires_at.unwrap();
        assert!((renewed - (73_002.0 + 86_400.0)).abs() < 1e-6, "renewed at its return: {renewed}");
        let words = IncidentReport::of("cam", s, None, "v", Vec::new(), 73_002.0).summary;
        assert!(words.contains("(learned until 1970-01-02T20:16:42Z unless seen again)"), "{words}");
        close_quietly(&mut t, &rules, 73_200.0);
        // More than a day after that return: it lapsed, and the upload is raised.
        let lapsed = feed_packets(&mut t, &rules, &upload, 10, 200, 73_002.0 + 86_401.0);
        assert!(matches!(lapsed.as_slice(), [Transition::Opened(i)] if i.suppressed.is_none()), "{lapsed:?}");
        assert!(t.memory.find(&learned.id).is_none());
    }

    /// A return of a learned upload that starts guessing passwords on the same peer and
    /// port is news at the tenth attempt: the daemon's learning quiets no attack.
    #[test]
    fn a_learned_behaviour_s_return_that_guesses_passwords_is_news() {
        let rules = learning();
        let upload = packet("52.1.2.3", 443, 1_000);
        let mut t = IncidentTracker::default();
        feed_packets(&mut t, &rules, &upload, 10, 0, 1_000.0);
        let learned = close_quietly(&mut t, &rules, 1_200.0);
        let guesses = Context { tcp_flags: 0x02, bytes: 74, ..upload };
        let back = feed_packets(&mut t, &rules, &guesses, 12, 100, 50_000.0);
        let [Transition::Suppressed(_), Transition::Opened(news)] = back.as_slice() else {
            panic!("{back:?}")
        };
        let n = news.news.as_ref().expect("news");
        assert_eq!(n.by.offset, 100 + 11, "the tenth connection attempt after the two before it opened");
        assert!(
            n.why.contains(&learned.id) && n.why.contains("10 connection attempts to 52.1.2.3 on 443/tcp"),
            "{}",
            n.why
        );
        assert!(news.suppressed.is_none());
    }

    /// A cloud answered by two addresses, each dismissed once: a return on one that moves
    /// to the other is the device's, not news; a third address is.
    #[test]
    fn news_is_judged_against_everything_the_device_remembers() {
        let rules = remembering();
        let (a, b) = (packet("52.1.2.3", 443, 1_000), packet("3.4.5.6", 443, 1_000));
        let mut t = IncidentTracker::default();
        for (i, upload) in [&a, &b].into_iter().enumerate() {
            let first = 100 * i as i64;
            feed_packets(&mut t, &rules, upload, 10, first, 1_000.0 + 1_000.0 * i as f64);
            let fb = verdict(&t, Verdict::FalsePositive);
            assert!(t.feedback(&fb, 1_020.0 + 1_000.0 * i as f64, 60, &rules.memory, 2).is_ok());
        }
        assert_eq!(t.memory.len(), 2);
        let back = feed_packets(&mut t, &rules, &b, 5, 1_000, 80_000.0);
        assert!(matches!(back.as_slice(), [Transition::Suppressed(_)]), "{back:?}");
        let moved = feed_packets(&mut t, &rules, &a, 5, 1_005, 80_005.0);
        assert!(moved.is_empty(), "the other address, dismissed too: {moved:?}");
        let third = feed_packets(&mut t, &rules, &packet("8.8.4.4", 443, 1_000), 1, 1_010, 80_010.0);
        let [Transition::Opened(news)] = third.as_slice() else { panic!("{third:?}") };
        assert!(news.news.as_ref().unwrap().why.contains("a new peer, 8.8.4.4"), "{news:?}");
    }

    #[test]
    fn without_memory_a_dismissed_behaviour_opens_again() {
        let upload = packet("52.1.2.3", 443, 1_000);
        let mut t = IncidentTracker::default();
        feed_packets(&mut t, &RULES, &upload, 10, 0, 1_000.0);
        let fb = verdict(&t, Verdict::FalsePositive);
        assert!(t.feedback(&fb, 1_010.0, 60, &RULES.memory, 2).is_ok());
        assert!(t.memory.is_empty());
        let again = feed_packets(&mut t, &RULES, &upload, 10, 100, 80_000.0);
        assert!(matches!(again.as_slice(), [Transition::Opened(_)]), "{again:?}");
    }
}
