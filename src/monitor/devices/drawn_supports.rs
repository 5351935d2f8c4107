//! A device's windows as the supports its classifier is adapted on (issue #97). The
//! model was meta-trained on supports of 1–5 known-normal rows and 25–29 unlabeled ones,
//! and its solve assumes that the unlabeled rows' normal part is distributed as the
//! known-normal rows are. So each of [`DRAWS`] draws takes its P from the device's
//! known-normal rows and its U from its newest few records plus other known-normal rows:
//! both from one span, at the trained shape. Chosen on the first half of the shared weeks
//! (docs/experiments/2026-12-06-trained-shape-draws.md); off by default
//! (`windows.drawn`).

use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::AdaptJob;

/// Draws a device is adapted on; the model scores a record by the largest posterior.
pub const DRAWS: usize = 8;
/// Known-normal rows in a draw's P.
const DRAWN_POSITIVES: usize = 5;
/// Rows in a draw's U: the newest records, then known-normal rows not in its P.
const DRAWN_UNLABELED: usize = 26;
/// The newest records in every draw's U: what the device does now.
pub const NEWEST_UNLABELED: usize = 3;

/// One draw's rows, row-major.
#[derive(Debug, Clone, PartialEq)]
pub struct DrawnSupport {
    pub positives: Vec<f32>,
    pub unlabeled: Vec<f32>,
}

/// The [`DRAWS`] supports of `job`, the same for the same device at the same count of
/// its records (a replay, or a restart, adapts as the run before it did).
pub fn draw_supports(job: &AdaptJob, dim: usize) -> Vec<DrawnSupport> {
    let known = &job.positive;
    let n = known.len() / dim.max(1);
    let row = |i: usize| &known[i * dim..(i + 1) * dim];
    let newest = job.unlabeled.len() / dim.max(1);
    let from_known = DRAWN_UNLABELED.saturating_sub(newest);
    (0..DRAWS)
        .map(|m| {
            let mut rng = ChaCha8Rng::seed_from_u64(seed(&job.device, job.seen, m));
            let mut order: Vec<usize> = (0..n).collect();
            order.shuffle(&mut rng);
            let p = DRAWN_POSITIVES.min(n);
            let positives: Vec<f32> = order[..p].iter().flat_map(|&i| row(i).iter().copied()).collect();
            let mut unlabeled = Vec::with_capacity(DRAWN_UNLABELED.max(newest) * dim);
            unlabeled.extend_from_slice(&job.unlabeled);
            let rest = &order[p..];
            if rest.len() > from_known {
                unlabeled.extend(rest[..from_known].iter().flat_map(|&i| row(i).iter().copied()));
            } else if n > 0 {
                // Too few known-normal rows beside P: drawn again, with replacement.
                for _ in 0..from_known {
                    unlabeled.extend_from_slice(row(rng.gen_range(0..n)));
                }
            }
            DrawnSupport { positives, unlabeled }
        })
        .collect()
}

/// A draw's seed: its device, the device's records so far and the draw's number.
fn seed(device: &str, seen: u64, draw: usize) -> u64 {
    let start = seen.wrapping_mul(1_000_003).wrapping_add(draw as u64);
    device.bytes().fold(start, |h, b| h.wrapping_mul(31).wrapping_add(u64::from(b)))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    fn job(known: usize, newest: usize, seen: u64) -> AdaptJob {
        AdaptJob {
            device: "cam".into(),
            positive: Arc::new((0..known).map(|i| i as f32).collect()),
            unlabeled: Arc::new((0..newest).map(|i| 1000.0 + i as f32).collect()),
            handover: 1,
            seen,
            drawn: true,
        }
    }

    #[test]
    fn draws_take_the_trained_shape_from_the_known_normal_rows() {
        let draws = draw_supports(&job(40, 3, 7), 1);
        assert_eq!(draws.len(), DRAWS);
        for d in &draws {
            assert_eq!(d.positives.len(), DRAWN_POSITIVES);
            assert_eq!(d.unlabeled.len(), DRAWN_UNLABELED);
            assert_eq!(d.unlabeled[..3], [1000.0, 1001.0, 1002.0], "the newest records in every draw");
            assert!(
                d.unlabeled[3..].iter().all(|v| *v < 40.0 && !d.positives.contains(v)),
                "known-normal, not in P"
            );
        }
        assert_ne!(draws[0], draws[1], "the draws differ");
        assert_eq!(draw_supports(&job(40, 3, 7), 1), draws, "the same count draws the same");
        assert_ne!(draw_supports(&job(40, 3, 8), 1), draws, "the next count draws anew");
    }

    #[test]
    fn few_known_normal_rows_are_drawn_again() {
        for d in draw_supports(&job(2, 3, 1), 1) {
            assert_eq!(d.positives.len(), 2, "all it has");
            assert_eq!(d.unlabeled.len(), DRAWN_UNLABELED);
            assert!(d.unlabeled[3..].iter().all(|v| *v < 2.0));
        }
        let d = &draw_supports(&job(20, 0, 1), 1)[0];
        assert_eq!(
            d.unlabeled.len(),
            DRAWN_UNLABELED,
            "a device with no recent record: known-normal rows alone"
        );
    }
}
