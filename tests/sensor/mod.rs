//! `metapu sense` on a real link: each test makes its own network namespace with a veth
//! pair, sends the frames of a real capture (Kitsune's IP-camera network) out of the
//! namespace's end, and the sensor captures the other end, producing to the bundled
//! broker. Needs root and `ip netns` (CI has both); without them a test says why and
//! passes without running.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use metapu::broker::LocalBroker;
use metapu::monitor::record;

use crate::support::veth::{ip, Veth};
use crate::support::{
    data_dir, free_port, http_get, metapu, metapu_binary, metric, notifications, read_all_partitions_until,
    repo, signal, stop, Broker, KillOnDrop,
};

/// The capture sent: 2,000 packets of a camera network, 12 hosts.
fn camera_network() -> PathBuf {
    data_dir().join("pcap/kitsune/mirai2000.pcap")
}

/// Two of its hosts, listed; the others are unlisted.
const DEVICES: &str = "camera,5c:cf:7f:05:f2:c6\nhub,4c:09:d4:c6:12:7b\n";

/// A veth pair, or `None` (the reason printed) where namespaces cannot be made.
fn veth() -> Option<Veth> {
    Veth::make().map_err(|why| eprintln!("sensor test not run: {why}")).ok()
}

/// Send a classic pcap's frames from inside the namespace, a short pause every 20
/// frames (a debug build's extraction is slow, and the test is about the sensor, not
/// the ring's size); the frames sent.
fn send(veth: &Veth, capture: &Path) -> usize {
    let script = repo().join("tests/sensor/send_frames.py");
    let out = Command::new("ip")
        .args(["netns", "exec", &veth.netns, "python3"])
        .arg(&script)
        .arg(&veth.inside)
        .arg(capture)
        .arg("20")
        .output()
        .unwrap();
    assert!(out.status.success(), "sending frames: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}

/// A running `metapu sense`: its stderr lines collected, its metrics address.
struct Sense {
    child: KillOnDrop,
    log: Arc<Mutex<Vec<String>>>,
    metrics: std::net::SocketAddr,
}

impl Sense {
    fn start(interface: &str, brokers: &str, topic: &str, dir: &Path, extra: &[&str]) -> Self {
        Self::start_with(interface, brokers, topic, dir, extra, &[])
    }

    /// With more settings as METAPU__SECTION__KEY variables.
    fn start_with(
        interface: &str,
        brokers: &str,
        topic: &str,
        dir: &Path,
        extra: &[&str],
        settings: &[(&str, &str)],
    ) -> Self {
        let metrics: std::net::SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let devices = dir.join("devices.csv");
        if !devices.exists() {
            std::fs::write(&devices, DEVICES).unwrap();
        }
        let mut child = Command::new(metapu_binary())
            .args(["sense", "--interface", interface, "--devices"])
            .arg(&devices)
            .args(extra)
            .env("METAPU__KAFKA__BROKERS", brokers)
            .env("METAPU__SENSOR__TOPIC", topic)
            .env("METAPU__SENSOR__FORMAT", "json")
            .env("METAPU__SENSOR__LISTEN", metrics.to_string())
            .envs(settings.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        for stream in [
            Box::new(child.stdout.take().unwrap()) as Box<dyn std::io::Read + Send>,
            Box::new(child.stderr.take().unwrap()),
        ] {
            let log = log.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stream).lines().map_while(Result::ok) {
                    log.lock().unwrap().push(line);
                }
            });
        }
        let sense = Self { child: KillOnDrop(child), log, metrics };
        assert!(
            sense.wait_for(Duration::from_secs(30), |l| l.contains("metrics at")),
            "the sensor did not start: {}",
            sense.log()
        );
        sense
    }

    fn log(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }

    fn wait_for(&self, limit: Duration, seen: impl Fn(&str) -> bool) -> bool {
        let started = Instant::now();
        while started.elapsed() < limit {
            if self.log.lock().unwrap().iter().any(|l| seen(l)) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    }

    fn scrape(&self) -> String {
        http_get(self.metrics, "/metrics").1
    }

    fn metric(&self, name: &str) -> f64 {
        metric(&self.scrape(), name).unwrap_or_else(|| panic!("{name} not in /metrics"))
    }

    /// Wait until the sensor has read `packets` packets.
    fn wait_packets(&self, packets: f64) {
        let started = Instant::now();
        while self.metric("metapu_sensor_packets_total") < packets
            && started.elapsed() < Duration::from_secs(60)
        {
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// SIGTERM; the exit status.
    fn stop(mut self) -> (std::process::ExitStatus, String) {
        signal(self.child.0.id(), "-TERM");
        let status = wait_exit(&mut self.child.0, Duration::from_secs(30));
        std::thread::sleep(Duration::from_millis(200));
        (status, self.log())
    }
}

/// The records a stopped sensor said it delivered ("sense: … N records delivered, …").
fn delivered(log: &str) -> usize {
    let summary =
        log.lines().find(|l| l.starts_with("sense:")).unwrap_or_else(|| panic!("no summary: {log}"));
    let before = summary.split(" records delivered").next().unwrap();
    before.rsplit(' ').next().unwrap().parse().unwrap_or_else(|_| panic!("{summary}"))
}

fn wait_exit(child: &mut std::process::Child, limit: Duration) -> std::process::ExitStatus {
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        assert!(started.elapsed() < limit, "the sensor did not exit within {limit:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// An Ethernet frame from `mac` that says IPv4 and stops 10 bytes into the IP header.
fn malformed_from(mac: &str) -> Vec<u8> {
    let mut frame = vec![0xff; 6];
    frame.extend(mac.split(':').map(|b| u8::from_str_radix(b, 16).unwrap()));
    frame.extend([0x08, 0x00, 0x45, 0x00, 0x00, 0x54, 0x00, 0x00, 0x40, 0x00, 0x40, 0x01]);
    frame
}

/// A classic pcap file holding one frame.
fn one_frame_capture(dir: &Path, frame: &[u8]) -> PathBuf {
    let mut bytes = Vec::new();
    for v in [0xa1b2_c3d4u32, 0x0004_0002, 0, 0, 65_535, 1] {
        bytes.extend_from_slice(&v.to_le_bytes());
    }
    for v in [0u32, 0, frame.len() as u32, frame.len() as u32] {
        bytes.extend_from_slice(&v.to_le_bytes());
    }
    bytes.extend_from_slice(frame);
    let path = dir.join("one-frame.pcap");
    std::fs::write(&path, bytes).unwrap();
    path
}

/// Device → its rows (features) in order, from `metapu extract`'s labeled-task CSV.
fn extract_rows(capture: &Path, devices: &Path, dir: &Path) -> BTreeMap<String, Vec<Vec<f32>>> {
    let out = dir.join("extract.csv");
    metapu(
        &["extract", "--pcap", &capture.to_string_lossy(), "--devices", &devices.to_string_lossy(), "--out"]
            .into_iter()
            .chain([out.to_str().unwrap()])
            .collect::<Vec<_>>(),
    );
    let mut rows: BTreeMap<String, Vec<Vec<f32>>> = BTreeMap::new();
    for r in csv::Reader::from_path(&out).unwrap().records() {
        let r = r.unwrap();
        rows.entry(r[0].to_string())
            .or_default()
            .push(r.iter().skip(2).map(|v| v.parse().unwrap()).collect());
    }
    rows
}

/// Device → (ts, features) of the records on a topic, in order.
/// Messages may be batches of a device's records (`sensor.batch_records`).
fn topic_rows(brokers: &str, topic: &str, n: usize) -> BTreeMap<String, Vec<(f64, Vec<f32>)>> {
    let decoded = |key: &Option<String>, value: &[u8]| {
        record::decode_message(key.as_deref().map(str::as_bytes), value, 115, 1 << 20)
    };
    let records = |messages: &[(Option<String>, Vec<u8>)]| -> usize {
        messages.iter().map(|(k, v)| decoded(k, v).len()).sum()
    };
    let messages = read_all_partitions_until(brokers, topic, Duration::from_secs(30), |m| records(m) >= n);
    let mut rows: BTreeMap<String, Vec<(f64, Vec<f32>)>> = BTreeMap::new();
    for (key, value) in &messages {
        for r in decoded(key, value) {
            let r = r.unwrap();
            assert_eq!(key.as_deref(), Some(r.device.as_str()), "records are keyed by device");
            rows.entry(r.device.clone()).or_default().push((r.ts, r.features.clone()));
        }
    }
    let batched = messages.iter().filter(|(_, v)| v.starts_with(record::BATCH_MAGIC)).count();
    assert!(batched > 0, "the default sensor batches a busy device's records");
    rows
}

#[test]
fn every_frame_of_a_listed_device_becomes_the_record_extract_makes_of_it() {
    let Some(veth) = veth() else { return };
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start();
    let saved = dir.path().join("saved.pcap");
    let notify_path = dir.path().join("notify.sock");
    let notify = std::os::unix::net::UnixDatagram::bind(&notify_path).unwrap();
    notify.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
    let systemd = [("NOTIFY_SOCKET", notify_path.to_str().unwrap()), ("WATCHDOG_USEC", "400000")];
    let save = ["--save", saved.to_str().unwrap()];
    let sense = Sense::start_with(&veth.outside, &broker.bootstrap(), "sensed", dir.path(), &save, &systemd);
    let told = notifications(&notify, "WATCHDOG=1", Duration::from_secs(10));
    assert!(told.iter().any(|m| m == "READY=1") && told.iter().any(|m| m == "WATCHDOG=1"), "{told:?}");
    let started = metapu::wall_clock::unix_now();
    let sent = send(&veth, &camera_network());
    assert_eq!(sent, 2000);
    // And a malformed frame from the camera: IPv4 cut short after 10 bytes of header.
    send(&veth, &one_frame_capture(dir.path(), &malformed_from("5c:cf:7f:05:f2:c6")));
    sense.wait_packets(sent as f64 + 1.0);
    let scraped = sense.scrape();
    let (status, log) = sense.stop();
    assert!(status.success(), "SIGTERM ends the sensor with 0: {log}");
    assert!(notifications(&notify, "STOPPING=1", Duration::from_secs(10)).iter().any(|m| m == "STOPPING=1"));
    let summary = log.lines().find(|l| l.starts_with("sense:")).unwrap_or_default().to_string();

    // What the sensor captured is what was sent (the link carries nothing else), none
    // lost; the malformed frame counted and skipped.
    let value = |name| metric(&scraped, name).unwrap_or_else(|| panic!("{name}: {scraped}"));
    assert_eq!(value("metapu_sensor_packets_total"), 2001.0, "{scraped}");
    assert_eq!(value("metapu_sensor_kernel_drops_total"), 0.0, "{scraped}");
    assert_eq!(value("metapu_sensor_unparsed_packets_total"), 1.0);

    // Every frame of a listed device is one record (a frame between the two, one each),
    // as many as `metapu extract` makes of the capture that was sent...
    let devices = dir.path().join("devices.csv");
    let sent_rows = extract_rows(&camera_network(), &devices, dir.path());
    let expected: usize = sent_rows.values().map(Vec::len).sum();
    let records = topic_rows(&broker.bootstrap(), "sensed", expected);
    for (device, rows) in &sent_rows {
        assert_eq!(records.get(device).map_or(0, Vec::len), rows.len(), "{device}'s records ({summary})");
    }
    assert_eq!(
        value("metapu_sensor_device_packets_total{device=\"camera\"}"),
        sent_rows["camera"].len() as f64
    );
    // ...and each is the row `metapu extract` computes from the frames as captured
    // (`--save`): same features, bit for bit, in the same order; times are the capture's.
    let saved_rows = extract_rows(&saved, &devices, dir.path());
    for (device, rows) in &saved_rows {
        let got = &records[device];
        assert_eq!(got.len(), rows.len(), "{device}");
        for (i, ((ts, features), want)) in got.iter().zip(rows).enumerate() {
            assert_eq!(features, want, "{device} record {i}");
            assert!(*ts >= started.floor() && *ts < started + 120.0, "{device} record {i} at {ts}");
        }
    }
    // The summary counts after the stop, when the last batches were sent.
    let on_topic: usize = records.values().map(Vec::len).sum();
    assert_eq!(delivered(&log), on_topic, "{summary}");

    // The unlisted hosts: counted, each named once in the log.
    let unknown = value("metapu_sensor_unknown_devices");
    assert!(unknown >= 5.0, "{scraped}");
    let named = log.lines().filter(|l| l.contains("no device list names")).count();
    assert_eq!(named as f64, unknown, "{log}");
    assert!(value("metapu_sensor_unknown_device_packets_total") > 0.0);
}

#[test]
fn a_link_that_goes_down_ends_the_sensor_with_an_error() {
    let Some(veth) = veth() else { return };
    let dir = tempfile::tempdir().unwrap();
    // No broker: the capture is what this is about.
    let mut sense = Sense::start(&veth.outside, "127.0.0.1:1", "down", dir.path(), &[]);
    ip(&["link", "set", &veth.outside, "down"]).unwrap();
    let status = wait_exit(&mut sense.child.0, Duration::from_secs(10));
    std::thread::sleep(Duration::from_millis(200));
    let log = sense.log();
    assert!(!status.success(), "a sensor on a dead link exits non-zero (systemd restarts it): {log}");
    assert!(log.contains(&format!("'{}' went down", veth.outside)), "{log}");
}

/// The capture's unicast senders that `listed` does not name.
fn unlisted_senders(listed: &[&str]) -> std::collections::BTreeSet<String> {
    use metapu::traffic::capture::CaptureReader;
    use metapu::traffic::devices::format_mac;
    let mut reader = CaptureReader::open(&camera_network()).unwrap();
    let mut macs = std::collections::BTreeSet::new();
    while let Some(frame) = reader.next_frame().unwrap() {
        let (src, _) = metapu::traffic::frame::frame_macs(frame.link, frame.data);
        let src = src.unwrap();
        if src >> 40 & 1 == 0 && !listed.contains(&format_mac(src).as_str()) {
            macs.insert(format_mac(src));
        }
    }
    macs
}

#[test]
fn sighup_rereads_the_device_list_and_discovery_sends_unlisted_hosts() {
    let Some(veth) = veth() else { return };
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start();
    let devices = dir.path().join("devices.csv");
    std::fs::write(&devices, "camera,5c:cf:7f:05:f2:c6\n").unwrap();
    let sense = Sense::start(&veth.outside, &broker.bootstrap(), "reloaded", dir.path(), &[]);
    send(&veth, &camera_network());
    sense.wait_packets(2000.0);
    std::fs::write(&devices, DEVICES).unwrap();
    signal(sense.child.0.id(), "-HUP");
    assert!(
        sense.wait_for(Duration::from_secs(10), |l| l.contains("device list re-read")),
        "{}",
        sense.log()
    );
    send(&veth, &camera_network());
    sense.wait_packets(4000.0);
    let (status, log) = sense.stop();
    assert!(status.success(), "{log}");
    let once = extract_rows(&camera_network(), &devices, dir.path());
    let records = topic_rows(&broker.bootstrap(), "reloaded", 2 * once["camera"].len() + once["hub"].len());
    // The camera, listed throughout: both passes. The hub, listed by the re-read: the
    // second pass, with statistics of its own from its first packet on.
    assert_eq!(records["camera"].len(), 2 * once["camera"].len());
    assert_eq!(records["hub"].len(), once["hub"].len());
    assert_eq!(records["hub"][0].1[0], 1.0, "the hub's first record starts its statistics afresh (weight 1)");
    assert!(records["camera"][once["camera"].len()].1[0] > 1.0, "the camera's go on across the re-read");

    // Discovery: every unlisted sender is sent under its MAC, the listed ones as before.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("devices.csv"), "camera,5c:cf:7f:05:f2:c6\n").unwrap();
    let sense = Sense::start(&veth.outside, &broker.bootstrap(), "discovered", dir.path(), &["--discover"]);
    send(&veth, &camera_network());
    sense.wait_packets(2000.0);
    let discovered = sense.metric("metapu_sensor_discovered_devices");
    let (status, log) = sense.stop();
    assert!(status.success(), "{log}");
    let hosts = unlisted_senders(&["5c:cf:7f:05:f2:c6"]);
    assert_eq!(discovered as usize, hosts.len(), "{hosts:?}");
    // Every record the sensor had acknowledged (its summary), not merely some: they
    // spread over the topic's partitions.
    let records = topic_rows(&broker.bootstrap(), "discovered", delivered(&log));
    let named: std::collections::BTreeSet<String> = records.keys().cloned().collect();
    assert!(named.contains("camera"));
    assert!(hosts.is_subset(&named), "discovered hosts send records under their MACs: {named:?}");
}

#[test]
fn a_broker_outage_queues_records_up_to_the_bound_and_counts_the_rest() {
    let Some(veth) = veth() else { return };
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let brokers = format!("127.0.0.1:{port}");
    let bound = 500;
    std::fs::write(dir.path().join("devices.csv"), DEVICES).unwrap();
    let bound_setting = bound.to_string();
    let settings = [("METAPU__SENSOR__MAX_QUEUED_RECORDS", bound_setting.as_str())];
    let sense = Sense::start_with(&veth.outside, &brokers, "outage", dir.path(), &[], &settings);
    send(&veth, &camera_network());
    sense.wait_packets(2000.0);
    let pass = extract_rows(&camera_network(), &dir.path().join("devices.csv"), dir.path());
    let per_pass: usize = pass.values().map(Vec::len).sum();
    assert_eq!(
        sense.metric("metapu_sensor_packets_total"),
        2000.0,
        "capturing goes on while the brokers are down"
    );
    // A message (a batch of up to batch_records) is queued whole or dropped whole: the
    // queue stops within one batch of the bound, never over it.
    // The last batches go within sensor.batch_wait_ms, and the gauge is set every second.
    let batch = metapu::daemon::config::DaemonConfig::defaults().sensor.batch_records as usize;
    let queue_full = || sense.metric("metapu_sensor_records_dropped_total{reason=\"queue_full\"}") as usize;
    let accounted = || queue_full() + sense.metric("metapu_sensor_records_queued") as usize;
    let started = Instant::now();
    while accounted() < per_pass && started.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(accounted(), per_pass, "every record queued or dropped: {}", sense.log());
    let queued = per_pass - queue_full();
    assert!(queued <= bound && queued > bound - batch, "{queued} queued: {}", sense.log());

    // The broker comes (back): what was queued and what comes after is delivered.
    let _broker = LocalBroker::start(&metapu::broker::binary_in(&repo()), port).unwrap();
    let started = Instant::now();
    while sense.metric("metapu_sensor_records_produced_total") < queued as f64
        && started.elapsed() < Duration::from_secs(60)
    {
        std::thread::sleep(Duration::from_millis(200));
    }
    send(&veth, &camera_network());
    sense.wait_packets(4000.0);
    let (status, log) = sense.stop();
    assert!(status.success(), "{log}");
    // What the sensor delivered reached the topic, the queued records and records of the
    // second pass among them; every other record is counted as dropped. How many of the
    // second pass wait in a full queue depends on how fast the broker acknowledges, so
    // only the sum is fixed.
    let summary = log.lines().find(|l| l.starts_with("sense:")).unwrap();
    let (sent, dropped) = (delivered(&log), dropped(summary));
    assert_eq!(sent + dropped, 2 * per_pass, "{summary}");
    assert!(sent > queued, "the second pass's records are delivered too: {summary}");
    let records: usize = topic_rows(&brokers, "outage", sent).values().map(Vec::len).sum();
    assert_eq!(records, sent, "{log}");
    // One line for the outage, one when it ends: never a line per record.
    assert_eq!(log.lines().filter(|l| l.contains("cannot reach the brokers")).count(), 1, "{log}");
    assert!(log.contains("the brokers take records again"), "{log}");
}

/// The records a sensor's summary line counts as dropped.
fn dropped(summary: &str) -> usize {
    let before = summary.split(" dropped (").next().unwrap();
    before.rsplit(' ').next().unwrap().parse().unwrap_or_else(|_| panic!("{summary}"))
}

/// `metapu sense ARGS` that must not start; its stderr.
fn sense_refused(args: &[&str], settings: &[(&str, &str)]) -> String {
    let out = Command::new(metapu_binary())
        .arg("sense")
        .args(args)
        .env("METAPU__KAFKA__BROKERS", "127.0.0.1:1")
        .env("METAPU__SENSOR__LISTEN", format!("127.0.0.1:{}", free_port()))
        .envs(settings.iter().copied())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "sense {args:?} ran: {stderr}");
    stderr
}

#[test]
fn what_the_sensor_cannot_run_with_is_refused_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let devices = dir.path().join("devices.csv");
    std::fs::write(&devices, DEVICES).unwrap();
    let devices = devices.to_str().unwrap();
    let err = sense_refused(&["--devices", devices], &[]);
    assert!(err.contains("no interface to capture on: give --interface IF or set sensor.interface"), "{err}");
    let err = sense_refused(&["--interface", "metapu-none0", "--devices", devices], &[]);
    assert!(err.contains("cannot capture on 'metapu-none0'"), "{err}");
    std::fs::write(dir.path().join("bad.csv"), "camera 5c:cf:7f:05:f2:c6\n").unwrap();
    let err =
        sense_refused(&["--interface", "lo", "--devices", dir.path().join("bad.csv").to_str().unwrap()], &[]);
    assert!(err.contains("bad.csv:1: 'camera 5c:cf:7f:05:f2:c6' is not `name,mac`"), "{err}");
    let err = sense_refused(&["--interface", "lo", "--devices", "/dev/null"], &[]);
    assert!(err.contains("the device list: no devices listed"), "{err}");
    let err =
        sense_refused(&["--interface", "lo", "--devices", devices], &[("METAPU__SENSOR__SNAPLEN", "10")]);
    assert!(err.contains("sensor.snaplen: must be at least 64 bytes"), "{err}");
    let err = sense_refused(
        &["--interface", "lo", "--devices", devices],
        &[("METAPU__SENSOR__BATCH_RECORDS", "0")],
    );
    assert!(err.contains("sensor.batch_records: must be 1 (a message per record) to 256"), "{err}");
    // Opening a real interface needs root.
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        let err =
            sense_refused(&["--interface", "lo", "--devices", devices, "--filter", "tcp port nonsense"], &[]);
        assert!(err.contains("filter 'tcp port nonsense'"), "{err}");
    }
}

/// The whole chain from the wire: a real device's traffic sent through the veth, `metapu
/// sense` → the bundled broker → the daemon with the shipped model. The device is
/// onboarded with `metapu onboard` over a span of its own traffic (labels on the input
/// topic are not trusted), and then a real SYN scan from it opens an incident.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn from_the_wire_a_scan_after_onboarding_opens_an_incident() {
    let Some(veth) = veth() else { return };
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start();
    let boot = broker.bootstrap();
    let mut cfg = crate::support::daemon_config(&boot, "wire");
    cfg.windows.trust_input_labels = false;
    cfg.model.path = repo().join("models/iot-default.safetensors");
    cfg.model.features = 115;
    let daemon = metapu::daemon::start(cfg.clone()).await.expect("daemon starts");
    let (captures, mac) = crate::support::sentinel_device("D-LinkHomeHub");
    std::fs::write(dir.path().join("devices.csv"), format!("hub,{mac}\n")).unwrap();
    let sense = Sense::start(&veth.outside, &boot, &cfg.kafka.input_topics[0], dir.path(), &[]);
    let daemon_metric = |name: &str| metric(&http_get(daemon.http_addr, "/metrics").1, name).unwrap_or(0.0);
    // The incident events so far, waiting up to `limit` for one of kind `what`.
    let events = |what: &'static str, limit: u64| {
        let found =
            crate::support::read_topic(&boot, &cfg.kafka.incidents_topic, Duration::from_secs(limit), |m| {
                crate::support::json_values(m).iter().any(|e| e["event"] == what && e["device"] == "hub")
            });
        crate::support::json_values(&found)
    };

    // The hub talks; the daemon sees it but has nothing known-normal to score it by.
    let mut sent = send(&veth, &captures[0]);
    sense.wait_packets(sent as f64);
    let started = Instant::now();
    while daemon_metric("metapu_records_unknown_total") < 100.0 && started.elapsed() < Duration::from_secs(30)
    {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        daemon_metric("metapu_records_unknown_total") >= 100.0,
        "the daemon did not get the hub's records"
    );

    // Onboarded for a span of its own traffic.
    let feedback = ["--brokers", boot.as_str(), "--topic", cfg.kafka.feedback_topic.as_str()];
    metapu(&[&["onboard", "--device", "hub", "--for", "8s", "--by", "test"][..], &feedback].concat());
    assert!(!events("onboarding", 30).is_empty());
    for capture in &captures[1..4] {
        sent += send(&veth, capture);
    }
    sense.wait_packets(sent as f64);
    let ended = events("onboarded", 60);
    let done = ended.iter().find(|e| e["event"] == "onboarded").expect("an onboarded event");
    assert_eq!(done["known_normal"], 50, "a full known-normal window: {done}");
    assert!(done["records"].as_u64().unwrap() > 100, "{done}");
    let before = events("opened", 2);
    assert!(before.iter().all(|e| e["event"] != "opened"), "an incident on its own traffic: {before:?}");

    // Then a real SYN scan from it, after more of its normal traffic.
    let infected = dir.path().join("hub.synscan.pcap");
    let synscan = crate::support::data_dir().join("pcap/ndpi/synscan.pcap");
    crate::support::infect(&captures[4..5], &mac, &synscan, &["--concatenate"], &infected);
    let scan_sent = metapu::wall_clock::unix_now();
    sent += send(&veth, &infected);
    sense.wait_packets(sent as f64);
    let opened = events("opened", 60);
    let incident = opened.iter().find(|e| e["event"] == "opened").expect("the scan opens an incident");
    assert!(incident["opened_at"].as_f64().unwrap() >= scan_sent, "{incident}");
    // The sensor sent each packet's context: the incident says what the traffic was.
    let traffic = &incident["traffic"];
    assert!(traffic["packets"].as_u64().unwrap_or(0) >= 1, "{incident}");
    let sentence = traffic["summary"].as_str().unwrap_or_default();
    assert!(sentence.contains("TCP SYN"), "{incident}");
    assert_eq!(
        traffic["device_mac"].as_str(),
        Some(mac.to_lowercase().replace('-', ":").as_str()),
        "{incident}"
    );
    assert!(incident["summary"].as_str().unwrap().contains(sentence), "{incident}");
    assert!(["low", "medium", "high", "critical"].contains(&incident["severity"].as_str().unwrap()));
    let (status, log) = sense.stop();
    assert!(status.success(), "{log}");
    stop(daemon).await;
}
