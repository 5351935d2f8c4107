//! Shared helpers for daemon tests: the real broker binary, a small trained model,
//! Kafka produce/consume helpers and a raw HTTP scrape.
#![allow(dead_code)]

pub mod load;
pub mod produce;
pub mod proxy;
pub mod schema;
pub mod scrape;
pub mod veth;

// The lab's tests include this module too and use neither.
#[allow(unused_imports)]
pub use scrape::{http_get, metric};

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use metapu::broker::LocalBroker;
use metapu::daemon::config::DaemonConfig;
use metapu::daemon::{Snapshot, StateTopic};
use metapu::data::split::Split;
use metapu::data::synthetic::{generate, SyntheticConfig};
use metapu::data::{Label, Task, TaskSet};
use metapu::model::file;
use metapu::monitor::record;
use metapu::train::{train_on_synthetic, TrainConfig};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::util::Timeout;
use sha2::Digest;
use tch::Device;

/// Run one of the package's binaries; its output (stdout, then stderr) and exit status.
fn run_binary(binary: &str, name: &str, args: &[&str]) -> (bool, String, String) {
    let out =
        std::process::Command::new(binary).args(args).output().unwrap_or_else(|e| panic!("{name} runs: {e}"));
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into_owned() + &stderr, stderr)
}

fn succeeds(binary: &str, name: &str, args: &[&str]) -> String {
    let (ok, text, _) = run_binary(binary, name, args);
    assert!(ok, "{name} {args:?} failed: {text}");
    text
}

fn refused(binary: &str, name: &str, args: &[&str]) -> String {
    let (ok, _, stderr) = run_binary(binary, name, args);
    assert!(!ok, "{name} {args:?} succeeded: {stderr}");
    stderr
}

/// A binary of the workspace. Cargo names the binaries of the test's own package; the
/// other package's lie beside them in the same target folder (`make test` builds both).
fn binary(name: &str) -> String {
    let own = [option_env!("CARGO_BIN_EXE_metapu"), option_env!("CARGO_BIN_EXE_metapu-lab")];
    let dir = own.iter().flatten().find_map(|p| Path::new(p).parent()).expect("a binary of this package");
    let path = dir.join(name);
    assert!(path.exists(), "{} is not built: cargo build --workspace", path.display());
    path.to_string_lossy().into_owned()
}

/// The repository's root (the lab's tests run from lab/).
pub fn repo() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    if manifest.ends_with("lab") {
        manifest.parent().expect("lab/ lies in the repository").to_path_buf()
    } else {
        manifest.to_path_buf()
    }
}

/// The repository's data/ (real rows and captures the tests use).
pub fn data_dir() -> PathBuf {
    repo().join("data")
}

/// An IoT Sentinel device's setup captures in data/ (sorted) and its MAC.
pub fn sentinel_device(name: &str) -> (Vec<PathBuf>, String) {
    let dir = data_dir().join("pcap/iot-sentinel").join(name);
    let mut captures: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "pcap"))
        .collect();
    captures.sort();
    let mac = std::fs::read_to_string(dir.join("_iotdevice-mac.txt")).unwrap().trim().to_string();
    (captures, mac)
}

/// `metapu datasets infect`: `attack` merged into the device's `benign` captures (`how`:
/// `--start F`, `--concatenate`, …), written to `out` with its labels beside it; what
/// the command printed.
pub fn infect(benign: &[PathBuf], mac: &str, attack: &Path, how: &[&str], out: &Path) -> String {
    let mut args = vec!["datasets".to_string(), "infect".into(), "--device-mac".into(), mac.into()];
    args.push("--benign".into());
    args.extend(benign.iter().map(|p| p.to_string_lossy().into_owned()));
    args.extend(["--attack".into(), attack.to_string_lossy().into_owned()]);
    args.extend(how.iter().map(|a| a.to_string()));
    args.extend(["--out".into(), out.to_string_lossy().into_owned()]);
    metapu(&args.iter().map(String::as_str).collect::<Vec<_>>())
}

