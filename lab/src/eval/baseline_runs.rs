//! The baselines' runs of a split: the meta-learned ones (MDRE, MnnPU, NP) chosen on
//! validation episodes, ours without its task representation, and the single-task ones.

use super::*;

/// What the meta-learned baselines are chosen and scored on.
pub(super) struct MetaScoring<'a> {
    pub(super) tasks: &'a [Task],
    pub(super) validation: &'a [(usize, &'a Task)],
    pub(super) val_packed: &'a PackedEpisodes,
    pub(super) target_episodes: &'a [Episode],
    pub(super) target_packed: &'a PackedEpisodes,
}

/// One meta-learned baseline (MDRE, MnnPU, NP): its candidates meta-trained and chosen
/// on validation episodes (one model, or one per target N_p), scored on the target
/// episodes; `None` when no candidate was kept.
pub(super) fn meta_baseline_run(
    method: Method,
    cfg: &EvalConfig,
    sampler: &EpisodeSampler<'_>,
    mcfg: &MetaTrainConfig,
    sc: &MetaScoring<'_>,
    (split, seed, device): (usize, u64, Device),
    progress: &mut dyn EvalProgress,
) -> Result<Option<MethodRun>, TrainError> {
    let dim = sampler.dim;
    let candidates: Vec<(MetaBaseline, String)> = match method {
        Method::Mdre => {
            cfg.step_sizes.iter().map(|&s| (MetaBaseline::Mdre { step: s }, format!("step={s}"))).collect()
        }
        Method::MnnPu => {
            cfg.step_sizes.iter().map(|&s| (MetaBaseline::MnnPu { step: s }, format!("step={s}"))).collect()
        }
        _ => cfg.task_dims.iter().map(|&k| (MetaBaseline::Np { task_dim: k }, format!("K={k}"))).collect(),
    };
    // One model for every N_p, or with `per_support_size` one per target N_p:
    // trained with that N_p only and chosen on that N_p's validation episodes,
    // as many as the single model is chosen on.
    let sizes = support_sizes(cfg);
    let mut accuracies = vec![f64::NAN; sc.target_episodes.len()];
    let (mut seconds, mut test_seconds, mut validations, mut names) = (0.0, 0.0, Vec::new(), Vec::new());
    let mut kept = Vec::new();
    for n_pos in &sizes {
        let fixed;
        let (sampler_n, val_n) = match *n_pos {
            None => (*sampler, None),
            Some(n) => {
                let protocol_n;
                (fixed, protocol_n) = with_support_size(&cfg.train.sampler, &cfg.protocol, n);
                let mut val_rng = ChaCha8Rng::seed_from_u64(seed.wrapping_add(n as u64));
                let repeats = cfg.protocol.positives.len();
                let episodes = protocol::episodes(sc.validation, &protocol_n, repeats, &mut val_rng);
                (
                    EpisodeSampler { cfg: &fixed, ..*sampler },
                    Some(PackedEpisodes::new(&episodes, sc.tasks, dim, device)),
                )
            }
        };
        let validation = val_n.as_ref().unwrap_or(sc.val_packed);
        let members: Vec<(meta::MetaModel, String)> =
            select_members(cfg.members, &candidates, |member, (candidate, name)| {
                let mcfg_m = MetaTrainConfig { seed: seed.wrapping_add(member as u64), ..mcfg.clone() };
                let size = n_pos.map(|n| format!(" N_p={n}")).unwrap_or_default();
                let of = if cfg.members > 1 { format!(" member {}", member + 1) } else { String::new() };
                progress.start(&format!("split {split}: {} {name}{size}{of}", method.label()));
                let m = meta::meta_train(*candidate, &sampler_n, validation, &mcfg_m)?;
                progress.done();
                let val = m.best_validation_accuracy;
                Ok((m, val))
            })?
            .into_iter()
            .map(|(m, (_, name))| (m, name.clone()))
            .collect();
        if members.is_empty() {
            continue;
        }
        let (models, labels): (Vec<meta::MetaModel>, Vec<String>) = members.into_iter().unzip();
        let idx = episodes_with(sc.target_episodes, *n_pos);
        let t = Instant::now();
        let scored = match n_pos {
            None => meta::evaluate_ensemble(&models, sc.target_packed),
            Some(_) => {
                let subset: Vec<Episode> = idx.iter().map(|&i| sc.target_episodes[i].clone()).collect();
                meta::evaluate_ensemble(&models, &PackedEpisodes::new(&subset, sc.tasks, dim, device))
            }
        };
        test_seconds += t.elapsed().as_secs_f64();
        for (&i, a) in idx.iter().zip(scored) {
            accuracies[i] = a;
        }
        seconds += models.iter().map(|m| m.seconds).sum::<f64>();
        validations.push(match models.as_slice() {
            [m] => m.best_validation_accuracy,
            _ => mean(&meta::evaluate_ensemble(&models, validation)),
        });
        kept.push((*n_pos, models[0].best_iteration));
        let name = labels.join(" + ");
        names.push(match n_pos {
            Some(n) => format!("N_p={n}: {name}"),
            None => name,
        });
    }
    if names.is_empty() {
        return Ok(None);
    }
    let (best_iteration, best_iteration_by_positives) = kept_iterations(&kept);
    Ok(Some(MethodRun {
        method,
        accuracies,
        estimated_priors: None,
        train_seconds: seconds,
        test_seconds,
        validation_accuracy: mean(&validations),
        chosen: names.join("; "),
        best_iteration,
        best_iteration_by_positives,
        prior_maps: None,
    }))
}

