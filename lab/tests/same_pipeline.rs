//! The lab measures the product: one real capture, made infected with a real scan, goes
//! through the daemon (Kafka in, scores and incidents out) and through the lab's
//! streaming evaluation (the capture in place, on its own clock), and both give the
//! same decision on every record and open the same incidents; and so does the shared
//! week of three real devices, through `metapu run` on the bundled broker as deployed.

use std::path::Path;
use std::time::Duration;

use crate::support::*;
use metapu::daemon;
use metapu::daemon::kafka::{self, TopicSpec};
use metapu::data::Label;
use metapu::model::file;
use metapu::monitor::record;
use metapu::traffic::capture::CaptureReader;
use metapu::traffic::devices::{parse_mac, Device};
use metapu::traffic::extract::{labeled_device_task, read_labels};
use metapu_lab::eval::stream::{self, DeviceStream, StreamConfig, STREAM_TOPIC};
use rdkafka::mocking::MockCluster;

/// Aria's setup captures with nDPI's SYN scan from it half-way through (`metapu
/// datasets infect`), as the lab's device stream.
fn infected_aria(dir: &Path) -> DeviceStream {
    let (benign, mac) = sentinel_device("Aria");
    let attack = data_dir().join("pcap/ndpi/synscan.pcap");
    let out = dir.join("aria.pcap");
    infect(&benign, &mac, &attack, &["--start", "0.5"], &out);
    let labels = read_labels(&out.with_extension("labels.csv")).unwrap();
    let device = Device { name: "aria".into(), mac: parse_mac(&mac).unwrap() };
    let (mut task, mut ts, _) = labeled_device_task(&out, device, labels).unwrap();
    // Enough of the scan to open incidents, few enough records for one-record batches.
    let keep = task.indices_of(Label::Positive).len() + 300;
    task.x.truncate(keep * 115);
    task.labels.truncate(keep);
    ts.truncate(keep);
    DeviceStream { task, ts, contexts: Vec::new(), kind: None }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daemon_and_the_lab_decide_alike_on_a_real_capture() {
    let dir = tempfile::tempdir().unwrap();
    let s = infected_aria(dir.path());
    let n = s.ts.len();
    let model_path = repo().join("models/iot-default.safetensors");

    let tag = "same";
    let cluster = MockCluster::new(1).expect("mock cluster");
    cluster.create_topic(STREAM_TOPIC, 1, 1).unwrap();
    for suffix in ["state", "feedback", "alerts", "priors", "deadletter", "scores", "incidents"] {
        cluster.create_topic(&format!("{tag}.{suffix}"), 1, 1).unwrap();
    }
    let boot = cluster.bootstrap_servers();
    let mut cfg = daemon_config(&boot, tag);
    cfg.kafka.input_topics = vec![STREAM_TOPIC.into()];
    cfg.model.path = model_path.clone();
    cfg.model.features = 115;
    // Every record its own micro-batch; adaptation as deployed (the event clock's
    // points on the records' time, which the lab keeps too), not the tests' quicker one.
    cfg.scoring.max_batch = 1;
    cfg.adaptation = daemon::config::DaemonConfig::defaults().adaptation;
    // The daemon's incidents run on its own clock, the lab's on the capture's: with no
    // quiet close, openings depend on the decisions alone.
    cfg.incidents.quiet_s = 1_000_000_000_000;
    let labeled = 10;
    let lab_cfg = StreamConfig::from_daemon(&cfg, labeled);

    // The lab: the capture in place.
    let lab =
        stream::run(file::load(&model_path, tch::Device::Cpu).unwrap(), std::slice::from_ref(&s), &lab_cfg);
    let lab = &lab[0];
    assert!(
        lab.attack > 0 && !lab.opened.is_empty(),
        "the scan opens an incident in the lab: {:?}",
        lab.opened
    );

    // The daemon: the same records through Kafka, the first benign ones labeled normal.
    let daemon = daemon::start(cfg.clone()).await.expect("daemon starts");
    let p = producer(&boot);
    for i in 0..n {
        let row = s.task.row(i, 115);
        send(&p, STREAM_TOPIC, Some("aria"), &record::encode("aria", s.ts[i], row, lab.known[i])).await;
    }
    let scores =
        json_values(&read_topic(&boot, &format!("{tag}.scores"), Duration::from_secs(120), |m| m.len() >= n));
    assert_eq!(scores.len(), n, "every record scored");
    let incidents =
        json_values(&read_topic(&boot, &format!("{tag}.incidents"), Duration::from_secs(20), |m| {
            json_values(m).iter().filter(|e| e["event"] == "opened").count() >= lab.opened.len()
        }));
    daemon.shutdown().await.unwrap();

    let mut differ = Vec::new();
    for (i, sc) in scores.iter().enumerate() {
        assert_eq!(sc["source"]["offset"].as_i64(), Some(i as i64), "in input order");
        let daemon_anomalous = sc["decision"] == "anomalous";
        let lab_score = lab.scores[i];
        let lab_anomalous = !lab_score.is_nan() && 1.0 - lab_score < cfg.model.threshold;
        let close = match sc["score"].as_f64() {
            Some(posterior) => (1.0 - posterior as f32 - lab_score).abs() < 1e-5,
            None => lab_score.is_nan(),
        };
        if daemon_anomalous != lab_anomalous || !close {
            differ.push((i, sc["score"].clone(), lab_score));
        }
    }
    assert!(
        differ.is_empty(),
        "{} of {n} records decided apart: {:?}",
        differ.len(),
        &differ[..differ.len().min(5)]
    );
    let opened: Vec<&str> = incidents
        .iter()
        .filter(|e| e["event"] == "opened")
        .filter_map(|e| e["incident_id"].as_str())
        .collect();
    assert_eq!(opened, lab.opened, "the same incidents, by id");
}

/// The shared week's three real devices (`../shared/data/pcap/week`, as `make
/// week-results` reads them): each capture's records in capture order, every packet
/// benign, the device's own traffic.
fn shared_week() -> Vec<DeviceStream> {
    let dir = repo().join("../shared/data/pcap/week");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| e.ok()?.path().file_stem().map(|s| s.to_string_lossy().into_owned()))
        .collect();
    names.sort();
    names.dedup();
    names
        .iter()
        .map(|name| {
            let pcap = dir.join(format!("{name}.pcap"));
            let mac = std::fs::read_to_string(dir.join(format!("{name}.mac"))).unwrap();
            let mut reader = CaptureReader::open(&pcap).unwrap();
            let mut packets = 0;
            while reader.next_frame().unwrap().is_some() {
                packets += 1;
            }
            let device = Device { name: name.clone(), mac: parse_mac(mac.trim()).unwrap() };
            let (task, ts, contexts) =
                labeled_device_task(&pcap, device, vec![Label::Positive; packets]).unwrap();
            DeviceStream { task, ts, contexts, kind: None }
        })
        .collect()
}

