//! What the daemon publishes: alerts, prior estimates, dead letters, scores.

use serde::{Deserialize, Serialize};

use sha2::{Digest, Sha256};

use super::devices::kinds::Share;
use super::devices::{IncidentChange, PriorUpdate};
use super::incidents::incident_traffic::{Severity, TrafficReport};
use super::incidents::Transition;
use super::record::Source;

/// Deterministic alert id from the source coordinates: a redelivered record yields
/// the same id, so consumers can drop duplicates (at-least-once delivery).
pub fn alert_id(source: &Source) -> String {
    let digest = Sha256::digest(source.id_text());
    digest[..16].iter().map(|b| format!("{b:02x}")).collect()
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Alert {
    pub alert_id: String,
    pub device: String,
    pub ts: f64,
    /// Posterior probability that the record is normal traffic.
    pub score: f32,
    /// The device's estimated share of normal traffic.
    pub prior: f32,
    pub model_version: String,
    pub source: Source,
}

/// Events on the incidents topic (key = device), told apart by `"event"`.
/// Its `"event"` tags are its variants' names in snake case, said once: serde writes
/// them, and `strum` gives them to the metrics (`VARIANTS`) and to [`Self::name`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, strum::IntoStaticStr, strum::VariantNames)]
#[serde(tag = "event", rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum IncidentEvent {
    Opened(IncidentReport),
    Updated(IncidentReport),
    /// It had closed quietly a moment ago and is open again, under its id
    /// (`incidents.reopen_s`).
    Reopened(IncidentReport),
    /// An incident of a behaviour an analyst dismissed (`suppressed` says which): recorded
    /// here and counted, not raised; no updates follow, its close does, and a record
    /// beyond the behaviour opens it as news (`opened`, with `news`).
    Suppressed(IncidentReport),
    Closed(IncidentReport),
    /// An analyst's verdict on an incident that had already closed.
    Reviewed(IncidentReport),
    /// Of the same behaviour as an incident a sibling of its kind raised minutes before
    /// (`fleet` says which): recorded under that fleet incident, which names its
    /// members, not raised; no updates follow, its close does, the verdict on the fleet
    /// incident answers it, and a record beyond its behaviour opens it as news.
    Joined(IncidentReport),
    /// An operator had the device forgotten (`metapu forget`): its known-normal
    /// records, windows and snapshot are gone; it is unmonitored until onboarded again.
    /// A `confirmed` verdict undid what the daemon remembered of an incident no longer
    /// at hand (learned, or dismissed): its behaviour's returns are raised again.
    Unlearned {
        device: String,
        incident_id: String,
        by: String,
        note: String,
        /// Unix seconds.
        time: f64,
    },
    Forgotten {
        device: String,
        /// Known-normal records dropped.
        known_normal: usize,
        by: String,
        note: String,
        /// Unix seconds.
        time: f64,
    },
    /// An operator started onboarding the device (`metapu onboard`): its traffic from
    /// `from` to `until` (Unix seconds, the daemon's clock) is its known-normal traffic,
    /// sampled into the positive window, which it replaces; no incident opens meanwhile.
    Onboarding {
        device: String,
        /// The kind it joins (`metapu onboard --kind`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        kind: Option<String>,
        from: f64,
        until: f64,
        by: String,
        note: String,
        time: f64,
    },
    /// An operator named the device's kind (`metapu kind`): what it was onboarded on and
    /// what analysts dismissed on it is offered to the kind's other members, and theirs
    /// to it; it left the kind it was of.
    KindJoined {
        device: String,
        kind: String,
        by: String,
        note: String,
        /// Unix seconds.
        time: f64,
    },
    /// The onboarding span ended: how many records it saw and the known-normal records
    /// the device now has.
    Onboarded {
        device: String,
        from: f64,
        until: f64,
        records: u64,
        known_normal: usize,
        by: String,
        note: String,
        time: f64,
    },
    /// A device sends traffic but has no known-normal record, so none of it is scored:
    /// reported once per device (again after a restart).
    Unmonitored {
        device: String,
        /// Records seen from the device.
        records: u64,
        /// Seconds since its first record (this daemon's view).
        since_s: f64,
        /// Unix seconds.
        time: f64,
        /// What is wrong and what to do, in words.
        message: String,
    },
}

