//! The comparison's parts: the paired t-test against a worked example, and every
//! baseline well above chance on easy, separable tasks.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tch::{Device, Kind};

use metapu::baselines::single::{self, NeuralBaseline};
use metapu::baselines::PackedEpisodes;
use metapu::data::protocol::{self, ProtocolConfig};
use metapu::data::{Label, Task};
use metapu::train::episodes::{EpisodeSampler, SamplerConfig, SourceTask};
use metapu::train::LrSchedule;
use metapu_lab::eval::meta::{meta_train, MetaBaseline, MetaTrainConfig};
use metapu_lab::eval::stats::{paired_t, two_sided_p};

#[test]
fn the_paired_t_test_matches_students_sleep_data() {
    // Cushny & Peebles' sleep data as Student (1908) analysed it: extra hours of sleep
    // under two drugs for the same 10 patients. The classic result: t = 4.062, 9 df,
    // two-sided p = 0.00283.
    let drug2 = [1.9, 0.8, 1.1, 0.1, -0.1, 4.4, 5.5, 1.6, 4.6, 3.4];
    let drug1 = [0.7, -1.6, -0.2, -1.2, -0.1, 3.4, 3.7, 0.8, 0.0, 2.0];
    let t = paired_t(&drug2, &drug1);
    assert!((t.t - 4.0621).abs() < 1e-3, "t = {}", t.t);
    assert_eq!(t.df, 9.0);
    assert!((t.p - 0.002833).abs() < 1e-5, "p = {}", t.p);
    // Two-sided 5 % and 1 % critical values of Student's t.
    for (t, df, p) in
        [(2.776445, 4.0, 0.05), (2.228139, 10.0, 0.05), (2.845340, 20.0, 0.01), (1.959964, 1e6, 0.05)]
    {
        assert!((two_sided_p(t, df) - p).abs() < 1e-5, "t={t} df={df}: {}", two_sided_p(t, df));
    }
    assert_eq!(paired_t(&[0.5, 0.6], &[0.5, 0.6]).p, 1.0, "identical columns");
}

/// Two well-separated Gaussian blobs; positives left, negatives right.
fn easy_task(id: &str, n_pos: usize, n_neg: usize, rng: &mut ChaCha8Rng) -> Task {
    let mut t = Task::new(id);
    let mut labels: Vec<Label> = std::iter::repeat_n(Label::Positive, n_pos)
        .chain(std::iter::repeat_n(Label::Negative, n_neg))
        .collect();
    rand::seq::SliceRandom::shuffle(labels.as_mut_slice(), rng);
    for &l in &labels {
        let cx = if l == Label::Positive { -2.0 } else { 2.0 };
        t.x.push(cx + rng.gen_range(-1.0f32..1.0));
        t.x.push(rng.gen_range(-1.0f32..1.0));
    }
    t.labels = labels;
    t
}

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len() as f64
}

fn target_episodes(tasks: &[Task]) -> PackedEpisodes {
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    let cfg = ProtocolConfig { test_size: 100, ..ProtocolConfig::default() };
    let refs: Vec<(usize, &Task)> = tasks.iter().enumerate().collect();
    let episodes = protocol::episodes(&refs, &cfg, 1, &mut rng);
    PackedEpisodes::new(&episodes, tasks, 2, Device::Cpu)
}

#[test]
fn single_task_baselines_beat_chance_on_separable_tasks() {
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    let targets: Vec<Task> = (0..2).map(|i| easy_task(&format!("t{i}"), 150, 150, &mut rng)).collect();
    let p = target_episodes(&targets);
    for method in [
        NeuralBaseline::Naive,
        NeuralBaseline::UPu,
        NeuralBaseline::NnPu,
        NeuralBaseline::Drpu { alpha: 0.2 },
    ] {
        let per_iterations = single::neural(method, &p, 3, Device::Cpu).unwrap();
        let best = per_iterations.iter().map(|a| mean(a)).fold(0.0, f64::max);
        // Chance is 0.5 at every π; uPU's unbounded negative risk lets it overfit
        // (what nnPU corrects), so the bar is well above chance rather than near 1.
        assert!(best > 0.7, "{method:?}: {best}");
        eprintln!("{method:?}: {best:.3}");
    }
    let best = single::dre(&p).iter().map(|a| mean(a)).fold(0.0, f64::max);
    assert!(best > 0.7, "DRE: {best}");
    eprintln!("DRE: {best:.3}");
}