/// Aria's first two setup captures with the real ICMP sweep after them, as
/// `dir/aria.icmp-sweep.pcap` (with labels and MAC beside it), the lab's short
/// infected capture; Aria's MAC.
pub fn aria_icmp_sweep(dir: &Path) -> String {
    let (benign, mac) = sentinel_device("Aria");
    let sweep = data_dir().join("pcap/stratosphere/test12-icmp-portscan.pcap");
    infect(&benign[..2], &mac, &sweep, &["--concatenate"], &dir.join("aria.icmp-sweep.pcap"));
    std::fs::write(dir.join("aria.icmp-sweep.mac"), &mac).unwrap();
    mac
}

/// The `metapu` binary.
pub fn metapu_binary() -> String {
    binary("metapu")
}

/// The `metapu-lab` binary.
pub fn lab_binary() -> String {
    binary("metapu-lab")
}

/// `metapu feedback` as an analyst runs it: `verdict` is `--false-positive` or
/// `--confirmed`, on `device`'s `incident`, by `by` (with `note`), to the feedback topic.
pub fn metapu_verdict(
    (bootstrap, topic): (&str, &str),
    device: &str,
    incident: &str,
    verdict: &str,
    by: &str,
    note: &str,
) -> String {
    metapu(&[
        "feedback",
        "--incident",
        incident,
        "--device",
        device,
        verdict,
        "--by",
        by,
        "--note",
        note,
        "--brokers",
        bootstrap,
        "--topic",
        topic,
    ])
}

/// An input record of `row` whose packet went from `device_ip` to `peer`:`port` over TCP
/// with `bytes` (a connection's data: ACK, PSH), labeled normal if `normal`.
pub fn outbound_record(
    ts: f64,
    row: &[f32],
    normal: bool,
    addresses: (&str, &str, u16),
    bytes: u32,
) -> Vec<u8> {
    outbound_tcp_record(ts, row, normal, addresses, bytes, 0x18)
}

/// [`outbound_record`] with the packet's TCP flags (0x02: a connection attempt).
pub fn outbound_tcp_record(
    ts: f64,
    row: &[f32],
    normal: bool,
    (device_ip, peer, port): (&str, &str, u16),
    bytes: u32,
    tcp_flags: u8,
) -> Vec<u8> {
    let mut v = serde_json::json!({
        "ts": ts,
        "features": row,
        "context": {
            "src_ip": device_ip, "dst_ip": peer, "src_port": 50_000, "dst_port": port, "proto": 6,
            "tcp_flags": tcp_flags, "bytes": bytes, "direction": "outbound"
        }
    });
    if normal {
        v["label"] = "normal".into();
    }
    serde_json::to_vec(&v).unwrap()
}

/// Run the `metapu` binary as a user would; its stdout and stderr, after checking that
/// it succeeded.
pub fn metapu(args: &[&str]) -> String {
    succeeds(&metapu_binary(), "metapu", args)
}

/// Run the `metapu` binary on input it must refuse; its stderr, after checking that it
/// failed.
pub fn metapu_refused(args: &[&str]) -> String {
    refused(&metapu_binary(), "metapu", args)
}

/// `metapu-lab` (the experiments), as [`metapu`].
pub fn lab(args: &[&str]) -> String {
    succeeds(&lab_binary(), "metapu-lab", args)
}

/// `metapu-lab` on input it must refuse, as [`metapu_refused`].
pub fn lab_refused(args: &[&str]) -> String {
    refused(&lab_binary(), "metapu-lab", args)
}

/// The bundled broker on a free loopback port; killed on drop.
pub struct Broker(pub LocalBroker);