impl IncidentEvent {
    /// Its `"event"` tag.
    pub fn name(&self) -> &'static str {
        self.into()
    }

    /// The device it is about (the record's key).
    pub fn device(&self) -> &str {
        match self {
            Self::Opened(r)
            | Self::Updated(r)
            | Self::Reopened(r)
            | Self::Suppressed(r)
            | Self::Closed(r)
            | Self::Reviewed(r)
            | Self::Joined(r) => &r.device,
            Self::Unmonitored { device, .. }
            | Self::Forgotten { device, .. }
            | Self::Unlearned { device, .. }
            | Self::Onboarding { device, .. }
            | Self::KindJoined { device, .. }
            | Self::Onboarded { device, .. } => device,
        }
    }
}

/// An incident as an analyst reads it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IncidentReport {
    pub incident_id: String,
    pub device: String,
    /// When it opened, its records and scores (the tracker's own figures).
    #[serde(flatten)]
    pub figures: super::incidents::IncidentFigures,
    /// Mean anomaly score of the anomalous records.
    pub mean_score: f32,
    /// Share of the records scored since it opened that were anomalous (`anomalous` ÷
    /// `records`): what the incident itself says.
    pub attack_share: f32,
    /// The model's estimate for the device's recent window (1 − π̂ of its last
    /// adaptation, as on the priors topic): it lags an attack that began after that
    /// adaptation, so it can be low in an open incident.
    pub model_attack_share: f32,
    /// The record that opened it.
    pub opened_by: Source,
    /// On `closed`: why (`quiet`, or `dismissed` by an analyst).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolution: Option<String>,
    pub model_version: String,
    /// Unix seconds of this event.
    pub time: f64,
    /// One line in words: what the traffic was (when the records carried context), then
    /// the counts.
    pub summary: String,
    /// `low`, `medium`, `high` or `critical` ([`Severity::of`]).
    pub severity: Severity,
    /// The packets behind its anomalous records: the device's address, peers, ports,
    /// protocols, packets, bytes (absent when the records carried no context).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traffic: Option<Box<TrafficReport>>,
    /// The features that moved most from the device's known-normal traffic, named and
    /// in words.
    pub top_features: Vec<super::incidents::explain::FeatureChange>,
    /// Analysts' verdicts so far (`metapu.feedback`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub feedback: Vec<super::incidents::Feedback>,
    /// Times it closed quietly and opened again (`incidents.reopen_s`), and the record
    /// that reopened it last.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub reopened: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reopened_by: Option<Box<Source>>,
    /// Of a behaviour an analyst dismissed: which dismissal (every event of a suppressed
    /// incident carries it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suppressed: Option<Box<super::incidents::behaviours::Dismissal>>,
    /// Something new in it, told in this event only (a later update carries none): it
    /// had been suppressed and went beyond the dismissed behaviour, or a look or an
    /// attack's footprint showed in it; how, in words, and the record that did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub news: Option<Box<super::incidents::behaviours::News>>,
    /// What raised it: `model` (its records' decisions, `open_k` of `open_n`), or a look
    /// on its packets (`address_scan`, `port_scan`, `flood`: `look` says why).
    #[serde(default)]
    pub raised_by: super::incidents::fanout::RaisedBy,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub look: Option<Box<super::incidents::fanout::Finding>>,
    /// It closed quietly without a verdict, and the daemon now remembers its behaviour
    /// (`incidents.learn_quiet_closes`): its returns are suppressed; a `confirmed`
    /// verdict on it undoes that.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub learned: bool,
    /// What it showed of an attack's footprint (a scan, repeated attempts on one
    /// login service, a new local peer or served port, a stranger): never learned without a
    /// verdict (`footprint.rs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub footprint: Option<Box<super::incidents::footprint::Footprint>>,
    /// It joined a sibling's fleet incident (event `joined`): which, on which device.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fleet: Option<Box<super::incidents::Fleet>>,
    /// A fleet incident: the siblings whose incidents joined it.
    #[serde(default, skip_serializing_if = "std::collections::BTreeSet::is_empty")]
    pub members: std::collections::BTreeSet<String>,
}

