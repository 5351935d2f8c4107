//! What an incident's records changed: the top features by robust deviation of its
//! anomalous records from the device's known-normal window (`model::explain`), named
//! and put in words (`traffic::feature_words`).

use serde::{Deserialize, Serialize};

use crate::model::explain::top_deviations;
use crate::model::Model;
use crate::traffic::feature_words;

/// Features named on each opened and updated incident.
pub const TOP_FEATURES: usize = 5;

/// One feature that moved, as published.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FeatureChange {
    /// The N-BaIoT column name.
    pub feature: String,
    /// `host`, `channel`, `channel_timing` or `socket` (empty for other names).
    pub family: String,
    /// Robust deviation (median and MAD) on the model's preprocessed scale.
    pub deviation: f32,
    /// Medians of the known-normal and of the incident's records, raw.
    pub normal: f32,
    pub now: f32,
    pub words: String,
}

/// The top features by which `unusual` rows depart from `normal` rows, one per family
/// and statistic: N-BaIoT measures each statistic over five time windows (and a host's
/// traffic by MAC and IP and by IP alone), and an analyst learns nothing from the same
/// change named five times, so the strongest window stands for the others.
pub fn feature_changes(model: &Model, normal: &[f32], unusual: &[f32]) -> Vec<FeatureChange> {
    let mut said = std::collections::HashSet::new();
    top_deviations(&model.preprocess, normal, unusual, model.preprocess.dim())
        .into_iter()
        .map(|d| {
            let name =
                model.feature_names.get(d.feature).cloned().unwrap_or_else(|| format!("f{}", d.feature));
            let meaning = feature_words::meaning(&name);
            (d, name, meaning)
        })
        .filter(|(_, name, meaning)| {
            let key = match meaning {
                // A channel's timing statistics count the same packets as its size statistics.
                Some(m) if m.statistic == "packets (timing statistics)" => "channel/packets".to_string(),
                Some(m) => format!("{}/{}", m.family.as_str(), m.statistic),
                None => name.clone(),
            };
            said.insert(key)
        })
        .take(TOP_FEATURES)
        .map(|(d, name, meaning)| FeatureChange {
            family: meaning.map_or("", |m| m.family.as_str()).to_string(),
            words: feature_words::describe(&name, d.normal, d.unusual),
            deviation: d.robust_z,
            normal: d.normal,
            now: d.unusual,
            feature: name,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::traffic::profiles::{Attack, DeviceType};
    use crate::traffic::simulate::{device_rows, plan, FleetConfig};

    fn shipped_model() -> Model {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("models/iot-default.safetensors");
        crate::model::file::load(&path, tch::Device::Cpu).expect("the shipped model loads")
    }

    /// A simulated doorbell attacked by `attack`: 50 of its benign rows as the positive
    /// window against 50 rows of the attack; the top features.
    fn top_changes(attack: Attack) -> Vec<FeatureChange> {
        let cfg = FleetConfig {
            devices: 1,
            types: vec![DeviceType::Doorbell],
            attacks: vec![attack],
            duration_s: 240.0,
            seed: 3,
            attacked_share: 1.0,
            attack_start: (0.5, 0.5),
            max_rows_per_class: Some(400),
            ..FleetConfig::default()
        };
        let device = plan(&cfg).remove(0);
        let rows = device_rows(&cfg, &device);
        let dim = rows.features.len() / rows.normal.len();
        let pick = |normal: bool| -> Vec<f32> {
            rows.features
                .chunks_exact(dim)
                .zip(&rows.normal)
                .filter(|(_, n)| **n == normal)
                .skip(if normal { 20 } else { 0 })
                .take(50)
                .flat_map(|(r, _)| r.iter().copied())
                .collect()
        };
        let changes = feature_changes(&shipped_model(), &pick(true), &pick(false));
        for c in &changes {
            println!("{attack:?}: {} ({:.1}): {}", c.feature, c.deviation, c.words);
        }
        // Each change named once: no statistic again at another window.
        let statistics: std::collections::HashSet<String> = changes
            .iter()
            .map(|c| {
                let m = feature_words::meaning(&c.feature).expect("an N-BaIoT name");
                format!("{}/{}", c.family, m.statistic.trim_end_matches(" (timing statistics)"))
            })
            .collect();
        assert_eq!(statistics.len(), changes.len(), "{changes:?}");
        changes
    }

    #[test]
    fn a_scan_moves_channels_and_sockets() {
        let families: Vec<String> = top_changes(Attack::MiraiScan).into_iter().map(|c| c.family).collect();
        assert_eq!(families.len(), TOP_FEATURES);
        assert!(
            families.iter().all(|f| ["channel", "channel_timing", "socket"].contains(&f.as_str())),
            "{families:?}"
        );
    }

    #[test]
    fn a_udp_flood_moves_the_hosts_outbound_volume_and_sizes() {
        // Mirai's plain UDP flood: one socket, large packets, fast. (BASHLITE's forges
        // its source address, so each packet is a new channel.) Its volume comes first
        // — packets on the socket it floods — and most of the top five are volumes or
        // sizes, not timing.
        let changes = top_changes(Attack::MiraiUdpplain);
        assert_eq!(changes.len(), TOP_FEATURES);
        assert!(
            changes[0].feature.ends_with("_weight") && changes[0].family != "channel_timing",
            "{changes:?}"
        );
        assert!(changes[0].now > 10.0 * changes[0].normal, "{changes:?}");
        let volume_or_size = changes.iter().filter(|c| c.family != "channel_timing").count();
        assert!(volume_or_size >= 3, "{changes:?}");
    }
}