/// A loopback port free a moment ago, and never one this test process was handed
/// before: the OS can hand the same free port to two calls in a row (a CI run's demo
/// test got its broker's port for its HTTP listener), and to two tests at once.
pub fn free_port() -> u16 {
    static HANDED_OUT: std::sync::Mutex<std::collections::BTreeSet<u16>> =
        std::sync::Mutex::new(std::collections::BTreeSet::new());
    let mut handed_out = HANDED_OUT.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        let port = metapu::broker::free_port().unwrap();
        if handed_out.insert(port) {
            return port;
        }
    }
}

impl Broker {
    pub fn start() -> Self {
        let bin = metapu::broker::binary_in(&repo());
        Self(LocalBroker::start(&bin, free_port()).expect("bundled broker (make test runs scripts/setup.sh)"))
    }

    /// The broker behind a switchable proxy: clients are told to use the proxy's port.
    pub fn behind_proxy() -> (Self, proxy::Proxy) {
        let bin = metapu::broker::binary_in(&repo());
        let (port, front) = (free_port(), free_port());
        let broker = LocalBroker::start_advertising(&bin, port, front).expect("bundled broker");
        (Self(broker), proxy::Proxy::start(front, port))
    }

    pub fn bootstrap(&self) -> String {
        self.0.bootstrap()
    }
}

/// Synthetic (2-feature) data: the model's training set and target tasks to replay.
pub struct Fixture {
    pub model_path: PathBuf,
    pub data: TaskSet,
    pub targets: Vec<usize>,
}

/// The model the tests run: meta-trained briefly on Synthetic (seed 11, 400 iterations),
/// kept in the repository so that every machine runs the same one. Training the same
/// seed on another machine gives another model (its BLAS rounds otherwise), and a test
/// that asserts what a model detects then fails on one machine and passes on the next.
/// Its hash is checked on load. To remake it (a change to the model's format or to
/// training): `METAPU_TRAIN_FIXTURE=1 cargo test --test integration -- units` writes it
/// anew; then set [`FIXTURE_SHA256`] to its new hash.
pub const FIXTURE_MODEL: &str = "tests/fixtures/synthetic-s11-i400.safetensors";
pub const FIXTURE_SHA256: &str = "9858fbe94a9e1e539bcab969759696d80ba655fa041c2c94d2742b29f7894950";

pub fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let (data, split) = generate(&SyntheticConfig::default(), 11);
        let model_path = repo().join(FIXTURE_MODEL);
        if std::env::var_os("METAPU_TRAIN_FIXTURE").is_some() {
            let cfg = TrainConfig {
                seed: 11,
                max_iterations: 400,
                eval_every: 200,
                meta_batch: 8,
                ..TrainConfig::default()
            };
            let (out, _, _) = train_on_synthetic(11, &cfg, Device::Cpu).unwrap();
            file::save(&out.model, &model_path).unwrap();
        }
        let bytes = std::fs::read(&model_path).expect("the fixture model is in the repository");
        let hash: String = sha2::Sha256::digest(&bytes).iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hash, FIXTURE_SHA256, "{FIXTURE_MODEL} is not the fixture the tests were written on");
        file::load(&model_path, Device::Cpu).expect("the fixture model loads");
        let targets = Split::resolve(&split.target, &data).unwrap();
        Fixture { model_path, data, targets }
    })
}

/// The configuration as a TOML file in `dir`, for tests that run the `metapu` binary.
pub fn write_config(cfg: &DaemonConfig, dir: &Path) -> PathBuf {
    let path = dir.join("metapu.toml");
    std::fs::write(&path, cfg.to_toml()).unwrap();
    path
}

impl Fixture {
    /// Rows of a target task with the given label.
    pub fn rows(&self, target: usize, label: Label) -> Vec<Vec<f32>> {
        let t: &Task = &self.data.tasks[self.targets[target]];
        t.indices_of(label).into_iter().map(|i| t.row(i, 2).to_vec()).collect()
    }
}

