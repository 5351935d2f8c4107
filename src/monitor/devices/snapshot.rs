//! Device-window snapshots for the state topic: a small binary layout.
//!
//! A device's state is up to three records (keys from [`Part::key`]): its main record
//! (`MPS4`: the `MPS3` layout with no rows, keyed by the device), its known-normal rows
//! and its unlabeled rows (`MPW1`: dim, rows (u32 LE each), the f32 LE values; keyed by
//! the device and a suffix no device name has; the unlabeled rows as `MPW2`: `MPW1`'s
//! layout, then the newest rows' count and the ring's next slot (u32 LE each), every
//! row's time bucket (i64 LE), the rows pushed (u64 LE) and the spread rows' priorities
//! (u64 LE each), so that a restored window goes on as the written one would:
//! `span_window.rs`). The main record changes with every
//! record and is small; the known-normal rows are written when they change, the
//! unlabeled rows less often: most of a full snapshot's bytes were the unlabeled window.
//! [`StateTopic`] puts a device's records back together.
//!
//! `MPS3`: dim, positive rows, unlabeled rows (u32 LE each), records seen (u64 LE),
//! the newest input record in the windows (partition i32, offset i64, topic length
//! u16 and bytes; offset −1 when none), the f32 LE values, then the device's incident
//! state as JSON (u32 LE length and bytes; with the behaviours analysts dismissed;
//! older snapshots' `learning` is ignored). `MPS2` (no incident state) and `MPS1` (no
//! source either) are still read. Windows, not adapted states, are stored: they outlive
//! a model change.

use serde::{Deserialize, Serialize};

use super::onboarding::Onboarding;
use super::span_window::SpanLayout;
use crate::model::TaskState;
use crate::monitor::incidents::IncidentTracker;
use crate::monitor::record::Source;

const MAGIC_V1: &[u8; 4] = b"MPS1";
const MAGIC_V2: &[u8; 4] = b"MPS2";
const MAGIC_V3: &[u8; 4] = b"MPS3";
const MAGIC_V4: &[u8; 4] = b"MPS4";
const MAGIC_ROWS: &[u8; 4] = b"MPW1";
const MAGIC_SPAN_ROWS: &[u8; 4] = b"MPW2";
const COUNTS: usize = 4 + 4 + 4 + 4 + 8;

#[derive(Debug, Clone, PartialEq)]
pub struct Snapshot {
    pub dim: usize,
    pub positive: Vec<f32>,
    pub unlabeled: Vec<f32>,
    /// How the unlabeled rows lie in their window (`MPW2`; none from older records).
    pub unlabeled_layout: Option<SpanLayout>,
    pub seen: u64,
    /// The newest input record in the windows: redeliveries up to it are not re-added.
    pub last_source: Option<Source>,
    /// The device's last decisions and open incident (`MPS3`; empty from older ones).
    pub incidents: IncidentTracker,
    /// An onboarding in progress, and the last one finished (none when absent).
    pub onboarding: Option<Onboarding>,
    pub onboarded: Option<Onboarding>,
    /// The device's kind (`kinds.rs`; none when absent), and whether its known-normal
    /// rows are what an operator accepted (shared with the kind).
    pub kind: Option<String>,
    pub rows_accepted: bool,
    /// Known-normal rows kept when verdicts add others (the window's first storage slots).
    pub pinned: usize,
    /// The input topic's partition count when the snapshot was written (0: unknown, in
    /// older snapshots): `last_source.partition` says who owns the device only under
    /// that count.
    pub input_partitions: u32,
    /// Its rows are records of their own (`MPS4`): as on the state topic already, not
    /// to be written again until they change.
    pub rows_apart: bool,
    /// Where its adaptation points stood on the event clock (none in older snapshots):
    /// a restart goes on with the same points.
    pub points: Option<SavedPoints>,
}

/// A device's time and adaptation points as a snapshot keeps them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SavedPoints {
    /// Its time at its last record (Unix seconds).
    pub clock: f64,
    /// When, on its time, its next point comes (none: at its next record's time plus
    /// the interval).
    pub next: Option<f64>,
    /// Its records since its last point.
    pub since: usize,
    /// Its classifiers (none in older snapshots, or before its first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub classifiers: Option<SavedClassifiers>,
}

/// A device's classifiers on the event clock: the one scoring since its last point, and
/// the one of that point's windows, installed at its next. With them a restart scores
/// each record with the classifier it would have had without the restart.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SavedClassifiers {
    /// The model version they were adapted on: another model adapts anew.
    pub model: String,
    pub scoring: TaskState,
    pub next: Option<TaskState>,
}

