//! Split files: which tasks are source, validation and target.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::{DataError, TaskSet};

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Split {
    pub source: Vec<String>,
    pub validation: Vec<String>,
    #[serde(default)]
    pub target: Vec<String>,
}

impl Split {
    pub fn load(path: &Path) -> Result<Self, DataError> {
        let text =
            std::fs::read_to_string(path).map_err(|source| DataError::Io { path: path.into(), source })?;
        serde_json::from_str(&text)
            .map_err(|e| DataError::BadSplit { path: path.into(), reason: e.to_string() })
    }

    pub fn save(&self, path: &Path) -> Result<(), DataError> {
        let text = serde_json::to_string_pretty(self).expect("split serialises");
        std::fs::write(path, text + "\n").map_err(|source| DataError::Io { path: path.into(), source })
    }

    /// Indices of a list of task ids in `set`; an unknown id is an error.
    pub fn resolve(ids: &[String], set: &TaskSet) -> Result<Vec<usize>, DataError> {
        ids.iter().map(|id| set.task_index(id)).collect()
    }
}