/// Daemon configuration for tests: the given broker, a fresh group and topics, an
/// ephemeral HTTP port, fast adaptation.
pub fn daemon_config(bootstrap: &str, tag: &str) -> DaemonConfig {
    let mut cfg = DaemonConfig::defaults();
    cfg.kafka.brokers = bootstrap.into();
    cfg.kafka.group_id = format!("metapu-{tag}");
    cfg.kafka.input_topics = vec![format!("{tag}.features")];
    cfg.kafka.alerts_topic = format!("{tag}.alerts");
    cfg.kafka.priors_topic = format!("{tag}.priors");
    cfg.kafka.deadletter_topic = format!("{tag}.deadletter");
    cfg.kafka.state_topic = format!("{tag}.state");
    cfg.kafka.scores_topic = format!("{tag}.scores");
    cfg.kafka.incidents_topic = format!("{tag}.incidents");
    cfg.kafka.feedback_topic = format!("{tag}.feedback");
    cfg.kafka.kinds_topic = format!("{tag}.kinds");
    cfg.kafka.publish_scores = true;
    cfg.kafka.publish_alerts = true;
    cfg.kafka.consumer_options.insert("session.timeout.ms".into(), "6000".into());
    cfg.kafka.consumer_options.insert("heartbeat.interval.ms".into(), "500".into());
    cfg.kafka.options.insert("topic.metadata.refresh.interval.ms".into(), "1000".into());
    cfg.model.path = fixture().model_path.clone();
    cfg.model.features = 2;
    cfg.http.listen = "127.0.0.1:0".into();
    cfg.adaptation.interval_ms = 100;
    cfg.scoring.max_wait_ms = 10;
    cfg.state.snapshot_interval_s = 1;
    // The tests' producers label known-normal records on the input topic.
    cfg.windows.trust_input_labels = true;
    // The tests' devices raise within seconds of their onboarding; a new device's
    // learning period would hold that. The shared week's daemon-equals-lab test and the
    // unit tests (monitor/incidents.rs) run it as deployed.
    cfg.incidents.learning_period_s = 0;
    cfg
}

pub fn producer(bootstrap: &str) -> FutureProducer {
    ClientConfig::new().set("bootstrap.servers", bootstrap).set("linger.ms", "1").create().unwrap()
}

pub async fn send(p: &FutureProducer, topic: &str, key: Option<&str>, value: &[u8]) {
    send_raw(p, topic, key.map(str::as_bytes), value).await;
}

/// Send with a key of any bytes (not necessarily UTF-8).
pub async fn send_raw(p: &FutureProducer, topic: &str, key: Option<&[u8]>, value: &[u8]) {
    let mut rec = FutureRecord::<[u8], [u8]>::to(topic).payload(value);
    if let Some(k) = key {
        rec = rec.key(k);
    }
    p.send(rec, Timeout::After(Duration::from_secs(10))).await.expect("produce");
}

pub async fn send_record(p: &FutureProducer, topic: &str, device: &str, ts: f64, row: &[f32], normal: bool) {
    send(p, topic, Some(device), &record::encode(device, ts, row, normal)).await;
}

/// A window's rows of the fixture's two features as bits, sorted: windows compared as
/// sets of rows, bit for bit (a window keeps its rows in storage order).
pub fn rows_bits(v: &[f32]) -> Vec<Vec<u32>> {
    let mut rows: Vec<Vec<u32>> = v.chunks(2).map(|r| r.iter().map(|x| x.to_bits()).collect()).collect();
    rows.sort();
    rows
}

/// Send one record of `device` to a given partition of `topic`.
pub async fn send_to(
    p: &FutureProducer,
    topic: &str,
    partition: i32,
    device: &str,
    ts: f64,
    row: &[f32],
    normal: bool,
) {
    let value = record::encode(device, ts, row, normal);
    let rec = FutureRecord::to(topic).key(device).payload(&value).partition(partition);
    p.send(rec, Timeout::After(Duration::from_secs(10))).await.expect("produce");
}

