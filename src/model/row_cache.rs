//! What an adaptation computes for a support row that does not depend on its task —
//! f(x) and h's first layer on x, W_x·x (`MetaPuNet::row_parts`) — kept per device from
//! one adaptation to its next. A device re-adapted every 30 of its records finds most of
//! its rows there (its 250 window rows, or its draws', mostly its known-normal rows), so
//! an adaptation embeds its new rows only: half of its arithmetic on the windows (f is
//! 38 % of it, W_x·x 14 %; docs/benchmarks.md). A row that several draws hold is
//! embedded once.
//!
//! Rows are known by a 128-bit hash of their raw values. A device keeps the parts of the
//! rows of its last adaptation only, each once: 250 rows × (100 + 100) floats, 200 KB, on
//! its windows; about 53 rows, 42 KB, on draws. The parts are packed into a padded batch
//! as the rows themselves are (`SupportBatch::pack`).

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};

use tch::{Kind, Tensor};

use super::support::{Support, SupportBatch};
use super::{check_rows, Model, ModelError, TaskState};

/// One device's rows of its last adaptation: each row's parts, f(x) then W_x·x.
#[derive(Debug, Default)]
struct DeviceRows {
    index: HashMap<u128, usize>,
    parts: Vec<f32>,
    /// The sweep it was last adapted in.
    sweep: u64,
}

/// Devices adapted between two sweeps; a device not adapted since the last sweep is
/// dropped at the next (a device gone, evicted or idle: its next adaptation, if any,
/// embeds all its rows).
const SWEEP_EVERY: u64 = 100_000;

/// The row parts of each device's last adaptation.
#[derive(Debug)]
pub struct RowCache {
    devices: HashMap<String, DeviceRows>,
    /// Two fixed seeds: the same row gets the same key in every process.
    keys: (ahash::RandomState, ahash::RandomState),
    sweep: u64,
    adapted: u64,
}

impl Default for RowCache {
    fn default() -> Self {
        Self {
            devices: HashMap::new(),
            keys: (ahash::RandomState::with_seeds(1, 2, 3, 4), ahash::RandomState::with_seeds(5, 6, 7, 8)),
            sweep: 0,
            adapted: 0,
        }
    }
}

impl RowCache {
    /// A row's key: its values' bytes under two seeds, hashed in one pass each (a
    /// value at a time cost 100 µs a device: a sixth of an adaptation).
    fn key(&self, row: &[f32], bytes: &mut Vec<u8>) -> u128 {
        bytes.clear();
        bytes.extend(row.iter().flat_map(|v| v.to_bits().to_le_bytes()));
        let hash = |state: &ahash::RandomState| {
            let mut h = state.build_hasher();
            h.write(bytes);
            h.finish()
        };
        (u128::from(hash(&self.keys.0)) << 64) | u128::from(hash(&self.keys.1))
    }

    /// Devices whose rows are kept.
    pub fn len(&self) -> usize {
        self.devices.len()
    }

    pub fn is_empty(&self) -> bool {
        self.devices.is_empty()
    }

    /// Keep `rows` as `device`'s, and count an adaptation towards the next sweep.
    fn keep(&mut self, device: &str, mut rows: DeviceRows) {
        rows.sweep = self.sweep;
        self.devices.insert(device.to_string(), rows);
        self.adapted += 1;
        if self.adapted >= SWEEP_EVERY {
            let last = self.sweep;
            self.devices.retain(|_, d| d.sweep >= last);
            (self.sweep, self.adapted) = (self.sweep + 1, 0);
        }
    }
}