/// The JSON tail: the incident state, and beside its fields the onboardings.
#[derive(Serialize, Deserialize, Default)]
struct Tail<T> {
    #[serde(flatten)]
    incidents: T,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    onboarding: Option<Onboarding>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    onboarded: Option<Onboarding>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    kind: Option<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    rows_accepted: bool,
    #[serde(default)]
    pinned: usize,
    #[serde(default)]
    input_partitions: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    points: Option<SavedPoints>,
    /// `last_source`'s place in its batch message (0 is not written).
    #[serde(default, skip_serializing_if = "is_first")]
    last_index: u32,
}

fn is_first(index: &u32) -> bool {
    *index == 0
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SnapshotError {
    #[error("not a metapu snapshot")]
    BadMagic,
    #[error("snapshot length does not match its header")]
    BadLength,
    #[error("snapshot holds NaN or infinity")]
    NonFinite,
    #[error("snapshot's incident state is unreadable: {0}")]
    Incidents(String),
}

/// Little-endian reader over a byte slice; `None` past the end.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }
    fn array<const N: usize>(&mut self) -> Option<[u8; N]> {
        self.take(N).and_then(|b| b.try_into().ok())
    }
}

impl Snapshot {
    /// A device with nothing yet: no rows, no records seen.
    pub fn empty(dim: usize) -> Self {
        Self {
            dim,
            positive: Vec::new(),
            unlabeled: Vec::new(),
            unlabeled_layout: None,
            seen: 0,
            last_source: None,
            incidents: IncidentTracker::default(),
            onboarding: None,
            onboarded: None,
            kind: None,
            rows_accepted: false,
            pinned: 0,
            input_partitions: 0,
            rows_apart: false,
            points: None,
        }
    }

    /// The whole state in one record (`MPS3`), as daemons before the split wrote it.
    pub fn encode(&self) -> Vec<u8> {
        self.encode_as(MAGIC_V3, &self.positive, &self.unlabeled)
    }

    /// The main record: everything but the rows, which go in [`encode_rows`] records.
    pub fn encode_main(&self) -> Vec<u8> {
        self.encode_as(MAGIC_V4, &[], &[])
    }

    fn encode_as(&self, magic: &[u8; 4], positive: &[f32], unlabeled: &[f32]) -> Vec<u8> {
        let (np, nu) = (positive.len() / self.dim.max(1), unlabeled.len() / self.dim.max(1));
        let topic = self.last_source.as_ref().map_or("", |s| s.topic.as_str());
        let topic = &topic.as_bytes()[..topic.len().min(u16::MAX as usize)];
        let mut out = Vec::with_capacity(COUNTS + 14 + topic.len() + 4 * (positive.len() + unlabeled.len()));
        out.extend_from_slice(magic);
        for n in [self.dim, np, nu] {
            out.extend_from_slice(&(n as u32).to_le_bytes());
        }
        out.extend_from_slice(&self.seen.to_le_bytes());
        let (partition, offset) = self.last_source.as_ref().map_or((0, -1), |s| (s.partition, s.offset));
        out.extend_from_slice(&partition.to_le_bytes());
        out.extend_from_slice(&offset.to_le_bytes());
        out.extend_from_slice(&(topic.len() as u16).to_le_bytes());
        out.extend_from_slice(topic);
        for v in positive.iter().chain(unlabeled) {
            out.extend_from_slice(&v.to_le_bytes());
        }
        let tail = Tail {
            incidents: &self.incidents,
            onboarding: self.onboarding.clone(),
            onboarded: self.onboarded.clone(),
            kind: self.kind.clone(),
            rows_accepted: self.rows_accepted,
            pinned: self.pinned,
            input_partitions: self.input_partitions,
            points: self.points.clone(),
            last_index: self.last_source.as_ref().map_or(0, |s| s.index),
        };
        let incidents = serde_json::to_vec(&tail).expect("incident state serialises");
        out.extend_from_slice(&(incidents.len() as u32).to_le_bytes());
        out.extend_from_slice(&incidents);
        out
    }

    /// A device's three records as the daemon writes them all at once (key, value; no
    /// value: an empty window's record deleted), rows first.
    pub fn records(&self, device: &str) -> [(Vec<u8>, Option<Vec<u8>>); 3] {
        [
            (Part::Positive.key(device), encode_rows(self.dim, &self.positive)),
            (Part::Unlabeled.key(device), self.encode_unlabeled()),
            (Part::Main.key(device), Some(self.encode_main())),
        ]
    }

