//! Aggregating split runs into the paper's tables: mean accuracy per method with the
//! best and those not significantly worse (paired t-test over the shared target
//! episodes, 5 %) in bold; breakdowns per N_p and per π; our prior RMSE; times.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::stats::{mean_se, paired_t};
use super::{Method, SplitRun};

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MethodSummary {
    pub method: Method,
    pub label: String,
    pub mean_accuracy: f64,
    /// Standard error over the splits' mean accuracies (0 with one split).
    pub se_over_splits: f64,
    pub per_split: Vec<f64>,
    /// Best, or not significantly worse than the best (paired t-test, 5 %).
    pub bold: bool,
    pub p_vs_best: f64,
    /// Paired t-test against Ours over the same episodes (absent for Ours, or
    /// without it): does this method differ from ours significantly?
    #[serde(default)]
    pub p_vs_ours: Option<f64>,
    pub by_positives: BTreeMap<usize, f64>,
    /// Keyed by π × 100 (JSON keys must be strings or integers).
    pub by_prior: BTreeMap<u32, f64>,
    pub train_seconds: f64,
    pub test_seconds: f64,
    pub chosen: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PriorSummary {
    pub rmse: f64,
    pub se_over_splits: f64,
    pub by_positives: BTreeMap<usize, f64>,
    pub by_prior: BTreeMap<u32, f64>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Summary {
    pub dataset: String,
    pub splits: usize,
    pub episodes_per_split: Vec<usize>,
    pub methods: Vec<MethodSummary>,
    pub prior: Option<PriorSummary>,
}

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len().max(1) as f64
}

/// Aggregate runs of one dataset.
pub fn summarise(dataset: &str, runs: &[SplitRun]) -> Summary {
    let methods: Vec<Method> = {
        let mut m: Vec<Method> = runs.iter().flat_map(|r| r.methods.iter().map(|m| m.method)).collect();
        m.sort();
        m.dedup();
        // Only methods present in every split can be paired.
        m.retain(|&x| runs.iter().all(|r| r.methods.iter().any(|m| m.method == x)));
        m
    };
    let column = |m: Method| -> Vec<f64> {
        runs.iter()
            .flat_map(|r| {
                r.methods.iter().find(|x| x.method == m).map(|x| x.accuracies.clone()).unwrap_or_default()
            })
            .collect()
    };
    let episodes: Vec<(usize, f64)> =
        runs.iter().flat_map(|r| r.episodes.iter().map(|e| (e.n_pos, e.prior))).collect();
    let overall: Vec<(Method, f64)> = methods.iter().map(|&m| (m, mean(&column(m)))).collect();
    let best = overall.iter().max_by(|a, b| a.1.total_cmp(&b.1)).map(|b| b.0);
    let best_column = best.map(column).unwrap_or_default();
    let ours_column = methods.contains(&Method::Ours).then(|| column(Method::Ours));

    let mut summaries = Vec::new();
    for &m in &methods {
        let acc = column(m);
        let per_split: Vec<f64> = runs
            .iter()
            .map(|r| r.methods.iter().find(|x| x.method == m).map_or(f64::NAN, |x| mean(&x.accuracies)))
            .collect();
        let test = paired_t(&acc, &best_column);
        let bold = Some(m) == best || !(test.p < 0.05 && mean(&acc) < mean(&best_column));
        let mut by_positives: BTreeMap<usize, Vec<f64>> = BTreeMap::new();
        let mut by_prior: BTreeMap<u32, Vec<f64>> = BTreeMap::new();
        for (a, &(n_pos, prior)) in acc.iter().zip(&episodes) {
            by_positives.entry(n_pos).or_default().push(*a);
            by_prior.entry((prior * 100.0).round() as u32).or_default().push(*a);
        }
        let runs_of = || runs.iter().filter_map(|r| r.methods.iter().find(|x| x.method == m));
        summaries.push(MethodSummary {
            method: m,
            label: m.label().into(),
            mean_accuracy: mean(&acc),
            se_over_splits: mean_se(&per_split).1,
            per_split,
            bold,
            p_vs_best: if Some(m) == best { 1.0 } else { test.p },
            p_vs_ours: ours_column.as_ref().filter(|_| m != Method::Ours).map(|o| paired_t(&acc, o).p),
            by_positives: by_positives.into_iter().map(|(k, v)| (k, mean(&v))).collect(),
            by_prior: by_prior.into_iter().map(|(k, v)| (k, mean(&v))).collect(),
            train_seconds: mean(&runs_of().map(|x| x.train_seconds).collect::<Vec<_>>()),
            test_seconds: mean(&runs_of().map(|x| x.test_seconds).collect::<Vec<_>>()),
            chosen: runs_of()
                .map(|x| match &x.prior_maps {
                    Some(maps) => {
                        let maps: Vec<String> = maps.iter().map(|m| m.to_string()).collect();
                        format!("{}, prior {}", x.chosen, maps.join(", "))
                    }
                    None => x.chosen.clone(),
                })
                .collect(),
        });
    }

    let prior = methods.contains(&Method::Ours).then(|| {
        let mut sq_by_np: BTreeMap<usize, Vec<f64>> = BTreeMap::new();
        let mut sq_by_pi: BTreeMap<u32, Vec<f64>> = BTreeMap::new();
        let mut per_split = Vec::new();
        let mut all = Vec::new();
        for r in runs {
            let Some(est) =
                r.methods.iter().find(|x| x.method == Method::Ours).and_then(|x| x.estimated_priors.clone())
            else {
                continue;
            };
            let sq: Vec<f64> = est.iter().zip(&r.episodes).map(|(e, ep)| (e - ep.prior).powi(2)).collect();
            per_split.push(mean(&sq).sqrt());
            for (s, ep) in sq.iter().zip(&r.episodes) {
                sq_by_np.entry(ep.n_pos).or_default().push(*s);
                sq_by_pi.entry((ep.prior * 100.0).round() as u32).or_default().push(*s);
            }
            all.extend(sq);
        }
        PriorSummary {
            rmse: mean(&all).sqrt(),
            se_over_splits: mean_se(&per_split).1,
            by_positives: sq_by_np.into_iter().map(|(k, v)| (k, mean(&v).sqrt())).collect(),
            by_prior: sq_by_pi.into_iter().map(|(k, v)| (k, mean(&v).sqrt())).collect(),
        }
    });
    Summary {
        dataset: dataset.into(),
        splits: runs.len(),
        episodes_per_split: runs.iter().map(|r| r.episodes.len()).collect(),
        methods: summaries,
        prior,
    }
}

fn pct(v: f64) -> String {
    format!("{:.2}", 100.0 * v)
}

/// The summary as Markdown: the main table, breakdowns, prior RMSE and times.
pub fn markdown(s: &Summary) -> String {
    let mut out = String::new();
    let episodes: usize = s.episodes_per_split.iter().sum();
    out.push_str(&format!(
        "### {} — mean test accuracy (%), {} split(s), {episodes} target episodes\n\n",
        s.dataset, s.splits
    ));
    let with_ours = s.methods.iter().any(|m| m.method == Method::Ours);
    out.push_str("Bold: the best, and those not significantly worse by a paired t-test over the same target episodes (5 %). ± is the standard error over splits. † = given the true target prior.");
    out.push_str(if with_ours { " p vs Ours: the same test against Ours.\n\n" } else { "\n\n" });
    out.push_str(if with_ours {
        "| method | accuracy | ± | p vs best | p vs Ours | chosen on validation |\n|---|---|---|---|---|---|\n"
    } else {
        "| method | accuracy | ± | p vs best | chosen on validation |\n|---|---|---|---|---|\n"
    });
    for m in &s.methods {
        let acc = pct(m.mean_accuracy);
        let acc = if m.bold { format!("**{acc}**") } else { acc };
        let dagger = if m.method.uses_true_prior() { " †" } else { "" };
        let mut chosen = m.chosen.clone();
        chosen.dedup();
        let vs_ours = match (with_ours, m.p_vs_ours) {
            (false, _) => String::new(),
            (true, Some(p)) => format!(" {p:.3} |"),
            (true, None) => " – |".into(),
        };
        out.push_str(&format!(
            "| {}{dagger} | {acc} | {} | {:.3} |{vs_ours} {} |\n",
            m.label,
            pct(m.se_over_splits),
            m.p_vs_best,
            chosen.join("; ")
        ));
    }
    let breakdown = |title: &str, keys: Vec<String>, get: &dyn Fn(&MethodSummary, usize) -> Option<f64>| {
        let mut t = format!(
            "\n#### Accuracy (%) by {title}\n\n| method | {} |\n|---|{}\n",
            keys.join(" | "),
            "---|".repeat(keys.len())
        );
        for m in &s.methods {
            let cells: Vec<String> = (0..keys.len()).map(|i| get(m, i).map_or("–".into(), pct)).collect();
            t.push_str(&format!("| {} | {} |\n", m.label, cells.join(" | ")));
        }
        t
    };
    if let Some(first) = s.methods.first() {
        let nps: Vec<usize> = first.by_positives.keys().copied().collect();
        let pis: Vec<u32> = first.by_prior.keys().copied().collect();
        out.push_str(&breakdown(
            "positive support size N_p",
            nps.iter().map(|n| format!("N_p = {n}")).collect(),
            &|m, i| nps.get(i).and_then(|k| m.by_positives.get(k)).copied(),
        ));
        out.push_str(&breakdown(
            "target prior π",
            pis.iter().map(|p| format!("π = {:.1}", f64::from(*p) / 100.0)).collect(),
            &|m, i| pis.get(i).and_then(|k| m.by_prior.get(k)).copied(),
        ));
    }
    if let Some(p) = &s.prior {
        out.push_str(&format!(
            "\n#### Our prior estimate: RMSE {:.3} (± {:.3} over splits)\n\n| N_p | {} | π | {} |\n|---|{}---|{}\n| RMSE | {} | | {} |\n",
            p.rmse,
            p.se_over_splits,
            p.by_positives.keys().map(|k| k.to_string()).collect::<Vec<_>>().join(" | "),
            p.by_prior.keys().map(|k| format!("{:.1}", f64::from(*k) / 100.0)).collect::<Vec<_>>().join(" | "),
            "---|".repeat(p.by_positives.len()),
            "---|".repeat(p.by_prior.len()),
            p.by_positives.values().map(|v| format!("{v:.3}")).collect::<Vec<_>>().join(" | "),
            p.by_prior.values().map(|v| format!("{v:.3}")).collect::<Vec<_>>().join(" | "),
        ));
    }
    out.push_str(
        "\n#### Time per split (seconds, this machine)\n\n| method | train | test |\n|---|---|---|\n",
    );
    for m in &s.methods {
        out.push_str(&format!("| {} | {:.1} | {:.2} |\n", m.label, m.train_seconds, m.test_seconds));
    }
    out.push_str("\nTrain: meta-training for meta-learned methods (the chosen candidate); for single-task methods, fitting every target support (the same as test).\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eval::{EpisodeInfo, MethodRun};

    fn method(method: Method, accuracies: Vec<f64>) -> MethodRun {
        MethodRun {
            method,
            accuracies,
            estimated_priors: None,
            train_seconds: 0.0,
            test_seconds: 0.0,
            validation_accuracy: 0.0,
            chosen: "-".into(),
            best_iteration: None,
            best_iteration_by_positives: None,
            prior_maps: None,
        }
    }

    #[test]
    fn every_method_is_tested_against_ours_on_the_same_episodes() {
        let episodes = (0..6)
            .map(|i| EpisodeInfo { task: format!("t{i}"), n_pos: 1, prior: 0.2, test_rows: 10 })
            .collect();
        let ours = vec![0.80, 0.82, 0.79, 0.85, 0.81, 0.83];
        let worse: Vec<f64> =
            ours.iter().zip([0.10, 0.12, 0.09, 0.11, 0.10, 0.13]).map(|(a, d)| a - d).collect();
        let run = SplitRun {
            split: 0,
            episodes,
            methods: vec![
                method(Method::Ours, ours.clone()),
                method(Method::NnPu, worse),
                method(Method::Np, ours),
            ],
        };
        let s = summarise("toy", &[run]);
        let p = |m: Method| s.methods.iter().find(|x| x.method == m).and_then(|x| x.p_vs_ours);
        assert_eq!(p(Method::Ours), None);
        assert!(p(Method::NnPu).is_some_and(|p| p < 0.001), "{:?}", p(Method::NnPu));
        assert!(p(Method::Np).is_some_and(|p| p > 0.5), "identical accuracies: {:?}", p(Method::Np));
        assert!(markdown(&s).contains("| p vs Ours |"));
    }
}
