//! The fan-out look through the real broker, on a real capture: nDPI's 28-packet TCP
//! scan (SYN, FIN, NULL and Xmas probes to a handful of ports) merged into Aria's setup
//! traffic, as `metapu extract` would produce it with each packet's context. The model
//! alone opened no incident on it on any validation device; the look raises one, saying
//! which look and why.

use std::time::Duration;

use crate::support::*;
use metapu::daemon;
use metapu::data::Label;
use metapu::monitor::record;
use metapu::traffic::devices::{parse_mac, Device};
use metapu::traffic::extract::{labeled_device_task, read_labels};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_28_packet_stealth_scan_raises_an_incident_of_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let (benign, mac) = sentinel_device("Aria");
    let capture = dir.path().join("aria.pcap");
    infect(&benign, &mac, &data_dir().join("pcap/ndpi/tcp_scan.pcapng"), &["--start", "0.5"], &capture);
    let labels = read_labels(&capture.with_extension("labels.csv")).unwrap();
    let device = Device { name: "aria".into(), mac: parse_mac(&mac).unwrap() };
    let (task, ts, contexts) = labeled_device_task(&capture, device, labels).unwrap();
    let attack: Vec<usize> = task.indices_of(Label::Negative);
    assert!(!attack.is_empty());

    let broker = Broker::start();
    let boot = broker.bootstrap();
    let mut cfg = daemon_config(&boot, "looks");
    cfg.model.path = repo().join("models/iot-default.safetensors");
    cfg.model.features = 115;
    let daemon = daemon::start(cfg.clone()).await.expect("daemon starts");
    let p = producer(&boot);
    let input = cfg.kafka.input_topics[0].clone();
    let mut known = 0;
    for i in 0..ts.len() {
        // Onboarded with its first 10 benign records, as the lab onboards.
        let normal = task.labels[i] == Label::Positive && known < 10;
        known += usize::from(normal);
        let value = record::encode_with_context("aria", ts[i], task.row(i, 115), normal, Some(&contexts[i]));
        send(&p, &input, Some("aria"), &value).await;
    }
    let raised = |m: &[(Option<String>, Vec<u8>)]| {
        json_values(m).into_iter().find(|e| e["event"] == "opened" && e["raised_by"] == "stealth_scan")
    };
    let got = read_topic(&boot, &cfg.kafka.incidents_topic, Duration::from_secs(60), |m| raised(m).is_some());
    let incident = raised(&got).expect("the scan raised an incident");
    let at = incident["opened_by"]["offset"].as_u64().unwrap() as usize;
    assert!(attack.contains(&at), "opened by attack record {at} (attack: {attack:?})");
    let why = incident["look"]["why"].as_str().unwrap();
    assert!(why.starts_with("stealth scan: 2 TCP packets with flags no connection uses"), "{why}");
    assert_eq!(incident["severity"], "high", "{incident}");
    let body = http_get(daemon.http_addr, "/metrics").1;
    assert!(metric(&body, "metapu_incident_events_total{event=\"opened\"}").is_some_and(|n| n >= 1.0));
    stop(daemon).await;
}

/// A paced SSH password guesser (`metapu datasets attack --kind ssh.bruteforce`, 27
/// connections in its minute, a few hundred bytes each) merged into Aria's setup
/// traffic, extracted as the sensor makes records (the device's MAC known) onto the
/// broker, and the real `metapu run` process: the login-guessing look raises it in its
/// own words, where the model alerts on almost none of its records.
#[test]
fn a_password_guesser_is_raised_through_metapu_run() {
    let dir = tempfile::tempdir().unwrap();
    let guesser = dir.path().join("ssh.pcap");
    metapu(&[
        "datasets",
        "attack",
        "--kind",
        "ssh.bruteforce",
        "--duration",
        "60",
        "--out",
        guesser.to_str().unwrap(),
    ]);
    let (benign, mac) = sentinel_device("Aria");
    let capture = dir.path().join("aria.pcap");
    infect(&benign, &mac, &guesser, &["--concatenate", "--start", "0.5"], &capture);

    let broker = Broker::start();
    let boot = broker.bootstrap();
    let http_port = free_port();
    let mut cfg = daemon_config(&boot, "guesser");
    cfg.http.listen = format!("127.0.0.1:{http_port}");
    cfg.model.path = repo().join("models/iot-default.safetensors");
    cfg.model.features = 115;
    // Onboarded by its first records, as a new device may be, with production's learning
    // period: the clouds Aria reaches in its first minutes are its own, not strangers.
    cfg.windows.bootstrap_positives = 10;
    cfg.incidents.learning_period_s = 3_600;
    let config = write_config(&cfg, dir.path());
    let _daemon = metapu_with_config("run", &config);
    let addr: std::net::SocketAddr = format!("127.0.0.1:{http_port}").parse().unwrap();
    let ready_by = std::time::Instant::now() + Duration::from_secs(60);
    let ready = || std::net::TcpStream::connect(addr).is_ok() && http_get(addr, "/readyz").0 == 200;
    while !ready() && std::time::Instant::now() < ready_by {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(ready(), "never ready");
    let input = &cfg.kafka.input_topics[0];
    metapu(&[
        "extract",
        "--pcap",
        capture.to_str().unwrap(),
        "--device-mac",
        &mac,
        "--topic",
        input,
        "--brokers",
        &boot,
    ]);

    let raised = |m: &[(Option<String>, Vec<u8>)]| {
        json_values(m).into_iter().find(|e| e["event"] == "opened" && e["raised_by"] == "login_guessing")
    };
    let got = read_topic(&boot, &cfg.kafka.incidents_topic, Duration::from_secs(90), |m| raised(m).is_some());
    let Some(incident) = raised(&got) else {
        let seen: Vec<String> = json_values(&got)
            .iter()
            .map(|e| format!("{} {} {}", e["event"], e["raised_by"], e["summary"]))
            .collect();
        panic!("the guesser raised no incident: {seen:#?}")
    };
    let why = incident["look"]["why"].as_str().unwrap();
    assert!(why.starts_with("login guessing: opened 5 connections to "), "{why}");
    assert!(why.contains("on 22/tcp (ssh)") && why.contains("a login service it never used"), "{why}");
    let body = http_get(addr, "/metrics").1;
    assert!(
        metric(&body, "metapu_incident_events_total{event=\"opened\"}").is_some_and(|n| n >= 1.0),
        "{body}"
    );
}