    /// The unlabeled rows' record: with their layout when known.
    fn encode_unlabeled(&self) -> Option<Vec<u8>> {
        match &self.unlabeled_layout {
            Some(layout) => encode_span_rows(self.dim, &self.unlabeled, layout),
            None => encode_rows(self.dim, &self.unlabeled),
        }
    }

    /// A device's records put back together: a main record of the split layout takes
    /// its rows from the row records (none: an empty window); an older whole snapshot
    /// holds its own and ignores row records.
    pub fn assemble(
        main: &[u8],
        positive: Option<&[u8]>,
        unlabeled: Option<&[u8]>,
    ) -> Result<Self, SnapshotError> {
        let (mut s, version) = Self::decode_version(main)?;
        if version == 4 {
            s.positive = positive.map(|b| decode_rows(b, s.dim)).transpose()?.unwrap_or_default();
            if let Some((rows, layout)) = unlabeled.map(|b| decode_span_rows(b, s.dim)).transpose()? {
                (s.unlabeled, s.unlabeled_layout) = (rows, layout);
            }
        }
        Ok(s)
    }

    /// One record as written: a whole snapshot, or a main record (empty windows).
    pub fn decode(bytes: &[u8]) -> Result<Self, SnapshotError> {
        Self::decode_version(bytes).map(|(s, _)| s)
    }

    fn decode_version(bytes: &[u8]) -> Result<(Self, u8), SnapshotError> {
        let mut r = Reader(bytes);
        let version = match r.take(4) {
            Some(m) if m == MAGIC_V4 => 4,
            Some(m) if m == MAGIC_V3 => 3,
            Some(m) if m == MAGIC_V2 => 2,
            Some(m) if m == MAGIC_V1 => 1,
            _ => return Err(SnapshotError::BadMagic),
        };
        let mut count =
            || r.array::<4>().map(|b| u32::from_le_bytes(b) as usize).ok_or(SnapshotError::BadLength);
        let (dim, np, nu) = (count()?, count()?, count()?);
        let seen = r.array::<8>().map(u64::from_le_bytes).ok_or(SnapshotError::BadLength)?;
        let last_source = if version >= 2 {
            let partition = r.array::<4>().map(i32::from_le_bytes).ok_or(SnapshotError::BadLength)?;
            let offset = r.array::<8>().map(i64::from_le_bytes).ok_or(SnapshotError::BadLength)?;
            let len = r.array::<2>().map(u16::from_le_bytes).ok_or(SnapshotError::BadLength)?;
            let topic = r.take(len as usize).ok_or(SnapshotError::BadLength)?;
            let topic = String::from_utf8(topic.to_vec()).map_err(|_| SnapshotError::BadLength)?;
            (offset >= 0).then_some(Source::new(topic, partition, offset))
        } else {
            None
        };
        let values =
            (np + nu).checked_mul(dim).and_then(|v| v.checked_mul(4)).ok_or(SnapshotError::BadLength)?;
        let windows = if version >= 3 { r.take(values) } else { (r.0.len() == values).then_some(r.0) };
        let windows = windows.ok_or(SnapshotError::BadLength)?;
        let tail = if version >= 3 {
            let len = r.array::<4>().map(u32::from_le_bytes).ok_or(SnapshotError::BadLength)? as usize;
            if r.0.len() != len {
                return Err(SnapshotError::BadLength);
            }
            serde_json::from_slice(r.0).map_err(|e| SnapshotError::Incidents(e.to_string()))?
        } else {
            Tail::<IncidentTracker>::default()
        };
        let floats = floats(windows)?;
        let (positive, unlabeled) = floats.split_at(np * dim);
        let last_source = last_source.map(|s| Source { index: tail.last_index, ..s });
        let snapshot = Self {
            dim,
            positive: positive.to_vec(),
            unlabeled: unlabeled.to_vec(),
            unlabeled_layout: None,
            seen,
            last_source,
            incidents: tail.incidents,
            onboarding: tail.onboarding,
            onboarded: tail.onboarded,
            kind: tail.kind,
            rows_accepted: tail.rows_accepted,
            pinned: tail.pinned,
            input_partitions: tail.input_partitions,
            rows_apart: version == 4,
            points: tail.points,
        };
        Ok((snapshot, version))
    }
}