impl IncidentReport {
    /// The analyst is not told: the incident is of a behaviour dismissed before.
    pub fn is_suppressed(&self) -> bool {
        self.suppressed.is_some()
    }

    /// Not raised by itself: suppressed, or joined to a sibling's fleet incident.
    pub fn is_quiet(&self) -> bool {
        self.suppressed.is_some() || self.fleet.is_some()
    }
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl IncidentReport {
    pub fn of(
        device: &str,
        i: &super::incidents::Incident,
        resolution: Option<&str>,
        model_version: &str,
        top_features: Vec<super::incidents::explain::FeatureChange>,
        time: f64,
    ) -> Self {
        let state = match resolution {
            None => "open".to_string(),
            Some(r) => format!("closed ({r})"),
        };
        let most = top_features.first().map(|f| format!("; most changed: {}", f.words)).unwrap_or_default();
        let share = i.figures.anomalous as f32 / i.figures.records.max(1) as f32;
        let traffic = i.traffic.report().map(Box::new);
        // "device cam sent 254 TCP SYN packets …; 254 of 300 records …", or as before
        // "device cam: 5 of 9 records …" when the records carried no context.
        let what = traffic.as_ref().map_or_else(|| ":".to_string(), |t| format!(" {};", t.summary));
        let mut severity = i.severity();
        if i.look.is_some() || i.news.is_some() {
            // A scan or flood, or something new during an incident: look at it now.
            severity = severity.max(Severity::High);
        }
        let raised = i.look.as_ref().map(|f| format!("; raised by the {}", f.why)).unwrap_or_default();
        let known = match (&i.suppressed, &i.news) {
            (Some(d), _) if i.held() => format!(
                "; held in the device's learning period{}: learned if it closes quietly, raised if it \
                 shows what is never learned (a scan, repeated attempts, a new local peer or \
                 served port, a stranger)",
                d.expires_at.map(|t| format!(" (until {})", iso8601(t))).unwrap_or_default()
            ),
            (Some(d), _) if d.learned => format!(
                "; suppressed: the behaviour of incident {}, which closed quietly without a verdict \
                 (learned{} unless seen again)",
                d.incident_id,
                d.expires_at.map(|t| format!(" until {}", iso8601(t))).unwrap_or_default()
            ),
            (Some(d), _) => format!(
                "; suppressed: the behaviour dismissed in incident {}{} by {:?}{}",
                d.incident_id,
                d.on.as_ref().map(|on| format!(" on {on}")).unwrap_or_default(),
                d.by,
                if d.note.is_empty() { String::new() } else { format!(" ({})", d.note) }
            ),
            (None, Some(news)) if i.news_fresh => format!("; news: {}", news.why),
            (None, _) => String::new(),
        };
        let fleet = match &i.fleet {
            Some(f) => format!(
                "; joined fleet incident {} raised on {}: the same behaviour; the verdict on it \
                 answers this one",
                f.incident_id, f.device
            ),
            None if !i.members.is_empty() => format!(
                "; a fleet incident: {} more of its kind joined it ({}); one verdict answers them all",
                i.members.len(),
                i.members.iter().cloned().collect::<Vec<_>>().join(", ")
            ),
            None => String::new(),
        };
        let learned = match (&i.footprint, resolution) {
            _ if i.learned && i.held() => {
                "; closed quietly in the device's learning period: its behaviour is remembered and \
                 its returns are suppressed (a confirmed verdict undoes it)"
                    .to_string()
            }
            _ if i.learned => {
                "; closed quietly without a verdict: its behaviour is remembered and its returns \
                               are suppressed (a confirmed verdict undoes it)"
                    .to_string()
            }
            (Some(f), Some(_)) => format!("; never learned without a verdict: it showed {}", f.words()),
            _ => String::new(),
        };
        let summary = format!(
            "device {device}{what} {} of {} records anomalous ({:.0} %) since the incident opened, peak \
             score {:.2}; {state}{raised}{known}{fleet}{learned}{most}",
            i.figures.anomalous,
            i.figures.records,
            100.0 * share,
            i.figures.peak_score,
        );
        Self {
            incident_id: i.id.clone(),
            device: device.to_string(),
            figures: i.figures,
            mean_score: i.mean_score(),
            attack_share: share,
            model_attack_share: i.attack_share,
            opened_by: i.opened_by.clone(),
            resolution: resolution.map(str::to_string),
            model_version: model_version.to_string(),
            time,
            summary,
            severity,
            traffic,
            top_features,
            feedback: i.feedback.clone(),
            reopened: i.reopened,
            reopened_by: i.reopened_by.clone().map(Box::new),
            suppressed: i.suppressed.clone().map(Box::new),
            news: i.fresh_news().cloned().map(Box::new),
            raised_by: i.look.as_ref().map_or_else(Default::default, |f| f.look),
            look: i.look.clone().map(Box::new),
            learned: i.learned,
            footprint: i.footprint.clone().map(Box::new),
            fleet: i.fleet.clone().map(Box::new),
            members: i.members.clone(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeadLetter {
    pub reason: String,
    pub kind: String,
    pub source: Source,
    /// The message, lossily decoded and cut to 4 KiB.
    pub payload: String,
    pub payload_bytes: usize,
    pub time: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScoreRecord {
    pub device: String,
    pub ts: f64,
    /// None while the device has no classifier.
    pub score: Option<f32>,
    pub decision: String,
    pub source: Source,
}

/// Unix seconds as ISO 8601 / RFC 3339 in UTC, to the millisecond (summaries and ECS).
pub fn iso8601(unix: f64) -> String {
    // Rounded to the millisecond before it becomes an integer: 1.5e9 + 0.25 is not exact
    // in nanoseconds.
    let millis = (unix * 1e3).round() as i128;
    let t = time::OffsetDateTime::from_unix_timestamp_nanos(millis * 1_000_000)
        .unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
    t.format(&time::format_description::well_known::Rfc3339).unwrap_or_else(|_| "1970-01-01T00:00:00Z".into())
}

pub fn payload_excerpt(bytes: &[u8]) -> String {
    const LIMIT: usize = 4096;
    String::from_utf8_lossy(&bytes[..bytes.len().min(LIMIT)]).into_owned()
}

/// What the monitor emits, in the order it decided it. The daemon's outbox puts each
/// on its topic (key: the device, or the message's own key for a dead letter).
// An incident event (~376 bytes, with a fleet's members) is 224 bytes larger than a
// score record: over clippy's 200. Boxing it would touch every consumer of `Emitted`
// for the scores' sake, whose batches are short-lived; left for the One Monitor issue's
// output type.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, strum::IntoStaticStr)]
#[strum(serialize_all = "snake_case")]
pub enum Emitted {
    /// Every record's decision (when scores are published).
    Score(ScoreRecord),
    /// An anomalous record (when alerts are published).
    Alert(Alert),
    Incident(IncidentEvent),
    Prior(PriorUpdate),
    /// What a member shares with its kind (the kinds topic, key `kind/device`).
    Share(Share),
    /// A refused message, under its own key.
    DeadLetter {
        key: Option<String>,
        letter: DeadLetter,
    },
}

impl Emitted {
    /// What it is: `score`, `alert`, `incident`, `prior`, `share`, `dead_letter`.
    pub fn kind(&self) -> &'static str {
        self.into()
    }

    /// An incident's change, published under `model_version`.
    pub fn incident(change: IncidentChange, model_version: &str) -> Self {
        Self::Incident(IncidentEvent::of_change(change, model_version))
    }
}

impl IncidentEvent {
    /// An incident's change, as published under `model_version`.
    pub fn of_change(c: IncidentChange, model_version: &str) -> Self {
        let resolution = match &c.transition {
            Transition::Closed(_, r) => Some(r.as_str()),
            _ => None,
        };
        let report =
            IncidentReport::of(&c.device, c.transition.incident(), resolution, model_version, c.top, c.time);
        match c.transition {
            Transition::Opened(_) => Self::Opened(report),
            Transition::Updated(_) => Self::Updated(report),
            Transition::Reopened(_) => Self::Reopened(report),
            Transition::Suppressed(_) => Self::Suppressed(report),
            Transition::Closed(..) => Self::Closed(report),
            Transition::Reviewed(_) => Self::Reviewed(report),
            Transition::Joined(_) => Self::Joined(report),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The name the metrics count an event under is the tag it is published with, for
    /// every variant (serde and strum each derive it from the variant's name).
    #[test]
    fn every_incident_event_s_name_is_its_published_tag() {
        let incident = crate::monitor::incidents::Incident::sample(10, 5);
        let r = IncidentReport::of("cam", &incident, None, "v", Vec::new(), 0.0);
        let (d, s) = (String::from("cam"), String::new());
        let events = vec![
            IncidentEvent::Opened(r.clone()),
            IncidentEvent::Updated(r.clone()),
            IncidentEvent::Reopened(r.clone()),
            IncidentEvent::Suppressed(r.clone()),
            IncidentEvent::Closed(r.clone()),
            IncidentEvent::Reviewed(r.clone()),
            IncidentEvent::Joined(r),
            IncidentEvent::Unlearned {
                device: d.clone(),
                incident_id: s.clone(),
                by: s.clone(),
                note: s.clone(),
                time: 0.0,
            },
            IncidentEvent::Forgotten {
                device: d.clone(),
                known_normal: 0,
                by: s.clone(),
                note: s.clone(),
                time: 0.0,
            },
            IncidentEvent::Onboarding {
                device: d.clone(),
                kind: None,
                from: 0.0,
                until: 1.0,
                by: s.clone(),
                note: s.clone(),
                time: 0.0,
            },
            IncidentEvent::KindJoined {
                device: d.clone(),
                kind: "cam".into(),
                by: s.clone(),
                note: s.clone(),
                time: 0.0,
            },
            IncidentEvent::Onboarded {
                device: d.clone(),
                from: 0.0,
                until: 1.0,
                records: 0,
                known_normal: 0,
                by: s.clone(),
                note: s,
                time: 0.0,
            },
            IncidentEvent::Unmonitored {
                device: d,
                records: 1,
                since_s: 0.0,
                time: 0.0,
                message: String::new(),
            },
        ];
        let names: Vec<&str> = events.iter().map(IncidentEvent::name).collect();
        assert_eq!(
            names,
            <IncidentEvent as strum::VariantNames>::VARIANTS,
            "one event of each variant, in order"
        );
        for e in &events {
            let tag = serde_json::to_value(e).unwrap()["event"].as_str().unwrap().to_string();
            assert_eq!(tag, e.name());
        }
    }

    /// An incident half of whose records were anomalous says so, whatever the model's
    /// estimate for the device's window was at its last adaptation (which lags).
    #[test]
    fn an_incident_s_attack_share_is_its_own() {
        let incident = crate::monitor::incidents::Incident::sample(2820, 1369);
        let r = IncidentReport::of("cam", &incident, None, "v", Vec::new(), 0.0);
        assert!((r.attack_share - 1369.0 / 2820.0).abs() < 1e-6);
        assert_eq!(r.model_attack_share, 0.0);
        assert!(r.summary.contains("1369 of 2820 records anomalous (49 %)"), "{}", r.summary);
        assert!(!r.summary.contains(" 0 %"), "{}", r.summary);
    }

    #[test]
    fn alert_ids_are_deterministic_per_source_record() {
        let s = |offset| Source::new("t", 1, offset);
        assert_eq!(alert_id(&s(5)), alert_id(&s(5)));
        assert_ne!(alert_id(&s(5)), alert_id(&s(6)));
    }
}
