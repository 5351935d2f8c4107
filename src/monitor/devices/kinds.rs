//! Device kinds: what an operator or an analyst accepted on one device of a kind is
//! offered to its siblings. An operator names a device's kind when onboarding it
//! (`metapu onboard --kind`); the daemon that holds a member shares what was accepted
//! on it — its onboarded known-normal rows and the behaviours analysts dismissed on it —
//! as one message on the kinds topic (key `kind/device`, the last one wins), which every
//! daemon reads whole (as Kafka Streams reads a global table): a member's siblings may
//! sit on any daemon of the group. Only what people accepted is shared as accepted; what
//! members merely did together is shared as raised: a member's incident of the same
//! behaviour as one a sibling raised minutes before joins it (one fleet incident, one
//! notification, one verdict), and a worm across the kind is one loud incident.
//!
//! Pure: the shell carries the messages; this table answers what a member is offered.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::windows::SharedRows;
use crate::monitor::incidents::behaviours::{Behaviour, Memory, MAX_REMEMBERED};
use crate::monitor::incidents::Raised;

/// Longest kind name accepted.
pub const MAX_KIND_LEN: usize = 128;
/// Dismissed behaviours offered per kind at most (the newest).
pub const MAX_KIND_BEHAVIOURS: usize = 4 * MAX_REMEMBERED;
/// Raised incidents a kind keeps of its members, to be joined (the newest).
pub const MAX_KIND_RAISED: usize = 64;

/// What one member shares with its kind (the kinds topic's message). An empty one (the
/// device forgotten, or moved to another kind) withdraws what it shared.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Share {
    pub kind: String,
    pub device: String,
    /// Features per row of `normal`.
    pub dim: usize,
    /// The member's known-normal rows from its last onboarding, row after row.
    #[serde(default)]
    pub normal: Vec<f32>,
    /// Behaviours analysts dismissed on the member (each saying on which device).
    #[serde(default)]
    pub behaviours: Vec<Behaviour>,
    /// The member's incidents at hand (open, last closed) that were raised or joined a
    /// sibling's: its kind's fleet incidents.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub raised: Vec<Raised>,
    /// The device's time (Unix seconds) when it was shared.
    pub at: f64,
}

impl Share {
    /// Its key on the kinds topic: one per member, so the last one wins.
    pub fn key(&self) -> String {
        key(&self.kind, &self.device)
    }

    pub fn is_empty(&self) -> bool {
        self.normal.is_empty() && self.behaviours.is_empty() && self.raised.is_empty()
    }

    /// What a member that left its kind (forgotten, or moved) shares: nothing.
    pub fn withdrawn(kind: String, device: &str, dim: usize, at: f64) -> Self {
        Self {
            kind,
            device: device.to_string(),
            dim,
            normal: Vec::new(),
            behaviours: Vec::new(),
            raised: Vec::new(),
            at,
        }
    }
}

pub fn key(kind: &str, device: &str) -> String {
    format!("{kind}/{device}")
}

/// Why a share or a kind name is refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum KindError {
    #[error("a kind is 1 to {MAX_KIND_LEN} characters of letters, digits, '-', '_' and '.', not {0:?}")]
    Name(String),
    #[error("a share of {device} has {values} values, not rows of {dim} features")]
    Rows { device: String, values: usize, dim: usize },
    #[error("a share of {device} has a value that is not finite")]
    NotFinite { device: String },
    #[error("a share of {device} tells of an incident raised on {other}")]
    Raised { device: String, other: String },
}

/// A kind's name, checked: it is part of a key and of every report that names it.
pub fn check_name(kind: &str) -> Result<(), KindError> {
    let ok = !kind.is_empty()
        && kind.len() <= MAX_KIND_LEN
        && kind.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if ok {
        Ok(())
    } else {
        Err(KindError::Name(kind.to_string()))
    }
}

/// What a kind holds: each member's share, and what is offered from them.
#[derive(Debug, Clone, Default)]
struct Kind {
    shares: BTreeMap<String, Share>,
    /// Every member's dismissed behaviours, newest last.
    memory: Memory,
    /// Incidents members raised (or joined), as each share told them, oldest first: a
    /// raise stays after the member's next share leaves it out, until newer ones push it
    /// out ([`MAX_KIND_RAISED`]) or the member leaves the kind.
    raised: Vec<Raised>,
}

