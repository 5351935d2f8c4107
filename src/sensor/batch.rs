//! A device's records held for one Kafka message ([`Batch`]): a message per record
//! cost the sensor about half its CPU (the client's work per message). A batch goes
//! when it is full or at the next flush, which the loop makes every `wait`, so no
//! record waits much longer than that.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::monitor::record::Batch;

use super::producer::RecordSink;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Batching {
    /// Records per message at most; 1: each record its own message, as before batches.
    pub records: u32,
    /// A record waits at most about this long for its batch to fill.
    pub wait: Duration,
}

impl Batching {
    pub const NONE: Self = Self { records: 1, wait: Duration::ZERO };
}

pub struct Batcher {
    batching: Batching,
    /// Keyed by device name: the sensor's device indices change when its list does.
    pending: HashMap<String, Batch, ahash::RandomState>,
    last_flush: Instant,
}

impl Batcher {
    pub fn new(batching: Batching) -> Self {
        Self { batching, pending: HashMap::default(), last_flush: Instant::now() }
    }

    /// One record of `device`: sent at once without batching or when it fills the batch.
    pub fn add(&mut self, device: &str, record: &[u8], sink: &impl RecordSink) {
        if self.batching.records <= 1 {
            return sink.send(device, record, 1);
        }
        let batch = match self.pending.get_mut(device) {
            Some(b) => b,
            None => self.pending.entry(device.to_string()).or_default(),
        };
        batch.push(record);
        if batch.records() >= self.batching.records {
            let records = batch.records();
            sink.send(device, &batch.take(), records);
        }
    }

    /// Send every batch when `wait` has passed since the last flush.
    pub fn flush_due(&mut self, now: Instant, sink: &impl RecordSink) {
        if now.duration_since(self.last_flush) >= self.batching.wait {
            self.flush(sink);
            self.last_flush = now;
        }
    }

    /// Send every batch that holds a record (a lone record as itself).
    pub fn flush(&mut self, sink: &impl RecordSink) {
        for (device, batch) in &mut self.pending {
            let records = batch.records();
            if let Some(message) = batch.take_message() {
                sink.send(device, &message, records);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;

    use super::*;
    use crate::monitor::record::{self, FeatureRecord};

    #[derive(Default)]
    struct Sent(RefCell<Vec<(String, Vec<u8>, u32)>>);

    impl RecordSink for Sent {
        fn send(&self, device: &str, payload: &[u8], records: u32) {
            self.0.borrow_mut().push((device.to_string(), payload.to_vec(), records));
        }
    }

    impl Sent {
        /// Each message's device, its record count as sent, and its records' times.
        fn messages(&self) -> Vec<(String, u32, Vec<f64>)> {
            let decoded = |d: &str, v: &[u8]| -> Vec<f64> {
                record::decode_message(Some(d.as_bytes()), v, 2, 1 << 20)
                    .into_iter()
                    .map(|r| r.map(|r: FeatureRecord| r.ts).expect("a valid record"))
                    .collect()
            };
            self.0.borrow().iter().map(|(d, v, n)| (d.clone(), *n, decoded(d, v))).collect()
        }
    }

    fn rec(device: &str, ts: f64) -> Vec<u8> {
        record::encode_binary(device, ts, &[1.0, 2.0], false, None)
    }

    #[test]
    fn a_full_batch_goes_at_once_and_the_rest_at_the_flush_in_order() {
        let sink = Sent::default();
        let mut b = Batcher::new(Batching { records: 3, wait: Duration::from_millis(50) });
        for (i, d) in ["a", "a", "b", "a", "a"].into_iter().enumerate() {
            b.add(d, &rec(d, i as f64), &sink);
        }
        assert_eq!(sink.messages(), vec![("a".into(), 3, vec![0.0, 1.0, 3.0])]);
        let start = b.last_flush;
        b.flush_due(start + Duration::from_millis(10), &sink);
        assert_eq!(sink.messages().len(), 1, "not yet due");
        b.flush_due(start + Duration::from_millis(50), &sink);
        let mut got = sink.messages();
        got.sort_by(|x, y| x.0.cmp(&y.0).then(x.1.cmp(&y.1)));
        assert_eq!(
            got,
            vec![
                ("a".into(), 1, vec![4.0]),
                ("a".into(), 3, vec![0.0, 1.0, 3.0]),
                ("b".into(), 1, vec![2.0])
            ]
        );
        // A lone record is sent as itself, not as a batch of one.
        assert!(sink.0.borrow().iter().filter(|m| m.2 == 1).all(|m| m.1.starts_with(record::BINARY_MAGIC)));
        b.flush(&sink);
        assert_eq!(sink.messages().len(), 3, "nothing left to send");
    }

    #[test]
    fn without_batching_each_record_is_its_own_message() {
        let sink = Sent::default();
        let mut b = Batcher::new(Batching::NONE);
        b.add("a", &rec("a", 1.0), &sink);
        b.add("a", &rec("a", 2.0), &sink);
        assert_eq!(sink.messages(), vec![("a".into(), 1, vec![1.0]), ("a".into(), 1, vec![2.0])]);
        assert_eq!(sink.0.borrow()[0].1, rec("a", 1.0));
    }
}
