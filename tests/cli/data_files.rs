//! Loading labeled-task CSVs and N-BaIoT directories, with their documented errors.

use std::path::{Path, PathBuf};

use metapu::data::{DataError, Label, TaskSet};

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(&p, text).unwrap();
    p
}

fn real_rows() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("data/nbaiot/raw")
}

#[test]
fn labeled_task_csv_loads_tasks_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let p = write(dir.path(), "t.csv", "a,task,label,b\n1,x,1,2\n3,y,0,4\n5,x,,6\n");
    let set = TaskSet::load(&p, false).unwrap();
    assert_eq!(set.feature_names, ["a", "b"]);
    assert_eq!(set.tasks.len(), 2);
    assert_eq!(set.tasks[0].id, "x");
    assert_eq!(set.tasks[0].x, [1.0, 2.0, 5.0, 6.0]);
    assert_eq!(set.tasks[0].labels, [Label::Positive, Label::Unlabeled]);
    assert_eq!(set.tasks[1].labels, [Label::Negative]);
}

#[test]
fn bad_csv_rows_name_file_line_and_reason() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        ("task,label,a,b\nx,1,1,2\nx,1,oops,2\n", 3, "'oops' is not a number"),
        ("task,label,a,b\nx,1,1,2\nx,1,1\n", 3, "3 columns, the header has 4"),
        ("task,label,a,b\nx,1,1,2\nx,1,1,2\nx,1,NaN,2\n", 4, "not finite"),
        ("task,label,a,b\nx,1,inf,2\nx,1,1,2\n", 2, "not finite"),
        ("task,label,a,b\nx,7,1,2\nx,0,1,2\n", 2, "label '7'"),
    ];
    for (i, (text, line, reason)) in cases.iter().enumerate() {
        let p = write(dir.path(), &format!("bad{i}.csv"), text);
        let err = TaskSet::load(&p, false).unwrap_err();
        match &err {
            DataError::BadRow { line: l, reason: r, .. } => {
                assert_eq!(l, line, "case {i}: {err}");
                assert!(r.contains(reason), "case {i}: {err}");
            }
            other => panic!("case {i}: expected BadRow, got {other}"),
        }
        assert!(err.to_string().starts_with(&format!("{}:{line}:", p.display())), "{err}");
        // With --skip-bad-rows the same file loads, counting what was skipped.
        let set = TaskSet::load(&p, true).unwrap();
        assert_eq!(set.skipped_rows, 1, "case {i}");
        assert!(set.rows() >= 1, "case {i}");
    }
}

#[test]
fn csv_without_task_or_label_column_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let p = write(dir.path(), "t.csv", "id,label,a\nx,1,1\n");
    assert!(TaskSet::load(&p, false).unwrap_err().to_string().contains("no 'task' column"));
    let p = write(dir.path(), "u.csv", "task,label,a\n");
    assert!(TaskSet::load(&p, false).unwrap_err().to_string().contains("no data rows"));
}

#[test]
fn nbaiot_kaggle_layout_loads_the_real_rows() {
    let set = TaskSet::load(&real_rows(), false).expect("data/nbaiot/raw");
    assert_eq!(set.dim(), 115);
    assert_eq!(set.feature_names[0], "MI_dir_L5_weight");
    assert_eq!(set.feature_names[114], "HpHp_L0.01_pcc");
    let ids: Vec<&str> = set.tasks.iter().map(|t| t.id.as_str()).collect();
    assert_eq!(ids, ["danmini_doorbell", "ecobee_thermostat"]);
    let doorbell = &set.tasks[0];
    assert_eq!(doorbell.len(), 3 * 299);
    assert_eq!(doorbell.indices_of(Label::Positive), (0..299).collect::<Vec<_>>(), "benign rows first");
    assert_eq!(doorbell.indices_of(Label::Negative).len(), 2 * 299);
    assert!(set.tasks[1].labels.iter().all(|&l| l == Label::Negative));
}

#[test]
fn nbaiot_uci_layout_loads_the_same_rows() {
    let raw = real_rows();
    let dir = tempfile::tempdir().unwrap();
    let dev = dir.path().join("Danmini_Doorbell");
    std::fs::create_dir_all(dev.join("gafgyt_attacks")).unwrap();
    std::fs::copy(raw.join("danmini_doorbell.benign.csv"), dev.join("benign_traffic.csv")).unwrap();
    std::fs::copy(raw.join("danmini_doorbell.gafgyt.udp.csv"), dev.join("gafgyt_attacks/udp.csv")).unwrap();
    std::fs::copy(raw.join("danmini_doorbell.gafgyt.scan.csv"), dev.join("gafgyt_attacks/scan.csv")).unwrap();
    let uci = TaskSet::load(dir.path(), false).unwrap();
    let kaggle = TaskSet::load(&raw, false).unwrap();
    assert_eq!(uci.tasks.len(), 1);
    assert_eq!(uci.tasks[0].x, kaggle.tasks[0].x, "same rows in the same order");
    assert_eq!(uci.tasks[0].labels, kaggle.tasks[0].labels);
}

#[test]
fn a_directory_without_nbaiot_files_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "notes.txt", "hello");
    assert!(TaskSet::load(dir.path(), false).unwrap_err().to_string().contains("no N-BaIoT files"));
}
