//! Ours in the experiment: its members trained per support size, chosen on validation
//! episodes only, and scored on the target episodes in each prior mode.

use super::*;

/// Our method and its prior ablations: one trained model, three ways to use π.
pub(super) const OURS_MODES: [(Method, PriorMode); 3] = [
    (Method::Ours, PriorMode::Estimated),
    (Method::OursNoPrior, PriorMode::Ignored),
    (Method::OursTruePrior, PriorMode::True),
];

/// A meta-trained model of ours, for the target episodes with `n_pos` positives
/// (None: every episode).
pub(super) struct OursFit {
    /// One model, or the members of an ensemble (the first trained with the split's seed).
    pub(super) models: Vec<Model>,
    pub(super) n_pos: Option<usize>,
    pub(super) validation_accuracy: f64,
    pub(super) seconds: f64,
    pub(super) chosen: String,
    /// The map of its prior estimate (the identity unless `calibrate_prior` chose one).
    pub(super) calibration: PriorCalibration,
    /// Models whose mean prior estimate replaces the members' own (none: their own).
    pub(super) prior_from: Vec<Model>,
}

/// The members' scores on `set`, each at its own prior estimate or, with `prior_from`
/// models, at the mean of theirs.
pub(super) fn member_scores(set: &EpisodeSet, members: &[Model], prior_from: &[Model]) -> Vec<EpisodeScores> {
    let mut scores: Vec<EpisodeScores> = members.iter().map(|m| set.scores(&m.net)).collect();
    if !prior_from.is_empty() {
        let estimates: Vec<EpisodeScores> = prior_from.iter().map(|m| set.scores(&m.net)).collect();
        let priors = metapu::episodes::mean_estimated_prior(&estimates);
        for s in &mut scores {
            s.estimated_prior.clone_from(&priors);
        }
    }
    scores
}

/// The N_p each model of a meta-learned method is for: every N_p at once (None), or
/// with `per_support_size` one model per target N_p.
pub(super) fn support_sizes(cfg: &EvalConfig) -> Vec<Option<usize>> {
    if cfg.per_support_size {
        cfg.protocol.positives.iter().map(|&n| Some(n)).collect()
    } else {
        vec![None]
    }
}

/// Training and validation for one model per target N_p: every training support and
/// every validation episode with `n` positives. Callers validate on `protocol.positives`
/// times as many repeats, so that each model is chosen on as many episodes as one
/// model for every N_p.
pub(super) fn with_support_size(
    sampler: &SamplerConfig,
    protocol: &ProtocolConfig,
    n: usize,
) -> (SamplerConfig, ProtocolConfig) {
    (
        SamplerConfig { min_positives: n, max_positives: n, ..sampler.clone() },
        ProtocolConfig { positives: vec![n], ..protocol.clone() },
    )
}

/// Indices of the episodes with `n_pos` positives (None: all).
pub(super) fn episodes_with(episodes: &[Episode], n_pos: Option<usize>) -> Vec<usize> {
    (0..episodes.len()).filter(|&i| n_pos.is_none_or(|n| episodes[i].n_pos == n)).collect()
}

/// The kept iteration of each model of a method, for `MethodRun`: one model for every
/// N_p gives `best_iteration`; one per N_p gives `best_iteration_by_positives`.
pub(super) fn kept_iterations(kept: &[(Option<usize>, u64)]) -> (Option<u64>, Option<BTreeMap<usize, u64>>) {
    match kept {
        [(None, iteration)] => (Some(*iteration), None),
        _ => {
            let map: BTreeMap<usize, u64> = kept.iter().filter_map(|&(n, it)| n.map(|n| (n, it))).collect();
            (None, (!map.is_empty()).then_some(map))
        }
    }
}

/// How ours was trained, for the table: summed over its models.
pub(super) struct OursSummary {
    pub(super) train_seconds: f64,
    pub(super) validation_accuracy: f64,
    pub(super) chosen: String,
    pub(super) best_iteration: Option<u64>,
    pub(super) best_iteration_by_positives: Option<BTreeMap<usize, u64>>,
    /// The maps of ours' prior estimate, where chosen on validation (`calibrate_prior`).
    pub(super) prior_maps: Option<Vec<PriorCalibration>>,
}

impl OursSummary {
    pub(super) fn of(fits: &[OursFit]) -> Self {
        let kept: Vec<(Option<usize>, u64)> =
            fits.iter().map(|f| (f.n_pos, f.models[0].provenance.best_iteration)).collect();
        let (best_iteration, best_iteration_by_positives) = kept_iterations(&kept);
        Self {
            train_seconds: fits.iter().map(|f| f.seconds).sum(),
            validation_accuracy: mean(&fits.iter().map(|f| f.validation_accuracy).collect::<Vec<_>>()),
            chosen: fits.iter().map(|f| f.chosen.as_str()).collect::<Vec<_>>().join("; "),
            best_iteration,
            best_iteration_by_positives,
            prior_maps: None,
        }
    }
}

