//! `metapu train` as a model builder runs it, its output piped (as under a journal):
//! progress as log lines with the time left, the preprocessing it chose from the data,
//! and a closing line that compares the model with nnPU on its validation episodes.

use metapu::data::split::Split;
use metapu::model::{file, PreprocessKind};

use crate::support::metapu;

#[test]
fn train_logs_its_progress_and_compares_the_model_with_nnpu() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("syn.csv");
    metapu(&["datasets", "synthetic", "--seed", "3", "--out", data.to_str().unwrap()]);
    // A few of the split's tasks keep the run short: 20 sources, 2 validation tasks.
    let split = Split::load(&dir.path().join("syn.split.json")).unwrap();
    let model = dir.path().join("m.safetensors");
    let run = std::process::Command::new(crate::support::metapu_binary())
        .args(["train", "--data", data.to_str().unwrap(), "--out", model.to_str().unwrap()])
        .args(["--source", &split.source[..20].join(","), "--validation", &split.validation[..2].join(",")])
        .args(["--iterations", "100", "--eval-every", "50"])
        .output()
        .unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&run.stdout), String::from_utf8_lossy(&run.stderr));
    assert!(run.status.success(), "{stderr}");
    // Two validations, each a log line with where it stands and the time left.
    let lines: Vec<&str> = stderr.lines().filter(|l| l.contains("validation_accuracy")).collect();
    assert_eq!(lines.len(), 2, "{stderr}");
    assert!(lines[0].contains("iteration=\"50/100\"") && lines[0].contains("left="), "{}", lines[0]);
    // Synthetic features are on a small scale: no preprocessing was chosen.
    assert!(stderr.contains("preprocess=None"), "{stderr}");
    assert_eq!(file::load(&model, tch::Device::Cpu).unwrap().preprocess.kind, PreprocessKind::None);
    let last = stdout.lines().last().unwrap_or_default();
    assert!(last.starts_with("on 24 validation episodes: ours "), "{stdout}");
    assert!(last.contains("nnPU given ours' prior estimate") && last.contains(" points: "), "{last}");
}
