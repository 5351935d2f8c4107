//! The evaluation protocol's sampling and the Synthetic generator.

use std::collections::HashSet;

use metapu::data::protocol::{accuracy, episodes, sample_episode, ProtocolConfig};
use metapu::data::synthetic::{generate, SyntheticConfig};
use metapu::data::Label;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

#[test]
fn episodes_have_exact_sizes_priors_and_no_support_row_in_the_test_set() {
    let (set, split) = generate(&SyntheticConfig::default(), 4);
    let cfg = ProtocolConfig::default();
    let mut rng = ChaCha8Rng::seed_from_u64(0);
    let targets: Vec<_> =
        split.target.iter().map(|id| set.task_index(id).unwrap()).map(|i| (i, &set.tasks[i])).collect();
    let eps = episodes(&targets, &cfg, 2, &mut rng);
    assert_eq!(eps.len(), targets.len() * 3 * 4 * 2, "every combination drawn");
    for e in &eps {
        let task = &set.tasks[e.task];
        assert_eq!(e.support_pos.len(), e.n_pos);
        assert_eq!(e.support_pos.len() + e.support_unl.len(), 30);
        assert!(e.support_pos.iter().all(|&i| task.labels[i] == Label::Positive));
        let unl_pos = e.support_unl.iter().filter(|&&i| task.labels[i] == Label::Positive).count();
        assert_eq!(unl_pos, (e.prior * (30 - e.n_pos) as f64).round() as usize, "unlabeled drawn at π");
        assert_eq!(e.test.len(), 200);
        let test_pos = e.test.iter().filter(|&&i| task.labels[i] == Label::Positive).count();
        assert_eq!(test_pos, (e.prior * 200.0).round() as usize, "test drawn at π");
        let support: HashSet<usize> = e.support_pos.iter().chain(&e.support_unl).copied().collect();
        assert_eq!(support.len(), 30, "no row twice in the support");
        assert!(e.test.iter().all(|i| !support.contains(i)), "a support row is in the test set");
        assert_eq!(e.test.iter().collect::<HashSet<_>>().len(), 200);
    }
}

#[test]
fn a_small_task_gives_a_smaller_test_set_at_the_same_prior() {
    let (set, _) = generate(&SyntheticConfig::default(), 4);
    // A source task has 300 rows at its own prior; ask for π = 0.8 on whatever it holds.
    let task = &set.tasks[0];
    let cfg = ProtocolConfig { test_size: 1000, ..ProtocolConfig::default() };
    let e = sample_episode(0, task, 5, 0.8, &cfg, &mut ChaCha8Rng::seed_from_u64(1)).unwrap();
    let pos = e.test.iter().filter(|&&i| task.labels[i] == Label::Positive).count() as f64;
    assert!(e.test.len() < 1000);
    assert!((pos / e.test.len() as f64 - 0.8).abs() < 0.02, "π kept: {}", pos / e.test.len() as f64);
}

#[test]
fn accuracy_is_one_minus_the_pn_risk_at_the_prior() {
    use Label::{Negative as N, Positive as P};
    let labels = [P, P, P, P, N, N, N, N];
    let predicted = [true, true, true, false, false, false, true, true];
    // positive error 1/4, negative error 2/4, π = 0.2: 1 − (0.2·0.25 + 0.8·0.5) = 0.55
    assert!((accuracy(0.2, &labels, &predicted) - 0.55).abs() < 1e-12);
    assert_eq!(accuracy(0.5, &labels, &[true, true, true, true, false, false, false, false]), 1.0);
}

#[test]
fn synthetic_tasks_follow_the_paper() {
    let (set, split) = generate(&SyntheticConfig::default(), 7);
    assert_eq!(set.tasks.len(), 140);
    assert_eq!((split.source.len(), split.validation.len(), split.target.len()), (100, 20, 20));
    let all: HashSet<&String> = split.source.iter().chain(&split.validation).chain(&split.target).collect();
    assert_eq!(all.len(), 140, "the split is a partition");
    for id in &split.source {
        let t = &set.tasks[set.task_index(id).unwrap()];
        assert_eq!(t.len(), 300);
        let prior = t.indices_of(Label::Positive).len() as f64 / 300.0;
        assert!([0.2, 0.4, 0.6, 0.8].iter().any(|p| (p - prior).abs() < 1e-9), "prior {prior}");
    }
    assert_eq!(generate(&SyntheticConfig::default(), 7).0, set, "deterministic by seed");
    assert_ne!(generate(&SyntheticConfig::default(), 8).0, set);
}
