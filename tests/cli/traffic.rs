//! The traffic commands as users run them: a capture through `metapu extract` gives
//! the same rows as AfterImage on the same packets, reads the real captures of
//! data/pcap whatever their format or name, and splits a LAN capture by
//! device; `metapu datasets infect` puts a real scan on a real device; `metapu
//! simulate` is deterministic by seed and writes a split with the held-out types.

use metapu::data::csv_tasks;
use metapu::data::split::Split;
use metapu::data::Label;
use std::path::{Path, PathBuf};

use crate::support::{metapu, metapu_refused};
use metapu::traffic::capture::CaptureReader;
use metapu::traffic::devices::{format_mac, parse_mac};
use metapu::traffic::frame::frame_macs;
use metapu::traffic::pcap::PcapWriter;
use metapu::traffic::simulate::{device_packets, plan, FleetConfig};
use metapu::traffic::{feature_names, AfterImage, Packet};

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
    assert!(err.contains("not a packet capture") && err.contains("notes.pcap"), "{err}");
}

fn pcap_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("data/pcap")
}

/// Every packet record of a capture: (index, seconds, source MAC, destination MAC, packet).
type Record = (u64, f64, Option<u64>, Option<u64>, Option<Packet>);

fn records(path: &Path) -> Vec<Record> {
    let mut r = CaptureReader::open(path).unwrap();
    let mut out = Vec::new();
    while let Some(f) = r.next_frame().unwrap() {
        let (src, dst) = frame_macs(f.link, f.data);
        out.push((f.index, f.ts.seconds(), src, dst, f.packet()));
    }
    out
}

#[test]
fn extract_reads_pcapng_and_captures_whose_names_lie() {
    let dir = tempfile::tempdir().unwrap();
    // upnp.pcap is pcapng and tcp_scan.pcapng classic pcap (the folder's README).
    for (name, packets) in
        [("ndpi/upnp.pcap", 14), ("ndpi/tcp_scan.pcapng", 30), ("ndpi/alexa-app.pcapng", 3103)]
    {
        let path = pcap_dir().join(name);
        let csv = dir.path().join("rows.csv");
        let text = metapu(&["extract", "--pcap", path.to_str().unwrap(), "--out", csv.to_str().unwrap()]);
        assert!(text.contains(&format!("extract: {packets} packets")), "{name}: {text}");
        // Capture times are real dates (2010–2030), not a resolution off by 1000.
        let recs = records(&path);
        assert_eq!(recs.len(), packets, "{name}");
        assert!(recs.iter().all(|r| (1.26e9..1.9e9).contains(&r.1)), "{name}: {:?}", recs[0].1);
        assert!(
            recs.windows(2).filter(|w| w[1].1 < w[0].1).count() < packets / 10,
            "{name}: mostly in time order"
        );
    }
}

#[test]
fn a_cut_short_capture_is_read_and_a_corrupt_one_names_the_byte() {
    let dir = tempfile::tempdir().unwrap();
    let whole = std::fs::read(pcap_dir().join("iot-sentinel/Aria/Setup-A-1-STA.pcap")).unwrap();
    let packets = records(&pcap_dir().join("iot-sentinel/Aria/Setup-A-1-STA.pcap")).len();
    let cut = dir.path().join("cut.pcap");
    std::fs::write(&cut, &whole[..whole.len() - 7]).unwrap();
    let csv = dir.path().join("rows.csv");
    let text = metapu(&["extract", "--pcap", cut.to_str().unwrap(), "--out", csv.to_str().unwrap()]);
    assert!(text.contains(&format!("extract: {} packets", packets - 1)), "{text}");
    assert!(text.contains("cut short"), "{text}");

    // The second record's captured length made absurd.
    let first_len = u32::from_le_bytes(whole[24 + 8..24 + 12].try_into().unwrap()) as usize;
    let second = 24 + 16 + first_len;
    let mut corrupt = whole.clone();
    corrupt[second + 8..second + 12].copy_from_slice(&u32::MAX.to_le_bytes());
    let bad = dir.path().join("corrupt.pcap");
    std::fs::write(&bad, corrupt).unwrap();
    let err = metapu_refused(&["extract", "--pcap", bad.to_str().unwrap(), "--out", csv.to_str().unwrap()]);
    assert!(err.contains("corrupt.pcap") && err.contains(&format!("at byte {second}")), "{err}");
}

