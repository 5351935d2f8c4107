//! An incident's change as the devices give it to the door: the transition, the
//! features that moved (explained on the device's rows as they were at the change), and
//! when it happened. A plain value: the door publishes it and reads nothing else.

use super::Device;
use crate::model::Model;
use crate::monitor::incidents::explain::{feature_changes, FeatureChange};
use crate::monitor::incidents::{Incident, IncidentRules, Transition};

/// One incident change of one device.
#[derive(Debug, Clone, PartialEq)]
pub struct IncidentChange {
    pub device: String,
    pub transition: Transition,
    /// The features that moved; empty for a device no longer tracked.
    pub top: Vec<FeatureChange>,
    /// Unix seconds, on the clock the change is published at.
    pub time: f64,
}

/// The incident's anomalous records against the device's known-normal window. Until
/// it holds `open_k` kept records, the device's newest `open_n` records stand in for
/// them (at least `open_k` of those were anomalous, so their medians are).
pub(super) fn explain(model: &Model, rules: &IncidentRules, d: &Device, i: &Incident) -> Vec<FeatureChange> {
    let dim = model.dim();
    let newest;
    let unusual = if i.kept.len() >= rules.open_k as usize * dim {
        &i.kept
    } else {
        newest = d.newest_rows(rules.open_n as usize);
        &newest
    };
    feature_changes(model, d.own_known_normal_rows(), unusual)
}
