//! `make bench`: what `metapu sense` extracts and produces on one core. The frames of
//! Kitsune's real camera network (data/pcap/kitsune/mirai2000.pcap, 12 hosts), replayed
//! in memory 100 times over with their times moved on, go through the sensor's loop body
//! (route by MAC, AfterImage per device, a binary record per packet per device) with
//! every host a device (as `--discover` makes them):
//! - into no sink: extraction and encoding alone;
//! - into the Kafka producer and the bundled broker, timed to the last acknowledgement.
//!
//! Then, as root, the capture itself: the sensor binary on a veth pair, fed by tcpreplay
//! at rising rates (`sensor/wire.rs`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use metapu::broker::{binary_in, free_port, LocalBroker};
use metapu::monitor::record::Format;
use metapu::sensor::{RecordProducer, RecordSink, Sensor, SensorMetrics, SensorSettings};
use metapu::traffic::capture::{CaptureReader, Frame, Timestamp};
use metapu::traffic::frame::Link;

#[path = "sensor/wire.rs"]
mod wire;

const ROUNDS: u64 = 100;

struct Nowhere;

impl RecordSink for Nowhere {
    fn send(&self, _: &str, payload: &[u8]) {
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

fn sensor() -> Sensor {
    let settings =
        SensorSettings { devices_file: None, format: Format::Binary, discover: true, max_discovered: 256 };
    Sensor::new(settings, Arc::new(SensorMetrics::new())).expect("a sensor")
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
        }
    }
    ROUNDS * frames.len() as u64
}

fn main() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let frames = frames(root);
    println!(
        "metapu sensor benchmark: {} real frames × {ROUNDS}, every host a device, binary records, one thread\n",
        frames.len()
    );
    println!("| into | packets | records | seconds | packets/s |");
    println!("|---|---:|---:|---:|---:|");

    let mut s = sensor();
    let started = Instant::now();
    let packets = feed(&mut s, &frames, &Nowhere);
    let secs = started.elapsed().as_secs_f64();
    println!(
        "| no sink (extraction + encoding) | {packets} | – | {secs:.2} | {:.0} |",
        packets as f64 / secs
    );

    let port = free_port().expect("a free port");
    let broker = LocalBroker::start(&binary_in(root), port).expect("the bundled broker (scripts/setup.sh)");
    let metrics = Arc::new(SensorMetrics::new());
    let client = {
        let mut c = rdkafka::config::ClientConfig::new();
        c.set("bootstrap.servers", format!("127.0.0.1:{port}")).set("linger.ms", "5");
        c
    };
    let producer =
        RecordProducer::new(client, "bench.sensor", 1_000_000, metrics.clone()).expect("a producer");
    let mut s = sensor();
    let started = Instant::now();
    let packets = feed(&mut s, &frames, &producer);
    let flushed = producer.finish(Duration::from_secs(120));
    let secs = started.elapsed().as_secs_f64();
    let delivered = metrics.records_produced.get();
    println!(
        "| the bundled broker, to the last acknowledgement | {packets} | {delivered} | {secs:.2} | {:.0} |",
        packets as f64 / secs
    );
    assert_eq!(flushed.unsent, 0, "every record delivered");

    drop(broker);
    wire::run(root);
}
