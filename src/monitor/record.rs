//! Input records: `{"device": str, "ts": seconds, "features": [floats], "label": "normal",
//! "context": {…}}` (label and context optional; the context: [`Context`]) or the same
//! fields in the binary layout of [`encode_binary`], with the device also (or only) in
//! the message key. Anything else is refused with a
//! reason that goes to the dead-letter topic.

use serde::Deserialize;

use crate::traffic::context::Context;

/// Where a record came from: its topic, partition and offset, and its place in a batch
/// message (0 for a message of one record, and then not written out).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Source {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    #[serde(default, skip_serializing_if = "is_first")]
    pub index: u32,
}

fn is_first(index: &u32) -> bool {
    *index == 0
}

impl Source {
    /// The first (or only) record of the message at `offset`.
    pub fn new(topic: impl Into<String>, partition: i32, offset: i64) -> Self {
        Self { topic: topic.into(), partition, offset, index: 0 }
    }

    /// Its order within its partition: offset, then place in a batch.
    pub fn position(&self) -> (i64, u32) {
        (self.offset, self.index)
    }

    /// The coordinates as text for deterministic ids: a batch's later records add their
    /// place, so ids of single-record messages stay what they were.
    pub fn id_text(&self) -> String {
        match self.index {
            0 => format!("{}\u{0}{}\u{0}{}", self.topic, self.partition, self.offset),
            i => format!("{}\u{0}{}\u{0}{}\u{0}{i}", self.topic, self.partition, self.offset),
        }
    }
}

/// A decoded, validated feature record.
#[derive(Debug, Clone, PartialEq)]
pub struct FeatureRecord {
    pub device: String,
    pub ts: f64,
    pub features: Vec<f32>,
    /// Operator- or onboarding-confirmed normal traffic: enters the positive window.
    pub known_normal: bool,
    /// The packet behind the record, when the producer sent it.
    pub context: Option<Context>,
}

/// Why a message was refused; the text goes to the dead-letter record.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidRecord {
    #[error("message is empty")]
    Empty,
    #[error("message is {size} bytes, over the {limit}-byte limit")]
    Oversized { size: usize, limit: usize },
    #[error("message is not UTF-8")]
    NotUtf8,
    #[error("malformed JSON: {0}")]
    Malformed(String),
    #[error("malformed binary record: {0}")]
    MalformedBinary(String),
    #[error("no device: neither the key nor the \"device\" field names one")]
    NoDevice,
    #[error("the key names device '{key}' but the record says '{field}'")]
    DeviceMismatch { key: String, field: String },
    #[error("{found} features, the model expects {expected}")]
    WrongDimension { found: usize, expected: usize },
    #[error("feature {index} is not a finite 32-bit number")]
    NonFinite { index: usize },
    #[error("NaN or Infinity at line {line}, column {column}: JSON has no such numbers")]
    NonFiniteLiteral { line: usize, column: usize },
    #[error("ts is not a finite number of seconds")]
    BadTimestamp,
    #[error("label '{0}' is not \"normal\" or \"anomalous\"")]
    BadLabel(String),
}

impl InvalidRecord {
    /// Every value of [`InvalidRecord::kind`].
    pub const KINDS: [&'static str; 10] = [
        "empty",
        "oversized",
        "not_utf8",
        "malformed",
        "no_device",
        "device_mismatch",
        "wrong_dimension",
        "non_finite",
        "bad_timestamp",
        "bad_label",
    ];

