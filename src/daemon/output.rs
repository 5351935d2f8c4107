//! What the daemon publishes: alerts, prior estimates, dead letters, scores.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// Where a record came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Source {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
}

/// Deterministic alert id from the source coordinates: a redelivered record yields
/// the same id, so consumers can drop duplicates (at-least-once delivery).
pub fn alert_id(source: &Source) -> String {
    let digest = Sha256::digest(format!("{}\u{0}{}\u{0}{}", source.topic, source.partition, source.offset));
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

pub fn payload_excerpt(bytes: &[u8]) -> String {
    const LIMIT: usize = 4096;
    String::from_utf8_lossy(&bytes[..bytes.len().min(LIMIT)]).into_owned()
}

pub fn unix_now() -> f64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64())
}
