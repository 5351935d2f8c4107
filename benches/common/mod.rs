//! What the broker-backed benchmarks share.

use std::time::Duration;

use rdkafka::message::ToBytes;
use rdkafka::producer::{BaseRecord, DefaultProducerContext, ThreadedProducer};

/// A process's resident memory, MiB (0 when /proc cannot say).
pub fn rss_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

/// Queue a record, waiting for room in the producer's queue as long as it takes.
pub fn send_until_queued<K: ToBytes + ?Sized, P: ToBytes + ?Sized>(
    producer: &ThreadedProducer<DefaultProducerContext>,
    mut record: BaseRecord<'_, K, P>,
) {
    loop {
        match producer.send(record) {
            Ok(()) => return,
            Err((_, r)) => {
                record = r;
                producer.poll(Duration::from_millis(5));
            }
        }
    }
}