/// `tcpdump -w - | metapu extract --pcap - …`: a capture on standard input gives the
/// rows the same capture gives as a file; with no device named it is refused.
#[test]
fn extract_reads_a_capture_from_standard_input() {
    let dir = tempfile::tempdir().unwrap();
    let (captures, mac) = crate::support::sentinel_device("Aria");
    let capture = &captures[0];
    let from_file = dir.path().join("file.csv");
    let from_stdin = dir.path().join("stdin.csv");
    let args = |out: &Path, pcap: &str| -> Vec<String> {
        let out = out.to_str().unwrap().to_string();
        ["extract", "--pcap", pcap, "--device-mac", &mac, "--out", &out].map(String::from).to_vec()
    };
    metapu(&args(&from_file, capture.to_str().unwrap()).iter().map(String::as_str).collect::<Vec<_>>());
    let run = std::process::Command::new(crate::support::metapu_binary())
        .args(args(&from_stdin, "-"))
        .stdin(std::fs::File::open(capture).unwrap())
        .output()
        .unwrap();
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let rows = std::fs::read_to_string(&from_file).unwrap();
    assert!(rows.lines().count() > 10, "{rows}");
    assert_eq!(std::fs::read_to_string(&from_stdin).unwrap(), rows, "the same rows from standard input");
    let err = metapu_refused(&["extract", "--pcap", "-", "--out", from_stdin.to_str().unwrap()]);
    assert!(err.contains("give --device NAME"), "{err}");
}

/// A broker that does not answer: the records are counted as not delivered, the
/// reason said once (not once per record or per reconnect), and the command fails
/// with the count instead of reporting success.
#[test]
fn extract_to_an_unreachable_broker_says_so_once() {
    let (captures, _) = crate::support::sentinel_device("Aria");
    // Port 1: nothing listens there. A port free now may be a broker's by the time
    // extract connects (other tests start brokers on free ports meanwhile).
    let run = std::process::Command::new(crate::support::metapu_binary())
        .args(["extract", "--pcap", captures[0].to_str().unwrap(), "--device", "aria", "--topic", "t"])
        .args(["--brokers", "127.0.0.1:1"])
        .output()
        .unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&run.stdout), String::from_utf8_lossy(&run.stderr));
    assert!(!run.status.success(), "{stdout}");
    let packets = records(&captures[0]).len();
    // One warning for the outage: whichever librdkafka reports first, the refused
    // connection or the records it could not deliver (the order is its threads').
    let said = stderr.matches("cannot reach the brokers").count()
        + stderr.matches("records are not being delivered").count();
    assert_eq!(said, 1, "said once: {stderr}");
    assert!(stderr.lines().count() < 10, "one line per record or per retry? {stderr}");
    assert!(stdout.contains(&format!("0 records delivered to t, {packets} failed")), "{stdout}");
    assert!(stderr.contains(&format!("{packets} records were not delivered to t (")), "{stderr}");
}