    /// Short, fixed label for metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Empty => "empty",
            Self::Oversized { .. } => "oversized",
            Self::NotUtf8 => "not_utf8",
            Self::Malformed(_) | Self::MalformedBinary(_) => "malformed",
            Self::NoDevice => "no_device",
            Self::DeviceMismatch { .. } => "device_mismatch",
            Self::WrongDimension { .. } => "wrong_dimension",
            Self::NonFinite { .. } | Self::NonFiniteLiteral { .. } => "non_finite",
            Self::BadTimestamp => "bad_timestamp",
            Self::BadLabel(_) => "bad_label",
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Wire {
    device: Option<String>,
    ts: f64,
    features: Vec<f64>,
    label: Option<String>,
    context: Option<Context>,
}

/// First bytes of a binary record (see [`encode_binary`]); JSON cannot start so.
pub const BINARY_MAGIC: &[u8; 4] = b"MPR1";

/// A message's fields, from JSON or binary, before the checks both formats share.
struct Fields {
    device: Option<String>,
    ts: f64,
    features: Vec<f32>,
    /// Index of the first feature that did not fit a finite f32.
    non_finite: Option<usize>,
    known_normal: bool,
    context: Option<Context>,
}

fn binary_fields(value: &[u8]) -> Result<Fields, InvalidRecord> {
    let bad = |what: &str| InvalidRecord::MalformedBinary(what.to_string());
    let mut at = BINARY_MAGIC.len();
    let mut take = |n: usize, what: &str| -> Result<&[u8], InvalidRecord> {
        let part = value.get(at..at + n).ok_or_else(|| bad(&format!("ends inside {what}")))?;
        at += n;
        Ok(part)
    };
    let flags = take(1, "the flags")?[0];
    if flags & !3 != 0 {
        return Err(bad(&format!("unknown flag bits {flags:#04x}")));
    }
    let len = u16::from_le_bytes(take(2, "the device length")?.try_into().map_err(|_| bad("device length"))?);
    let device =
        std::str::from_utf8(take(usize::from(len), "the device")?).map_err(|_| InvalidRecord::NotUtf8)?;
    let ts = f64::from_le_bytes(take(8, "ts")?.try_into().map_err(|_| bad("ts"))?);
    let n = u32::from_le_bytes(take(4, "the feature count")?.try_into().map_err(|_| bad("feature count"))?)
        as usize;
    let raw = take(n.checked_mul(4).ok_or_else(|| bad("feature count"))?, "the features")?;
    let features: Vec<f32> =
        raw.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
    let context = if flags & 2 == 2 {
        let (context, used) =
            Context::decode_binary(value.get(at..).unwrap_or_default()).map_err(|e| bad(&e.0))?;
        at += used;
        Some(context)
    } else {
        None
    };
    if at != value.len() {
        return Err(bad(&format!("{} bytes after the record", value.len() - at)));
    }
    Ok(Fields {
        device: (!device.is_empty()).then(|| device.to_string()),
        ts,
        non_finite: features.iter().position(|v| !v.is_finite()),
        features,
        known_normal: flags & 1 == 1,
        context,
    })
}

fn json_fields(value: &[u8]) -> Result<Fields, InvalidRecord> {
    let text = std::str::from_utf8(value).map_err(|_| InvalidRecord::NotUtf8)?;
    let wire: Wire = serde_json::from_str(text).map_err(|e| refusal_of(text, &e))?;
    let known_normal = match wire.label.as_deref() {
        None | Some("anomalous") => false,
        Some("normal") => true,
        Some(other) => return Err(InvalidRecord::BadLabel(other.into())),
    };
    // Values beyond f32's range become infinite here and are refused below.
    let features: Vec<f32> = wire.features.iter().map(|&v| v as f32).collect();
    Ok(Fields {
        device: wire.device,
        ts: wire.ts,
        non_finite: features.iter().position(|v| !v.is_finite()),
        features,
        known_normal,
        context: wire.context,
    })
}

/// Decode and validate one message: JSON, or binary when it starts with
/// [`BINARY_MAGIC`].
pub fn decode(
    key: Option<&[u8]>,
    value: &[u8],
    dim: usize,
    max_bytes: usize,
) -> Result<FeatureRecord, InvalidRecord> {
    if value.is_empty() {
        return Err(InvalidRecord::Empty);
    }
    if value.len() > max_bytes {
        return Err(InvalidRecord::Oversized { size: value.len(), limit: max_bytes });
    }
    let wire = if value.starts_with(BINARY_MAGIC) { binary_fields(value)? } else { json_fields(value)? };
    let key = key.map(|k| std::str::from_utf8(k).map_err(|_| InvalidRecord::NotUtf8)).transpose()?;
    let device = match (key.filter(|k| !k.is_empty()), wire.device) {
        (Some(k), Some(f)) if k != f => {
            return Err(InvalidRecord::DeviceMismatch { key: k.into(), field: f })
        }
        (Some(k), _) => k.to_string(),
        (None, Some(f)) if !f.is_empty() => f,
        _ => return Err(InvalidRecord::NoDevice),
    };
    if !wire.ts.is_finite() {
        return Err(InvalidRecord::BadTimestamp);
    }
    if wire.features.len() != dim {
        return Err(InvalidRecord::WrongDimension { found: wire.features.len(), expected: dim });
    }
    if let Some(index) = wire.non_finite {
        return Err(InvalidRecord::NonFinite { index });
    }
    Ok(FeatureRecord {
        device,
        ts: wire.ts,
        features: wire.features,
        known_normal: wire.known_normal,
        context: wire.context,
    })
}

/// Why serde_json refused `text`. Producers such as Python's `json.dumps` write
/// `NaN` and `Infinity` by default; name them rather than calling the JSON malformed.
fn refusal_of(text: &str, e: &serde_json::Error) -> InvalidRecord {
    let (line, column) = (e.line(), e.column());
    let at = text.lines().nth(line.saturating_sub(1)).map(|l| {
        // serde_json's column is 1-based and points at (or just past) the offending byte.
        let i = column.saturating_sub(1).min(l.len());
        (i.saturating_sub(1)..=i).filter_map(|i| l.get(i..)).any(|rest| {
            let rest = rest.trim_start_matches('-');
            rest.starts_with("NaN") || rest.starts_with("Infinity")
        })
    });
    if at == Some(true) {
        InvalidRecord::NonFiniteLiteral { line, column }
    } else {
        InvalidRecord::Malformed(e.to_string())
    }
}

/// Encode a record in the binary input format: [`BINARY_MAGIC`], a flags byte (bit 0:
/// known normal; bit 1: a context follows the features), the device (u16 length,
/// UTF-8), ts (f64), the feature count (u32), the features (f32) and the context
/// ([`Context::encode_binary`]), all little-endian. A third of the JSON's size, and
/// decoded without parsing text. Devices of over 65,535 bytes are cut.
pub fn encode_binary(
    device: &str,
    ts: f64,
    features: &[f32],
    known_normal: bool,
    context: Option<&Context>,
) -> Vec<u8> {
    let name = &device.as_bytes()[..device.len().min(u16::MAX as usize)];
    let mut out = Vec::with_capacity(4 + 1 + 2 + name.len() + 8 + 4 + 4 * features.len());
    out.extend_from_slice(BINARY_MAGIC);
    out.push(u8::from(known_normal) | (u8::from(context.is_some()) << 1));
    out.extend_from_slice(&(name.len() as u16).to_le_bytes());
    out.extend_from_slice(name);
    out.extend_from_slice(&ts.to_le_bytes());
    out.extend_from_slice(&(features.len() as u32).to_le_bytes());
    for v in features {
        out.extend_from_slice(&v.to_le_bytes());
    }
    if let Some(c) = context {
        c.encode_binary(&mut out);
    }
    out
}

/// First bytes of a batch message; neither JSON nor a binary record starts so.
pub const BATCH_MAGIC: &[u8; 4] = b"MPB1";

/// A batch message: [`BATCH_MAGIC`], then per record its length (u32, little-endian)
/// and its bytes, each a record of either format. One Kafka message for many records
/// of one device cuts the client's cost per record (the sensor's bound); each record
/// is still checked, and refused, on its own.
#[derive(Debug, Clone)]
pub struct Batch {
    bytes: Vec<u8>,
    records: u32,
}

impl Default for Batch {
    fn default() -> Self {
        Self { bytes: BATCH_MAGIC.to_vec(), records: 0 }
    }
}

impl Batch {
    pub fn push(&mut self, record: &[u8]) {
        let len = u32::try_from(record.len()).expect("a record under 4 GiB");
        self.bytes.extend_from_slice(&len.to_le_bytes());
        self.bytes.extend_from_slice(record);
        self.records += 1;
    }

