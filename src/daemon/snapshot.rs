//! Device-window snapshots for the state topic: a small binary layout.
//!
//! `MPS3`: dim, positive rows, unlabeled rows (u32 LE each), records seen (u64 LE),
//! the newest input record in the windows (partition i32, offset i64, topic length
//! u16 and bytes; offset −1 when none), the f32 LE values, then the device's incident
//! state as JSON (u32 LE length and bytes; beside the incident state's fields,
//! `learning`: records still to learn as normal after a dismissal, absent in older
//! snapshots). `MPS2` (no incident state) and `MPS1` (no
//! source either) are still read. Windows, not adapted states, are stored: they outlive
//! a model change.

use serde::{Deserialize, Serialize};

use super::incidents::IncidentTracker;
use super::onboarding::Onboarding;
use super::record::Source;

const MAGIC_V1: &[u8; 4] = b"MPS1";
const MAGIC_V2: &[u8; 4] = b"MPS2";
const MAGIC_V3: &[u8; 4] = b"MPS3";
const COUNTS: usize = 4 + 4 + 4 + 4 + 8;

#[derive(Debug, Clone, PartialEq)]
pub struct Snapshot {
    pub dim: usize,
    pub positive: Vec<f32>,
    pub unlabeled: Vec<f32>,
    pub seen: u64,
    /// The newest input record in the windows: redeliveries up to it are not re-added.
    pub last_source: Option<Source>,
    /// The device's last decisions and open incident (`MPS3`; empty from older ones).
    pub incidents: IncidentTracker,
    /// Records still to be learned as known-normal after a dismissal (0 when absent).
    pub learning: usize,
    /// An onboarding in progress, and the last one finished (none when absent).
    pub onboarding: Option<Onboarding>,
    pub onboarded: Option<Onboarding>,
    /// Known-normal rows kept when verdicts add others (the window's first storage slots).
    pub pinned: usize,
}

/// The JSON tail: the incident state, and beside its fields the dismissal learning.
#[derive(Serialize, Deserialize)]
struct Tail<T> {
    #[serde(flatten)]
    incidents: T,
    #[serde(default)]
    learning: usize,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    onboarding: Option<Onboarding>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    onboarded: Option<Onboarding>,
    #[serde(default)]
    pinned: usize,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SnapshotError {
    #[error("not a metapu snapshot")]
    BadMagic,
    #[error("snapshot length does not match its header")]
    BadLength,
    #[error("snapshot holds NaN or infinity")]
    NonFinite,
    #[error("snapshot's incident state is unreadable: {0}")]
    Incidents(String),
}

/// Little-endian reader over a byte slice; `None` past the end.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }
    fn array<const N: usize>(&mut self) -> Option<[u8; N]> {
        self.take(N).and_then(|b| b.try_into().ok())
    }
}

impl Snapshot {
    pub fn encode(&self) -> Vec<u8> {
        let (np, nu) = (self.positive.len() / self.dim.max(1), self.unlabeled.len() / self.dim.max(1));
        let topic = self.last_source.as_ref().map_or("", |s| s.topic.as_str());
        let topic = &topic.as_bytes()[..topic.len().min(u16::MAX as usize)];
        let mut out =
            Vec::with_capacity(COUNTS + 14 + topic.len() + 4 * (self.positive.len() + self.unlabeled.len()));
        out.extend_from_slice(MAGIC_V3);
        for n in [self.dim, np, nu] {
            out.extend_from_slice(&(n as u32).to_le_bytes());
        }
        out.extend_from_slice(&self.seen.to_le_bytes());
        let (partition, offset) = self.last_source.as_ref().map_or((0, -1), |s| (s.partition, s.offset));
        out.extend_from_slice(&partition.to_le_bytes());
        out.extend_from_slice(&offset.to_le_bytes());
        out.extend_from_slice(&(topic.len() as u16).to_le_bytes());
        out.extend_from_slice(topic);
        for v in self.positive.iter().chain(&self.unlabeled) {
            out.extend_from_slice(&v.to_le_bytes());
        }
        let tail = Tail {
            incidents: &self.incidents,
            learning: self.learning,
            onboarding: self.onboarding.clone(),
            onboarded: self.onboarded.clone(),
            pinned: self.pinned,
        };
        let incidents = serde_json::to_vec(&tail).expect("incident state serialises");
        out.extend_from_slice(&(incidents.len() as u32).to_le_bytes());
        out.extend_from_slice(&incidents);
        out
    }