impl Kind {
    fn rebuild_memory(&mut self) {
        let mut all: Vec<Behaviour> =
            self.shares.values().flat_map(|s| s.behaviours.iter().cloned()).collect();
        all.sort_by(|a, b| a.dismissal.at.total_cmp(&b.dismissal.at));
        let skip = all.len().saturating_sub(MAX_KIND_BEHAVIOURS);
        self.memory = Memory { behaviours: all.split_off(skip) };
    }

    /// Take a member's raises: each replaces what was heard of the same incident.
    fn hear_raised(&mut self, raised: &[Raised]) {
        for r in raised {
            self.raised.retain(|old| old.incident_id != r.incident_id);
            self.raised.push(r.clone());
        }
        self.raised.sort_by(|a, b| a.at.total_cmp(&b.at));
        let skip = self.raised.len().saturating_sub(MAX_KIND_RAISED);
        self.raised.drain(..skip);
    }
}

/// Every kind this daemon has read on the kinds topic.
#[derive(Debug, Clone, Default)]
pub struct Kinds {
    kinds: BTreeMap<String, Kind>,
}

impl Kinds {
    /// Take one share (replacing the member's last); `dim` is the model's. Returns the
    /// kind it changed.
    pub fn apply(&mut self, share: Share, dim: usize) -> Result<String, KindError> {
        check_name(&share.kind)?;
        if share.dim != dim || share.normal.len() % dim.max(1) != 0 {
            return Err(KindError::Rows { device: share.device, values: share.normal.len(), dim });
        }
        if !share.normal.iter().all(|v| v.is_finite()) {
            return Err(KindError::NotFinite { device: share.device });
        }
        if let Some(r) = share.raised.iter().find(|r| r.device != share.device) {
            return Err(KindError::Raised { other: r.device.clone(), device: share.device });
        }
        let name = share.kind.clone();
        let kind = self.kinds.entry(name.clone()).or_default();
        if share.is_empty() {
            kind.raised.retain(|r| r.device != share.device);
            kind.shares.remove(&share.device);
        } else {
            kind.hear_raised(&share.raised);
            kind.shares.insert(share.device.clone(), share);
        }
        kind.rebuild_memory();
        if kind.shares.is_empty() {
            self.kinds.remove(&name);
        }
        Ok(name)
    }

    /// Known-normal rows the kind offers `device` (its siblings' onboarded rows, taken
    /// in turn from each so that no one member fills them): at most `max` rows.
    pub fn offered_rows(&self, kind: &str, device: &str, dim: usize, max: usize) -> Option<SharedRows> {
        let k = self.kinds.get(kind)?;
        let siblings: Vec<&[f32]> = k
            .shares
            .values()
            .filter(|s| s.device != device && s.dim == dim && !s.normal.is_empty())
            .map(|s| s.normal.as_slice())
            .collect();
        let mut rows = Vec::new();
        let mut i = 0;
        while rows.len() < max * dim {
            let before = rows.len();
            for s in &siblings {
                // The newest first: a window keeps its newest rows.
                let n = s.len() / dim;
                if i < n && rows.len() < max * dim {
                    let r = n - 1 - i;
                    rows.extend_from_slice(&s[r * dim..(r + 1) * dim]);
                }
            }
            if rows.len() == before {
                break;
            }
            i += 1;
        }
        (!rows.is_empty()).then(|| SharedRows::new(rows))
    }

    /// Behaviours dismissed on members of `kind`.
    pub fn memory(&self, kind: &str) -> Option<&Memory> {
        self.kinds.get(kind).map(|k| &k.memory).filter(|m| !m.is_empty())
    }

    /// A member held here raised (or joined) an incident: its kind hears at once, so
    /// that a sibling on this daemon raising the same a moment later joins it whatever
    /// the kinds topic's delay (its share, read back, tells the same).
    pub fn hear_raised(&mut self, kind: &str, raised: Raised) {
        self.kinds.entry(kind.to_string()).or_default().hear_raised(&[raised]);
    }

    /// Incidents the members of `kind` raised or joined, oldest first.
    pub fn raised(&self, kind: &str) -> &[Raised] {
        self.kinds.get(kind).map_or(&[], |k| k.raised.as_slice())
    }