/// The shared week through `metapu run` on the bundled broker — the deployed
/// configuration: event clock, default adaptation, micro-batches and incident rules —
/// and through the lab's streaming, as `metapu-lab week` runs it: every record decided
/// alike, and the same incidents opened on each device, by id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daemon_on_the_broker_and_the_lab_open_the_same_incidents_over_the_shared_week() {
    // Every core kept busy throughout: the daemon lags behind the records it is sent.
    let _busy = load::Load::every_core();
    let streams = shared_week();
    let n: usize = streams.iter().map(|s| s.ts.len()).sum();
    let model_path = repo().join("models/iot-default.safetensors");
    let broker = Broker::start();
    let boot = broker.bootstrap();
    let mut cfg = daemon_config(&boot, "week");
    cfg.kafka.input_topics = vec![STREAM_TOPIC.into()];
    cfg.model.path = model_path.clone();
    cfg.model.features = 115;
    let defaults = daemon::config::DaemonConfig::defaults();
    (cfg.adaptation, cfg.scoring) = (defaults.adaptation, defaults.scoring);
    cfg.incidents.learning_period_s = defaults.incidents.learning_period_s;
    let labeled = 10;
    let lab = stream::run(
        file::load(&model_path, tch::Device::Cpu).unwrap(),
        &streams,
        &StreamConfig::from_daemon(&cfg, labeled),
    );
    assert!(lab.iter().any(|o| !o.opened.is_empty()), "the week opens false incidents in the lab");

    // The same records, device after device as the lab reads them, the first benign
    // ones labeled normal, each device on a partition of its own as in the lab (a
    // partition's stream time is its device's; its offsets are the lab's sources).
    let partitions = TopicSpec::plain(STREAM_TOPIC, streams.len() as i32);
    kafka::ensure_topics(&cfg.kafka, &[partitions], Duration::from_secs(10)).await.unwrap();
    let daemon = daemon::start(cfg.clone()).await.expect("daemon starts");
    let p = producer(&boot);
    let mut pending = Vec::new();
    for (partition, (s, o)) in streams.iter().zip(&lab).enumerate() {
        let id = &s.task.id;
        for i in 0..s.ts.len() {
            let value = record::encode_binary(id, s.ts[i], s.task.row(i, 115), o.known[i], s.contexts.get(i));
            pending.push(value);
            if pending.len() == 2_000 {
                send_all(&p, id, partition as i32, std::mem::take(&mut pending)).await;
            }
        }
        send_all(&p, id, partition as i32, std::mem::take(&mut pending)).await;
    }
    let scores =
        json_values(&read_topic(&boot, &cfg.kafka.scores_topic, Duration::from_secs(600), |m| m.len() >= n));
    assert_eq!(scores.len(), n, "every record scored");
    let opened_of = |m: &[(Option<String>, Vec<u8>)]| {
        json_values(m).into_iter().filter(|e| e["event"] == "opened").collect::<Vec<_>>()
    };
    let lab_opened: usize = lab.iter().map(|o| o.opened.len()).sum();
    let incidents = read_topic(&boot, &cfg.kafka.incidents_topic, Duration::from_secs(30), |m| {
        opened_of(m).len() >= lab_opened
    });
    daemon.shutdown().await.unwrap();

    // A device's records beyond its share of a batch wait for the next: the scores of
    // devices next to each other in the input may interleave, each device's in order.
    for (s, o) in streams.iter().zip(&lab) {
        let id = s.task.id.as_str();
        let mine: Vec<&serde_json::Value> = scores.iter().filter(|sc| sc["device"] == id).collect();
        assert_eq!(mine.len(), s.ts.len(), "{id}: every record scored once");
        let offsets: Vec<i64> = mine.iter().filter_map(|sc| sc["source"]["offset"].as_i64()).collect();
        assert!(offsets.windows(2).all(|w| w[0] < w[1]), "{id}: in input order");
        let anomalous = mine.iter().filter(|sc| sc["decision"] == "anomalous").count();
        let unknown = mine.iter().filter(|sc| sc["decision"] == "unknown").count();
        let lab_unknown = o.decisions.iter().filter(|d| d.is_none()).count();
        assert_eq!((anomalous, unknown), (o.anomalous, lab_unknown), "{id}: anomalous and unscored records");
        let opened: Vec<String> = opened_of(&incidents)
            .iter()
            .filter(|e| e["device"] == id)
            .filter_map(|e| e["incident_id"].as_str().map(str::to_string))
            .collect();
        assert_eq!(opened, o.opened, "{id}: the same incidents, by id");
    }
}

/// Produce `values` under `key`, all in flight at once, in order on `partition`.
async fn send_all(p: &rdkafka::producer::FutureProducer, key: &str, partition: i32, values: Vec<Vec<u8>>) {
    let deliveries: Vec<_> = values
        .iter()
        .map(|v| {
            p.send_result(
                rdkafka::producer::FutureRecord::to(STREAM_TOPIC).key(key).payload(v).partition(partition),
            )
            .unwrap_or_else(|(e, _)| panic!("enqueued: {e}"))
        })
        .collect();
    for d in deliveries {
        d.await.expect("not cancelled").unwrap_or_else(|(e, _)| panic!("delivered: {e}"));
    }
}
