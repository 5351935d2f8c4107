//! Combining the split runs of several `eval` invocations into one comparison:
//! baselines run once can be paired with a later run of ours, and the splits of one
//! experiment can be run in several processes (`--first-split`), as long as every
//! split's inputs saw exactly the same target episodes (same data, seed and protocol),
//! which is checked.

use super::{Method, SplitRun};

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum MergeError {
    #[error("nothing to merge")]
    Empty,
    #[error("split {split} has methods {found:?}, split {first} has {expected:?}: every split needs the same methods")]
    Methods { split: usize, found: Vec<Method>, first: usize, expected: Vec<Method> },
    #[error("input {input}, split {split}: its target episodes differ from an earlier input's (another seed, data or protocol?)")]
    Episodes { input: usize, split: usize },
}

/// Split by split (matched on the split index), the methods of every input; a method
/// found in several inputs is taken from the last one. Every split of the result must
/// end with the same methods, or the table would compare them on different splits.
pub fn merge_runs(inputs: Vec<Vec<SplitRun>>) -> Result<Vec<SplitRun>, MergeError> {
    let mut merged: Vec<SplitRun> = Vec::new();
    for (input, runs) in inputs.into_iter().enumerate() {
        for mut run in runs {
            match merged.iter_mut().find(|m| m.split == run.split) {
                Some(into) => {
                    if run.episodes != into.episodes {
                        return Err(MergeError::Episodes { input, split: into.split });
                    }
                    for method in run.methods {
                        into.methods.retain(|m| m.method != method.method);
                        into.methods.push(method);
                    }
                    into.methods.sort_by_key(|m| m.method);
                }
                None => {
                    run.methods.sort_by_key(|m| m.method);
                    merged.push(run);
                }
            }
        }
    }
    merged.sort_by_key(|r| r.split);
    let names = |r: &SplitRun| r.methods.iter().map(|m| m.method).collect::<Vec<_>>();
    let first = merged.first().ok_or(MergeError::Empty)?;
    let expected = names(first);
    if let Some(other) = merged.iter().find(|r| names(r) != expected) {
        return Err(MergeError::Methods {
            split: other.split,
            found: names(other),
            first: first.split,
            expected,
        });
    }
    Ok(merged)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eval::{EpisodeInfo, Method, MethodRun};

    fn run(split: usize, prior: f64, methods: &[(Method, f64)]) -> SplitRun {
        SplitRun {
            split,
            episodes: vec![EpisodeInfo { task: "t0".into(), n_pos: 1, prior, test_rows: 200 }],
            methods: methods
                .iter()
                .map(|&(method, acc)| MethodRun {
                    method,
                    accuracies: vec![acc],
                    estimated_priors: None,
                    train_seconds: 1.0,
                    test_seconds: 1.0,
                    validation_accuracy: acc,
                    chosen: "-".into(),
                    best_iteration: None,
                    best_iteration_by_positives: None,
                    prior_maps: None,
                })
                .collect(),
        }
    }

    #[test]
    fn methods_are_combined_and_the_last_input_wins() {
        let baselines = vec![run(0, 0.2, &[(Method::Ours, 0.7), (Method::NnPu, 0.75)])];
        let ours = vec![run(0, 0.2, &[(Method::Ours, 0.8)])];
        let merged = merge_runs(vec![baselines, ours]).unwrap();
        let got: Vec<(Method, f64)> = merged[0].methods.iter().map(|m| (m.method, m.accuracies[0])).collect();
        assert_eq!(got, vec![(Method::Ours, 0.8), (Method::NnPu, 0.75)]);
    }

    #[test]
    fn runs_on_other_episodes_are_refused() {
        let a = vec![run(0, 0.2, &[(Method::NnPu, 0.75)])];
        let other_prior = vec![run(0, 0.4, &[(Method::Ours, 0.8)])];
        assert_eq!(
            merge_runs(vec![a.clone(), other_prior]).unwrap_err(),
            MergeError::Episodes { input: 1, split: 0 }
        );
        // A split that another input does not cover lacks that input's methods.
        let two_splits = vec![run(0, 0.2, &[]), run(1, 0.2, &[])];
        assert_eq!(
            merge_runs(vec![a, two_splits]).unwrap_err(),
            MergeError::Methods { split: 1, found: vec![], first: 0, expected: vec![Method::NnPu] }
        );
        assert_eq!(merge_runs(vec![]).unwrap_err(), MergeError::Empty);
        assert_eq!(merge_runs(vec![vec![], vec![]]).unwrap_err(), MergeError::Empty);
    }

    #[test]
    fn splits_run_in_separate_processes_are_joined_in_split_order() {
        let ours = vec![run(0, 0.2, &[(Method::Ours, 0.8)]), run(1, 0.4, &[(Method::Ours, 0.7)])];
        let later_split = vec![run(1, 0.4, &[(Method::Naive, 0.6)])];
        let first_split = vec![run(0, 0.2, &[(Method::Naive, 0.65)])];
        let merged = merge_runs(vec![ours, later_split, first_split]).unwrap();
        let got: Vec<(usize, Vec<(Method, f64)>)> = merged
            .iter()
            .map(|r| (r.split, r.methods.iter().map(|m| (m.method, m.accuracies[0])).collect()))
            .collect();
        assert_eq!(
            got,
            vec![
                (0, vec![(Method::Ours, 0.8), (Method::Naive, 0.65)]),
                (1, vec![(Method::Ours, 0.7), (Method::Naive, 0.6)]),
            ]
        );
        // The same split index with other episodes is still refused.
        let clash = vec![run(1, 0.2, &[(Method::Naive, 0.6)])];
        let ours = vec![run(1, 0.4, &[(Method::Ours, 0.7)])];
        assert_eq!(merge_runs(vec![ours, clash]).unwrap_err(), MergeError::Episodes { input: 1, split: 1 });
    }
}