/// Each device's decision on its record at `ts`, read from the scores topic until `n`
/// devices have one (or a minute passes).
pub fn decisions_at(boot: &str, cfg: &DaemonConfig, ts: f64, n: usize) -> HashMap<String, String> {
    let at = |m: &[(Option<String>, Vec<u8>)]| -> HashMap<String, String> {
        json_values(m)
            .iter()
            .filter(|s| s["ts"] == ts)
            .map(|s| (s["device"].as_str().unwrap().to_string(), s["decision"].as_str().unwrap().to_string()))
            .collect()
    };
    at(&read_topic(boot, &cfg.kafka.scores_topic, Duration::from_secs(60), |m| at(m).len() >= n))
}

/// Read a one-partition topic from the beginning until `done` holds for what was
/// read, or `limit` passes. Returns (key, value) pairs.
pub fn read_topic(
    bootstrap: &str,
    topic: &str,
    limit: Duration,
    done: impl Fn(&[(Option<String>, Vec<u8>)]) -> bool,
) -> Vec<(Option<String>, Vec<u8>)> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", format!("reader-{topic}-{}", free_port()))
        .set("auto.offset.reset", "earliest")
        .set("enable.auto.commit", "false")
        .set("topic.metadata.refresh.interval.ms", "500")
        .create()
        .unwrap();
    // Direct assignment of partition 0 (test output topics have one): no group join.
    let mut tpl = rdkafka::TopicPartitionList::new();
    tpl.add_partition_offset(topic, 0, rdkafka::Offset::Beginning).unwrap();
    consumer.assign(&tpl).unwrap();
    let started = Instant::now();
    let mut out = Vec::new();
    while started.elapsed() < limit && !done(&out) {
        if let Some(Ok(m)) = consumer.poll(Duration::from_millis(100)) {
            let key = m.key().map(|k| String::from_utf8_lossy(k).into_owned());
            out.push((key, m.payload().unwrap_or_default().to_vec()));
        }
    }
    check_if_incidents(topic, &out);
    out
}

/// A consumer assigned every partition of a topic from the beginning (no group join),
/// and the partition count; `eof`: it reports each partition's end.
fn reader_of_all_partitions(bootstrap: &str, topic: &str, eof: bool) -> (BaseConsumer, usize) {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", format!("reader-{topic}-{}", free_port()))
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", if eof { "true" } else { "false" })
        .create()
        .unwrap();
    let md = consumer.fetch_metadata(Some(topic), Duration::from_secs(10)).unwrap();
    let partitions =
        md.topics().iter().find(|t| t.name() == topic).map_or(1, |t| t.partitions().len().max(1));
    let mut tpl = rdkafka::TopicPartitionList::new();
    for p in 0..partitions as i32 {
        tpl.add_partition_offset(topic, p, rdkafka::Offset::Beginning).unwrap();
    }
    consumer.assign(&tpl).unwrap();
    (consumer, partitions)
}

/// Read every partition of a topic from the beginning until `n` messages arrived or
/// `limit` passes (order is kept within a partition, i.e. per key).
pub fn read_all_partitions(
    bootstrap: &str,
    topic: &str,
    limit: Duration,
    n: usize,
) -> Vec<(Option<String>, Vec<u8>)> {
    read_all_partitions_until(bootstrap, topic, limit, |out| out.len() >= n)
}

/// [`read_all_partitions`] until `enough` says so of the messages read.
pub fn read_all_partitions_until(
    bootstrap: &str,
    topic: &str,
    limit: Duration,
    enough: impl Fn(&[(Option<String>, Vec<u8>)]) -> bool,
) -> Vec<(Option<String>, Vec<u8>)> {
    let (consumer, _) = reader_of_all_partitions(bootstrap, topic, false);
    let started = Instant::now();
    let mut out = Vec::new();
    while started.elapsed() < limit && !enough(&out) {
        if let Some(Ok(m)) = consumer.poll(Duration::from_millis(100)) {
            let key = m.key().map(|k| String::from_utf8_lossy(k).into_owned());
            out.push((key, m.payload().unwrap_or_default().to_vec()));
        }
    }
    check_if_incidents(topic, &out);
    out
}

