//! Labeled tasks: loading (labeled-task CSV, N-BaIoT layouts), the paper's Synthetic
//! generator, split files and the evaluation protocol's sampling.

pub mod csv_tasks;
pub mod nbaiot;
pub mod protocol;
pub mod split;
pub mod synthetic;

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// Label of a row: known normal (positive), known anomalous (negative), or unknown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Label {
    Positive,
    Negative,
    Unlabeled,
}

/// One task (one device): row-major features and a label per row.
#[derive(Debug, Clone, PartialEq)]
pub struct Task {
    pub id: String,
    pub x: Vec<f32>,
    pub labels: Vec<Label>,
}

impl Task {
    pub fn new(id: impl Into<String>) -> Self {
        Self { id: id.into(), x: Vec::new(), labels: Vec::new() }
    }

    pub fn len(&self) -> usize {
        self.labels.len()
    }

    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    pub fn row(&self, i: usize, dim: usize) -> &[f32] {
        &self.x[i * dim..(i + 1) * dim]
    }

    pub fn indices_of(&self, label: Label) -> Vec<usize> {
        (0..self.len()).filter(|&i| self.labels[i] == label).collect()
    }
}

/// Tasks sharing one feature space.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskSet {
    pub feature_names: Vec<String>,
    pub tasks: Vec<Task>,
    /// Rows skipped by `--skip-bad-rows`.
    pub skipped_rows: usize,
}

#[derive(Debug, thiserror::Error)]
pub enum DataError {
    #[error("cannot read {path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{path}:{line}: {reason}")]
    BadRow { path: PathBuf, line: u64, reason: String },
    #[error("{path}: {reason}")]
    BadFile { path: PathBuf, reason: String },
    #[error("{path}: {reason}")]
    BadSplit { path: PathBuf, reason: String },
    #[error("unknown task '{0}' (not in the data)")]
    UnknownTask(String),
}

impl TaskSet {
    pub fn dim(&self) -> usize {
        self.feature_names.len()
    }

    pub fn rows(&self) -> usize {
        self.tasks.iter().map(Task::len).sum()
    }

    pub fn task_index(&self, id: &str) -> Result<usize, DataError> {
        self.tasks.iter().position(|t| t.id == id).ok_or_else(|| DataError::UnknownTask(id.into()))
    }

    /// sha256 over feature names, task ids, labels and feature bits, in order.
    pub fn content_hash(&self) -> String {
        let mut h = Sha256::new();
        for name in &self.feature_names {
            h.update(name.as_bytes());
            h.update([0]);
        }
        for t in &self.tasks {
            h.update(t.id.as_bytes());
            h.update([0]);
            for l in &t.labels {
                h.update([*l as u8]);
            }
            for v in &t.x {
                h.update(v.to_le_bytes());
            }
        }
        format!("{:x}", h.finalize())
    }

    /// Load a labeled-task CSV file, or an N-BaIoT directory (UCI or Kaggle layout).
    pub fn load(path: &Path, skip_bad_rows: bool) -> Result<Self, DataError> {
        if path.is_dir() {
            nbaiot::load_dir(path, skip_bad_rows)
        } else {
            csv_tasks::load(path, skip_bad_rows)
        }
    }
}
