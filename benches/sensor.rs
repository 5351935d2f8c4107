//! `make bench`: what `metapu sense` extracts and produces on one core. The frames of
//! Kitsune's real camera network (data/pcap/kitsune/mirai2000.pcap, 12 hosts), replayed
//! in memory 100 times over with their times moved on, go through the sensor's loop body
//! (route by MAC, AfterImage per device, a binary record per packet per device) with
//! every host a device (as `--discover` makes them):
//! - into no sink: extraction and encoding alone;
//! - into the Kafka producer and the bundled broker, timed to the last acknowledgement,
//!   a message per record and in the default batches, with this process's CPU per packet.
//!
//! Then, as root, the capture itself: the sensor binary on a veth pair, fed by tcpreplay
//! at rising rates (`sensor/wire.rs`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use metapu::broker::{binary_in, free_port, LocalBroker};
use metapu::monitor::record::Format;
use metapu::sensor::{Batching, RecordProducer, RecordSink, Sensor, SensorMetrics, SensorSettings};
use metapu::traffic::capture::{CaptureReader, Frame, Timestamp};
use metapu::traffic::frame::Link;

#[path = "sensor/wire.rs"]
mod wire;

const ROUNDS: u64 = 100;

struct Nowhere;

impl RecordSink for Nowhere {
    fn send(&self, _: &str, payload: &[u8], _: u32) {
        std::hint::black_box(payload);
    }
}

struct Owned {
    nanos: u64,
    orig_len: u32,
    data: Vec<u8>,
}

fn frames(root: &std::path::Path) -> Vec<Owned> {
    let mut reader =
        CaptureReader::open(&root.join("data/pcap/kitsune/mirai2000.pcap")).expect("the capture");
    let mut out = Vec::new();
    while let Some(f) = reader.next_frame().expect("a frame") {
        assert!(matches!(f.link, Link::Ethernet));
        out.push(Owned { nanos: f.ts.nanos(), orig_len: f.orig_len, data: f.data.to_vec() });
    }
    out
}

fn sensor(batching: Batching) -> Sensor {
    let settings = SensorSettings {
        devices_file: None,
        format: Format::Binary,
        discover: true,
        max_discovered: 256,
        batching,
    };
    Sensor::new(settings, Arc::new(SensorMetrics::new())).expect("a sensor")
}

/// The shipped defaults' batching (`sensor.batch_records`, `batch_wait_ms`).
fn default_batching() -> Batching {
    metapu::daemon::config::DaemonConfig::defaults().sensor.batching()
}

/// Every frame, `ROUNDS` times, each round later than the last; packets taken.
fn feed(sensor: &mut Sensor, frames: &[Owned], sink: &impl RecordSink) -> u64 {
    let span = frames.last().map_or(0, |f| f.nanos) - frames.first().map_or(0, |f| f.nanos) + 1_000_000;
    for round in 0..ROUNDS {
        for (i, f) in frames.iter().enumerate() {
            let frame = Frame {
                index: round * frames.len() as u64 + i as u64,
                ts: Timestamp::from_nanos(f.nanos + round * span),
                link: Link::Ethernet,
                orig_len: f.orig_len,
                data: &f.data,
            };
            sensor.take(&frame, sink);
            sensor.flush_due(Instant::now(), sink);
        }
    }
    sensor.flush(sink);
    ROUNDS * frames.len() as u64
}

/// User + system CPU seconds of this process, every thread (the Kafka client's too;
/// the broker is another process).
fn cpu_seconds() -> f64 {
    // SAFETY: getrusage fills the struct it is given.
    let usage = unsafe {
        let mut u: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut u);
        u
    };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    secs(usage.ru_utime) + secs(usage.ru_stime)
}

fn main() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let frames = frames(root);
    println!(
        "metapu sensor benchmark: {} real frames × {ROUNDS}, every host a device, binary records, one thread\n",
        frames.len()
    );
    println!("| into | packets | records | seconds | packets/s | this process's CPU µs/packet |");
    println!("|---|---:|---:|---:|---:|---:|");

    let batching = default_batching();
    let mut s = sensor(batching);
    let (started, cpu) = (Instant::now(), cpu_seconds());
    let packets = feed(&mut s, &frames, &Nowhere);
    let (secs, cpu) = (started.elapsed().as_secs_f64(), cpu_seconds() - cpu);
    println!(
        "| no sink (extraction + encoding + batching) | {packets} | – | {secs:.2} | {:.0} | {:.2} |",
        packets as f64 / secs,
        cpu * 1e6 / packets as f64
    );

    let port = free_port().expect("a free port");
    let broker = LocalBroker::start(&binary_in(root), port).expect("the bundled broker (scripts/setup.sh)");
    // A message per record (as before batches), then the defaults' batches, side by side.
    let rows = [
        ("the bundled broker, a message per record, to the last acknowledgement", Batching::NONE),
        (
            &*format!(
                "the bundled broker, up to {} records a message (the default), to the last acknowledgement",
                batching.records
            ),
            batching,
        ),
    ];
    for (i, (what, batching)) in rows.into_iter().enumerate() {
        let metrics = Arc::new(SensorMetrics::new());
        let client = {
            let mut c = rdkafka::config::ClientConfig::new();
            c.set("bootstrap.servers", format!("127.0.0.1:{port}")).set("linger.ms", "5");
            c
        };
        let topic = format!("bench.sensor.{i}");
        let producer = RecordProducer::new(client, &topic, 1_000_000, metrics.clone()).expect("a producer");
        let mut s = sensor(batching);
        let (started, cpu) = (Instant::now(), cpu_seconds());
        let packets = feed(&mut s, &frames, &producer);
        let flushed = producer.finish(Duration::from_secs(120));
        let (secs, cpu) = (started.elapsed().as_secs_f64(), cpu_seconds() - cpu);
        let delivered = metrics.records_produced.get();
        println!(
            "| {what} | {packets} | {delivered} | {secs:.2} | {:.0} | {:.2} |",
            packets as f64 / secs,
            cpu * 1e6 / packets as f64
        );
        assert_eq!(flushed.unsent, 0, "every record delivered");
    }

    drop(broker);
    wire::run(root);
}