/// Ours without the task vectors z: trained on the split, scored on the target
/// episodes.
pub(super) fn ours_no_z_run(
    sd: &SplitData<'_>,
    cfg: &EvalConfig,
    tasks: &[Task],
    target_episodes: &[Episode],
    (split, seed, device): (usize, u64, Device),
    stop: &AtomicBool,
    progress: &mut dyn EvalProgress,
) -> Result<Option<MethodRun>, TrainError> {
    let dim = sd.data.dim();
    let mut run = None;
    progress.start(&format!("split {split}: ours w/o z"));
    let tc = TrainConfig { seed, use_task_vectors: false, ..cfg.train.clone() };
    let out = train::train(sd.data, &sd.source, &sd.validation, &tc, device, stop, &mut ())?;
    if let Some(set) = EpisodeSet::new(target_episodes.to_vec(), tasks, dim, Kind::Float, device) {
        let t = Instant::now();
        let e = set.evaluate(&out.model.net, PriorMode::Estimated);
        run = Some(MethodRun {
            method: Method::OursNoZ,
            accuracies: e.results.iter().map(|r| r.accuracy).collect(),
            estimated_priors: None,
            train_seconds: out.seconds,
            test_seconds: t.elapsed().as_secs_f64(),
            validation_accuracy: out.model.provenance.best_validation_accuracy,
            chosen: "-".into(),
            best_iteration: Some(out.model.provenance.best_iteration),
            best_iteration_by_positives: None,
            prior_maps: None,
        });
    }
    progress.done();
    Ok(run)
}

/// Ours as given (an earlier run's models), one ensemble for every N_p.
pub(super) fn given_ours(models: Vec<Model>, prior_from: Vec<Model>) -> OursFit {
    let dims: Vec<String> = models.iter().map(|m| format!("K={}", m.net.config.task_dim)).collect();
    let prior = match prior_from.len() {
        0 => String::new(),
        n => format!(", prior from {n} other model(s)"),
    };
    OursFit {
        chosen: dims.join(" + ") + &prior,
        validation_accuracy: f64::NAN,
        seconds: 0.0,
        n_pos: None,
        models,
        calibration: PriorCalibration::IDENTITY,
        prior_from,
    }
}

/// Single-task baselines: every candidate on validation episodes, the chosen one on
/// target episodes; train time = fitting all target supports. Without validation
/// episodes the largest budget of each is taken (and named so in `chosen`).
pub(super) fn single_task_runs(
    cfg: &EvalConfig,
    val_packed: Option<&PackedEpisodes>,
    target_packed: &PackedEpisodes,
    seed: u64,
    device: Device,
    split: usize,
    progress: &mut dyn EvalProgress,
) -> Result<Vec<MethodRun>, TrainError> {
    let mut methods = Vec::new();
    for method in [Method::Naive, Method::UPu, Method::NnPu, Method::Drpu, Method::Dre] {
        if !cfg.methods.contains(&method) {
            continue;
        }
        progress.start(&format!("split {split}: {}", method.label()));
        let run = |p: &PackedEpisodes| -> Result<(Vec<Vec<f64>>, Vec<String>), tch::TchError> {
            let iters = || single::ITERATIONS.iter().map(|i| format!("iterations={i}"));
            Ok(match method {
                Method::Naive => (single::neural(NeuralBaseline::Naive, p, seed, device)?, iters().collect()),
                Method::UPu => (single::neural(NeuralBaseline::UPu, p, seed, device)?, iters().collect()),
                Method::NnPu => (single::neural(NeuralBaseline::NnPu, p, seed, device)?, iters().collect()),
                Method::Drpu => {
                    let (mut all, mut names) = (Vec::new(), Vec::new());
                    for alpha in single::DRPU_ALPHAS {
                        all.extend(single::neural(NeuralBaseline::Drpu { alpha }, p, seed, device)?);
                        names.extend(
                            single::ITERATIONS.iter().map(|i| format!("alpha={alpha}, iterations={i}")),
                        );
                    }
                    (all, names)
                }
                _ => (single::dre(p), single::DRE_LAMBDAS.iter().map(|l| format!("lambda={l}")).collect()),
            })
        };
        let t = Instant::now();
        let (target, names) = run(target_packed)?;
        let seconds = t.elapsed().as_secs_f64();
        let (best, validation_accuracy, note) = match val_packed {
            Some(v) => {
                let (val, _) = run(v)?;
                let best = best_by_validation(&val);
                (best, mean(&val[best]), "")
            }
            None => (target.len() - 1, f64::NAN, " (no validation tasks: last candidate)"),
        };
        methods.push(MethodRun {
            method,
            accuracies: target[best].clone(),
            estimated_priors: None,
            train_seconds: seconds,
            test_seconds: seconds,
            validation_accuracy,
            chosen: format!("{}{note}", names[best]),
            best_iteration: None,
            best_iteration_by_positives: None,
            prior_maps: None,
        });
        progress.done();
    }
    Ok(methods)
}