impl Model {
    /// [`Model::adapt_batch`] for the given devices' supports, computing the row parts
    /// only of rows that none of the device's last adaptation had (`cache`), and keeping
    /// this adaptation's for its next. The parts are packed as `adapt_batch` packs the
    /// rows ([`SupportBatch::pack`]). A model whose h does not see task vectors adapts as
    /// `adapt_batch` does.
    pub fn adapt_batch_cached(
        &self,
        supports: &[(&str, Support<'_>)],
        cache: &mut RowCache,
    ) -> Result<Vec<TaskState>, ModelError> {
        self.adapt_cached(supports, 1, cache)
    }

    /// [`Self::adapt_batch_cached`] for groups of `draws` consecutive supports of one
    /// device each, the group's task vectors shared ([`MetaPuNet::adapt_rows`]): one
    /// state a support, in order. A device's kept rows are the union of its group's.
    pub(super) fn adapt_cached(
        &self,
        supports: &[(&str, Support<'_>)],
        draws: usize,
        cache: &mut RowCache,
    ) -> Result<Vec<TaskState>, ModelError> {
        if !self.net.adapts_from_rows() {
            let plain: Vec<Support<'_>> = supports.iter().map(|(_, s)| *s).collect();
            return self.adapt_plain(&plain, draws);
        }
        let dim = self.dim();
        for (i, (_, s)) in supports.iter().enumerate() {
            check_rows(s.positives, dim, i)?;
            check_rows(s.unlabeled, dim, i)?;
        }
        let (set_dim, hidden) = (self.net.config.set_dim, self.net.config.hidden);
        let width = (set_dim + hidden) as usize;
        // Each task's rows (positives first): their keys, and where each row's parts
        // are — the device's last adaptation (`Err(old index)`) or this batch's new rows
        // (a row new to the batch is embedded once, however many draws hold it).
        let mut fresh: Vec<&[f32]> = Vec::new();
        let mut fresh_at: HashMap<u128, usize> = HashMap::new();
        let mut tasks: Vec<Vec<(u128, Result<usize, usize>)>> = Vec::with_capacity(supports.len());
        let mut bytes = Vec::with_capacity(dim * 4);
        for (device, s) in supports {
            let old = cache.devices.get(*device);
            let rows = s
                .positives
                .chunks(dim)
                .chain(s.unlabeled.chunks(dim))
                .map(|row| {
                    let key = cache.key(row, &mut bytes);
                    match old.and_then(|o| o.index.get(&key)) {
                        Some(&at) => (key, Err(at)),
                        None => {
                            let at = *fresh_at.entry(key).or_insert_with(|| {
                                fresh.push(row);
                                fresh.len() - 1
                            });
                            (key, Ok(at))
                        }
                    }
                })
                .collect();
            tasks.push(rows);
        }
        let fresh_parts = self.row_parts(&fresh)?;
        // Each task's parts in its rows' order (what is packed), and each device's rows
        // over its group (kept for its next adaptation, a row's parts once).
        let mut packed_parts: Vec<Vec<f32>> = Vec::with_capacity(supports.len());
        let mut kept: Vec<(&str, DeviceRows)> = Vec::new();
        for ((device, _), rows) in supports.iter().zip(&tasks) {
            let old = cache.devices.get(*device);
            if kept.last().is_none_or(|(d, _)| d != device) {
                kept.push((device, DeviceRows::default()));
            }
            let mine = &mut kept.last_mut().expect("just pushed").1;
            let mut parts = Vec::with_capacity(rows.len() * width);
            for (key, at) in rows {
                let row = match *at {
                    Ok(k) => &fresh_parts[k * width..(k + 1) * width],
                    Err(k) => {
                        let o = old.expect("a row found in the device's last adaptation");
                        &o.parts[k * width..(k + 1) * width]
                    }
                };
                parts.extend_from_slice(row);
                if let std::collections::hash_map::Entry::Vacant(slot) = mine.index.entry(*key) {
                    slot.insert(mine.parts.len() / width);
                    mine.parts.extend_from_slice(row);
                }
            }
            packed_parts.push(parts);
        }
        let packed: Vec<Support<'_>> = supports
            .iter()
            .zip(&packed_parts)
            .map(|((_, s), parts)| {
                let split = s.positives.len() / dim * width;
                Support { positives: &parts[..split], unlabeled: &parts[split..] }
            })
            .collect();
        let batch = SupportBatch::pack(&packed, width, self.net.kind(), self.net.device())?;
        for (device, mine) in kept {
            cache.keep(device, mine);
        }
        // f and W_x·x as views of the packed parts: the layers read them strided.
        let adapted = tch::no_grad(|| {
            let (f, wx) = (batch.x.narrow(2, 0, set_dim), batch.x.narrow(2, set_dim, hidden));
            self.net.adapt_rows(&f, &wx, &batch.pos, &batch.unl, draws as i64)
        });
        Ok(adapted.to_states())
    }

    /// The row parts of raw rows, preprocessed as the model does: row-major `[N,
    /// set_dim + hidden]`, f(x) then W_x·x.
    fn row_parts(&self, rows: &[&[f32]]) -> Result<Vec<f32>, ModelError> {
        if rows.is_empty() {
            return Ok(Vec::new());
        }
        let flat: Vec<f32> = rows.concat();
        let x = Tensor::from_slice(&flat)
            .reshape([rows.len() as i64, self.dim() as i64])
            .to_kind(self.net.kind())
            .to_device(self.net.device());
        let x = self.preprocess.apply_tensor(&x);
        let parts = tch::no_grad(|| {
            let (f, wx) = self.net.row_parts(&x);
            Tensor::cat(&[f, wx], 1)
        });
        Vec::<f32>::try_from(
            parts.to_kind(Kind::Float).to_device(tch::Device::Cpu).contiguous().flatten(0, -1),
        )
        .map_err(|_| ModelError::BadState { task: 0 })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::test_models::{rows, untrained};
    use rand::SeedableRng;

    fn model() -> Model {
        untrained(11)
    }

    fn close(a: &TaskState, b: &TaskState) -> bool {
        let near =
            |x: &[f32], y: &[f32]| x.iter().zip(y).all(|(p, q)| (p - q).abs() <= 1e-4 * (1.0 + q.abs()));
        near(&a.z_p, &b.z_p) && near(&a.z_u, &b.z_u) && near(&a.w, &b.w) && (a.prior - b.prior).abs() < 1e-4
    }

    #[test]
    fn kept_row_parts_adapt_as_the_rows_themselves_do() {
        let m = model();
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
        let (p1, u1, p2) = (rows(&mut rng, 4), rows(&mut rng, 9), rows(&mut rng, 2));
        let mut cache = RowCache::default();
        let supports = [
            ("a", Support { positives: &p1, unlabeled: &u1 }),
            ("b", Support { positives: &p2, unlabeled: &u1[..3 * 6] }),
        ];
        let plain = m.adapt_batch(&supports.map(|(_, s)| s)).unwrap();
        let cached = m.adapt_batch_cached(&supports, &mut cache).unwrap();
        assert!(plain.iter().zip(&cached).all(|(a, b)| close(a, b)), "{plain:?} vs {cached:?}");
        assert_eq!(cache.len(), 2);
        // a's window moves on by two rows: its other rows' parts come from the cache.
        let mut u1_next = u1[2 * 6..].to_vec();
        u1_next.extend(rows(&mut rng, 2));
        let next = [("a", Support { positives: &p1, unlabeled: &u1_next })];
        let plain = m.adapt_batch(&next.map(|(_, s)| s)).unwrap();
        let cached = m.adapt_batch_cached(&next, &mut cache).unwrap();
        assert!(close(&plain[0], &cached[0]), "{plain:?} vs {cached:?}");
        assert_eq!(cache.devices["a"].index.len(), 4 + 9, "the rows of its last adaptation only");
        let bad = [("a", Support { positives: &[], unlabeled: &u1 })];
        assert_eq!(m.adapt_batch_cached(&bad, &mut cache), Err(ModelError::NoPositives { task: 0 }));
    }
}
