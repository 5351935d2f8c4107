//! `metapu-lab week` as make week-results runs it, on a short real capture: one as it
//! is (no labels: the device's own traffic) and one with a real sweep merged in.

use crate::support::{aria_icmp_sweep, lab, repo, sentinel_device};

#[test]
fn the_week_experiment_reports_false_incidents_and_each_attack() {
    let dir = tempfile::tempdir().unwrap();
    let captures = dir.path().join("captures");
    std::fs::create_dir(&captures).unwrap();
    let (benign, mac) = sentinel_device("Aria");
    std::fs::copy(&benign[0], captures.join("aria.pcap")).unwrap();
    std::fs::write(captures.join("aria.mac"), &mac).unwrap();
    aria_icmp_sweep(&captures);
    let out = dir.path().join("out");
    let model = repo().join("models/iot-default.safetensors");
    let text = lab(&[
        "week",
        "--captures",
        captures.to_str().unwrap(),
        "--model",
        model.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(text.contains("week: aria: ") && text.contains("week: aria.icmp-sweep: "), "{text}");
    let weeks: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("week.json")).unwrap()).unwrap();
    let (clean, attacked) = (&weeks[0], &weeks[1]);
    assert_eq!(clean["capture"], "aria");
    assert_eq!(clean["attack"], 0, "no labels: the device's own traffic");
    assert!(clean["benign_by_day"][0][1].as_u64().unwrap() > 10, "{clean}");
    assert_eq!(attacked["attack"], 37, "every sweep packet involves the device");
    assert!(attacked["benign_hours"].as_f64().unwrap() > 0.0 && attacked["false_incidents"].is_array());
    let hours = clean["false_incident_hours"].as_array().unwrap();
    assert_eq!(hours.len(), clean["false_incidents"].as_array().unwrap().len(), "{clean}");
    assert!(clean["false_reopened"].is_array() && attacked["attack_reopened"].is_boolean(), "{attacked}");

    // Onboarded by time instead: the span's records are known-normal, not measured, and
    // a span past the capture's end leaves nothing to measure and no incident.
    let measured = |span: &str| {
        let out = dir.path().join(format!("out-{span}"));
        let args = ["week", "--captures", captures.to_str().unwrap(), "--model", model.to_str().unwrap()];
        lab(&[&args[..], &["--out", out.to_str().unwrap(), "--onboard-for", span]].concat());
        let weeks: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(out.join("week.json")).unwrap()).unwrap();
        let clean = &weeks[0];
        let benign: u64 =
            clean["benign_by_day"].as_array().unwrap().iter().map(|d| d[1].as_u64().unwrap()).sum();
        (benign, clean["false_incidents"].as_array().unwrap().len())
    };
    let all: u64 = weeks[0]["benign_by_day"].as_array().unwrap().iter().map(|d| d[1].as_u64().unwrap()).sum();
    // An analyst's verdicts go through the daemon's feedback path on capture time (a
    // refused one stops the command).
    let args = ["week", "--captures", captures.to_str().unwrap(), "--model", model.to_str().unwrap()];
    let analyst = dir.path().join("out-analyst");
    lab(&[&args[..], &["--out", analyst.to_str().unwrap(), "--analyst"]].concat());
    assert!(analyst.join("week.json").exists());
    let (short, _) = measured("5");
    assert!(short > 0 && short < all + 10, "{short} of {all}");
    assert_eq!(measured("1000000"), (0, 0));
}