fn floats(bytes: &[u8]) -> Result<Vec<f32>, SnapshotError> {
    let floats: Vec<f32> =
        bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
    if floats.iter().any(|v| !v.is_finite()) {
        return Err(SnapshotError::NonFinite);
    }
    Ok(floats)
}

/// A window's rows as a record of their own (`MPW1`); `None` for an empty window, whose
/// record is deleted (a tombstone) instead.
pub fn encode_rows(dim: usize, rows: &[f32]) -> Option<Vec<u8>> {
    if rows.is_empty() {
        return None;
    }
    let mut out = Vec::with_capacity(12 + 4 * rows.len());
    out.extend_from_slice(MAGIC_ROWS);
    for n in [dim, rows.len() / dim.max(1)] {
        out.extend_from_slice(&(n as u32).to_le_bytes());
    }
    for v in rows {
        out.extend_from_slice(&v.to_le_bytes());
    }
    Some(out)
}

/// An unlabeled window's rows and how they lie (`MPW2`); `None` for an empty window.
pub fn encode_span_rows(dim: usize, rows: &[f32], layout: &SpanLayout) -> Option<Vec<u8>> {
    let mut out = encode_rows(dim, rows)?;
    out[..4].copy_from_slice(MAGIC_SPAN_ROWS);
    for n in [layout.recent, layout.next] {
        out.extend_from_slice(&(n as u32).to_le_bytes());
    }
    for b in &layout.buckets {
        out.extend_from_slice(&b.to_le_bytes());
    }
    out.extend_from_slice(&layout.pushes.to_le_bytes());
    for p in &layout.priorities {
        out.extend_from_slice(&p.to_le_bytes());
    }
    Some(out)
}

/// Unlabeled rows as either record holds them, with their layout when written.
fn decode_span_rows(bytes: &[u8], dim: usize) -> Result<(Vec<f32>, Option<SpanLayout>), SnapshotError> {
    let RowParts { with_layout, rows, values, rest } = row_parts(bytes, dim)?;
    if !with_layout {
        return rows_alone(values, rest).map(|values| (values, None));
    }
    let mut r = Reader(rest);
    let mut count = || r.array::<4>().map(|b| u32::from_le_bytes(b) as usize).ok_or(SnapshotError::BadLength);
    let (recent, next) = (count()?, count()?);
    // Every row's bucket, the pushes, and a priority for each spread row.
    let tail = rows.checked_sub(recent).and_then(|spread| (rows + 1 + spread).checked_mul(8));
    if Some(r.0.len()) != tail {
        return Err(SnapshotError::BadLength);
    }
    let mut words = r.0.chunks_exact(8).map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")));
    let buckets = words.by_ref().take(rows).map(|w| w as i64).collect();
    let pushes = words.next().ok_or(SnapshotError::BadLength)?;
    let priorities = words.collect();
    Ok((floats(values)?, Some(SpanLayout { recent, next, buckets, pushes, priorities })))
}

/// Rows of a device whose main record says `dim` features (`MPW1`).
fn decode_rows(bytes: &[u8], dim: usize) -> Result<Vec<f32>, SnapshotError> {
    match row_parts(bytes, dim)? {
        RowParts { with_layout: false, values, rest, .. } => rows_alone(values, rest),
        _ => Err(SnapshotError::BadMagic),
    }
}

/// A row record read up to the end of its rows.
struct RowParts<'a> {
    /// `MPW2` (a layout follows the rows), or `MPW1`.
    with_layout: bool,
    rows: usize,
    /// The rows' bytes, `dim` features a row, and the bytes after them.
    values: &'a [u8],
    rest: &'a [u8],
}

fn row_parts(bytes: &[u8], dim: usize) -> Result<RowParts<'_>, SnapshotError> {
    let mut r = Reader(bytes);
    let with_layout = match r.take(4) {
        Some(m) if m == MAGIC_ROWS => false,
        Some(m) if m == MAGIC_SPAN_ROWS => true,
        _ => return Err(SnapshotError::BadMagic),
    };
    let mut count = || r.array::<4>().map(|b| u32::from_le_bytes(b) as usize).ok_or(SnapshotError::BadLength);
    let (stored_dim, rows) = (count()?, count()?);
    let values = rows.checked_mul(dim).and_then(|v| v.checked_mul(4)).ok_or(SnapshotError::BadLength)?;
    if stored_dim != dim {
        return Err(SnapshotError::BadLength);
    }
    let values = r.take(values).ok_or(SnapshotError::BadLength)?;
    Ok(RowParts { with_layout, rows, values, rest: r.0 })
}

