//! The paper's target protocol (section 5.1): for a task, a number of positives N_p
//! and a prior π, a support of N_p labeled positives plus (size − N_p) unlabeled rows
//! drawn at π, and a disjoint test set drawn at π. Accuracy = 1 − PN risk at π.

use rand::seq::SliceRandom;
use rand::Rng;

use super::{Label, Task};

#[derive(Debug, Clone)]
pub struct ProtocolConfig {
    pub positives: Vec<usize>,
    pub priors: Vec<f64>,
    pub support_size: usize,
    pub test_size: usize,
}

impl Default for ProtocolConfig {
    fn default() -> Self {
        Self { positives: vec![1, 3, 5], priors: vec![0.2, 0.4, 0.6, 0.8], support_size: 30, test_size: 200 }
    }
}

/// One evaluation episode on one task, as row indices into it.
#[derive(Debug, Clone, PartialEq)]
pub struct Episode {
    pub task: usize,
    pub n_pos: usize,
    pub prior: f64,
    pub support_pos: Vec<usize>,
    pub support_unl: Vec<usize>,
    pub test: Vec<usize>,
}

/// Draw one episode, or None when the task has too few labeled rows for the support.
/// The test set takes `test_size` rows at π, or fewer at the same π when the task
/// has not enough of one class left.
pub fn sample_episode(
    task_index: usize,
    task: &Task,
    n_pos: usize,
    prior: f64,
    cfg: &ProtocolConfig,
    rng: &mut impl Rng,
) -> Option<Episode> {
    let mut pos = task.indices_of(Label::Positive);
    let mut neg = task.indices_of(Label::Negative);
    pos.shuffle(rng);
    neg.shuffle(rng);
    let n_unl = cfg.support_size.checked_sub(n_pos)?;
    let unl_pos = (prior * n_unl as f64).round() as usize;
    let unl_neg = n_unl - unl_pos;
    if pos.len() < n_pos + unl_pos || neg.len() < unl_neg {
        return None;
    }
    let support_pos = pos[..n_pos].to_vec();
    let mut support_unl: Vec<usize> =
        pos[n_pos..n_pos + unl_pos].iter().chain(&neg[..unl_neg]).copied().collect();
    support_unl.shuffle(rng);
    let (left_pos, left_neg) = (&pos[n_pos + unl_pos..], &neg[unl_neg..]);
    let mut want_pos = (prior * cfg.test_size as f64).round() as usize;
    let mut want_neg = cfg.test_size - want_pos;
    // Shrink both classes by the same factor when one runs short, keeping π.
    let shrink = [(want_pos, left_pos.len()), (want_neg, left_neg.len())]
        .iter()
        .filter(|(want, _)| *want > 0)
        .map(|&(want, have)| have as f64 / want as f64)
        .fold(1.0_f64, f64::min);
    if shrink < 1.0 {
        want_pos = (want_pos as f64 * shrink).floor() as usize;
        want_neg = (want_neg as f64 * shrink).floor() as usize;
    }
    if want_pos + want_neg == 0 {
        return None;
    }
    let test = left_pos[..want_pos].iter().chain(&left_neg[..want_neg]).copied().collect();
    Some(Episode { task: task_index, n_pos, prior, support_pos, support_unl, test })
}

/// Every (task, N_p, π) combination, `repeats` times each; combinations a task
/// cannot supply are left out.
pub fn episodes(
    tasks: &[(usize, &Task)],
    cfg: &ProtocolConfig,
    repeats: usize,
    rng: &mut impl Rng,
) -> Vec<Episode> {
    let mut out = Vec::new();
    for &(index, task) in tasks {
        for &n_pos in &cfg.positives {
            for &prior in &cfg.priors {
                for _ in 0..repeats {
                    if let Some(e) = sample_episode(index, task, n_pos, prior, cfg, rng) {
                        out.push(e);
                    }
                }
            }
        }
    }
    out
}

/// Accuracy = 1 − PN risk with class prior π: π·(positive error) + (1−π)·(negative error).
pub fn accuracy(prior: f64, labels: &[Label], predicted_positive: &[bool]) -> f64 {
    let (mut pos, mut pos_err, mut neg, mut neg_err) = (0usize, 0usize, 0usize, 0usize);
    for (l, &p) in labels.iter().zip(predicted_positive) {
        match l {
            Label::Positive => {
                pos += 1;
                pos_err += usize::from(!p);
            }
            Label::Negative => {
                neg += 1;
                neg_err += usize::from(p);
            }
            Label::Unlabeled => {}
        }
    }
    let rate = |err: usize, n: usize| if n == 0 { 0.0 } else { err as f64 / n as f64 };
    1.0 - (prior * rate(pos_err, pos) + (1.0 - prior) * rate(neg_err, neg))
}
