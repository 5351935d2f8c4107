//! A peer's DNS name, validated once: what a record's packet context carries and what
//! `peer_names.rs` learns from a device's own lookups.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// The longest DNS name (RFC 1035, without the trailing dot).
pub const MAX_NAME_LEN: usize = 253;

/// A peer's DNS name: lowercase, without the trailing dot, letters, digits, `-`, `_`
/// and dots between labels of at most 63 characters.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PeerName(Arc<str>);

/// A name that is not a DNS name, as a record or a sensor gave it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "peer name {0:?} is not a DNS name (letters, digits, '-', '_' and dots between labels of 1 to 63, at most 253 in all)"
)]
pub struct BadName(pub String);

impl PeerName {
    pub fn new(text: &str) -> Result<Self, BadName> {
        let name = text.strip_suffix('.').unwrap_or(text);
        let label_ok = |l: &str| {
            (1..=63).contains(&l.len())
                && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        };
        if name.is_empty() || name.len() > MAX_NAME_LEN || !name.split('.').all(label_ok) {
            return Err(BadName(text.chars().take(300).collect()));
        }
        Ok(Self(name.to_ascii_lowercase().into()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for PeerName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::fmt::Debug for PeerName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", &*self.0)
    }
}

impl Serialize for PeerName {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for PeerName {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        PeerName::new(&text).map_err(serde::de::Error::custom)
    }
}