/// An `MPW1` record's values, which must end it.
fn rows_alone(values: &[u8], rest: &[u8]) -> Result<Vec<f32>, SnapshotError> {
    if !rest.is_empty() {
        return Err(SnapshotError::BadLength);
    }
    floats(values)
}

/// Which of a device's records a state-topic key names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    Main,
    Positive,
    Unlabeled,
}

/// 0xFF never occurs in UTF-8, so no device name ends as a row record's key does.
const PART_MARK: u8 = 0xFF;

impl Part {
    pub const ALL: [Part; 3] = [Part::Main, Part::Positive, Part::Unlabeled];

    pub fn key(self, device: &str) -> Vec<u8> {
        let mut key = device.as_bytes().to_vec();
        match self {
            Part::Main => {}
            Part::Positive => key.extend([PART_MARK, b'p']),
            Part::Unlabeled => key.extend([PART_MARK, b'u']),
        }
        key
    }

    /// The device and part a key names; `None` for a key that is not a device's.
    pub fn of_key(key: &[u8]) -> Option<(&str, Part)> {
        let (device, part) = match key {
            [device @ .., PART_MARK, b'p'] => (device, Part::Positive),
            [device @ .., PART_MARK, b'u'] => (device, Part::Unlabeled),
            device => (device, Part::Main),
        };
        std::str::from_utf8(device).ok().map(|d| (d, part))
    }
}

/// A device's records as last written, and the state partition of its main record.
#[derive(Debug, Default, Clone)]
struct Stored {
    partition: i32,
    main: Option<Vec<u8>>,
    positive: Option<Vec<u8>>,
    unlabeled: Option<Vec<u8>>,
}

/// The state topic as read from its beginning: the last value per key, a tombstone
/// (no value) deleting it, grouped by device.
#[derive(Debug, Default)]
pub struct StateTopic {
    devices: std::collections::HashMap<String, Stored>,
}

impl StateTopic {
    /// One record, in the order read (per partition; a device's records share one).
    pub fn apply(&mut self, key: &[u8], partition: i32, value: Option<&[u8]>) {
        let Some((device, part)) = Part::of_key(key) else { return };
        let value = value.filter(|v| !v.is_empty()).map(<[u8]>::to_vec);
        let stored = self.devices.entry(device.to_string()).or_default();
        match part {
            Part::Main => {
                stored.partition = partition;
                stored.main = value;
            }
            Part::Positive => stored.positive = value,
            Part::Unlabeled => stored.unlabeled = value,
        }
    }

    /// Devices with a main record (row records without one are left over from a device
    /// forgotten while they were being deleted).
    pub fn len(&self) -> usize {
        self.devices.values().filter(|s| s.main.is_some()).count()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The snapshots as they stand, devices whose records do not read left out (tests
    /// read the state topic with it).
    pub fn latest(&self) -> std::collections::HashMap<String, Snapshot> {
        self.devices.iter().filter_map(|(device, s)| Some((device.clone(), s.snapshot()?.ok()?))).collect()
    }

    /// Each device's snapshot, put back together, with its state partition.
    pub fn snapshots(self) -> impl Iterator<Item = (String, i32, Result<Snapshot, SnapshotError>)> {
        self.devices.into_iter().filter_map(|(device, s)| Some((device, s.partition, s.snapshot()?)))
    }
}

impl Stored {
    /// The device's snapshot put back together; `None` without a main record.
    fn snapshot(&self) -> Option<Result<Snapshot, SnapshotError>> {
        let main = self.main.as_deref()?;
        Some(Snapshot::assemble(main, self.positive.as_deref(), self.unlabeled.as_deref()))
    }
}

/// A record the shell writes to the state topic: a device's part, or its tombstone
/// (`value: None`). It goes to state partition `home` where the device's state was
/// read from, else to the one its input partition maps to.
#[derive(Debug, Clone)]
pub struct StateRecord {
    pub device: String,
    pub part: Part,
    pub key: Vec<u8>,
    pub value: Option<Vec<u8>>,
    pub input_partition: i32,
    pub home: Option<i32>,
}

/// A state record the broker did not acknowledge (`Input::WritesFailed`), with the
/// state partition it was sent to.
#[derive(Debug, Clone)]
pub struct WriteFailed {
    pub device: String,
    pub part: Part,
    pub partition: i32,
    pub tombstone: bool,
}

#[cfg(test)]
#[path = "snapshot_tests.rs"]
mod tests;