#[test]
fn a_lan_capture_is_split_by_device_each_with_its_own_features() {
    let dir = tempfile::tempdir().unwrap();
    let path = pcap_dir().join("kitsune/mirai2000.pcap");
    let recs = records(&path);
    // The two busiest senders of the camera network.
    let mut sent = std::collections::BTreeMap::<u64, usize>::new();
    for r in &recs {
        *sent.entry(r.2.unwrap()).or_default() += 1;
    }
    let mut busiest: Vec<(usize, u64)> = sent.iter().map(|(&m, &n)| (n, m)).collect();
    busiest.sort_unstable_by(|a, b| b.cmp(a));
    let macs = [busiest[0].1, busiest[1].1];
    let devices = dir.path().join("devices.csv");
    std::fs::write(&devices, format!("cam-a,{}\ncam-b,{}\n", format_mac(macs[0]), format_mac(macs[1])))
        .unwrap();
    let csv = dir.path().join("rows.csv");
    let text = metapu(&[
        "extract",
        "--pcap",
        path.to_str().unwrap(),
        "--devices",
        devices.to_str().unwrap(),
        "--out",
        csv.to_str().unwrap(),
    ]);
    let involves = |r: &Record, mac: u64| r.2 == Some(mac) || r.3 == Some(mac);
    let dropped = recs.iter().filter(|r| !involves(r, macs[0]) && !involves(r, macs[1])).count();
    assert!(dropped > 0, "the capture has other hosts");
    assert!(text.contains(&format!("{dropped} of no listed device (dropped)")), "{text}");
    let set = csv_tasks::load(&csv, false).unwrap();
    assert_eq!(set.tasks.iter().map(|t| t.id.as_str()).collect::<Vec<_>>(), ["cam-a", "cam-b"]);
    for (task, mac) in set.tasks.iter().zip(macs) {
        // Each device's rows are AfterImage over its own packets alone.
        let mine: Vec<Packet> = recs.iter().filter(|r| involves(r, mac)).map(|r| r.4.unwrap()).collect();
        assert_eq!(task.len(), mine.len(), "{}", task.id);
        let mut ai = AfterImage::new();
        for (i, p) in mine.iter().enumerate() {
            assert_eq!(task.row(i, 115), ai.row(p).as_slice(), "{} row {i}", task.id);
        }
        assert!(task.labels.iter().all(|&l| l == Label::Unlabeled));
    }
    // To Kafka: the same rows, each device's keyed by its name, in capture order.
    let broker = crate::support::Broker::start();
    let boot = broker.bootstrap();
    metapu(&[
        "extract",
        "--pcap",
        path.to_str().unwrap(),
        "--devices",
        devices.to_str().unwrap(),
        "--topic",
        "lan.features",
        "--brokers",
        &boot,
    ]);
    let total: usize = set.tasks.iter().map(|t| t.len()).sum();
    let got =
        crate::support::read_all_partitions(&boot, "lan.features", std::time::Duration::from_secs(30), total);
    assert_eq!(got.len(), total);
    for task in &set.tasks {
        let mine: Vec<&Vec<u8>> =
            got.iter().filter(|(k, _)| k.as_deref() == Some(task.id.as_str())).map(|(_, v)| v).collect();
        assert_eq!(mine.len(), task.len(), "{}", task.id);
        let first: serde_json::Value = serde_json::from_slice(mine[0]).unwrap();
        assert_eq!(first["device"], task.id.as_str());
        let features: Vec<f32> =
            first["features"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap() as f32).collect();
        assert_eq!(features, task.row(0, 115), "{}: the first row", task.id);
    }
    let err = metapu_refused(&[
        "extract",
        "--pcap",
        path.to_str().unwrap(),
        "--device-mac",
        "00:11:22",
        "--out",
        "x.csv",
    ]);
    assert!(err.contains("'00:11:22' is not a MAC address"), "{err}");
}

