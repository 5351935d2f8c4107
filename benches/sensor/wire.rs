//! The sensor on a link: the release `metapu sense` (default settings, `--discover`)
//! captures one end of a veth pair through libpcap, pinned to one core; on the other
//! core tcpreplay sends Kitsune's camera network (looped) into the other end from a
//! namespace of its own, at fixed rates and then as fast as it can (`--topspeed`). Each
//! step's counts are the sensor's own /metrics (packets, kernel drops, records delivered
//! and dropped); its CPU time comes from /proc. Two rounds:
//! - to the bundled broker, which shares the sender's core (on two cores, the sender,
//!   the kernel's delivery of its frames and the broker are one core's work);
//! - with the broker unreachable (an outage): records queue up to
//!   `sensor.max_queued_records` and the rest are dropped and counted, so the sender,
//!   alone on its core, can outrun the capture.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use metapu::broker::{binary_in, free_port, LocalBroker};

#[path = "../../tests/support/scrape.rs"]
mod scrape;
#[path = "../../tests/support/veth.rs"]
mod veth;

use veth::Veth;

/// The sensor's core; the sender and the broker share the other.
const SENSOR_CORE: &str = "0";
const SENDER_CORE: &str = "1";
/// A fixed rate sends this many seconds of packets.
const STEP_SECONDS: u64 = 3;
/// Packets sent at top speed.
const TOP_SPEED_PACKETS: u64 = 1_200_000;
/// A step is over when the sensor's counters stood still this long.
const SETTLED: Duration = Duration::from_millis(1500);

#[derive(Clone, Copy)]
enum Rate {
    PerSecond(u64),
    TopSpeed,
}

impl Rate {
    fn packets(self) -> u64 {
        match self {
            Rate::PerSecond(r) => r * STEP_SECONDS,
            Rate::TopSpeed => TOP_SPEED_PACKETS,
        }
    }

    fn flag(self) -> String {
        match self {
            Rate::PerSecond(r) => format!("--pps={r}"),
            Rate::TopSpeed => "--topspeed".into(),
        }
    }
}

/// The sensor's counters at one moment.
#[derive(Clone, Copy, Default)]
struct Counts {
    packets: u64,
    kernel_drops: u64,
    produced: u64,
    queue_full: u64,
    cpu_ticks: u64,
}

impl std::ops::Sub for Counts {
    type Output = Counts;
    fn sub(self, o: Counts) -> Counts {
        Counts {
            packets: self.packets - o.packets,
            kernel_drops: self.kernel_drops - o.kernel_drops,
            produced: self.produced - o.produced,
            queue_full: self.queue_full - o.queue_full,
            cpu_ticks: self.cpu_ticks - o.cpu_ticks,
        }
    }
}

struct Sensor {
    child: Child,
    metrics: std::net::SocketAddr,
}

impl Sensor {
    fn start(interface: &str, brokers: &str, log: &Path) -> Self {
        let metrics: std::net::SocketAddr =
            format!("127.0.0.1:{}", free_port().expect("a free port")).parse().expect("an address");
        let log = std::fs::File::create(log).expect("the sensor's log");
        let child = Command::new("taskset")
            .args(["-c", SENSOR_CORE, env!("CARGO_BIN_EXE_metapu"), "sense", "--discover"])
            .args(["--interface", interface])
            .env("METAPU__KAFKA__BROKERS", brokers)
            .env("METAPU__SENSOR__TOPIC", "bench.wire")
            .env("METAPU__SENSOR__LISTEN", metrics.to_string())
            .stdout(log.try_clone().expect("the log"))
            .stderr(log)
            .spawn()
            .expect("metapu sense");
        let sensor = Self { child, metrics };
        let started = Instant::now();
        while std::net::TcpStream::connect(metrics).is_err() {
            assert!(started.elapsed() < Duration::from_secs(30), "metapu sense did not start");
            std::thread::sleep(Duration::from_millis(100));
        }
        sensor
    }

    fn counts(&self) -> Counts {
        let body = scrape::http_get(self.metrics, "/metrics").1;
        let value = |name: &str| scrape::metric(&body, name).unwrap_or(0.0) as u64;
        // utime + stime, fields 14 and 15 of /proc/PID/stat (taskset exec'd the sensor).
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.child.id())).unwrap_or_default();
        let fields: Vec<&str> = stat.rsplit_once(')').map_or("", |(_, r)| r).split_whitespace().collect();
        let tick = |i: usize| fields.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
        Counts {
            packets: value("metapu_sensor_packets_total"),
            kernel_drops: value("metapu_sensor_kernel_drops_total"),
            produced: value("metapu_sensor_records_produced_total"),
            queue_full: value("metapu_sensor_records_dropped_total{reason=\"queue_full\"}"),
            // Fields after the name: state is 0, utime 11, stime 12.
            cpu_ticks: tick(11) + tick(12),
        }
    }

    /// Wait until the counters stand still; the counts and when records last arrived.
    fn settle(&self) -> (Counts, Instant) {
        let mut last = self.counts();
        let mut moved = Instant::now();
        let mut produced_at = Instant::now();
        while moved.elapsed() < SETTLED && produced_at.elapsed() < Duration::from_secs(120) {
            std::thread::sleep(Duration::from_millis(100));
            let now = self.counts();
            if now.produced != last.produced {
                produced_at = Instant::now();
            }
            if (now.packets, now.produced, now.queue_full, now.kernel_drops)
                != (last.packets, last.produced, last.queue_full, last.kernel_drops)
            {
                moved = Instant::now();
            }
            last = now;
        }
        (last, produced_at)
    }
}