#[test]
fn meta_learned_baselines_beat_chance_on_separable_tasks() {
    let mut rng = ChaCha8Rng::seed_from_u64(2);
    let mut tasks: Vec<Task> = (0..8)
        .map(|i| {
            let n_pos = [60, 120, 180, 240][i % 4];
            easy_task(&format!("s{i}"), n_pos, 300 - n_pos, &mut rng)
        })
        .collect();
    tasks.extend((0..2).map(|i| easy_task(&format!("t{i}"), 150, 150, &mut rng)));
    let sources: Vec<SourceTask> =
        (0..8).filter_map(|i| SourceTask::partition(i, &tasks[i], 0.5, &mut rng)).collect();
    let sampler_cfg = SamplerConfig::default();
    let sampler = EpisodeSampler {
        sources: &sources,
        tasks: &tasks,
        dim: 2,
        cfg: &sampler_cfg,
        kind: Kind::Float,
        device: Device::Cpu,
    };
    let p = target_episodes(&tasks[8..]);
    // With a weight average and the cosine rate, as `eval --weight-average 0.999
    // --lr-schedule cosine` can give every meta-learned method.
    let cfg = MetaTrainConfig {
        seed: 4,
        max_iterations: 150,
        eval_every: 50,
        patience: 10,
        meta_batch: 2,
        weight_average: 0.9,
        lr_schedule: LrSchedule::Cosine,
    };
    for method in [
        MetaBaseline::MnnPu { step: 0.1 },
        MetaBaseline::Mdre { step: 0.1 },
        MetaBaseline::Np { task_dim: 8 },
    ] {
        // Validated on the same easy episodes: this checks the methods learn, not selection.
        let model = meta_train(method, &sampler, &p, &cfg).unwrap();
        let acc = mean(&model.evaluate(&p));
        assert!(acc > 0.7, "{method:?}: {acc}");
        // The kept checkpoint is one that was validated.
        assert!([50, 100, 150].contains(&model.best_iteration), "{method:?}: {}", model.best_iteration);
        eprintln!("{method:?}: {acc:.3}");
    }
}

/// Four balanced easy tasks as source tasks, half of each one's rows unlabeled.
fn balanced_sources(rng: &mut ChaCha8Rng) -> (Vec<Task>, Vec<SourceTask>) {
    let tasks: Vec<Task> = (0..4).map(|i| easy_task(&format!("s{i}"), 150, 150, rng)).collect();
    let sources = (0..4).filter_map(|i| SourceTask::partition(i, &tasks[i], 0.5, rng)).collect();
    (tasks, sources)
}

fn sampler<'a>(sources: &'a [SourceTask], tasks: &'a [Task], cfg: &'a SamplerConfig) -> EpisodeSampler<'a> {
    EpisodeSampler { sources, tasks, dim: 2, cfg, kind: Kind::Float, device: Device::Cpu }
}

