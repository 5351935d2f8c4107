//! Several solves of one device at the shape the model was meta-trained on (issue #97):
//! each draw is a support of a few known-normal rows and an unlabeled set of about 25, the
//! draws of a device share their task vectors (the mean of theirs), and a record's
//! posterior is the largest of its draws'. Sharing the task vectors keeps scoring one
//! embedding of a record: each draw adds a dot product, not a forward of h.

use tch::{Kind, Tensor};

use super::support::{DrawnSolve, Support, SupportBatch};
use super::{check_rows, closed_form, AdaptedBatch, MetaPuNet, Model, ModelError, RowCache, TaskState};

impl Model {
    /// Adapt each device on its `draws` supports, consecutive in `supports` and named by
    /// its id: one state a device, holding its draws' solves. `cache` keeps the row
    /// parts of each device's rows for its next adaptation (`model/row_cache.rs`).
    pub fn adapt_drawn(
        &self,
        supports: &[(&str, Support<'_>)],
        draws: usize,
        cache: Option<&mut RowCache>,
    ) -> Result<Vec<TaskState>, ModelError> {
        let draws = draws.max(1);
        if supports.len() % draws != 0 || supports.chunks(draws).any(|g| g.iter().any(|(d, _)| *d != g[0].0))
        {
            return Err(ModelError::Draws { supports: supports.len(), draws });
        }
        let states = match cache {
            Some(cache) => self.adapt_cached(supports, draws, cache)?,
            None => self.adapt_plain(&supports.iter().map(|(_, s)| *s).collect::<Vec<_>>(), draws)?,
        };
        Ok(fold_draws(states, draws))
    }

    /// Adapt raw supports in one batch, groups of `draws` sharing their task vectors:
    /// one state a support.
    pub(super) fn adapt_plain(
        &self,
        supports: &[Support<'_>],
        draws: usize,
    ) -> Result<Vec<TaskState>, ModelError> {
        let dim = self.dim();
        for (i, s) in supports.iter().enumerate() {
            check_rows(s.positives, dim, i)?;
            check_rows(s.unlabeled, dim, i)?;
        }
        // Pack raw rows, then preprocess the whole padded batch at once (padding rows
        // are masked out whatever their value).
        let mut batch = SupportBatch::pack(supports, dim, self.net.kind(), self.net.device())?;
        batch.x = self.preprocess.apply_tensor(&batch.x);
        Ok(tch::no_grad(|| self.net.adapt_draws(&batch, draws as i64, 0.0)).to_states())
    }
}

/// Each group of `draws` states as one: the first, holding the others' solves.
fn fold_draws(states: Vec<TaskState>, draws: usize) -> Vec<TaskState> {
    let mut out: Vec<TaskState> = Vec::with_capacity(states.len() / draws.max(1));
    for (i, state) in states.into_iter().enumerate() {
        if i % draws == 0 {
            out.push(state);
        } else if let Some(first) = out.last_mut() {
            first.draws.push(DrawnSolve { w: state.w, prior: state.prior });
        }
    }
    out
}

/// The posterior of rows `x` (`[N, D]`, preprocessed), row i under the state `task[i]`:
/// the largest of its state's solves' (a state without draws has one).
pub(super) fn largest_posterior(
    net: &MetaPuNet,
    states: &[&TaskState],
    adapted: &AdaptedBatch,
    task: &Tensor,
    x: &Tensor,
) -> Result<Tensor, ModelError> {
    let m = net.config.embed_dim as usize;
    let solves = 1 + states.iter().map(|s| s.draws.len()).max().unwrap_or(0);
    // [T, solves, M] weights and [T, solves] priors; a state with fewer draws is padded
    // with w = 0, whose posterior 0 never wins.
    let mut w = vec![0f32; states.len() * solves * m];
    let mut prior = vec![0f32; states.len() * solves];
    for (t, s) in states.iter().enumerate() {
        let own = std::iter::once((s.w.as_slice(), s.prior));
        for (k, (wk, pk)) in own.chain(s.draws.iter().map(|d| (d.w.as_slice(), d.prior))).enumerate() {
            if wk.len() != m {
                return Err(ModelError::BadState { task: t });
            }
            let at = t * solves + k;
            w[at * m..(at + 1) * m].copy_from_slice(wk);
            prior[at] = pk;
        }
    }
    let (kind, device) = (net.kind(), net.device());
    let tensor =
        |v: &[f32], shape: &[i64]| Tensor::from_slice(v).reshape(shape).to_kind(kind).to_device(device);
    let w = tensor(&w, &[states.len() as i64, solves as i64, m as i64]).index_select(0, task);
    let prior = tensor(&prior, &[states.len() as i64, solves as i64]).index_select(0, task);
    let h = net.embed_flat(&adapted.z_p, &adapted.z_u, task, x);
    let ratio = (h.unsqueeze(1) * w).sum_dim_intlist(-1, false, kind);
    Ok(closed_form::posterior(&prior, &ratio).amax(1, false).to_kind(Kind::Float))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::test_models::{rows, untrained};
    use rand::SeedableRng;

    fn model() -> Model {
        untrained(5)
    }

    fn near(a: &[f32], b: &[f32]) -> bool {
        a.len() == b.len() && a.iter().zip(b).all(|(p, q)| (p - q).abs() <= 1e-4 * (1.0 + q.abs()))
    }

    #[test]
    fn one_draw_is_the_single_solve() {
        let m = model();
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
        let (p, u) = (rows(&mut rng, 3), rows(&mut rng, 12));
        let support = Support { positives: &p, unlabeled: &u };
        let single = m.adapt(support).unwrap();
        let drawn = m.adapt_drawn(&[("a", support)], 1, None).unwrap();
        let cached = m.adapt_drawn(&[("a", support)], 1, Some(&mut RowCache::default())).unwrap();
        for s in [&drawn[0], &cached[0]] {
            assert!(near(&s.w, &single.w) && near(&s.z_p, &single.z_p), "{s:?} vs {single:?}");
            assert!(s.draws.is_empty());
        }
    }

    #[test]
    fn draws_share_task_vectors_and_score_by_the_largest_posterior() {
        let m = model();
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(2);
        let (p1, u1, p2, u2) = (rows(&mut rng, 3), rows(&mut rng, 10), rows(&mut rng, 4), rows(&mut rng, 10));
        let supports = [
            ("a", Support { positives: &p1, unlabeled: &u1 }),
            ("a", Support { positives: &p2, unlabeled: &u2 }),
        ];
        let plain = m.adapt_drawn(&supports, 2, None).unwrap();
        let cached = m.adapt_drawn(&supports, 2, Some(&mut RowCache::default())).unwrap();
        assert_eq!(plain.len(), 1);
        let state = &plain[0];
        assert_eq!(state.draws.len(), 1);
        assert!(near(&state.w, &cached[0].w) && near(&state.draws[0].w, &cached[0].draws[0].w));
        // Shared: the mean of what each draw alone would have.
        let alone: Vec<TaskState> = supports.iter().map(|(_, s)| m.adapt(*s).unwrap()).collect();
        let mean: Vec<f32> = alone[0].z_p.iter().zip(&alone[1].z_p).map(|(a, b)| (a + b) / 2.0).collect();
        assert!(near(&state.z_p, &mean));
        // Each draw scored alone under the shared vectors; the state scores their max.
        let records = rows(&mut rng, 5);
        let first = TaskState { draws: vec![], ..state.clone() };
        let second = TaskState { w: state.draws[0].w.clone(), prior: state.draws[0].prior, ..first.clone() };
        let task = vec![0; 5];
        let a = m.score(&[&first], &task, &records, 0.5).unwrap().posterior;
        let b = m.score(&[&second], &task, &records, 0.5).unwrap().posterior;
        let both = m.score(&[state], &task, &records, 0.5).unwrap().posterior;
        let max: Vec<f32> = a.iter().zip(&b).map(|(x, y)| x.max(*y)).collect();
        assert!(near(&both, &max), "{both:?} vs {max:?}");
        assert!(a != b, "the draws differ, so the max is not vacuous");
    }

    #[test]
    fn draws_that_do_not_group_by_device_are_refused() {
        let m = model();
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
        let (p, u) = (rows(&mut rng, 2), rows(&mut rng, 4));
        let s = Support { positives: &p, unlabeled: &u };
        assert_eq!(
            m.adapt_drawn(&[("a", s), ("b", s)], 2, None),
            Err(ModelError::Draws { supports: 2, draws: 2 })
        );
        assert_eq!(
            m.adapt_drawn(&[("a", s), ("a", s), ("a", s)], 2, None),
            Err(ModelError::Draws { supports: 3, draws: 2 })
        );
    }

    #[test]
    fn a_single_solve_is_written_as_before_draws() {
        let state = TaskState { z_p: vec![1.0], z_u: vec![2.0], w: vec![3.0], prior: 0.5, draws: vec![] };
        let json = serde_json::to_string(&state).unwrap();
        assert_eq!(json, r#"{"z_p":[1.0],"z_u":[2.0],"w":[3.0],"prior":0.5}"#);
        let back: TaskState = serde_json::from_str(&json).unwrap();
        assert_eq!(back, state);
    }
}
