//! N-BaIoT directories, in either published layout. Device = task, benign = positive.
//!
//! - UCI:    `<device>/benign_traffic.csv`, `<device>/mirai_attacks/*.csv`,
//!   `<device>/gafgyt_attacks/*.csv`
//! - Kaggle: `<device>.benign.csv`, `<device>.mirai.udp.csv`, `<device>.gafgyt.scan.csv`, …
//!
//! Each file has the 115-column header and feature values only.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::csv_tasks::{bad_row, parse_feature, sized_record};
use super::{DataError, Label, Task, TaskSet};

/// One traffic file and what it holds.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct TrafficFile {
    pub device: String,
    /// "benign", or "<family>.<attack>" such as "gafgyt.udp".
    pub class: String,
    pub path: PathBuf,
}

impl TrafficFile {
    pub fn label(&self) -> Label {
        if self.class == "benign" {
            Label::Positive
        } else {
            Label::Negative
        }
    }
}

fn read_dir_sorted(dir: &Path) -> Result<Vec<PathBuf>, DataError> {
    let io = |source| DataError::Io { path: dir.into(), source };
    let mut out: Vec<PathBuf> =
        std::fs::read_dir(dir).map_err(io)?.filter_map(|e| e.ok().map(|e| e.path())).collect();
    out.sort();
    Ok(out)
}

fn file_name(p: &Path) -> String {
    p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
}

/// A Kaggle-layout file name: `<device>.benign.csv` or `<device>.<family>.<attack>.csv`.
fn classify_kaggle(path: &Path) -> Option<TrafficFile> {
    let name = file_name(path);
    let parts: Vec<&str> = name.strip_suffix(".csv")?.split('.').collect();
    let (device, class) = match parts.as_slice() {
        [device, "benign"] => (device.to_string(), "benign".to_string()),
        [device, family @ ("mirai" | "gafgyt"), attack] => (device.to_string(), format!("{family}.{attack}")),
        _ => return None,
    };
    Some(TrafficFile { device, class, path: path.into() })
}

/// One traffic file named in either layout: Kaggle's file name, or UCI's
/// `<device>/benign_traffic.csv` and `<device>/<family>_attacks/<attack>.csv`.
pub fn classify(path: &Path) -> Option<TrafficFile> {
    if let Some(f) = classify_kaggle(path) {
        return Some(f);
    }
    let parent = path.parent()?;
    if file_name(path) == "benign_traffic.csv" {
        return Some(TrafficFile { device: file_name(parent), class: "benign".into(), path: path.into() });
    }
    let family = file_name(parent).strip_suffix("_attacks")?.to_string();
    let attack = file_name(path).strip_suffix(".csv")?.to_string();
    let device = file_name(parent.parent()?);
    Some(TrafficFile { device, class: format!("{family}.{attack}"), path: path.into() })
}

/// List the traffic files of a directory in either layout, benign first per device.
pub fn discover(dir: &Path) -> Result<Vec<TrafficFile>, DataError> {
    let mut files = Vec::new();
    for entry in read_dir_sorted(dir)? {
        let name = file_name(&entry);
        if entry.is_dir() {
            // UCI layout: one folder per device.
            let benign = entry.join("benign_traffic.csv");
            if benign.is_file() {
                files.push(TrafficFile { device: name.clone(), class: "benign".into(), path: benign });
            }
            for family in ["gafgyt", "mirai"] {
                let attacks = entry.join(format!("{family}_attacks"));
                if attacks.is_dir() {
                    for f in read_dir_sorted(&attacks)? {
                        if let Some(attack) = file_name(&f).strip_suffix(".csv") {
                            files.push(TrafficFile {
                                device: name.clone(),
                                class: format!("{family}.{attack}"),
                                path: f.clone(),
                            });
                        }
                    }
                }
            }
        } else if let Some(file) = classify_kaggle(&entry) {
            files.push(file);
        }
    }
    // Benign first within a device, then attacks by name.
    files.sort_by(|a, b| {
        (&a.device, a.class != "benign", &a.class).cmp(&(&b.device, b.class != "benign", &b.class))
    });
    if files.is_empty() {
        return Err(DataError::BadFile {
            path: dir.into(),
            reason: "no N-BaIoT files found (expected <device>/benign_traffic.csv or <device>.benign.csv)"
                .into(),
        });
    }
    Ok(files)
}

/// Read one feature-only CSV. Returns its header and row-major values.
pub fn read_feature_csv(
    path: &Path,
    skip_bad_rows: bool,
    skipped: &mut usize,
) -> Result<(Vec<String>, Vec<f32>), DataError> {
    let file = std::fs::File::open(path).map_err(|source| DataError::Io { path: path.into(), source })?;
    let mut reader = csv::ReaderBuilder::new().flexible(true).from_reader(std::io::BufReader::new(file));
    let header: Vec<String> = reader
        .headers()
        .map_err(|e| DataError::BadFile { path: path.into(), reason: format!("header: {e}") })?
        .iter()
        .map(str::to_string)
        .collect();
    let mut values = Vec::new();
    let mut row = Vec::with_capacity(header.len());
    for (n, record) in reader.records().enumerate() {
        let (line, record) = sized_record(n, record, header.len());
        let parsed = record.and_then(|rec| {
            row.clear();
            for (v, name) in rec.iter().zip(&header) {
                row.push(parse_feature(v, name)?);
            }
            Ok(())
        });
        match parsed {
            Ok(()) => values.extend_from_slice(&row),
            Err(reason) => bad_row(path, line, reason, skip_bad_rows, skipped)?,
        }
    }
    Ok((header, values))
}

pub fn load_dir(dir: &Path, skip_bad_rows: bool) -> Result<TaskSet, DataError> {
    let files = discover(dir)?;
    let mut names: Option<Vec<String>> = None;
    let mut tasks: BTreeMap<String, Task> = BTreeMap::new();
    let mut skipped = 0;
    for f in &files {
        let (header, values) = read_feature_csv(&f.path, skip_bad_rows, &mut skipped)?;
        match &names {
            None => names = Some(header.clone()),
            Some(n) if *n != header => {
                return Err(DataError::BadFile {
                    path: f.path.clone(),
                    reason: "header differs from the other files".into(),
                })
            }
            Some(_) => {}
        }
        let task = tasks.entry(f.device.clone()).or_insert_with(|| Task::new(f.device.clone()));
        let rows = values.len() / header.len().max(1);
        task.x.extend_from_slice(&values);
        task.labels.extend(std::iter::repeat_n(f.label(), rows));
    }
    Ok(TaskSet {
        feature_names: names.unwrap_or_default(),
        tasks: tasks.into_values().collect(),
        skipped_rows: skipped,
    })
}
