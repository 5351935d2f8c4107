//! The traffic commands as users run them: a capture through `metapu extract` gives
//! the same rows as AfterImage on the same packets; `metapu simulate` is
//! deterministic by seed and writes a split with the held-out types as targets.

mod support;

use metapu::data::csv_tasks;
use metapu::data::split::Split;
use metapu::data::Label;
use metapu::traffic::pcap::PcapWriter;
use metapu::traffic::simulate::{device_packets, plan, FleetConfig};
use metapu::traffic::{feature_names, AfterImage};
use support::{metapu, metapu_refused};

#[test]
fn extract_from_a_capture_matches_afterimage_on_the_same_packets() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = FleetConfig {
        devices: 1,
        duration_s: 90.0,
        seed: 5,
        attacked_share: 1.0,
        attack_start: (0.6, 0.6),
        ..FleetConfig::default()
    };
    let device = &plan(&cfg)[0];
    let mut packets = device_packets(&cfg, device);
    packets.truncate(3000);
    // pcap keeps microseconds: compare on the timestamps it can store.
    for p in &mut packets {
        p.packet.ts = (p.packet.ts * 1e6).round() / 1e6;
    }
    let pcap = dir.path().join("capture.pcap");
    let mut w = PcapWriter::new(std::io::BufWriter::new(std::fs::File::create(&pcap).unwrap())).unwrap();
    for p in &packets {
        w.write(&p.packet, 0x02_00_00_00_00_01, p.proto).unwrap();
    }
    w.finish().unwrap();

    let csv = dir.path().join("rows.csv");
    let text = metapu(&["extract", "--pcap", pcap.to_str().unwrap(), "--out", csv.to_str().unwrap()]);
    assert!(text.contains(&format!("{} packets", packets.len())), "{text}");

    let mut reader = csv::Reader::from_path(&csv).unwrap();
    let header: Vec<String> = reader.headers().unwrap().iter().map(str::to_string).collect();
    assert_eq!(header, feature_names(), "N-BaIoT's header");
    let mut ai = AfterImage::new();
    let mut rows = 0;
    for (rec, p) in reader.records().zip(&packets) {
        let rec = rec.unwrap();
        let want = ai.row(&p.packet);
        let got: Vec<f32> = rec.iter().map(|v| v.parse().unwrap()).collect();
        assert_eq!(got, want, "row {rows}");
        rows += 1;
    }
    assert_eq!(rows, packets.len());
}

#[test]
fn extract_refuses_what_is_not_a_capture() {
    let dir = tempfile::tempdir().unwrap();
    let bogus = dir.path().join("notes.pcap");
    std::fs::write(&bogus, b"this is not a capture at all").unwrap();
    let err = metapu_refused(&[
        "extract",
        "--pcap",
        bogus.to_str().unwrap(),
        "--out",
        dir.path().join("x.csv").to_str().unwrap(),
    ]);
    assert!(err.contains("not a pcap file") && err.contains("notes.pcap"), "{err}");
}

#[test]
fn simulate_is_deterministic_and_splits_by_held_out_type() {
    let dir = tempfile::tempdir().unwrap();
    let run = |name: &str, seed: &str| {
        let out = dir.path().join(format!("{name}.csv"));
        let split = dir.path().join(format!("{name}.split.json"));
        metapu(&[
            "simulate",
            "--devices",
            "10",
            "--duration",
            "2m",
            "--seed",
            seed,
            "--attacked",
            "1",
            "--max-rows-per-class",
            "200",
            "--out",
            out.to_str().unwrap(),
            "--split-out",
            split.to_str().unwrap(),
            "--holdout-types",
            "webcam",
        ]);
        (std::fs::read(&out).unwrap(), out, split)
    };
    let (a, path, split) = run("a", "7");
    let (b, ..) = run("b", "7");
    let (c, ..) = run("c", "8");
    assert_eq!(a, b, "same seed, same bytes");
    assert_ne!(a, c);
    let set = csv_tasks::load(&path, false).unwrap();
    assert_eq!(set.tasks.len(), 10);
    assert_eq!(set.feature_names, feature_names());
    for t in &set.tasks {
        let (pos, neg) = (t.indices_of(Label::Positive).len(), t.indices_of(Label::Negative).len());
        assert!(pos > 0 && pos <= 200 && neg > 0 && neg <= 200, "{}: {pos} benign, {neg} attack rows", t.id);
    }
    let split = Split::load(&split).unwrap();
    assert_eq!(split.target, vec!["webcam-00005".to_string(), "webcam-00010".to_string()]);
    assert_eq!(split.source.len() + split.validation.len(), 8);
    assert!(!split.validation.is_empty());
}

#[test]
fn simulate_feeds_kafka_in_time_order_with_onboarding_labels() {
    let broker = support::Broker::start();
    let boot = broker.bootstrap();
    let text = metapu(&[
        "simulate",
        "--devices",
        "3",
        "--duration",
        "1m",
        "--seed",
        "4",
        "--attacked",
        "1",
        "--max-rows-per-class",
        "20",
        "--label-first",
        "5",
        "--topic",
        "sim.features",
        "--brokers",
        &boot,
    ]);
    let rows: usize = text
        .split_whitespace()
        .zip(text.split_whitespace().skip(1))
        .find_map(|(n, w)| (w == "rows").then(|| n.parse().ok()).flatten())
        .expect("row count printed");
    assert!(text.contains(&format!("{rows} records delivered to sim.features, 0 failed")), "{text}");
    let got = support::read_all_partitions(&boot, "sim.features", std::time::Duration::from_secs(30), rows);
    assert_eq!(got.len(), rows);
    let values = support::json_values(&got);
    let mut last_ts = std::collections::BTreeMap::<String, f64>::new();
    let mut labeled = std::collections::BTreeMap::<String, usize>::new();
    for (v, (key, _)) in values.iter().zip(&got) {
        let device = v["device"].as_str().unwrap();
        assert_eq!(key.as_deref(), Some(device), "keyed by device");
        assert_eq!(v["features"].as_array().unwrap().len(), 115);
        // A device's records arrive in time order (one key, one partition).
        let ts = v["ts"].as_f64().unwrap();
        let last = last_ts.entry(device.to_string()).or_insert(0.0);
        assert!(ts >= *last, "{device}: time order");
        *last = ts;
        *labeled.entry(device.to_string()).or_default() += usize::from(v["label"] == "normal");
    }
    assert_eq!(labeled.len(), 3);
    assert!(labeled.values().all(|&n| n == 5), "{labeled:?}");
}
