//! The paper's math: gradients of the closed-form solve, permutation invariance,
//! batched = one-by-one adaptation, prior recovery, the dead-w guard.

use metapu::model::{
    closed_form, MetaPuNet, Model, NetConfig, PreprocessKind, Preprocessor, Provenance, Support, SupportBatch,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tch::{Device, Kind, Tensor};

fn random(shape: &[i64], seed: i64) -> Tensor {
    tch::manual_seed(seed);
    Tensor::randn(shape, (Kind::Double, Device::Cpu))
}

fn model(dim: i64, seed: i64) -> Model {
    // Its own generator: torch's is the process's, which other test threads draw from.
    let net = MetaPuNet::new(NetConfig::paper(dim, 8), Device::Cpu);
    net.init_from_seed(seed as u64);
    let names = (0..dim).map(|i| format!("f{i}")).collect();
    Model {
        net,
        preprocess: Preprocessor::identity(PreprocessKind::None, dim as usize),
        feature_names: names,
        provenance: Provenance::default(),
    }
}

fn rows(rng: &mut ChaCha8Rng, n: usize, dim: usize) -> Vec<f32> {
    (0..n * dim).map(|_| rng.gen_range(-2.0..2.0)).collect()
}

/// d/dh and d/dλ of a scalar of w̃ = (K + λI)^-1 k against central differences (f64).
#[test]
fn closed_form_gradient_matches_finite_differences() {
    let h = (random(&[2, 6, 4], 1).abs() + 0.1).set_requires_grad(true);
    let pos = Tensor::from_slice(&[1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0])
        .reshape([2, 6])
        .to_kind(Kind::Double);
    let unl = Tensor::from_slice(&[0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 0.0, 1.0, 1.0, 1.0, 0.0, 0.0])
        .reshape([2, 6])
        .to_kind(Kind::Double);
    let lambda = Tensor::from_slice(&[0.3f64]).reshape([]).set_requires_grad(true);
    let c = random(&[2, 4], 2);
    let objective = |h: &Tensor, lambda: &Tensor| {
        (closed_form::unconstrained_weights(h, &pos, &unl, lambda) * &c).sum(Kind::Double)
    };

    let value = objective(&h, &lambda);
    let grads = Tensor::run_backward(&[value], &[&h, &lambda], false, false);
    let (grad_h, grad_lambda) =
        (Vec::<f64>::try_from(grads[0].flatten(0, -1)).unwrap(), grads[1].double_value(&[]));

    let eps = 1e-6;
    let base = Vec::<f64>::try_from(h.detach().flatten(0, -1)).unwrap();
    let at = |values: &[f64], lam: f64| {
        let h = Tensor::from_slice(values).reshape([2, 6, 4]);
        objective(&h, &Tensor::from_slice(&[lam]).reshape([])).double_value(&[])
    };
    let mut checked = 0;
    for i in 0..base.len() {
        let (mut up, mut down) = (base.clone(), base.clone());
        up[i] += eps;
        down[i] -= eps;
        let numeric = (at(&up, 0.3) - at(&down, 0.3)) / (2.0 * eps);
        assert!(
            (numeric - grad_h[i]).abs() <= 1e-6 * (1.0 + numeric.abs()),
            "dh[{i}]: autograd {} vs numeric {numeric}",
            grad_h[i]
        );
        checked += usize::from(numeric.abs() > 1e-9);
    }
    assert!(checked > 20, "most embedding entries influence w̃ ({checked} did)");
    let numeric = (at(&base, 0.3 + eps) - at(&base, 0.3 - eps)) / (2.0 * eps);
    assert!(
        (numeric - grad_lambda).abs() <= 1e-6 * (1.0 + numeric.abs()),
        "dλ: autograd {grad_lambda} vs numeric {numeric}"
    );
    assert!(grad_lambda.abs() > 1e-6);
}

#[test]
fn task_vectors_and_state_are_invariant_to_support_order() {
    let m = model(3, 7);
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    let (p, u) = (rows(&mut rng, 4, 3), rows(&mut rng, 9, 3));
    let reversed = |v: &[f32]| v.chunks(3).rev().flatten().copied().collect::<Vec<f32>>();
    let (p2, u2) = (reversed(&p), reversed(&u));
    let a = m.adapt(Support { positives: &p, unlabeled: &u }).unwrap();
    let b = m.adapt(Support { positives: &p2, unlabeled: &u2 }).unwrap();
    let close = |x: &[f32], y: &[f32]| x.iter().zip(y).all(|(a, b)| (a - b).abs() <= 1e-5 * (1.0 + a.abs()));
    assert!(close(&a.z_p, &b.z_p) && close(&a.z_u, &b.z_u), "task vectors changed with order");
    assert!((a.prior - b.prior).abs() < 1e-4, "prior changed with order");
    let probe = rows(&mut rng, 20, 3);
    let task = vec![0; 20];
    let (sa, sb) = (m.score(&[&a], &task, &probe, 0.5).unwrap(), m.score(&[&b], &task, &probe, 0.5).unwrap());
    assert!(
        sa.posterior.iter().zip(&sb.posterior).all(|(x, y)| (x - y).abs() < 1e-4),
        "scores changed with order"
    );
    // And the support itself matters: swapping roles changes z.
    let c = m.adapt(Support { positives: &u[..12], unlabeled: &p }).unwrap();
    assert!(!close(&a.z_p, &c.z_p));
}

#[test]
fn batched_adaptation_equals_one_by_one() {
    let m = model(5, 11);
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    let sizes = [(1, 29), (5, 25), (3, 7), (50, 200), (2, 0)];
    let data: Vec<(Vec<f32>, Vec<f32>)> =
        sizes.iter().map(|&(np, nu)| (rows(&mut rng, np, 5), rows(&mut rng, nu, 5))).collect();
    let supports: Vec<Support<'_>> =
        data.iter().map(|(p, u)| Support { positives: p, unlabeled: u }).collect();
    let batched = m.adapt_batch(&supports).unwrap();
    assert_eq!(batched.len(), sizes.len());
    // w itself is only determined up to float rounding amplified by cond(K + λI)
    // along directions where h has almost no energy, so compare what w is used
    // for: task vectors, the prior and the posterior of probe records.
    let probe = rows(&mut rng, 20, 5);
    let probe_task = vec![0; 20];
    for (s, b) in supports.iter().zip(&batched) {
        let single = m.adapt(*s).unwrap();
        for (x, y) in single.z_p.iter().chain(&single.z_u).zip(b.z_p.iter().chain(&b.z_u)) {
            assert!((x - y).abs() <= 1e-5 * (1.0 + x.abs()), "{x} vs {y}");
        }
        assert!((single.prior - b.prior).abs() <= 1e-4, "prior {} vs {}", single.prior, b.prior);
        let (one, many) = (
            m.score(&[&single], &probe_task, &probe, 0.5).unwrap(),
            m.score(&[b], &probe_task, &probe, 0.5).unwrap(),
        );
        for (x, y) in one.posterior.iter().zip(&many.posterior) {
            assert!((x - y).abs() <= 1e-4, "posterior {x} vs {y}");
        }
    }
    // Scoring many tasks' records in one call equals scoring each task alone.
    let records = rows(&mut rng, 10, 5);
    let task: Vec<usize> = (0..10).map(|i| i % sizes.len()).collect();
    let refs: Vec<_> = batched.iter().collect();
    let all = m.score(&refs, &task, &records, 0.5).unwrap();
    for i in 0..10 {
        let one = m.score(&[refs[task[i]]], &[0], &records[i * 5..(i + 1) * 5], 0.5).unwrap();
        assert!((one.posterior[0] - all.posterior[i]).abs() <= 1e-6);
        assert!((0.0..=1.0).contains(&all.posterior[i]));
    }
}

/// With one-hot embeddings of 10 bins, r(x) = p_p(bin)/p(bin) is exactly a w·h.
/// Positives live on bins 0–5, negatives on 4–9, so bins 0–3 are positive-only
/// (irreducibility) and max r = 1/π there.
#[test]
fn prior_is_recovered_when_the_ratio_is_representable() {
    let mut rng = ChaCha8Rng::seed_from_u64(42);
    for &prior in &[0.2, 0.5, 0.8] {
        let (n_pos, n_unl, bins) = (20_000usize, 50_000usize, 10i64);
        let draw = |positive: bool, rng: &mut ChaCha8Rng| {
            if positive {
                rng.gen_range(0..6)
            } else {
                rng.gen_range(4..10)
            }
        };
        let mut bin_of = Vec::with_capacity(n_pos + n_unl);
        for _ in 0..n_pos {
            bin_of.push(draw(true, &mut rng));
        }
        for _ in 0..n_unl {
            let positive = rng.gen_bool(prior);
            bin_of.push(draw(positive, &mut rng));
        }
        let idx = Tensor::from_slice(&bin_of).to_kind(Kind::Int64);
        let h = idx.one_hot(bins).to_kind(Kind::Double).unsqueeze(0);
        let pos_mask: Vec<f64> = (0..n_pos + n_unl).map(|i| f64::from(u8::from(i < n_pos))).collect();
        let pos = Tensor::from_slice(&pos_mask).unsqueeze(0);
        let unl = 1.0 - &pos;
        let lambda = Tensor::from_slice(&[1e-6f64]).reshape([]);
        let w = closed_form::nonnegative_weights(
            &closed_form::unconstrained_weights(&h, &pos, &unl, &lambda),
            0.0,
        );
        let r = closed_form::ratio(&h, &w);
        let estimate = closed_form::prior_from_ratio(&r, &Tensor::ones_like(&pos)).double_value(&[0]);
        assert!((estimate - prior).abs() < 0.02, "π = {prior}: estimated {estimate}");
    }
}

/// All w̃ negative: inference clamps w to 0 (π = 1, posterior 0, nothing NaN), and
/// the training leak still passes a gradient back to the embedding.
#[test]
fn a_dead_weight_vector_is_finite_and_still_trainable() {
    let w_raw = Tensor::from_slice(&[-0.5f64, -1.0, -2.0]).reshape([1, 3]).set_requires_grad(true);
    let h = Tensor::from_slice(&[1.0f64, 2.0, 3.0, 0.5, 0.5, 0.5]).reshape([1, 2, 3]);
    let mask = Tensor::ones([1, 2], (Kind::Double, Device::Cpu));

    let dead = closed_form::nonnegative_weights(&w_raw, 0.0);
    let r = closed_form::ratio(&h, &dead);
    let prior = closed_form::prior_from_ratio(&r, &mask);
    assert_eq!(prior.double_value(&[0]), 1.0);
    assert_eq!(
        closed_form::posterior(&prior.unsqueeze(-1), &r).abs().sum(Kind::Double).double_value(&[]),
        0.0
    );

    let leaky = closed_form::nonnegative_weights(&w_raw, 0.01);
    let labels = Tensor::ones([1, 2], (Kind::Double, Device::Cpu));
    let loss = closed_form::smoothed_pn_risk(&prior, &closed_form::ratio(&h, &leaky), &labels, &mask, 10.0);
    let grad = Tensor::run_backward(&[loss], &[&w_raw], false, false).remove(0);
    assert!(grad.abs().sum(Kind::Double).double_value(&[]) > 0.0, "no gradient through a dead w");
}

/// The true-prior risk scores the ratio at the share of positives among the valid
/// query rows; padding counts for neither class.
#[test]
fn the_query_prior_is_the_positive_share_of_valid_rows() {
    let labels = Tensor::from_slice(&[1.0f64, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0, 0.0]).reshape([2, 4]);
    let mask = Tensor::from_slice(&[1.0f64, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.0]).reshape([2, 4]);
    let prior = closed_form::query_prior(&labels, &mask);
    assert_eq!((prior.double_value(&[0]), prior.double_value(&[1])), (0.5, 2.0 / 3.0));
}

#[test]
fn malformed_supports_and_records_are_refused() {
    let m = model(3, 1);
    let ok = [0.0f32; 6];
    assert!(m.adapt(Support { positives: &[0.0; 4], unlabeled: &ok }).is_err(), "not whole rows");
    assert!(m.adapt(Support { positives: &[], unlabeled: &ok }).is_err(), "no positives");
    assert!(m.adapt(Support { positives: &[f32::NAN, 0.0, 0.0], unlabeled: &ok }).is_err(), "NaN");
    let s = m.adapt(Support { positives: &ok, unlabeled: &ok }).unwrap();
    assert!(m.score(&[&s], &[1], &[0.0; 3], 0.5).is_err(), "task index out of range");
    assert!(m.score(&[&s], &[0], &[f32::INFINITY, 0.0, 0.0], 0.5).is_err(), "infinite record");
    assert!(SupportBatch::pack(&[], 3, Kind::Float, Device::Cpu).is_err());
}

fn seeded_model(dim: i64, prior_head: bool) -> Model {
    let mut config = NetConfig::paper(dim, 8);
    config.prior_head = prior_head;
    let net = MetaPuNet::new(config, Device::Cpu);
    net.init_from_seed(21);
    Model {
        net,
        preprocess: Preprocessor::identity(PreprocessKind::None, dim as usize),
        feature_names: (0..dim).map(|i| format!("f{i}")).collect(),
        provenance: Provenance::default(),
    }
}

/// The prior head starts as the identity on logit(1/max r): same f, g, h and w as the
/// paper's model from the same seed, the same prior up to the head's clipping, and a
/// gradient that reaches the head; once its weights move, the prior moves.
#[test]
fn an_untrained_prior_head_keeps_the_papers_estimate_and_can_learn() {
    let (paper, headed) = (seeded_model(3, false), seeded_model(3, true));
    let mut rng = ChaCha8Rng::seed_from_u64(8);
    let data: Vec<(Vec<f32>, Vec<f32>)> = [(1, 29), (3, 27), (5, 25)]
        .iter()
        .map(|&(np, nu)| (rows(&mut rng, np, 3), rows(&mut rng, nu, 3)))
        .collect();
    let supports: Vec<Support<'_>> =
        data.iter().map(|(p, u)| Support { positives: p, unlabeled: u }).collect();
    let (a, b) = (paper.adapt_batch(&supports).unwrap(), headed.adapt_batch(&supports).unwrap());
    for (x, y) in a.iter().zip(&b) {
        assert_eq!(x.w, y.w);
        assert!((x.prior - y.prior).abs() <= 1e-3, "prior {} vs {}", x.prior, y.prior);
    }

    let batch = SupportBatch::pack(&supports, 3, Kind::Float, Device::Cpu).unwrap();
    let prior = headed.net.adapt(&batch, 0.01).prior;
    let vars = headed.net.vs.variables();
    let out_layer = &vars["p.1.weight"];
    let grad = Tensor::run_backward(&[prior.sum(Kind::Float)], &[out_layer], false, false).remove(0);
    assert!(grad.abs().sum(Kind::Float).double_value(&[]) > 0.0, "no gradient reaches the prior head");

    tch::no_grad(|| {
        let _ = vars["p.1.bias"].shallow_clone().fill_(-2.0);
    });
    for (x, y) in a.iter().zip(&headed.adapt_batch(&supports).unwrap()) {
        assert!(y.prior < x.prior - 0.01, "a negative offset should lower π: {} vs {}", y.prior, x.prior);
    }
}
