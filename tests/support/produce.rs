//! Producing at full speed, shared by the tests and the broker benchmarks
//! (benches/common includes this file).

use std::time::Duration;

use rdkafka::message::ToBytes;
use rdkafka::producer::{BaseRecord, DefaultProducerContext, ThreadedProducer};

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
