//! Meta-training on the paper's Synthetic tasks: it learns, and it is reproducible.

use std::sync::atomic::{AtomicBool, Ordering};

use metapu::data::split::Split;
use metapu::data::synthetic::{generate, SyntheticConfig};
use metapu::data::Label;
use metapu::model::{file, Support};
use metapu::train::{train, LrSchedule, Progress, TrainConfig};
use tch::Device;

fn indices(ids: &[String], set: &metapu::data::TaskSet) -> Vec<usize> {
    Split::resolve(ids, set).unwrap()
}

/// 30 Synthetic tasks (20 source, 5 validation): enough for short runs.
fn small_synthetic(seed: u64) -> (metapu::data::TaskSet, Vec<usize>, Vec<usize>) {
    let (set, split) = generate(
        &SyntheticConfig { tasks: 30, source: 20, validation: 5, ..SyntheticConfig::default() },
        seed,
    );
    let (src, val) = (indices(&split.source, &set), indices(&split.validation, &set));
    (set, src, val)
}

/// The model file of a run that nothing stops early.
fn trained_file(set: &metapu::data::TaskSet, src: &[usize], val: &[usize], cfg: &TrainConfig) -> Vec<u8> {
    let out = train(set, src, val, cfg, Device::Cpu, &AtomicBool::new(false), &mut ()).unwrap();
    file::to_bytes(&out.model).unwrap()
}

#[test]
fn a_short_run_lifts_validation_accuracy_above_70_percent() {
    let (set, split) = generate(&SyntheticConfig::default(), 1);
    let cfg = TrainConfig {
        seed: 1,
        max_iterations: 1500,
        eval_every: 250,
        meta_batch: 8,
        ..TrainConfig::default()
    };
    let out = train(
        &set,
        &indices(&split.source, &set),
        &indices(&split.validation, &set),
        &cfg,
        Device::Cpu,
        &AtomicBool::new(false),
        &mut (),
    )
    .unwrap();
    let first = out.history.first().unwrap().validation_accuracy;
    let best = out.model.provenance.best_validation_accuracy;
    assert!(best > 0.70, "best validation accuracy {best:.4} (first {first:.4})");
    assert!(best >= first);
    // The kept model is the best checkpoint, not the last one.
    let best_point =
        out.history.iter().max_by(|a, b| a.validation_accuracy.total_cmp(&b.validation_accuracy)).unwrap();
    assert_eq!(out.model.provenance.best_iteration, best_point.iteration);
}

#[test]
fn the_same_seed_and_data_give_the_same_model_file() {
    let (set, src, val) = small_synthetic(2);
    let run = |seed| {
        let cfg =
            TrainConfig { seed, max_iterations: 40, eval_every: 20, meta_batch: 2, ..TrainConfig::default() };
        trained_file(&set, &src, &val, &cfg)
    };
    let a = run(5);
    assert_eq!(a, run(5), "same seed, different file");
    assert_ne!(a, run(6), "different seeds gave the same file");
}

#[test]
fn a_network_of_other_sizes_is_trained_saved_and_loaded_at_them() {
    let (set, src, val) = small_synthetic(3);
    let cfg = TrainConfig {
        max_iterations: 20,
        eval_every: 10,
        meta_batch: 2,
        hidden: 24,
        embed_dim: 12,
        ..TrainConfig::default()
    };
    let bytes = trained_file(&set, &src, &val, &cfg);
    let model = file::from_bytes(&bytes, std::path::Path::new("sized.safetensors"), Device::Cpu).unwrap();
    assert_eq!((model.net.config.hidden, model.net.config.embed_dim), (24, 12));
    // Layer shapes follow the sizes: h's last layer maps the hidden width to M.
    let vars = model.net.vs.variables();
    assert_eq!(vars["h.3.weight"].size(), vec![12, 24]);
    assert_eq!(vars["f.0.weight"].size(), vec![24, set.dim() as i64]);
    // The loaded model adapts and scores: w has M entries.
    let task = &set.tasks[val[0]];
    let rows = |want: Label| -> Vec<f32> {
        task.indices_of(want).into_iter().take(5).flat_map(|i| task.row(i, set.dim()).to_vec()).collect()
    };
    let (pos, neg) = (rows(Label::Positive), rows(Label::Negative));
    let unlabeled: Vec<f32> = pos.iter().chain(&neg).copied().collect();
    let state = model.adapt(Support { positives: &pos, unlabeled: &unlabeled }).unwrap();
    assert_eq!(state.w.len(), 12);
    let scores = model.score(&[&state], &[0; 10], &unlabeled, 0.5).unwrap();
    assert_eq!(scores.posterior.len(), 10);
    assert!(scores.posterior.iter().all(|p| p.is_finite()));
}