impl Drop for Sensor {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What tcpreplay said it did: packets sent and the rate.
struct Sent {
    packets: u64,
    per_second: f64,
}

fn send(veth: &Veth, capture: &Path, rate: Rate) -> Sent {
    let out = Command::new("ip")
        .args(["netns", "exec", &veth.netns, "taskset", "-c", SENDER_CORE, "tcpreplay", "-q"])
        .args(["-i", &veth.inside, &rate.flag(), "--loop=0", &format!("--limit={}", rate.packets())])
        .arg(capture)
        .output()
        .expect("tcpreplay");
    let text = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "tcpreplay: {text}");
    // "Actual: 300000 packets (...) sent in 3.00 seconds" and "Rated: … Bps, … Mbps, 100000.26 pps".
    let packets = text
        .split("Actual:")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("tcpreplay's count: {text}"));
    let per_second = text
        .split("Rated:")
        .nth(1)
        .and_then(|r| r.split(" pps").next())
        .and_then(|r| r.rsplit(',').next())
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("tcpreplay's rate: {text}"));
    Sent { packets, per_second }
}

/// Why the rounds cannot run here, if they cannot.
fn missing() -> Option<String> {
    let runs = |cmd: &str, arg: &str| {
        Command::new(cmd).arg(arg).stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok()
    };
    if !runs("tcpreplay", "--version") {
        return Some("tcpreplay is missing (scripts/bench-setup.sh installs it as root)".into());
    }
    if !runs("taskset", "--version") {
        return Some("taskset is missing".into());
    }
    if std::thread::available_parallelism().map_or(0, |n| n.get()) < 2 {
        return Some("it needs two cores".into());
    }
    None
}

fn round(capture: &Path, broker: Option<&LocalBroker>, rates: &[Rate], dir: &Path) {
    let veth = match Veth::make() {
        Ok(v) => v,
        Err(why) => {
            println!("| not run: {why} |");
            return;
        }
    };
    let (brokers, into) = match broker {
        Some(b) => (b.bootstrap(), "the bundled broker"),
        None => ("127.0.0.1:1".to_string(), "no broker (outage)"),
    };
    let log = dir.join(if broker.is_some() { "sense-broker.log" } else { "sense-outage.log" });
    let sensor = Sensor::start(&veth.outside, &brokers, &log);
    for &rate in rates {
        let before = sensor.counts();
        let sent = send(&veth, capture, rate);
        let sent_at = Instant::now();
        let (after, produced_at) = sensor.settle();
        let d = after - before;
        let drained = if d.produced > 0 {
            format!("{:.1}", produced_at.saturating_duration_since(sent_at).as_secs_f64())
        } else {
            "–".into()
        };
        let asked = match rate {
            Rate::PerSecond(r) => format!("{r}"),
            Rate::TopSpeed => "top speed".into(),
        };
        // Clock ticks are 10 ms (USER_HZ = 100).
        let micros = d.cpu_ticks as f64 * 10_000.0 / d.packets.max(1) as f64;
        println!(
            "| {into} | {asked} | {:.0} | {} | {} | {} | {} | {} | {micros:.1} | {drained} |",
            sent.per_second, sent.packets, d.packets, d.kernel_drops, d.produced, d.queue_full
        );
    }
}

pub fn run(root: &Path) {
    print!("\nOn a link (as root): ");
    if let Some(why) = missing() {
        println!("not run: {why}.");
        return;
    }
    println!(
        "`metapu sense --discover` (the release binary, default settings) on one end of a veth pair, \
         pinned to core {SENSOR_CORE}; tcpreplay in a namespace on the other end, on core {SENDER_CORE}, \
         sending Kitsune's camera network looped ({STEP_SECONDS} s of packets at each fixed rate, \
         {TOP_SPEED_PACKETS} at top speed). Counts from the sensor's /metrics; CPU: the sensor \
         process's user + system time (every thread) per captured packet; drained: seconds from the \
         sender's end to the last delivered record. To the broker, the broker shares core \
         {SENDER_CORE} with the sender; with no broker (an outage), records wait up to \
         sensor.max_queued_records and the rest are dropped and counted.\n"
    );
    println!(
        "| records to | asked packets/s | sent packets/s | packets sent | captured | kernel drops | \
         records delivered | records dropped (queue full) | sensor CPU µs/packet | drained (s) |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let capture = root.join("data/pcap/kitsune/mirai2000.pcap");
    let dir = tempfile::tempdir().expect("a temporary directory");
    let port = free_port().expect("a free port");
    let broker = LocalBroker::start(&binary_in(root), port).expect("the bundled broker (scripts/setup.sh)");
    let pinned = Command::new("taskset")
        .args(["-a", "-p", "-c", SENDER_CORE, &broker.pid().to_string()])
        .stdout(Stdio::null())
        .status()
        .expect("taskset");
    assert!(pinned.success(), "pinning the broker");
    let to_broker = [50_000, 100_000, 150_000, 200_000].map(Rate::PerSecond);
    round(&capture, Some(&broker), &[&to_broker[..], &[Rate::TopSpeed]].concat(), dir.path());
    drop(broker);
    let outage = [200_000, 300_000, 400_000].map(Rate::PerSecond);
    round(&capture, None, &[&outage[..], &[Rate::TopSpeed]].concat(), dir.path());
}