    pub fn decode(bytes: &[u8]) -> Result<Self, SnapshotError> {
        let mut r = Reader(bytes);
        let version = match r.take(4) {
            Some(m) if m == MAGIC_V3 => 3,
            Some(m) if m == MAGIC_V2 => 2,
            Some(m) if m == MAGIC_V1 => 1,
            _ => return Err(SnapshotError::BadMagic),
        };
        let mut count =
            || r.array::<4>().map(|b| u32::from_le_bytes(b) as usize).ok_or(SnapshotError::BadLength);
        let (dim, np, nu) = (count()?, count()?, count()?);
        let seen = r.array::<8>().map(u64::from_le_bytes).ok_or(SnapshotError::BadLength)?;
        let last_source = if version >= 2 {
            let partition = r.array::<4>().map(i32::from_le_bytes).ok_or(SnapshotError::BadLength)?;
            let offset = r.array::<8>().map(i64::from_le_bytes).ok_or(SnapshotError::BadLength)?;
            let len = r.array::<2>().map(u16::from_le_bytes).ok_or(SnapshotError::BadLength)?;
            let topic = r.take(len as usize).ok_or(SnapshotError::BadLength)?;
            let topic = String::from_utf8(topic.to_vec()).map_err(|_| SnapshotError::BadLength)?;
            (offset >= 0).then_some(Source { topic, partition, offset })
        } else {
            None
        };
        let values =
            (np + nu).checked_mul(dim).and_then(|v| v.checked_mul(4)).ok_or(SnapshotError::BadLength)?;
        let windows = if version == 3 { r.take(values) } else { (r.0.len() == values).then_some(r.0) };
        let windows = windows.ok_or(SnapshotError::BadLength)?;
        let tail = if version == 3 {
            let len = r.array::<4>().map(u32::from_le_bytes).ok_or(SnapshotError::BadLength)? as usize;
            if r.0.len() != len {
                return Err(SnapshotError::BadLength);
            }
            serde_json::from_slice(r.0).map_err(|e| SnapshotError::Incidents(e.to_string()))?
        } else {
            Tail {
                incidents: IncidentTracker::default(),
                learning: 0,
                onboarding: None,
                onboarded: None,
                pinned: 0,
            }
        };
        let floats: Vec<f32> =
            windows.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
        if floats.iter().any(|v| !v.is_finite()) {
            return Err(SnapshotError::NonFinite);
        }
        let (positive, unlabeled) = floats.split_at(np * dim);
        Ok(Self {
            dim,
            positive: positive.to_vec(),
            unlabeled: unlabeled.to_vec(),
            seen,
            last_source,
            incidents: tail.incidents,
            learning: tail.learning,
            onboarding: tail.onboarding,
            onboarded: tail.onboarded,
            pinned: tail.pinned,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::daemon::incidents::{Decision, IncidentRules};

    #[test]
    fn snapshots_round_trip_and_reject_garbage() {
        let s = Snapshot {
            incidents: Default::default(),
            dim: 2,
            positive: vec![1.0, 2.0],
            unlabeled: vec![3.0, 4.0, 5.0, 6.0],
            seen: 9,
            last_source: Some(Source { topic: "in".into(), partition: 3, offset: 41 }),
            learning: 0,
            onboarding: None,
            onboarded: None,
            pinned: 0,
        };
        assert_eq!(Snapshot::decode(&s.encode()).unwrap(), s);
        let none = Snapshot { last_source: None, ..s.clone() };
        assert_eq!(Snapshot::decode(&none.encode()).unwrap(), none);
        // An open incident travels with the windows (its clock fields restart at restore).
        let rules =
            IncidentRules { open_k: 1, open_n: 1, update_interval_ms: 1, quiet_ms: 1, keep_records: 1 };
        let mut with_incident = s.clone();
        let d = Decision {
            anomalous: true,
            posterior: 0.2,
            prior: 0.6,
            ts: 5.0,
            source: &Source { topic: "in".into(), partition: 3, offset: 40 },
            features: &[1.0, 2.0],
            context: None,
        };
        assert!(with_incident.incidents.observe("a", d, &rules, 0, 1.5e9).is_some());
        assert_eq!(Snapshot::decode(&with_incident.encode()).unwrap(), with_incident);
        // So does the dismissal learning still to come, and a tail without it reads as 0.
        let learning = Snapshot { learning: 12, ..with_incident.clone() };
        assert_eq!(Snapshot::decode(&learning.encode()).unwrap(), learning);
        // And an onboarding under way and the last one done.
        let span =
            Onboarding { from: 1.0, until: 3601.0, records: 7, by: "ops".into(), note: "joined".into() };
        let onboarding =
            Snapshot { onboarding: Some(span.clone()), onboarded: Some(span), pinned: 2, ..s.clone() };
        assert_eq!(Snapshot::decode(&onboarding.encode()).unwrap(), onboarding);
        let tail = 4 + serde_json::to_vec(&Tail {
            incidents: &s.incidents,
            learning: 0,
            onboarding: None,
            onboarded: None,
            pinned: 0,
        })
        .unwrap()
        .len();
        let mut before = s.encode();
        before.truncate(before.len() - tail);
        let old_tail = serde_json::to_vec(&s.incidents).unwrap();
        before.extend_from_slice(&(old_tail.len() as u32).to_le_bytes());
        before.extend_from_slice(&old_tail);
        assert_eq!(Snapshot::decode(&before).unwrap(), s);
        // The second layout (no incident state) still reads.
        let mut v2 = s.encode();
        v2[..4].copy_from_slice(b"MPS2");
        v2.truncate(v2.len() - tail);
        assert_eq!(Snapshot::decode(&v2).unwrap(), s);
        // The first layout (no source) still reads.
        let mut v1 = b"MPS1".to_vec();
        for n in [2u32, 1, 0] {
            v1.extend_from_slice(&n.to_le_bytes());
        }
        v1.extend_from_slice(&7u64.to_le_bytes());
        v1.extend_from_slice(&1f32.to_le_bytes());
        v1.extend_from_slice(&2f32.to_le_bytes());
        let old = Snapshot::decode(&v1).unwrap();
        assert_eq!((old.positive, old.seen, old.last_source), (vec![1.0, 2.0], 7, None));
        assert_eq!(Snapshot::decode(b"nope"), Err(SnapshotError::BadMagic));
        let mut cut = s.encode();
        cut.pop();
        assert_eq!(Snapshot::decode(&cut), Err(SnapshotError::BadLength));
        let bad = Snapshot { positive: vec![f32::NAN, 0.0], ..s };
        assert_eq!(Snapshot::decode(&bad.encode()), Err(SnapshotError::NonFinite));
    }
}
