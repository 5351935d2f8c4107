//! Packing support sets of many tasks into padded tensors, and the adapted
//! per-task state that comes back.

use serde::{Deserialize, Serialize};
use tch::{Device, Kind, Tensor};

use super::ModelError;

/// One task's support set: row-major feature rows, already preprocessed.
#[derive(Debug, Clone, Copy)]
pub struct Support<'a> {
    pub positives: &'a [f32],
    pub unlabeled: &'a [f32],
}

/// B support sets padded to a common length S: `x` `[B, S, D]`, masks `[B, S]`.
/// Positives come first in each task's slots, then unlabeled rows, then padding.
#[derive(Debug)]
pub struct SupportBatch {
    pub x: Tensor,
    pub pos: Tensor,
    pub unl: Tensor,
}

impl SupportBatch {
    pub fn pack(
        supports: &[Support<'_>],
        dim: usize,
        kind: Kind,
        device: Device,
    ) -> Result<Self, ModelError> {
        if supports.is_empty() {
            return Err(ModelError::EmptyBatch);
        }
        let mut longest = 0;
        for (i, s) in supports.iter().enumerate() {
            for rows in [s.positives, s.unlabeled] {
                if rows.len() % dim != 0 {
                    return Err(ModelError::Dimension { expected: dim, found: rows.len(), task: i });
                }
            }
            if s.positives.is_empty() {
                return Err(ModelError::NoPositives { task: i });
            }
            longest = longest.max((s.positives.len() + s.unlabeled.len()) / dim);
        }
        let b = supports.len();
        let mut x = vec![0f32; b * longest * dim];
        let mut pos = vec![0f32; b * longest];
        let mut unl = vec![0f32; b * longest];
        for (i, s) in supports.iter().enumerate() {
            let base = i * longest;
            let n_pos = s.positives.len() / dim;
            let n_unl = s.unlabeled.len() / dim;
            x[base * dim..(base + n_pos) * dim].copy_from_slice(s.positives);
            x[(base + n_pos) * dim..(base + n_pos + n_unl) * dim].copy_from_slice(s.unlabeled);
            pos[base..base + n_pos].fill(1.0);
            unl[base + n_pos..base + n_pos + n_unl].fill(1.0);
        }
        let (b, s, d) = (b as i64, longest as i64, dim as i64);
        let to =
            |v: &[f32], shape: &[i64]| Tensor::from_slice(v).reshape(shape).to_kind(kind).to_device(device);
        Ok(Self { x: to(&x, &[b, s, d]), pos: to(&pos, &[b, s]), unl: to(&unl, &[b, s]) })
    }
}

/// Adapted state of B tasks: task vectors, non-negative ratio weights, prior.
#[derive(Debug)]
pub struct AdaptedBatch {
    pub z_p: Tensor,
    pub z_u: Tensor,
    pub w: Tensor,
    pub prior: Tensor,
}

/// One task's adapted classifier {z_p, z_u, w, π}, detached from torch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskState {
    pub z_p: Vec<f32>,
    pub z_u: Vec<f32>,
    pub w: Vec<f32>,
    pub prior: f32,
    /// The other draws' solves under the same task vectors (`model/draws.rs`): a record's
    /// posterior is the largest of this one's and theirs. Empty for a single solve,
    /// which is then written exactly as before draws existed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub draws: Vec<DrawnSolve>,
}

/// One draw's weights and prior, under its task's shared task vectors.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DrawnSolve {
    pub w: Vec<f32>,
    pub prior: f32,
}

impl AdaptedBatch {
    pub fn len(&self) -> usize {
        self.prior.size()[0] as usize
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn to_states(&self) -> Vec<TaskState> {
        let rows = |t: &Tensor| -> Vec<Vec<f32>> {
            let t = t.detach().to_kind(Kind::Float).to_device(Device::Cpu).contiguous();
            let width = t.size()[1] as usize;
            let flat = Vec::<f32>::try_from(t.flatten(0, -1)).unwrap_or_default();
            flat.chunks(width.max(1)).map(<[f32]>::to_vec).collect()
        };
        let prior = Vec::<f32>::try_from(self.prior.detach().to_kind(Kind::Float).to_device(Device::Cpu))
            .unwrap_or_default();
        rows(&self.z_p)
            .into_iter()
            .zip(rows(&self.z_u))
            .zip(rows(&self.w))
            .zip(prior)
            .map(|(((z_p, z_u), w), prior)| TaskState { z_p, z_u, w, prior, draws: Vec::new() })
            .collect()
    }

    pub fn from_states(states: &[&TaskState], kind: Kind, device: Device) -> Result<Self, ModelError> {
        let first = states.first().ok_or(ModelError::EmptyBatch)?;
        let stack = |pick: fn(&TaskState) -> &[f32], width: usize| -> Result<Tensor, ModelError> {
            let mut flat = Vec::with_capacity(states.len() * width);
            for (i, s) in states.iter().enumerate() {
                let v = pick(s);
                if v.len() != width {
                    return Err(ModelError::BadState { task: i });
                }
                flat.extend_from_slice(v);
            }
            Ok(Tensor::from_slice(&flat)
                .reshape([states.len() as i64, width as i64])
                .to_kind(kind)
                .to_device(device))
        };
        let prior: Vec<f32> = states.iter().map(|s| s.prior).collect();
        Ok(Self {
            z_p: stack(|s| &s.z_p, first.z_p.len())?,
            z_u: stack(|s| &s.z_u, first.z_u.len())?,
            w: stack(|s| &s.w, first.w.len())?,
            prior: Tensor::from_slice(&prior).to_kind(kind).to_device(device),
        })
    }
}
