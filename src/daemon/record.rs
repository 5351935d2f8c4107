//! Input records: `{"device": str, "ts": seconds, "features": [floats], "label": "normal"}`
//! with the device also (or only) in the message key. Anything else is refused with a
//! reason that goes to the dead-letter topic.

use serde::Deserialize;

/// A decoded, validated feature record.
#[derive(Debug, Clone, PartialEq)]
pub struct FeatureRecord {
    pub device: String,
    pub ts: f64,
    pub features: Vec<f32>,
    /// Operator- or onboarding-confirmed normal traffic: enters the positive window.
    pub known_normal: bool,
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
            Self::Malformed(_) => "malformed",
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
}

/// Decode and validate one message.
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
    let text = std::str::from_utf8(value).map_err(|_| InvalidRecord::NotUtf8)?;
    let wire: Wire = serde_json::from_str(text).map_err(|e| refusal_of(text, &e))?;
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
    let mut features = Vec::with_capacity(dim);
    for (index, &v) in wire.features.iter().enumerate() {
        let f = v as f32;
        if !f.is_finite() {
            return Err(InvalidRecord::NonFinite { index });
        }
        features.push(f);
    }
    let known_normal = match wire.label.as_deref() {
        None | Some("anomalous") => false,
        Some("normal") => true,
        Some(other) => return Err(InvalidRecord::BadLabel(other.into())),
    };
    Ok(FeatureRecord { device, ts: wire.ts, features, known_normal })
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

/// Encode a record in the input format (replay tools, tests).
pub fn encode(device: &str, ts: f64, features: &[f32], known_normal: bool) -> Vec<u8> {
    let mut v = serde_json::json!({ "device": device, "ts": ts, "features": features });
    if known_normal {
        v["label"] = "normal".into();
    }
    serde_json::to_vec(&v).expect("record serialises")
}
