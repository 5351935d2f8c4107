//! `metapu-lab real-traffic` as the experiments run it: an infected real capture
//! streamed through the daemon's pipeline, onboarded and not.

use std::path::Path;

use metapu::data::split::Split;
use metapu::data::{csv_tasks, Label};

use crate::support::{aria_icmp_sweep, lab_binary, repo};

#[test]
fn the_real_traffic_experiment_streams_an_infected_device_through_the_pipeline() {
    let dir = tempfile::tempdir().unwrap();
    let captures = dir.path().join("captures");
    std::fs::create_dir(&captures).unwrap();
    aria_icmp_sweep(&captures);
    let model = repo().join("models/iot-default.safetensors");
    let lab = |labeled: &str, results: &Path| {
        let run = std::process::Command::new(lab_binary())
            .args([
                "real-traffic",
                "--captures",
                captures.to_str().unwrap(),
                "--model",
                model.to_str().unwrap(),
            ])
            .args(["--out", results.to_str().unwrap(), "--labeled", labeled, "--min-rows", "30"])
            .output()
            .unwrap();
        assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
        let report: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(results.join("stream.json")).unwrap()).unwrap();
        report["devices"][0].clone()
    };

    let onboarded = dir.path().join("onboarded");
    let d = lab("10", &onboarded);
    let set = csv_tasks::load(&onboarded.join("real.csv"), false).unwrap();
    let task = &set.tasks[0];
    let (benign, attack) = (task.indices_of(Label::Positive).len(), task.indices_of(Label::Negative).len());
    assert_eq!(attack, 37, "every sweep packet involves the device");
    assert_eq!(d["benign"].as_u64().unwrap() as usize, benign - 10, "the 10 labeled records are not counted");
    assert_eq!(d["attack"].as_u64().unwrap() as usize, attack);
    assert!(d["attack_alerts"].as_u64().unwrap() > 0 && d["first_alert"].as_u64().is_some(), "{d}");
    assert_eq!(d["attack_unscored"], 0, "adapted long before the attack: {d}");
    let scores = std::fs::read_to_string(onboarded.join("scores-ours.csv")).unwrap();
    assert_eq!(scores.lines().count(), 1 + benign + attack);
    let split = Split::load(&onboarded.join("real.split.json")).unwrap();
    assert_eq!(split.target, ["aria.icmp-sweep"]);

    // No record labeled normal: the device never gets a classifier, nothing is scored.
    let d = lab("0", &dir.path().join("unlabeled"));
    assert_eq!(
        (d["benign_unscored"].clone(), d["attack_unscored"].as_u64()),
        (d["benign"].clone(), Some(37))
    );
    assert_eq!((d["benign_alerts"].as_u64(), d["attack_alerts"].as_u64()), (Some(0), Some(0)));
    assert!(d["first_alert"].is_null());
}
