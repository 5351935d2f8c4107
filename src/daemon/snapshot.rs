//! Device-window snapshots for the state topic: a small binary layout
//! (`MPS1`, dim, positive rows, unlabeled rows, records seen, then f32 LE values).
//! Windows, not adapted states, are stored: they outlive a model change.

const MAGIC: &[u8; 4] = b"MPS1";
const HEADER: usize = 4 + 4 + 4 + 4 + 8;

#[derive(Debug, Clone, PartialEq)]
pub struct Snapshot {
    pub dim: usize,
    pub positive: Vec<f32>,
    pub unlabeled: Vec<f32>,
    pub seen: u64,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SnapshotError {
    #[error("not a metapu snapshot")]
    BadMagic,
    #[error("snapshot length does not match its header")]
    BadLength,
    #[error("snapshot holds NaN or infinity")]
    NonFinite,
}

impl Snapshot {
    pub fn encode(&self) -> Vec<u8> {
        let (np, nu) = (self.positive.len() / self.dim.max(1), self.unlabeled.len() / self.dim.max(1));
        let mut out = Vec::with_capacity(HEADER + 4 * (self.positive.len() + self.unlabeled.len()));
        out.extend_from_slice(MAGIC);
        for n in [self.dim, np, nu] {
            out.extend_from_slice(&(n as u32).to_le_bytes());
        }
        out.extend_from_slice(&self.seen.to_le_bytes());
        for v in self.positive.iter().chain(&self.unlabeled) {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out
    }

    pub fn decode(bytes: &[u8]) -> Result<Self, SnapshotError> {
        if bytes.len() < HEADER || &bytes[..4] != MAGIC {
            return Err(SnapshotError::BadMagic);
        }
        let u32_at =
            |i: usize| u32::from_le_bytes([bytes[i], bytes[i + 1], bytes[i + 2], bytes[i + 3]]) as usize;
        let (dim, np, nu) = (u32_at(4), u32_at(8), u32_at(12));
        let mut seen = [0u8; 8];
        seen.copy_from_slice(&bytes[16..24]);
        let values = (np + nu).checked_mul(dim).ok_or(SnapshotError::BadLength)?;
        if bytes.len() != HEADER + 4 * values {
            return Err(SnapshotError::BadLength);
        }
        let floats: Vec<f32> =
            bytes[HEADER..].chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
        if floats.iter().any(|v| !v.is_finite()) {
            return Err(SnapshotError::NonFinite);
        }
        let (positive, unlabeled) = floats.split_at(np * dim);
        Ok(Self {
            dim,
            positive: positive.to_vec(),
            unlabeled: unlabeled.to_vec(),
            seen: u64::from_le_bytes(seen),
        })
    }
}