#[test]
fn infect_puts_a_real_scan_on_a_device_and_extract_labels_it() {
    let dir = tempfile::tempdir().unwrap();
    let (benign, mac) = crate::support::sentinel_device("Aria");
    let attack = pcap_dir().join("ndpi/synscan.pcap");
    let out = dir.path().join("aria-infected.pcap");
    let text = crate::support::infect(&benign, &mac, &attack, &["--start", "0.5"], &out);
    assert!(text.contains("the attacker 172.16.0.8"), "{text}");

    let benign_count: usize = benign.iter().map(|p| records(p).len()).sum();
    let attack_recs = records(&attack);
    let merged = records(&out);
    assert_eq!(merged.len(), benign_count + attack_recs.len());
    assert!(merged.windows(2).all(|w| w[0].1 <= w[1].1), "merged in time order");
    let scanner = metapu::traffic::packet::host_of_ip("172.16.0.8".parse().unwrap());
    assert!(
        merged.iter().filter_map(|r| r.4).all(|p| p.src != scanner && p.dst != scanner),
        "no trace of the scanner"
    );

    let labels = std::fs::read_to_string(out.with_extension("labels.csv")).unwrap();
    let attack_rows: Vec<usize> = labels
        .lines()
        .skip(1)
        .filter(|l| l.split(',').nth(1) == Some("attack"))
        .map(|l| l.split(',').next().unwrap().parse().unwrap())
        .collect();
    assert_eq!(attack_rows.len(), attack_recs.len());
    // The scan's first packet stands where --start put it: halfway through the benign span.
    let benign_times: Vec<f64> = merged
        .iter()
        .enumerate()
        .filter(|(i, _)| attack_rows.binary_search(i).is_err())
        .map(|(_, r)| r.1)
        .collect();
    let (lo, hi) = (benign_times[0], benign_times[benign_times.len() - 1]);
    assert!((merged[attack_rows[0]].1 - (lo + hi) / 2.0).abs() < 1e-3);
    // And keeps its own timing: every gap between its packets as captured.
    let shifted: Vec<f64> = attack_rows.iter().map(|&i| merged[i].1).collect();
    for (k, (a, b)) in attack_recs.iter().zip(attack_recs.iter().skip(1)).enumerate() {
        let (want, got) = (b.1 - a.1, shifted[k + 1] - shifted[k]);
        assert!((want - got).abs() < 2e-6, "gap {k}: {want} s captured, {got} s merged");
    }

    let csv = dir.path().join("rows.csv");
    let labels_path = out.with_extension("labels.csv");
    metapu(&[
        "extract",
        "--pcap",
        out.to_str().unwrap(),
        "--device-mac",
        &mac,
        "--labels",
        labels_path.to_str().unwrap(),
        "--out",
        csv.to_str().unwrap(),
    ]);
    let set = csv_tasks::load(&csv, false).unwrap();
    assert_eq!(set.tasks.len(), 1);
    let device = parse_mac(&mac).unwrap();
    let is_attack = |i: usize| attack_rows.binary_search(&i).is_ok();
    let mine: Vec<(usize, &Record)> =
        merged.iter().enumerate().filter(|(_, r)| r.2 == Some(device) || r.3 == Some(device)).collect();
    let want: Vec<Label> =
        mine.iter().map(|(i, _)| if is_attack(*i) { Label::Negative } else { Label::Positive }).collect();
    assert_eq!(set.tasks[0].labels, want);
    let attack_rows_kept = want.iter().filter(|&&l| l == Label::Negative).count();
    assert!(attack_rows_kept * 10 >= attack_recs.len() * 9, "{attack_rows_kept} of {}", attack_recs.len());
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
    let broker = crate::support::Broker::start();
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
    let got =
        crate::support::read_all_partitions(&boot, "sim.features", std::time::Duration::from_secs(30), rows);
    assert_eq!(got.len(), rows);
    let values = crate::support::json_values(&got);
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

/// The shared week's camera, extracted as the sensor extracts it (its MAC known): the
/// records of its uploads name its cloud by the name it looked up, whichever of the
/// cloud's addresses (four /16s) answered, and nothing else is named that.
#[test]
fn a_real_cameras_cloud_is_named_by_its_own_lookups_across_its_addresses() {
    use metapu::traffic::context::Direction;
    use metapu::traffic::devices::Device;
    use metapu::traffic::extract::labeled_device_task;
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/data/pcap/week");
    let pcap = dir.join("blink-cam-01.pcap");
    let mac = std::fs::read_to_string(dir.join("blink-cam-01.mac")).unwrap();
    let mut reader = CaptureReader::open(&pcap).unwrap();
    let mut packets = 0;
    while reader.next_frame().unwrap().is_some() {
        packets += 1;
    }
    let device = Device { name: "cam".into(), mac: parse_mac(mac.trim()).unwrap() };
    let (_, _, contexts) = labeled_device_task(&pcap, device, vec![Label::Positive; packets]).unwrap();
    let uploads: Vec<_> =
        contexts.iter().filter(|c| c.proto == 6 && c.direction == Some(Direction::Outbound)).collect();
    let named: Vec<_> = uploads.iter().filter(|c| c.peer_name.is_some()).collect();
    let mut by_name: std::collections::BTreeMap<String, std::collections::BTreeSet<[u8; 2]>> =
        Default::default();
    for c in &named {
        let Some(std::net::IpAddr::V4(peer)) = c.dst_ip else { continue };
        let prefix = [peer.octets()[0], peer.octets()[1]];
        by_name.entry(c.peer_name.as_ref().unwrap().to_string()).or_default().insert(prefix);
    }
    eprintln!("{} of {} outbound TCP records named: {by_name:?}", named.len(), uploads.len());
    let cloud = by_name.iter().max_by_key(|(_, prefixes)| prefixes.len()).expect("a name");
    assert!(cloud.0.ends_with("immedia-semi.com"), "{by_name:?}");
    assert!(cloud.1.len() >= 4, "one name over four /16s: {by_name:?}");
    assert!(named.len() * 10 >= uploads.len() * 9, "{} of {} named", named.len(), uploads.len());
}
