//! Combining the split runs of several `eval` invocations into one comparison:
//! baselines run once can be paired with a later run of ours, as long as both saw
//! exactly the same target episodes (same data, seed and protocol), which is checked.

use super::SplitRun;

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum MergeError {
    #[error("nothing to merge")]
    Empty,
    #[error("input {input} has {found} splits, the first has {expected}")]
    SplitCount { input: usize, expected: usize, found: usize },
    #[error("input {input}, split {split}: its target episodes differ from the first input's (another seed, data or protocol?)")]
    Episodes { input: usize, split: usize },
}

/// Split by split, the methods of every input; a method found in several inputs is
/// taken from the last one.
pub fn merge_runs(inputs: Vec<Vec<SplitRun>>) -> Result<Vec<SplitRun>, MergeError> {
    let mut inputs = inputs.into_iter();
    let mut merged = inputs.next().ok_or(MergeError::Empty)?;
    for (i, runs) in inputs.enumerate() {
        let input = i + 1;
        if runs.len() != merged.len() {
            return Err(MergeError::SplitCount { input, expected: merged.len(), found: runs.len() });
        }
        for (into, run) in merged.iter_mut().zip(runs) {
            if run.split != into.split || run.episodes != into.episodes {
                return Err(MergeError::Episodes { input, split: into.split });
            }
            for method in run.methods {
                into.methods.retain(|m| m.method != method.method);
                into.methods.push(method);
            }
            into.methods.sort_by_key(|m| m.method);
        }
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
        let two_splits = vec![run(0, 0.2, &[]), run(1, 0.2, &[])];
        assert_eq!(
            merge_runs(vec![a, two_splits]).unwrap_err(),
            MergeError::SplitCount { input: 1, expected: 1, found: 2 }
        );
        assert_eq!(merge_runs(vec![]).unwrap_err(), MergeError::Empty);
    }
}