    pub fn records(&self) -> u32 {
        self.records
    }

    /// The message, and the batch emptied for the next records.
    pub fn take(&mut self) -> Vec<u8> {
        self.records = 0;
        std::mem::replace(&mut self.bytes, BATCH_MAGIC.to_vec())
    }

    /// What to send of it, emptying it: nothing when it is empty, a lone record as
    /// itself (the format every reader knows), else the batch message.
    pub fn take_message(&mut self) -> Option<Vec<u8>> {
        match self.records {
            0 => None,
            // The magic and the record's length before it.
            1 => Some(self.take().split_off(BATCH_MAGIC.len() + 4)),
            _ => Some(self.take()),
        }
    }
}

/// What a message holds, before any record is decoded.
#[derive(Debug)]
pub enum Records<'a> {
    /// One record: the message itself.
    One,
    /// A batch message's records, in order.
    Batch(Vec<&'a [u8]>),
    /// Over the size limit, or a batch with broken framing or no record: one refusal.
    Refused(InvalidRecord),
}

/// What `value` holds: one record or a batch's ([`Batch`]), or why it is refused whole.
pub fn records_of(value: &[u8], max_bytes: usize) -> Records<'_> {
    if value.len() > max_bytes {
        return Records::Refused(InvalidRecord::Oversized { size: value.len(), limit: max_bytes });
    }
    let Some(mut rest) = value.strip_prefix(BATCH_MAGIC.as_slice()) else { return Records::One };
    let bad = |what: String| Records::Refused(InvalidRecord::MalformedBinary(format!("batch: {what}")));
    let mut parts = Vec::new();
    while !rest.is_empty() {
        let Some((len, after)) = rest.split_first_chunk::<4>() else {
            return bad(format!("ends inside the length of record {}", parts.len()));
        };
        let len = u32::from_le_bytes(*len) as usize;
        let Some((part, after)) = after.split_at_checked(len) else {
            return bad(format!("record {} says {len} bytes, {} follow", parts.len(), after.len()));
        };
        parts.push(part);
        rest = after;
    }
    if parts.is_empty() {
        return bad("no records".into());
    }
    Records::Batch(parts)
}

