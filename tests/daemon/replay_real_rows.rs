//! The recorded real N-BaIoT rows (Danmini doorbell: benign, then BASHLITE udp and
//! scan) replayed by `metapu replay` through the bundled broker into the daemon with
//! the shipped default IoT model: per-record decisions give TPR, FPR and detection
//! latency, which must stay within the bounds docs/results.md states.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::support::*;
use metapu::daemon;
use metapu::daemon::config::DaemonConfig;

const BENIGN: usize = 299;
const UDP: usize = 299;
const SCAN: usize = 299;
const LABELED: usize = 50;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_doorbell_rows_detected_through_broker_and_daemon() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let broker = Broker::start();
    let cfg = doorbell_config(&broker.bootstrap(), "realrows", root.join("models/iot-default.safetensors"));
    let daemon = daemon::start(cfg.clone()).await.expect("daemon starts");
    replay_and_check(&broker.bootstrap(), &cfg, Path::new(env!("CARGO_BIN_EXE_metapu")), false).await;
    stop(daemon).await;
}

/// `make package-test`: the same with the daemon and `replay` run from the unpacked .deb
/// (`METAPU_PACKAGED_ROOT`) in an environment that holds no venv, no LIBTORCH and no Rust.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "make package-test runs it on the unpacked package"]
async fn packaged_binary_detects_real_doorbell_rows() {
    let tree = PathBuf::from(
        std::env::var("METAPU_PACKAGED_ROOT")
            .expect("METAPU_PACKAGED_ROOT: the unpacked .deb (make package-test)"),
    );
    let bin = tree.join("usr/bin/metapu");
    let broker = Broker::start();
    let cfg = doorbell_config(
        &broker.bootstrap(),
        "packaged",
        tree.join("usr/share/metapu/models/iot-default.safetensors"),
    );
    let dir = tempfile::tempdir().unwrap();
    let (config, log) = (dir.path().join("metapu.toml"), dir.path().join("daemon.log"));
    std::fs::write(&config, cfg.to_toml()).unwrap();
    let mut daemon = KillOnDrop(
        Command::new(&bin)
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .arg("run")
            .arg("--config")
            .arg(&config)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("the packaged metapu starts"),
    );
    replay_and_check(&broker.bootstrap(), &cfg, &bin, true).await;
    signal(daemon.0.id(), "-TERM");
    let status = daemon.0.wait().unwrap();
    assert!(status.success(), "daemon exit {status}: {}", std::fs::read_to_string(&log).unwrap_or_default());
}

fn doorbell_config(bootstrap: &str, tag: &str, model: PathBuf) -> DaemonConfig {
    let mut cfg = daemon_config(bootstrap, tag);
    cfg.model.path = model;
    cfg.model.features = 115;
    cfg
}

