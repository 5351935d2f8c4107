//! What comes in: a message as received (`Received`) and with its decode result
//! (`Consumed`); a micro-batch's messages decoded into records (a batch message into
//! each of its records), and the input offsets a processed batch releases.

use std::collections::HashMap;

use super::record::Source;
use super::record::{self, FeatureRecord};

/// One input message: where it came from and its bytes (a Kafka message, or a
/// capture's record built in place).
#[derive(Debug, Clone)]
pub struct Received {
    pub source: Source,
    pub key: Option<Vec<u8>>,
    pub payload: Vec<u8>,
}

/// One input message with its decode result.
#[derive(Debug)]
pub struct Consumed {
    /// The message, its bytes kept for a dead letter (none for a record built in place).
    pub message: Received,
    pub decoded: Result<FeatureRecord, record::InvalidRecord>,
    /// Its partition's stream time at it, stamped as it enters the pipeline
    /// (`stream_time.rs`); NaN until then.
    pub(super) stamp: f64,
}

impl Consumed {
    pub fn new(message: Received, decoded: Result<FeatureRecord, record::InvalidRecord>) -> Self {
        Self { message, decoded, stamp: f64::NAN }
    }

    /// A record that needs no decoding (the lab's captures, tests).
    pub fn record(record: FeatureRecord, source: Source) -> Self {
        Self::new(Received { source, key: None, payload: Vec::new() }, Ok(record))
    }

    pub(super) fn source(&self) -> &Source {
        &self.message.source
    }
}

/// Highest consumed offset of one input partition in a batch.
pub type PartitionOffset = (String, i32, i64);

/// Below this many messages a micro-batch is decoded on the service thread alone.
const PARALLEL_DECODE_FROM: usize = 512;

/// Decode a micro-batch, on two threads when it is large: decoding (JSON above all)
/// costs as much as scoring, and the scoring forward is not running meanwhile.
pub fn decode_batch(messages: Vec<Received>, dim: usize, max_bytes: usize) -> Vec<Consumed> {
    let decode_all = |messages: Vec<Received>| {
        let mut out = Vec::with_capacity(messages.len());
        for m in messages {
            decode_message(m, dim, max_bytes, &mut out);
        }
        out
    };
    if messages.len() < PARALLEL_DECODE_FROM {
        return decode_all(messages);
    }
    let mut first = messages;
    let second = first.split_off(first.len() / 2);
    std::thread::scope(|s| {
        let other = s.spawn(|| decode_all(second));
        let mut out: Vec<Consumed> = decode_all(first);
        // Decoding does not panic on any input (fuzzed). Should it, the panic goes on
        // as it would have on one thread, rather than half the batch going missing.
        out.extend(other.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic)));
        out
    })
}

/// One message's records onto `out`: the message itself, or each record of a batch
/// message under its place in the batch ([`Source::index`]), keeping its own bytes only
/// when it is refused (for its dead letter).
fn decode_message(message: Received, dim: usize, max_bytes: usize, out: &mut Vec<Consumed>) {
    let parts = match record::records_of(&message.payload, max_bytes) {
        record::Records::Batch(parts) => parts,
        record::Records::Refused(refused) => return out.push(Consumed::new(message, Err(refused))),
        record::Records::One => {
            let decoded = record::decode(message.key.as_deref(), &message.payload, dim, max_bytes);
            return out.push(Consumed::new(message, decoded));
        }
    };
    for (index, part) in parts.into_iter().enumerate() {
        let decoded = record::decode(message.key.as_deref(), part, dim, max_bytes);
        let source = Source { index: index as u32, ..message.source.clone() };
        let payload = if decoded.is_err() { part.to_vec() } else { Vec::new() };
        out.push(Consumed::new(Received { source, key: message.key.clone(), payload }, decoded));
    }
}

/// Highest offset per partition of fully processed messages.
pub fn highest_offsets<'a>(sources: impl IntoIterator<Item = &'a Source>) -> Vec<PartitionOffset> {
    let mut highest: HashMap<(&str, i32), i64> = HashMap::new();
    for s in sources {
        let e = highest.entry((s.topic.as_str(), s.partition)).or_insert(s.offset);
        *e = (*e).max(s.offset);
    }
    highest.into_iter().map(|((t, p), o)| (t.to_string(), p, o)).collect()
}

/// The offsets a processed micro-batch releases: per input partition its highest
/// offset, but below every record still deferred on that partition (a deferred record
/// is scored by a later batch, and its offset must not be committed before).
pub fn releasable_offsets(batch: &[Consumed], deferred: &[Consumed]) -> Vec<PartitionOffset> {
    let mut offsets = highest_offsets(batch.iter().map(Consumed::source));
    for (topic, partition, offset) in &mut offsets {
        for c in
            deferred.iter().map(Consumed::source).filter(|c| c.topic == *topic && c.partition == *partition)
        {
            *offset = (*offset).min(c.offset - 1);
        }
    }
    offsets.retain(|(_, _, o)| *o >= 0);
    offsets
}