#[test]
fn episodes_drawn_at_a_prior_keep_it_in_the_support_and_the_query() {
    let mut rng = ChaCha8Rng::seed_from_u64(6);
    // Balanced tasks: without episode priors every support and query would sit near 0.5.
    let (tasks, sources) = balanced_sources(&mut rng);
    let cfg = SamplerConfig { episode_priors: vec![0.2, 0.8], ..SamplerConfig::default() };
    let batch = sampler(&sources, &tasks, &cfg).sample(200, &mut rng);
    let support_prior = Vec::<f32>::try_from(&batch.support_prior).unwrap();
    let query_pos = Vec::<f32>::try_from(batch.query_y.sum_dim_intlist(1, false, Kind::Float)).unwrap();
    let query_all = Vec::<f32>::try_from(batch.query_mask.sum_dim_intlist(1, false, Kind::Float)).unwrap();
    let unlabeled = Vec::<f32>::try_from(batch.support.unl.sum_dim_intlist(1, false, Kind::Float)).unwrap();
    let mut seen = [0usize; 2];
    for b in 0..200 {
        let prior = if support_prior[b] < 0.5 { 0.2 } else { 0.8 };
        seen[usize::from(prior > 0.5)] += 1;
        // 25–29 unlabeled rows: the share is the nearest count to π·n.
        assert!(
            (support_prior[b] - prior).abs() <= 0.5 / unlabeled[b] + 1e-6,
            "support {b}: {}",
            support_prior[b]
        );
        assert!((25.0..=29.0).contains(&unlabeled[b]), "support {b} has {} unlabeled rows", unlabeled[b]);
        // The query shrinks when a class runs short but keeps the ratio (±1 row).
        let ratio = query_pos[b] / query_all[b];
        assert!((ratio - prior).abs() < 0.03, "query {b}: {ratio} of {}", query_all[b]);
        assert!(query_all[b] >= 80.0, "query {b} has {} rows", query_all[b]);
    }
    assert!(seen.iter().all(|&n| n > 60), "both priors drawn: {seen:?}");
}

#[test]
fn onset_episodes_keep_attacks_out_of_the_support_and_in_the_query() {
    let mut rng = ChaCha8Rng::seed_from_u64(8);
    let (tasks, sources) = balanced_sources(&mut rng);
    let support_and_query = |cfg: &SamplerConfig, rng: &mut ChaCha8Rng| {
        let batch = sampler(&sources, &tasks, cfg).sample(200, rng);
        let support = Vec::<f32>::try_from(&batch.support_prior).unwrap();
        let negatives = (&batch.query_mask - &batch.query_y).sum_dim_intlist(1, false, Kind::Float);
        (support, Vec::<f32>::try_from(negatives).unwrap())
    };
    let all = SamplerConfig { onset_share: 1.0, ..SamplerConfig::default() };
    let (support, query_negatives) = support_and_query(&all, &mut rng);
    assert!(support.iter().all(|&p| p == 1.0), "an onset support holds an attack: {support:?}");
    assert!(query_negatives.iter().all(|&n| n >= 40.0), "the query lost its attacks: {query_negatives:?}");
    // A share of them: about that share of supports are attack-free (balanced tasks
    // otherwise put about half attacks in every support).
    let quarter = SamplerConfig { onset_share: 0.25, ..SamplerConfig::default() };
    let (support, _) = support_and_query(&quarter, &mut rng);
    let onsets = support.iter().filter(|&&p| p == 1.0).count();
    assert!((30..=70).contains(&onsets), "{onsets} of 200 onset supports at a share of 0.25");
}

#[test]
fn a_fixed_support_size_puts_that_many_positives_in_every_support() {
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let (tasks, sources) = balanced_sources(&mut rng);
    let positives_per_support = |cfg: &SamplerConfig, rng: &mut ChaCha8Rng| -> Vec<f32> {
        let batch = sampler(&sources, &tasks, cfg).sample(100, rng);
        Vec::<f32>::try_from(batch.support.pos.sum_dim_intlist(1, false, Kind::Float)).unwrap()
    };
    let fixed = SamplerConfig { min_positives: 3, max_positives: 3, ..SamplerConfig::default() };
    assert!(positives_per_support(&fixed, &mut rng).iter().all(|&n| n == 3.0));
    // The default draws every N_p from 1 to 5.
    let drawn = positives_per_support(&SamplerConfig::default(), &mut rng);
    for n in 1..=5 {
        assert!(drawn.contains(&(n as f32)), "N_p = {n} never drawn: {drawn:?}");
    }
    assert!(drawn.iter().all(|&n| (1.0..=5.0).contains(&n)));
}