#[test]
fn the_cosine_schedule_lowers_the_rate_that_training_uses() {
    let (set, src, val) = small_synthetic(2);
    let run = |lr_schedule| {
        let cfg = TrainConfig {
            seed: 5,
            max_iterations: 40,
            eval_every: 40,
            meta_batch: 2,
            lr_schedule,
            ..TrainConfig::default()
        };
        trained_file(&set, &src, &val, &cfg)
    };
    // Same seed, data and draws: only the step sizes differ, so only they can change the model.
    assert_ne!(run(LrSchedule::Constant), run(LrSchedule::Cosine), "the schedule was not applied");
}

#[test]
fn a_stop_request_still_returns_a_model() {
    let (set, src, val) = small_synthetic(3);
    let cfg = TrainConfig { max_iterations: 1000, ..TrainConfig::default() };
    let stop = AtomicBool::new(true);
    let out = train(&set, &src, &val, &cfg, Device::Cpu, &stop, &mut ()).unwrap();
    assert!(out.interrupted);
    assert_eq!(out.iterations, 0);
    assert!(out.model.provenance.best_validation_accuracy > 0.0);
}

/// With `weight_average`, the average is what gets validated and kept, and validating
/// it swaps the live weights back: a run validated at iterations 20 and 40 sees the
/// same average at 40 as a run validated at 40 only.
#[test]
fn the_weight_average_is_kept_and_validating_it_leaves_training_alone() {
    let (set, src, val) = small_synthetic(4);
    let run = |weight_average, eval_every| {
        let cfg = TrainConfig {
            seed: 4,
            max_iterations: 40,
            eval_every,
            meta_batch: 2,
            weight_average,
            ..TrainConfig::default()
        };
        train(&set, &src, &val, &cfg, Device::Cpu, &AtomicBool::new(false), &mut ()).unwrap()
    };
    let raw = run(0.0, 40);
    let averaged_twice = run(0.999, 20);
    let averaged_once = run(0.999, 40);
    assert_ne!(
        file::to_bytes(&raw.model).unwrap(),
        file::to_bytes(&averaged_once.model).unwrap(),
        "the raw weights were kept"
    );
    let (a, b) = (averaged_twice.history.last().unwrap(), averaged_once.history.last().unwrap());
    assert_eq!((a.iteration, b.iteration), (40, 40));
    assert_eq!(a.validation_accuracy, b.validation_accuracy);
    assert_eq!(a.prior_rmse, b.prior_rmse, "validating at iteration 20 changed the training");
}

/// Asks training to stop once it has taken `at` steps.
struct StopAt<'a> {
    at: u64,
    stop: &'a AtomicBool,
}

impl Progress for StopAt<'_> {
    fn step(&mut self, iteration: u64, _loss: f64) {
        if iteration >= self.at {
            self.stop.store(true, Ordering::Relaxed);
        }
    }
}

/// Stopped after some steps but before the first validation, a run with the weight
/// average keeps the average, as a checkpoint would, not the live weights.
#[test]
fn a_stop_before_the_first_validation_keeps_the_weight_average() {
    let (set, src, val) = small_synthetic(5);
    let run = |weight_average| {
        let cfg = TrainConfig {
            seed: 5,
            max_iterations: 100,
            eval_every: 50,
            meta_batch: 2,
            weight_average,
            ..TrainConfig::default()
        };
        let stop = AtomicBool::new(false);
        let out =
            train(&set, &src, &val, &cfg, Device::Cpu, &stop, &mut StopAt { at: 10, stop: &stop }).unwrap();
        assert!(out.interrupted && out.history.is_empty());
        assert_eq!(out.iterations, 10);
        out
    };
    let (raw, averaged) = (run(0.0), run(0.999));
    // The same ten steps were taken (averaging does not steer training), so the two
    // differ only if the average was kept.
    assert_ne!(
        file::to_bytes(&raw.model).unwrap(),
        file::to_bytes(&averaged.model).unwrap(),
        "the live weights were kept"
    );
}
