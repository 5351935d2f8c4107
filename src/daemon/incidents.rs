//! Incidents: one per attack, not one alert per record. Per device, a small state
//! machine over its scored records — open when `k` of the last `n` decisions are
//! anomalous; update while open, at most every `update_interval`; close after `quiet`
//! with no anomalous decision. Pure: no Kafka, no clock of its own (times come in).

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::output::Source;

/// Opening, updating and closing rules (`[incidents]`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct IncidentRules {
    /// Open when `open_k` of the last `open_n` decisions are anomalous (`open_n` ≤ 64).
    pub open_k: u32,
    pub open_n: u32,
    pub update_interval_ms: u64,
    pub quiet_ms: u64,
    /// Anomalous records kept per open incident (for feedback and explanations).
    pub keep_records: usize,
}

/// An open incident of one device. Part of the device's snapshot; the service-clock
/// fields are not (they restart at restore).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Incident {
    /// Deterministic: the device and the source of the record that opened it, so a
    /// redelivered record never opens a second incident.
    pub id: String,
    pub opened_by: Source,
    /// Unix seconds at opening.
    pub opened_at: f64,
    /// Record timestamps (`ts`) of the opening and of the last anomalous record.
    pub first_ts: f64,
    pub last_ts: f64,
    /// Records scored since opening, and how many of them were anomalous.
    pub records: u64,
    pub anomalous: u64,
    /// Anomaly score (1 − posterior of normal traffic) of the anomalous records.
    pub peak_score: f32,
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
}

impl Incident {
    pub fn mean_score(&self) -> f32 {
        (self.score_sum / self.anomalous.max(1) as f64) as f32
    }
}

/// Why an incident closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resolution {
    /// `quiet` passed with no anomalous decision.
    Quiet,
}

impl Resolution {
    pub fn as_str(self) -> &'static str {
        match self {
            Resolution::Quiet => "quiet",
        }
    }
}

/// What happened to a device's incident.
#[derive(Debug, Clone, PartialEq)]
pub enum Transition {
    Opened(Incident),
    Updated(Incident),
    Closed(Incident, Resolution),
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
}

/// A device's incident state: its last decisions and its open incident.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct IncidentTracker {
    /// The last decisions, newest in bit 0 (1 = anomalous).
    pub recent: u64,
    pub open: Option<Incident>,
    /// The newest record seen (partition, offset): a redelivered one is not counted twice.
    pub last_seen: Option<(i32, i64)>,
}

pub fn incident_id(device: &str, source: &Source) -> String {
    let text = format!("{device}\u{0}{}\u{0}{}\u{0}{}", source.topic, source.partition, source.offset);
    Sha256::digest(text)[..16].iter().map(|b| format!("{b:02x}")).collect()
}

impl IncidentTracker {
    /// Take one scored record; the incident opened, if it did.
    pub fn observe(
        &mut self,
        device: &str,
        d: Decision<'_>,
        rules: &IncidentRules,
        now_ms: u64,
        now_unix: f64,
    ) -> Option<Transition> {
        let here = (d.source.partition, d.source.offset);
        if self.last_seen.is_some_and(|(p, o)| p == here.0 && o >= here.1) {
            return None; // redelivered: already counted
        }
        self.last_seen = Some(here);
        let n = rules.open_n.clamp(1, 64);
        let mask = if n == 64 { u64::MAX } else { (1u64 << n) - 1 };
        self.recent = ((self.recent << 1) | u64::from(d.anomalous)) & mask;
        let anomaly = 1.0 - d.posterior;
        if let Some(open) = &mut self.open {
            open.records += 1;
            open.attack_share = 1.0 - d.prior;
            open.changed = true;
            if d.anomalous {
                open.anomalous += 1;
                open.peak_score = open.peak_score.max(anomaly);
                open.score_sum += f64::from(anomaly);
                open.last_ts = d.ts;
                open.last_anomalous_ms = now_ms;
                if open.kept.len() < rules.keep_records * d.features.len() {
                    open.kept.extend_from_slice(d.features);
                }
            }
            return None;
        }
        if !d.anomalous || self.recent.count_ones() < rules.open_k.max(1) {
            return None;
        }
        let incident = Incident {
            id: incident_id(device, d.source),
            opened_by: d.source.clone(),
            opened_at: now_unix,
            first_ts: d.ts,
            last_ts: d.ts,
            records: 1,
            anomalous: 1,
            peak_score: anomaly,
            score_sum: f64::from(anomaly),
            attack_share: 1.0 - d.prior,
            last_anomalous_ms: now_ms,
            last_update_ms: now_ms,
            changed: false,
            kept: if rules.keep_records > 0 { d.features.to_vec() } else { Vec::new() },
        };
        self.open = Some(incident.clone());
        Some(Transition::Opened(incident))
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

    /// Time passes: an update is due, or the incident has been quiet long enough.
    pub fn tick(&mut self, rules: &IncidentRules, now_ms: u64) -> Option<Transition> {
        let open = self.open.as_mut()?;
        if now_ms.saturating_sub(open.last_anomalous_ms) >= rules.quiet_ms {
            let closed = self.open.take()?;
            self.recent = 0;
            return Some(Transition::Closed(closed, Resolution::Quiet));
        }
        if open.changed && now_ms.saturating_sub(open.last_update_ms) >= rules.update_interval_ms {
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

    const RULES: IncidentRules =
        IncidentRules { open_k: 3, open_n: 5, update_interval_ms: 1_000, quiet_ms: 10_000, keep_records: 2 };

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
            };
            out.extend(t.observe("cam", d, &RULES, offset as u64 * 100, 0.0));
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
        assert!((i.attack_share - 0.3).abs() < 1e-6 && (i.peak_score - 0.9).abs() < 1e-6);
    }

    #[test]
    fn counts_while_open_updates_at_most_every_interval_and_closes_when_quiet() {
        let mut t = IncidentTracker::default();
        feed(&mut t, &[true, true, true], 0);
        assert!(t.tick(&RULES, 250).is_none(), "nothing new since opening");
        feed(&mut t, &[true, false, true, true], 3);
        assert!(t.tick(&RULES, 1_199).is_none(), "an update within the interval after opening");
        let Some(Transition::Updated(u)) = t.tick(&RULES, 1_200) else { panic!("no update") };
        assert_eq!((u.records, u.anomalous, u.last_ts), (5, 4, 6.0));
        assert_eq!(u.kept, [1.0, 2.0, 1.0, 2.0], "two records kept");
        assert!(t.tick(&RULES, 2_500).is_none(), "no new records: no update");
        assert!(t.tick(&RULES, 600 + 9_999).is_none(), "quiet not yet over");
        let Some(Transition::Closed(c, Resolution::Quiet)) = t.tick(&RULES, 600 + 10_000) else { panic!() };
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
        assert_eq!(t.open.as_ref().map(|i| i.records), Some(1));
        // The same records on a restored tracker without the incident: the same id.
        let mut restored = IncidentTracker::default();
        let reopened = feed(&mut restored, &[true, true, true], 0);
        let [Transition::Opened(i)] = reopened.as_slice() else { panic!("{reopened:?}") };
        assert_eq!(Some(&i.id), t.open.as_ref().map(|o| &o.id));
    }
}