/// Every partition of the state topic read from the beginning until `done` holds of
/// its devices' snapshots (put back together from their records) or `limit` passes.
pub fn read_state(
    bootstrap: &str,
    topic: &str,
    limit: Duration,
    done: impl Fn(&HashMap<String, Snapshot>) -> bool,
) -> HashMap<String, Snapshot> {
    let (consumer, partitions) = reader_of_all_partitions(bootstrap, topic, true);
    let started = Instant::now();
    let mut state = StateTopic::default();
    // Judged only at the end of every partition: a device's records are written one
    // after another, and its main record may come before its rows.
    let mut at_end = std::collections::HashSet::new();
    loop {
        if at_end.len() == partitions {
            let latest = state.latest();
            if done(&latest) {
                return latest;
            }
        }
        if started.elapsed() >= limit {
            return state.latest();
        }
        match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(m)) => {
                at_end.remove(&m.partition());
                if let Some(key) = m.key() {
                    state.apply(key, m.partition(), m.payload());
                }
            }
            Some(Err(rdkafka::error::KafkaError::PartitionEOF(p))) => {
                at_end.insert(p);
            }
            _ => {}
        }
    }
}

/// Incident events are checked against their schemas wherever a test reads them.
fn check_if_incidents(topic: &str, messages: &[(Option<String>, Vec<u8>)]) {
    if topic.ends_with("incidents") {
        for (_, value) in messages {
            schema::check_incident_event(value);
        }
    }
}

pub fn json_values(messages: &[(Option<String>, Vec<u8>)]) -> Vec<serde_json::Value> {
    messages.iter().filter_map(|(_, v)| serde_json::from_slice(v).ok()).collect()
}

/// Stop a daemon and wait for it, for a bounded time: a stop that hangs fails its test
/// here, with the reason, instead of holding the whole suite.
pub async fn stop(d: metapu::daemon::Daemon) {
    match tokio::time::timeout(Duration::from_secs(120), d.shutdown()).await {
        Ok(result) => result.expect("the daemon stopped with an error"),
        Err(_) => panic!("the daemon did not stop within 120 s"),
    }
}

pub async fn wait_until(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let started = Instant::now();
    while started.elapsed() < limit {
        if cond() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    cond()
}

/// sd_notify datagrams received on `socket` until one contains `until`, or `limit`
/// passes (the socket needs a read timeout).
pub fn notifications(socket: &std::os::unix::net::UnixDatagram, until: &str, limit: Duration) -> Vec<String> {
    let started = Instant::now();
    let mut got: Vec<String> = Vec::new();
    let mut buf = [0u8; 256];
    while started.elapsed() < limit && !got.iter().any(|m| m.contains(until)) {
        if let Ok(n) = socket.recv(&mut buf) {
            got.push(String::from_utf8_lossy(&buf[..n]).into_owned());
        }
    }
    got
}

/// Send `sig` (as `kill` spells it: "-TERM") to a process.
pub fn signal(pid: u32, sig: &str) {
    let ok = std::process::Command::new("kill").args([sig, &pid.to_string()]).status().unwrap().success();
    assert!(ok, "kill {sig} {pid}");
}

/// A child process killed when dropped, so a failing test leaves no daemon behind.
/// `metapu COMMAND --config CONFIG` as its own process, its output dropped, killed when
/// the handle goes (the daemon, `run`; the console, `console`).
pub fn metapu_with_config(command: &str, config: &Path) -> KillOnDrop {
    KillOnDrop(
        std::process::Command::new(metapu_binary())
            .args([command, "--config"])
            .arg(config)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("metapu {command} starts: {e}")),
    )
}

pub struct KillOnDrop(pub std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