    /// Members that shared something, per kind (for the metrics).
    pub fn counts(&self) -> Vec<(String, usize)> {
        self.kinds.iter().map(|(name, k)| (name.clone(), k.shares.len())).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::monitor::incidents::behaviours::Dismissal;
    use std::collections::BTreeSet;

    fn share(device: &str, rows: &[f32], dismissed: &[&str]) -> Share {
        let behaviours = dismissed
            .iter()
            .enumerate()
            .map(|(i, id)| Behaviour {
                dismissal: Dismissal {
                    incident_id: id.to_string(),
                    by: "ana".into(),
                    note: String::new(),
                    at: i as f64,
                    on: Some(device.into()),
                    learned: false,
                    expires_at: None,
                },
                peers: BTreeSet::from(["52.1.2.3".to_string()]),
                names: BTreeSet::new(),
                services: BTreeSet::from(["443/tcp".to_string()]),
                transports: BTreeSet::from(["tcp".to_string()]),
                outbound: true,
                inbound: false,
                bytes: 1000,
                anomalous: 6,
                first_bytes: 1000,
                first_anomalous: 6,
                lo: Vec::new(),
                hi: Vec::new(),
            })
            .collect();
        Share {
            kind: "cam".into(),
            device: device.into(),
            dim: 1,
            normal: rows.to_vec(),
            behaviours,
            raised: Vec::new(),
            at: 0.0,
        }
    }

    #[test]
    fn a_member_is_offered_its_siblings_rows_in_turn_never_its_own() {
        let mut k = Kinds::default();
        k.apply(share("a", &[1.0, 2.0, 3.0], &[]), 1).unwrap();
        k.apply(share("b", &[10.0, 20.0], &[]), 1).unwrap();
        k.apply(share("c", &[100.0], &[]), 1).unwrap();
        let offered = |k: &Kinds, d: &str, max| k.offered_rows("cam", d, 1, max).map(|r| r.to_vec());
        // Newest of each sibling first, then the next of each.
        assert_eq!(offered(&k, "new", 4), Some(vec![3.0, 20.0, 100.0, 2.0]));
        assert_eq!(offered(&k, "a", 10), Some(vec![20.0, 100.0, 10.0]));
        assert_eq!(offered(&k, "new", 0), None);
        assert_eq!(k.offered_rows("plug", "new", 1, 4), None, "another kind offers nothing");
        // A member forgotten withdraws what it shared.
        k.apply(share("b", &[], &[]), 1).unwrap();
        assert_eq!(offered(&k, "a", 10), Some(vec![100.0]));
    }

    #[test]
    fn a_kind_remembers_every_members_dismissals_bounded() {
        let mut k = Kinds::default();
        k.apply(share("a", &[], &["i1"]), 1).unwrap();
        k.apply(share("b", &[], &["i2", "i3"]), 1).unwrap();
        let m = k.memory("cam").expect("behaviours");
        assert_eq!(m.len(), 3);
        assert_eq!(m.find("i2").and_then(|b| b.dismissal.on.as_deref()), Some("b"));
        let many: Vec<String> = (0..MAX_KIND_BEHAVIOURS + 5).map(|i| format!("x{i}")).collect();
        let names: Vec<&str> = many.iter().map(String::as_str).collect();
        k.apply(share("c", &[], &names), 1).unwrap();
        assert_eq!(k.memory("cam").map(Memory::len), Some(MAX_KIND_BEHAVIOURS));
        k.apply(share("a", &[], &[]), 1).unwrap();
        k.apply(share("b", &[], &[]), 1).unwrap();
        k.apply(share("c", &[], &[]), 1).unwrap();
        assert!(k.memory("cam").is_none() && k.counts().is_empty());
    }

    #[test]
    fn bad_shares_are_refused() {
        let mut k = Kinds::default();
        assert!(matches!(k.apply(share("a", &[1.0], &[]), 2), Err(KindError::Rows { .. })));
        assert!(matches!(k.apply(share("a", &[f32::NAN], &[]), 1), Err(KindError::NotFinite { .. })));
        let bad = Share { kind: "a/b".into(), ..share("a", &[1.0], &[]) };
        assert!(matches!(k.apply(bad, 1), Err(KindError::Name(_))));
        assert!(check_name(&"x".repeat(MAX_KIND_LEN + 1)).is_err());
        assert!(check_name("edimax-cam_2.1").is_ok());
        assert!(k.counts().is_empty());
    }
}
