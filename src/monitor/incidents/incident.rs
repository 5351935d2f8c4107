//! One open incident: what it counts, its looks' findings, its fleet, how it closed.

use super::*;

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
    /// Its news was told in the event at hand: later events (updates, the close) carry
    /// none, so that an update is news only when something new appeared in it.
    #[serde(skip)]
    pub news_fresh: bool,
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
    /// A new incident at its opening record (and a look's finding, if one opened it).
    pub(super) fn opened(
        device: &str,
        d: &Decision<'_>,
        finding: Option<Finding>,
        rules: &IncidentRules,
        (now_ms, now_unix): (u64, f64),
    ) -> Self {
        let anomaly = 1.0 - d.posterior;
        let mut incident = Incident {
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
            kept: if rules.keep_records > 0 { d.features.to_vec() } else { Vec::new() },
            look: finding,
            ..Self::blank(incident_id(device, d.source), d.source.clone())
        };
        if let Some(c) = d.context {
            incident.traffic.add(c, d.ts);
        }
        incident
    }

    /// Held by the device's learning period: suppressed as itself
    /// ([`IncidentTracker::learning_hold`]), not as a remembered behaviour.
    pub fn held(&self) -> bool {
        self.suppressed.as_ref().is_some_and(|d| d.incident_id == self.id)
    }

    pub fn mean_score(&self) -> f32 {
        (self.score_sum / self.figures.anomalous.max(1) as f64) as f32
    }

    /// An incident with nothing in it yet.
    pub(super) fn blank(id: String, opened_by: Source) -> Self {
        Self {
            id,
            opened_by,
            figures: IncidentFigures::default(),
            score_sum: 0.0,
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
            news_fresh: false,
            look: None,
            learned: false,
            footprint: None,
            shown: 0,
            fleet: None,
            members: BTreeSet::new(),
        }
    }

    /// An open incident with these counts, for other modules' tests.
    #[cfg(test)]
    pub(crate) fn sample(records: u64, anomalous: u64) -> Self {
        let opened_by = Source::new("iot.features", 0, 311);
        Self {
            figures: IncidentFigures { records, anomalous, peak_score: 0.9, ..IncidentFigures::default() },
            score_sum: 0.9 * anomalous as f64,
            ..Self::blank("0123456789abcdef0123456789abcdef".into(), opened_by)
        }
    }

    /// The news told in the event at hand, if any.
    pub fn fresh_news(&self) -> Option<&News> {
        self.news.as_ref().filter(|_| self.news_fresh)
    }

    /// It showed evidence of an attack on the wire: a look's finding, or a footprint on
    /// the device (a stranger alone is never learned, but a fleet's new host is one too).
    pub fn shows_evidence(&self) -> bool {
        self.look.is_some() || self.footprint.as_ref().is_some_and(Footprint::on_the_device)
    }

    /// Not raised to an analyst by itself: suppressed (or held), or joined to a
    /// sibling's fleet incident. Its updates are not sent.
    pub fn quiet(&self) -> bool {
        self.suppressed.is_some() || self.fleet.is_some()
    }

    /// Something new for the analyst, said at once (its event goes out now; the next
    /// update waits its interval from here).
    pub(super) fn tell(&mut self, news: News, now_ms: u64) {
        self.news = Some(news);
        self.news_fresh = true;
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
    pub(super) fn add_anomalous(
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
    pub(super) fn note_footprint(&mut self, c: Option<&Context>, history: &History) -> Option<Footprint> {
        let found = footprint::of_record(c, &self.traffic, history)?;
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

/// Why an incident closed (the metrics register its values from this list).
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::IntoStaticStr, strum::VariantNames)]
#[strum(serialize_all = "snake_case")]
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
        self.into()
    }
}

/// An incident a member raised to an analyst, as its kind hears of it: what a sibling
/// raising the same behaviour minutes later joins (`IncidentRules::fleet_ms`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Raised {
    pub device: String,
    pub incident_id: String,
    /// The member's time (Unix seconds) when it was raised.
    pub at: f64,
    /// Its behaviour so far (peers, names, services, directions; `dismissal` names the
    /// raised incident itself, by nobody: it is no verdict).
    pub behaviour: Behaviour,
    /// It joined this sibling's incident instead of being raised: that incident's id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub joined: Option<String>,
}