/// How many records a message holds, without decoding them: a batch's count (read off
/// its lengths), else 1 (a refused batch too).
pub fn records_in(value: &[u8]) -> usize {
    let Some(mut rest) = value.strip_prefix(BATCH_MAGIC.as_slice()) else { return 1 };
    let mut n = 0;
    while let Some((len, after)) = rest.split_first_chunk::<4>() {
        let Some(next) = after.get(u32::from_le_bytes(*len) as usize..) else { break };
        rest = next;
        n += 1;
    }
    n.max(1)
}

/// Every record of one message, each decoded on its own ([`decode`]); a refused batch
/// is one refusal.
pub fn decode_message(
    key: Option<&[u8]>,
    value: &[u8],
    dim: usize,
    max_bytes: usize,
) -> Vec<Result<FeatureRecord, InvalidRecord>> {
    match records_of(value, max_bytes) {
        Records::One => vec![decode(key, value, dim, max_bytes)],
        Records::Refused(e) => vec![Err(e)],
        Records::Batch(parts) => parts.into_iter().map(|p| decode(key, p, dim, max_bytes)).collect(),
    }
}

/// Encode a record in the input format (replay tools, tests).
pub fn encode(device: &str, ts: f64, features: &[f32], known_normal: bool) -> Vec<u8> {
    encode_with_context(device, ts, features, known_normal, None)
}

/// [`encode`], with the packet's context.
pub fn encode_with_context(
    device: &str,
    ts: f64,
    features: &[f32],
    known_normal: bool,
    context: Option<&Context>,
) -> Vec<u8> {
    let mut v = serde_json::json!({ "device": device, "ts": ts, "features": features });
    if known_normal {
        v["label"] = "normal".into();
    }
    if let Some(c) = context {
        v["context"] = serde_json::to_value(c).expect("a context serialises");
    }
    serde_json::to_vec(&v).expect("record serialises")
}

/// How records are written to Kafka: the daemon reads both. (Plain comments on the
/// variants: documented values would turn every command's `--help` into the long form.)
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    // `{"device", "ts", "features", "label"}`.
    Json,
    // The compact binary layout (`MPR1`…, [`encode_binary`]).
    Binary,
}

impl Format {
    pub fn encode(
        self,
        device: &str,
        ts: f64,
        features: &[f32],
        known_normal: bool,
        context: Option<&Context>,
    ) -> Vec<u8> {
        match self {
            Format::Json => encode_with_context(device, ts, features, known_normal, context),
            Format::Binary => encode_binary(device, ts, features, known_normal, context),
        }
    }
}
