//! A device's prior update: what it estimates of itself at each adaptation, published
//! on the priors topic (the console's alerts by day and its remembered behaviours).

use serde::{Deserialize, Serialize};

use super::Device;
use crate::monitor::incidents::behaviours::{Dismissal, MemoryRules};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PriorUpdate {
    pub device: String,
    /// Estimated share of normal traffic in the device's recent window.
    pub prior: f32,
    pub attack_share: f32,
    pub positive_window: usize,
    pub unlabeled_window: usize,
    /// Unix seconds.
    pub time: f64,
    pub model_version: String,
    /// The device's own time at this adaptation point: its newest record's `ts`.
    #[serde(default)]
    pub ts: f64,
    /// Records of the device scored, and of those anomalous, since this daemon began
    /// tracking it: counters, begun again by a restart (the console's alerts by day).
    #[serde(default)]
    pub scored: u64,
    #[serde(default)]
    pub alerted: u64,
    /// Its kind, as an operator onboarded it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// The device's times of the first and the newest record it took as known-normal
    /// since this daemon began tracking it (absent: none since).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub known_normal_span: Option<(f64, f64)>,
    /// The behaviours it remembers (dismissed by an analyst, or learned), each with
    /// `expires_at`: its returns are suppressed until then.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub remembered: Vec<Dismissal>,
}

impl Device {
    /// The prior update of a device just adapted, as of `time` (Unix seconds); `None`
    /// if it has no classifier.
    pub(super) fn prior_update(
        &self,
        id: &str,
        model_version: &str,
        time: f64,
        memory: &MemoryRules,
    ) -> Option<PriorUpdate> {
        let prior = self.classifier.as_ref()?.prior;
        let remembered = (self.incidents.memory().behaviours.iter())
            .map(|b| Dismissal { expires_at: Some(b.dismissal.expires(memory)), ..b.dismissal.clone() })
            .collect();
        Some(PriorUpdate {
            device: id.to_string(),
            prior,
            attack_share: 1.0 - prior,
            positive_window: self.positive.len(),
            unlabeled_window: self.unlabeled.len(),
            time,
            model_version: model_version.to_string(),
            ts: self.clock,
            scored: self.scored,
            alerted: self.alerted,
            kind: self.kind.clone(),
            known_normal_span: self.known_span,
            remembered,
        })
    }
}
