//! The labeled-task CSV: a header; a `task` column (id); a `label` column
//! (1 = positive/normal, 0 = negative/anomalous, empty = unlabeled); every other
//! column a numeric feature, in the same order in every row.

use std::collections::HashMap;
use std::io::Write;
use std::path::Path;

use super::{DataError, Label, Task, TaskSet};

pub fn parse_label(s: &str) -> Option<Label> {
    match s.trim() {
        "1" => Some(Label::Positive),
        "0" => Some(Label::Negative),
        "" => Some(Label::Unlabeled),
        _ => None,
    }
}

/// Parse a finite f32, with a reason on failure.
pub fn parse_feature(s: &str, column: &str) -> Result<f32, String> {
    let v: f32 = s.trim().parse().map_err(|_| format!("column {column}: '{s}' is not a number"))?;
    if v.is_finite() {
        Ok(v)
    } else {
        Err(format!("column {column}: {s} is not finite"))
    }
}

/// One CSV record checked against the header's column count, with its line number for
/// messages (the header is line 1; counted when the reader gives no position).
pub fn sized_record(
    index: usize,
    record: csv::Result<csv::StringRecord>,
    columns: usize,
) -> (u64, Result<csv::StringRecord, String>) {
    let counted = index as u64 + 2;
    match record {
        Err(e) => (counted, Err(e.to_string())),
        Ok(rec) => {
            let line = rec.position().map_or(counted, |p| p.line());
            if rec.len() == columns {
                (line, Ok(rec))
            } else {
                (line, Err(format!("{} columns, the header has {columns}", rec.len())))
            }
        }
    }
}

/// A bad row: with `skip`, logged and counted; otherwise the load's error.
pub fn bad_row(
    path: &Path,
    line: u64,
    reason: String,
    skip: bool,
    skipped: &mut usize,
) -> Result<(), DataError> {
    if !skip {
        return Err(DataError::BadRow { path: path.into(), line, reason });
    }
    tracing::warn!(file = %path.display(), line, reason, "skipping bad row");
    *skipped += 1;
    Ok(())
}

pub fn load(path: &Path, skip_bad_rows: bool) -> Result<TaskSet, DataError> {
    let file = std::fs::File::open(path).map_err(|source| DataError::Io { path: path.into(), source })?;
    let mut reader = csv::ReaderBuilder::new().flexible(true).from_reader(std::io::BufReader::new(file));
    let bad_file = |reason: String| DataError::BadFile { path: path.into(), reason };
    let header = reader.headers().map_err(|e| bad_file(format!("header: {e}")))?.clone();
    let task_col =
        header.iter().position(|c| c == "task").ok_or_else(|| bad_file("no 'task' column".into()))?;
    let label_col =
        header.iter().position(|c| c == "label").ok_or_else(|| bad_file("no 'label' column".into()))?;
    let feature_cols: Vec<usize> = (0..header.len()).filter(|&c| c != task_col && c != label_col).collect();
    if feature_cols.is_empty() {
        return Err(bad_file("no feature columns".into()));
    }
    let feature_names: Vec<String> = feature_cols.iter().map(|&c| header[c].to_string()).collect();

    let mut tasks: Vec<Task> = Vec::new();
    let mut index: HashMap<String, usize> = HashMap::new();
    let mut skipped = 0;
    let mut row = Vec::with_capacity(feature_cols.len());
    for (n, record) in reader.records().enumerate() {
        let (line, record) = sized_record(n, record, header.len());
        let parsed = record.and_then(|rec| {
            let label = parse_label(&rec[label_col])
                .ok_or_else(|| format!("label '{}' is not 1, 0 or empty", &rec[label_col]))?;
            row.clear();
            for (&c, name) in feature_cols.iter().zip(&feature_names) {
                row.push(parse_feature(&rec[c], name)?);
            }
            Ok((rec[task_col].to_string(), label))
        });
        match parsed {
            Ok((id, label)) => {
                let i = *index.entry(id.clone()).or_insert_with(|| {
                    tasks.push(Task::new(id));
                    tasks.len() - 1
                });
                tasks[i].x.extend_from_slice(&row);
                tasks[i].labels.push(label);
            }
            Err(reason) => bad_row(path, line, reason, skip_bad_rows, &mut skipped)?,
        }
    }
    if tasks.is_empty() {
        return Err(bad_file("no data rows".into()));
    }
    Ok(TaskSet { feature_names, tasks, skipped_rows: skipped })
}

/// A label as the CSV writes it.
pub fn label_field(label: Label) -> &'static str {
    match label {
        Label::Positive => "1",
        Label::Negative => "0",
        Label::Unlabeled => "",
    }
}

/// The labeled-task CSV's header: `task`, `label`, then the features.
pub fn header(feature_names: &[String]) -> Vec<String> {
    let mut header = vec!["task".to_string(), "label".to_string()];
    header.extend(feature_names.iter().cloned());
    header
}

/// Write tasks as a labeled-task CSV.
pub fn write(set: &TaskSet, out: &mut impl Write) -> std::io::Result<()> {
    write_tasks(&set.feature_names, &set.tasks, out)
}

/// Write tasks of `feature_names.len()` features as a labeled-task CSV.
pub fn write_tasks<'a>(
    feature_names: &[String],
    tasks: impl IntoIterator<Item = &'a Task>,
    out: &mut impl Write,
) -> std::io::Result<()> {
    let mut w = csv::Writer::from_writer(out);
    w.write_record(header(feature_names))?;
    let dim = feature_names.len();
    for t in tasks {
        for i in 0..t.len() {
            let mut rec = vec![t.id.clone(), label_field(t.labels[i]).to_string()];
            rec.extend(t.row(i, dim).iter().map(|v| v.to_string()));
            w.write_record(&rec)?;
        }
    }
    w.flush()
}