/// Replay Danmini's rows with `metapu_bin replay` into the daemon under test and hold
/// its decisions to the bounds docs/results.md states.
async fn replay_and_check(boot: &str, cfg: &DaemonConfig, metapu_bin: &Path, clean_env: bool) {
    let raw = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/nbaiot/raw");
    let boot = boot.to_string();
    let input = cfg.kafka.input_topics[0].clone();
    // Replay into a running consumer, as live traffic arrives: one probe record first,
    // scored once the daemon holds the partitions. (A backlog of one device larger
    // than `scoring.max_per_device` per micro-batch would be shed by design.)
    let p = producer(&boot);
    send_record(&p, &input, "probe", 0.0, &[0.0; 115], true).await;
    let probe = read_topic(&boot, &cfg.kafka.scores_topic, Duration::from_secs(60), |m| !m.is_empty());
    assert!(!probe.is_empty(), "the daemon consumes");

    let files =
        ["benign", "gafgyt.udp", "gafgyt.scan"].map(|c| raw.join(format!("danmini_doorbell.{c}.csv")));
    let mut replay = Command::new(metapu_bin);
    if clean_env {
        replay.env_clear().env("PATH", "/usr/bin:/bin");
    }
    let out = replay
        .args(["replay", "--topic", &input, "--brokers", &boot, "--rate", "300"])
        .args(["--label-first", &LABELED.to_string()])
        .args(["--schedule", "danmini:benign,gafgyt.udp,gafgyt.scan"])
        .args(&files)
        .output()
        .expect("metapu replay runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "replay failed: {stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains(&format!("897 records delivered to {input}, 0 failed")), "{stdout}");

    // Every record's decision, by its offset (= its place in the replay: one device,
    // one partition, one producer).
    let total = BENIGN + UDP + SCAN;
    let scores = read_topic(&boot, &cfg.kafka.scores_topic, Duration::from_secs(60), |m| {
        json_values(m).iter().filter(|v| v["device"] != "probe").count() >= total
    });
    let mut decision: BTreeMap<usize, String> = BTreeMap::new();
    for v in json_values(&scores).into_iter().filter(|v| v["device"] != "probe") {
        assert_eq!(v["device"], "danmini_doorbell");
        decision.insert(
            v["source"]["offset"].as_i64().unwrap() as usize,
            v["decision"].as_str().unwrap().to_string(),
        );
    }
    if decision.len() != total {
        let dead = read_topic(&boot, &cfg.kafka.deadletter_topic, Duration::from_secs(5), |m| !m.is_empty());
        panic!(
            "{} of {total} records scored; dead letters: {:?}",
            decision.len(),
            json_values(&dead).first()
        );
    }
    let anomalous = |i: &usize| decision[i] == "anomalous";
    let unknown = decision.values().filter(|d| *d == "unknown").count();
    // Benign records after the labeled ones (those are known normal by construction).
    let benign: Vec<usize> = (LABELED..BENIGN).collect();
    let attack: Vec<usize> = (BENIGN..total).collect();
    let fpr = benign.iter().filter(|i| anomalous(i)).count() as f64 / benign.len() as f64;
    let tpr = attack.iter().filter(|i| anomalous(i)).count() as f64 / attack.len() as f64;
    let tpr_udp = (BENIGN..BENIGN + UDP).filter(anomalous).count() as f64 / UDP as f64;
    let tpr_scan = (BENIGN + UDP..total).filter(anomalous).count() as f64 / SCAN as f64;
    let latency = attack.iter().position(anomalous).expect("some attack record alerts");
    let alerts = read_topic(&boot, &cfg.kafka.alerts_topic, Duration::from_secs(20), |m| {
        m.len() >= decision.values().filter(|d| *d == "anomalous").count()
    });
    println!(
        "real rows: TPR {tpr:.3} (udp {tpr_udp:.3}, scan {tpr_scan:.3}), FPR {fpr:.3}, \
         latency {latency} records, unknown {unknown}, alerts {}",
        alerts.len()
    );
    // Bounds stated in docs/results.md. The first record is labeled normal, so the
    // device is adapted before its first record is scored: none is left unknown.
    assert_eq!(unknown, 0, "records left unscored");
    assert!(tpr >= 0.90, "TPR {tpr:.3}");
    assert!(fpr <= 0.05, "FPR {fpr:.3}");
    // Issue #37's goal is the first alert within 10 attack records. The shipped model
    // catches this flood once an adaptation has seen some of it (the burst test below:
    // none of it before), so the first alert comes within one adaptation interval
    // (100 ms: 30 records at 300 records/s) and 10 records more; measured 8 and 14, the
    // model before alerted at record 1 (docs/experiments/2026-11-27-benchmark-devices-as-sources.md).
    assert!(latency <= 40, "first alert {latency} records after the attack began");
    assert_eq!(
        alerts.len(),
        decision.values().filter(|d| *d == "anomalous").count(),
        "one alert per anomalous record"
    );
    // Incidents (issue #38's measure): one or two, opened during the attack only. The
    // goal, the first within 10 attack records, is not met with the rules chosen on the
    // validation devices (6 of 10): its incident opened at attack record 13 (11 with
    // the model before; docs/results.md). The bound is the first alert's, plus 10.
    let incidents = read_topic(&boot, &cfg.kafka.incidents_topic, Duration::from_secs(10), |m| {
        json_values(m).iter().any(|v| v["event"] == "opened")
    });
    let events = json_values(&incidents);
    let first = events.iter().find(|v| v["event"] == "opened").expect("an incident");
    println!("real rows: {}", first["summary"]);
    let top = first["top_features"].as_array().expect("top features");
    assert_eq!(top.len(), 5, "{first}");
    for f in top {
        println!("real rows:   {} ({:.1}): {}", f["feature"], f["deviation"].as_f64().unwrap(), f["words"]);
        assert!(f["words"].as_str().is_some_and(|w| w.contains("window")), "{f}");
    }
    let opened: Vec<usize> = events
        .iter()
        .filter(|v| v["event"] == "opened" && v["device"] == "danmini_doorbell")
        .map(|v| v["opened_by"]["offset"].as_i64().unwrap() as usize)
        .collect();
    println!("real rows: incidents opened by records {opened:?}");
    assert!((1..=2).contains(&opened.len()), "{} incidents", opened.len());
    assert!(opened.iter().all(|&i| i >= BENIGN), "an incident during benign traffic: {opened:?}");
    assert!(opened[0] < BENIGN + 50, "first incident at record {}", opened[0]);
}

/// A fresh daemon, then every real row in one burst: Danmini's benign rows (the first 5
/// labeled normal), its BASHLITE udp and scan rows, and the Ecobee's Mirai rows, which
/// come with no known-normal record. Danmini is adapted before its first records are
/// scored (none is left `unknown`) and its attack is detected; the Ecobee is reported
/// once as unmonitored and counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_is_scored_and_a_device_without_normal_traffic_is_reported() {
    const ECOBEE: usize = 299;
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let broker = Broker::start();
    let boot = broker.bootstrap();
    let mut cfg = doorbell_config(&boot, "burst", root.join("models/iot-default.safetensors"));
    cfg.incidents.unmonitored_after_s = 1;
    // Background adaptation far off: whatever is scored was adapted before scoring.
    cfg.adaptation.interval_ms = 600_000;
    let daemon = daemon::start(cfg.clone()).await.expect("daemon starts");

    let raw = root.join("data/nbaiot/raw");
    let out = Command::new(env!("CARGO_BIN_EXE_metapu"))
        .args(["replay", "--topic", &cfg.kafka.input_topics[0], "--brokers", &boot, "--rate", "0"])
        .args(["--label-first", "5", "--schedule", "danmini:benign,gafgyt.udp,gafgyt.scan"])
        .args(
            ["danmini_doorbell.benign", "danmini_doorbell.gafgyt.udp", "danmini_doorbell.gafgyt.scan"]
                .map(|f| raw.join(format!("{f}.csv"))),
        )
        .arg(raw.join("ecobee_thermostat.mirai.udp.csv"))
        .output()
        .expect("metapu replay runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "replay failed: {stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let total = BENIGN + UDP + SCAN + ECOBEE;
    assert!(stdout.contains(&format!("{total} records delivered")), "{stdout}");

    let scores = read_topic(&boot, &cfg.kafka.scores_topic, Duration::from_secs(90), |m| m.len() >= total);
    let mut by_device: BTreeMap<String, Vec<(i64, String)>> = BTreeMap::new();
    for v in json_values(&scores) {
        by_device
            .entry(v["device"].as_str().unwrap().to_string())
            .or_default()
            .push((v["source"]["offset"].as_i64().unwrap(), v["decision"].as_str().unwrap().to_string()));
    }
    let mut danmini = by_device.remove("danmini_doorbell").expect("danmini scored");
    danmini.sort();
    danmini.dedup();
    // Danmini's record index by offset (the two devices share the input partition).
    let danmini_index: BTreeMap<i64, usize> = danmini.iter().enumerate().map(|(i, (o, _))| (*o, i)).collect();
    let danmini: Vec<String> = danmini.into_iter().map(|(_, decision)| decision).collect();
    let ecobee = by_device.remove("ecobee_thermostat").expect("ecobee scored");
    assert_eq!(danmini.len(), BENIGN + UDP + SCAN, "every danmini record scored once");
    assert_eq!(ecobee.len(), ECOBEE, "every ecobee record has its decision");
    let unknown = danmini.iter().filter(|d| *d == "unknown").count();
    assert_eq!(unknown, 0, "danmini records left unscored in the burst");
    let rate = |rows: &[String]| rows.iter().filter(|d| *d == "anomalous").count() as f64 / rows.len() as f64;
    let (tpr, fpr) = (rate(&danmini[BENIGN..]), rate(&danmini[5..BENIGN]));
    let benign_alerts: Vec<usize> = (0..BENIGN).filter(|&i| danmini[i] == "anomalous").collect();
    println!("burst: danmini TPR {tpr:.3}, FPR {fpr:.3}; benign records anomalous: {benign_alerts:?}");
    // With no re-adaptation, every record is scored by the state adapted on the benign
    // rows alone. The scan still stands out. The UDP flood rows are caught only once an
    // adaptation has seen some (the test above: 0.97 with adaptation every 100 ms); the
    // shipped model caught them before any had arrived until it was trained on real
    // devices (docs/experiments/2026-11-27-benchmark-devices-as-sources.md).
    let (udp_tpr, scan_tpr) = (rate(&danmini[BENIGN..BENIGN + UDP]), rate(&danmini[BENIGN + UDP..]));
    println!("burst: udp TPR {udp_tpr:.3}, scan TPR {scan_tpr:.3}");
    assert!(scan_tpr >= 0.9, "scan TPR {scan_tpr:.3}");
    assert!(ecobee.iter().all(|(_, d)| d == "unknown"), "a device with no known-normal record is not scored");

    let unmonitored = |m: &[(Option<String>, Vec<u8>)]| {
        json_values(m).into_iter().filter(|v| v["event"] == "unmonitored").collect::<Vec<_>>()
    };
    let incidents = read_topic(&boot, &cfg.kafka.incidents_topic, Duration::from_secs(30), |m| {
        !unmonitored(m).is_empty()
    });
    // Everything arrives within quiet_s, so Danmini has one incident, open by its 20th
    // scan record at the latest, as the test above bounds it (measured: the 12th). With
    // 5 known-normal records a short run of its benign records may be anomalous and open
    // it early: printed above.
    let opened: Vec<_> = json_values(&incidents).into_iter().filter(|v| v["event"] == "opened").collect();
    assert_eq!(opened.len(), 1, "{opened:?}");
    assert_eq!(opened[0]["device"], "danmini_doorbell");
    let by = danmini_index[&opened[0]["opened_by"]["offset"].as_i64().unwrap()];
    println!("burst: danmini's incident opened by its record {by}");
    assert!(by < BENIGN + UDP + 20, "opened by danmini's record {by}, after the scan's first 20");
    let events = unmonitored(&incidents);
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(
        (events[0]["event"].as_str(), events[0]["device"].as_str()),
        (Some("unmonitored"), Some("ecobee_thermostat"))
    );
    assert_eq!(events[0]["records"], ECOBEE as u64);
    assert!(events[0]["message"].as_str().unwrap().contains("labeled normal"), "{}", events[0]);
    let body = http_get(daemon.http_addr, "/metrics").1;
    assert_eq!(metric(&body, "metapu_devices_unmonitored"), Some(1.0), "{body}");
    assert_eq!(metric(&body, "metapu_incident_events_total{event=\"unmonitored\"}"), Some(1.0));
    // Reported once: a second look finds nothing new.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let again =
        read_topic(&boot, &cfg.kafka.incidents_topic, Duration::from_secs(3), |m| unmonitored(m).len() > 1);
    assert_eq!(unmonitored(&again).len(), 1, "the unmonitored device was reported again");
    stop(daemon).await;
}