/// One model (or ensemble) of ours as `ours_runs` scores it.
#[derive(Clone, Copy)]
pub(super) struct OursScoring<'a> {
    pub(super) members: &'a [Model],
    /// The N_p of the episodes it scores (None: every N_p).
    pub(super) n_pos: Option<usize>,
    pub(super) calibration: PriorCalibration,
    /// Models whose mean prior estimate the members read their ratios at (none: their own).
    pub(super) prior_from: &'a [Model],
}

/// Target results of `models` for each of `wanted` (a subset of OURS_MODES' methods);
/// each episode is scored by the model (or ensemble) of its N_p (None: of every N_p).
pub(super) fn ours_runs(
    models: &[OursScoring<'_>],
    episodes: &[Episode],
    tasks: &[Task],
    wanted: &[Method],
    summary: &OursSummary,
) -> Vec<MethodRun> {
    /// The episodes one model (or ensemble) scores, its members' scores on them (the
    /// same whatever prior the decision then uses), and the map of its estimate.
    struct Part {
        calibration: PriorCalibration,
        idx: Vec<usize>,
        scored: Option<(EpisodeSet, Vec<EpisodeScores>)>,
    }
    let scoring = Instant::now();
    let parts: Vec<Part> = models
        .iter()
        .filter(|m| !m.members.is_empty())
        .map(|&OursScoring { members, n_pos, calibration, prior_from }| {
            let idx = episodes_with(episodes, n_pos);
            let subset = idx.iter().map(|&i| episodes[i].clone()).collect();
            let net = &members[0].net;
            let dim = net.config.input_dim as usize;
            let scored = EpisodeSet::new(subset, tasks, dim, Kind::Float, net.device()).map(|set| {
                let scores = member_scores(&set, members, prior_from);
                (set, scores)
            });
            Part { calibration, idx, scored }
        })
        .collect();
    // Each method's test time includes the adaptation, as if it were tested alone.
    let scoring_seconds = scoring.elapsed().as_secs_f64();
    OURS_MODES
        .iter()
        .filter(|(m, _)| wanted.contains(m))
        .map(|&(method, mode)| {
            let t = Instant::now();
            let mut accuracies = vec![f64::NAN; episodes.len()];
            let mut priors = vec![f64::NAN; episodes.len()];
            for part in &parts {
                let Some((set, scores)) = &part.scored else { continue };
                let e = calibrated_evaluation(set, scores, mode, part.calibration);
                for (&i, r) in part.idx.iter().zip(&e.results) {
                    accuracies[i] = r.accuracy;
                    priors[i] = r.estimated_prior;
                }
            }
            MethodRun {
                method,
                accuracies,
                estimated_priors: (method == Method::Ours).then_some(priors),
                train_seconds: summary.train_seconds,
                test_seconds: scoring_seconds + t.elapsed().as_secs_f64(),
                validation_accuracy: summary.validation_accuracy,
                chosen: summary.chosen.clone(),
                best_iteration: summary.best_iteration,
                best_iteration_by_positives: summary.best_iteration_by_positives.clone(),
                prior_maps: summary.prior_maps.clone().filter(|_| method == Method::Ours),
            }
        })
        .collect()
}

/// The evaluation of the members whose `scores` these are (one: that model's own)
/// under `mode`, the estimated prior mapped by `calibration` (only the estimate: the
/// true prior and "no prior" are never mapped).
pub(super) fn calibrated_evaluation(
    set: &EpisodeSet,
    scores: &[EpisodeScores],
    mode: PriorMode,
    calibration: PriorCalibration,
) -> Evaluation {
    let calibration = if mode == PriorMode::Estimated { calibration } else { PriorCalibration::IDENTITY };
    set.evaluate_ensemble(scores, mode, |p| calibration.apply(p))
}

/// How ours meta-trains with training seed `seed` for target N_p `n_pos` (None: every
/// N_p); K is the caller's.
pub(super) fn ours_train_config(cfg: &EvalConfig, seed: u64, n_pos: Option<usize>) -> TrainConfig {
    let mut tc = TrainConfig { seed, ..cfg.train.clone() };
    if let Some(n) = n_pos {
        (tc.sampler, tc.protocol) = with_support_size(&cfg.train.sampler, &cfg.train.protocol, n);
        tc.validation_repeats *= cfg.protocol.positives.len();
    }
    tc
}

/// Validation accuracy of ours (estimated prior) where training gave none (an
/// ensemble, given models, or a prior map to choose): on the episodes a single model
/// trained with the split's seed is validated on, so that it compares with that
/// model's own, or with `fresh_validation` on fresh ones, which no model's
/// checkpoint was chosen on; averaged over the fits of each N_p as for trained models. With
/// `calibrate_prior`, each fit keeps the map of its prior estimate best on these
/// episodes, and its accuracy there is the one counted.
pub(super) fn ours_validation(
    fits: &mut [OursFit],
    sd: &SplitData<'_>,
    tasks: &[Task],
    cfg: &EvalConfig,
    seed: u64,
) -> f64 {
    let candidates =
        if cfg.calibrate_prior { PriorCalibration::grid() } else { vec![PriorCalibration::IDENTITY] };
    let accuracies: Vec<f64> = fits
        .iter_mut()
        .map(|fit| {
            let Some(first) = fit.models.first() else { return f64::NAN };
            let mut tc = ours_train_config(cfg, seed, fit.n_pos);
            if let Some(repeats) = cfg.fresh_validation {
                tc.seed = fresh_validation_seed(seed);
                tc.validation_repeats *= repeats.max(1);
            }
            let episodes = train::validation_episodes(tasks, &sd.source, &sd.validation, &tc);
            let dim = first.net.config.input_dim as usize;
            let Some(set) = EpisodeSet::new(episodes, tasks, dim, Kind::Float, first.net.device()) else {
                return f64::NAN;
            };
            let scores = member_scores(&set, &fit.models, &fit.prior_from);
            let best = PriorCalibration::best_by(&candidates, |c| {
                calibrated_evaluation(&set, &scores, PriorMode::Estimated, c).mean_accuracy
            });
            match best {
                Some((calibration, accuracy)) => {
                    fit.calibration = calibration;
                    accuracy
                }
                None => f64::NAN,
            }
        })
        .collect();
    mean(&accuracies)
}

/// Meta-train ours for every K candidate (and, with `per_support_size`, every target
/// N_p); keep per N_p the candidate best on validation, and with `members` > 1
/// that many such models from different training seeds, as one ensemble.
pub(super) fn train_ours(
    split: usize,
    sd: &SplitData<'_>,
    cfg: &EvalConfig,
    seed: u64,
    device: Device,
    progress: &mut dyn EvalProgress,
) -> Result<Vec<OursFit>, TrainError> {
    let stop = AtomicBool::new(false);
    let members = cfg.members.max(1);
    let mut fits = Vec::new();
    for n_pos in support_sizes(cfg) {
        let chosen = select_members(members, &cfg.task_dims, |member, &k| {
            let tc = TrainConfig {
                task_dim: k,
                ..ours_train_config(cfg, seed.wrapping_add(member as u64), n_pos)
            };
            progress.start(&format!(
                "split {split}: ours K={k}{}{}",
                n_pos.map(|n| format!(" N_p={n}")).unwrap_or_default(),
                if members > 1 { format!(" member {}", member + 1) } else { String::new() }
            ));
            let out = train::train(sd.data, &sd.source, &sd.validation, &tc, device, &stop, &mut ())?;
            progress.done();
            let val = out.model.provenance.best_validation_accuracy;
            Ok(((out.model, out.seconds), val))
        })?;
        let mut fit: Option<OursFit> = None;
        for ((model, seconds), k) in chosen {
            let label = format!("K={k}");
            let val = model.provenance.best_validation_accuracy;
            let f = fit.get_or_insert_with(|| OursFit {
                models: Vec::new(),
                n_pos,
                validation_accuracy: 0.0,
                seconds: 0.0,
                chosen: n_pos.map(|n| format!("N_p={n}: ")).unwrap_or_default(),
                calibration: PriorCalibration::IDENTITY,
                prior_from: Vec::new(),
            });
            // The mean of the members' own validations; an ensemble's is measured later.
            f.validation_accuracy += (val - f.validation_accuracy) / (f.models.len() + 1) as f64;
            f.seconds += seconds;
            f.chosen += &if f.models.is_empty() { label } else { format!(" + {label}") };
            f.models.push(model);
        }
        fits.extend(fit);
    }
    Ok(fits)
}

/// For each of `members` ensemble members (training seeds one apart), the candidate
/// whose trained model validates best (the first of equals): the selection that ours
/// and the meta-learned baselines share. `train` gets the member and a candidate and
/// returns the model and its validation accuracy.
pub(super) fn select_members<'c, C, M>(
    members: usize,
    candidates: &'c [C],
    mut train: impl FnMut(usize, &'c C) -> Result<(M, f64), TrainError>,
) -> Result<Vec<(M, &'c C)>, TrainError> {
    let mut chosen = Vec::new();
    for member in 0..members.max(1) {
        let mut best: Option<(M, f64, &C)> = None;
        for c in candidates {
            let (m, val) = train(member, c)?;
            if best.as_ref().is_none_or(|b| val > b.1) {
                best = Some((m, val, c));
            }
        }
        chosen.extend(best.map(|(m, _, c)| (m, c)));
    }
    Ok(chosen)
}
