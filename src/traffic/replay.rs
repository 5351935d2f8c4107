//! Replay planning, free of I/O timing: which device sends which recorded row next.
//! Devices take turns (round robin), each in its own file order; a schedule picks
//! and orders a device's segments and can hold one back until some seconds into
//! the replay (`danmini:benign,gafgyt.udp@+60s`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::data::nbaiot::{self, read_feature_csv};
use crate::data::{csv_tasks, DataError, Label};

/// A run of one class of records from one device.
#[derive(Debug, Clone, PartialEq)]
pub struct Segment {
    /// "benign", "gafgyt.udp", … for N-BaIoT files; "benign", "attack" or
    /// "unlabeled" for labeled-task CSVs.
    pub class: String,
    /// Held back until this many seconds into the replay.
    pub not_before_s: f64,
    pub rows: Vec<Vec<f32>>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct DeviceStream {
    pub device: String,
    pub segments: Vec<Segment>,
}

fn push_segment(streams: &mut BTreeMap<String, DeviceStream>, device: &str, class: &str, row: Vec<f32>) {
    let s = streams
        .entry(device.to_string())
        .or_insert_with(|| DeviceStream { device: device.to_string(), segments: Vec::new() });
    match s.segments.last_mut() {
        Some(seg) if seg.class == class => seg.rows.push(row),
        _ => s.segments.push(Segment { class: class.into(), not_before_s: 0.0, rows: vec![row] }),
    }
}

fn is_task_csv(path: &Path) -> Result<bool, DataError> {
    let file = std::fs::File::open(path).map_err(|source| DataError::Io { path: path.into(), source })?;
    let mut r = csv::Reader::from_reader(std::io::BufReader::new(file));
    let header =
        r.headers().map_err(|e| DataError::BadFile { path: path.into(), reason: format!("header: {e}") })?;
    Ok(header.iter().any(|c| c == "task") && header.iter().any(|c| c == "label"))
}

/// Streams from N-BaIoT directories or files (UCI or Kaggle names) and labeled-task
/// CSVs; every input must have the same number of features.
pub fn load(paths: &[PathBuf]) -> Result<(usize, Vec<DeviceStream>), DataError> {
    let mut streams: BTreeMap<String, DeviceStream> = BTreeMap::new();
    let mut dim: Option<usize> = None;
    let mut check_dim = |path: &Path, d: usize| match dim {
        Some(expected) if expected != d => Err(DataError::BadFile {
            path: path.into(),
            reason: format!("{d} features, earlier inputs have {expected}"),
        }),
        _ => {
            dim = Some(d);
            Ok(())
        }
    };
    for path in paths {
        if path.is_dir() {
            for f in nbaiot::discover(path)? {
                let (header, values) = read_feature_csv(&f.path, false, &mut 0)?;
                check_dim(&f.path, header.len())?;
                for row in values.chunks(header.len().max(1)) {
                    push_segment(&mut streams, &f.device, &f.class, row.to_vec());
                }
            }
        } else if is_task_csv(path)? {
            let set = csv_tasks::load(path, false)?;
            check_dim(path, set.dim())?;
            for t in &set.tasks {
                for (i, label) in t.labels.iter().enumerate() {
                    let class = match label {
                        Label::Positive => "benign",
                        Label::Negative => "attack",
                        Label::Unlabeled => "unlabeled",
                    };
                    push_segment(&mut streams, &t.id, class, t.row(i, set.dim()).to_vec());
                }
            }
        } else {
            let f = nbaiot::classify(path).ok_or_else(|| DataError::BadFile {
                path: path.into(),
                reason: "neither a labeled-task CSV (task, label columns) nor an N-BaIoT file name \
                         (<device>.benign.csv, <device>.<family>.<attack>.csv, <device>/benign_traffic.csv)"
                    .into(),
            })?;
            let (header, values) = read_feature_csv(path, false, &mut 0)?;
            check_dim(path, header.len())?;
            for row in values.chunks(header.len().max(1)) {
                push_segment(&mut streams, &f.device, &f.class, row.to_vec());
            }
        }
    }
    let streams: Vec<DeviceStream> = streams.into_values().collect();
    // N-BaIoT files are read benign first per device; keep that order.
    Ok((dim.unwrap_or(0), streams))
}

/// `device:class[@+Ns],class…` entries separated by `;` (or given as repeated flags).
/// A device matches by exact name or unique prefix.
#[derive(Debug, Clone, PartialEq)]
pub struct ScheduleEntry {
    pub device: String,
    pub segments: Vec<(String, f64)>,
}

pub fn parse_schedule(text: &str) -> Result<Vec<ScheduleEntry>, String> {
    let mut out = Vec::new();
    for entry in text.split(';').map(str::trim).filter(|e| !e.is_empty()) {
        let (device, rest) =
            entry.split_once(':').ok_or_else(|| format!("'{entry}': expected device:class[,class@+Ns…]"))?;
        let mut segments = Vec::new();
        for seg in rest.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (class, delay) = match seg.split_once("@+") {
                Some((class, d)) => {
                    let secs = d.strip_suffix('s').unwrap_or(d);
                    let secs: f64 =
                        secs.parse().map_err(|_| format!("'{seg}': the delay must look like @+60s"))?;
                    if !secs.is_finite() || secs < 0.0 {
                        return Err(format!("'{seg}': the delay must be a non-negative number of seconds"));
                    }
                    (class, secs)
                }
                None => (seg, 0.0),
            };
            segments.push((class.to_string(), delay));
        }
        if segments.is_empty() {
            return Err(format!("'{entry}': no segments"));
        }
        out.push(ScheduleEntry { device: device.trim().to_string(), segments });
    }
    Ok(out)
}

/// Reorder (and select) the segments of scheduled devices; the delay of a segment
/// also holds back the ones after it. Unscheduled devices keep all their segments.
pub fn apply_schedule(streams: &mut [DeviceStream], schedule: &[ScheduleEntry]) -> Result<(), String> {
    for entry in schedule {
        let matches: Vec<usize> = streams
            .iter()
            .enumerate()
            .filter(|(_, s)| s.device == entry.device || s.device.starts_with(&entry.device))
            .map(|(i, _)| i)
            .collect();
        let exact = streams.iter().position(|s| s.device == entry.device);
        let i = match (exact, matches.as_slice()) {
            (Some(i), _) => i,
            (None, [i]) => *i,
            (None, []) => return Err(format!("schedule: no device matches '{}'", entry.device)),
            (None, _) => return Err(format!("schedule: '{}' matches more than one device", entry.device)),
        };
        let stream = &mut streams[i];
        let mut chosen = Vec::new();
        let mut hold = 0.0f64;
        for (class, delay) in &entry.segments {
            let seg = stream.segments.iter().find(|s| &s.class == class).ok_or_else(|| {
                let have: Vec<&str> = stream.segments.iter().map(|s| s.class.as_str()).collect();
                format!("schedule: {} has no '{class}' records (it has {})", stream.device, have.join(", "))
            })?;
            hold = hold.max(*delay);
            chosen.push(Segment { not_before_s: hold, ..seg.clone() });
        }
        stream.segments = chosen;
    }
    Ok(())
}

/// The next thing to do.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Step<'a> {
    Send {
        device: usize,
        row: &'a [f32],
        class: &'a str,
        known_normal: bool,
    },
    /// Every device with records left waits for a held-back segment.
    WaitUntil(f64),
    Done,
}

pub struct Replayer {
    streams: Vec<DeviceStream>,
    /// Per device: segment and row of the next record.
    cursor: Vec<(usize, usize)>,
    benign_labeled: Vec<usize>,
    label_first: usize,
    looping: bool,
    turn: usize,
    /// Seconds into the replay at which the current pass began (for `--loop`).
    pass_start: f64,
}

impl Replayer {
    pub fn new(streams: Vec<DeviceStream>, label_first: usize, looping: bool) -> Self {
        let n = streams.len();
        Self {
            streams,
            cursor: vec![(0, 0); n],
            benign_labeled: vec![0; n],
            label_first,
            looping,
            turn: 0,
            pass_start: 0.0,
        }
    }

    pub fn streams(&self) -> &[DeviceStream] {
        &self.streams
    }

    pub fn total_records(&self) -> usize {
        self.streams.iter().flat_map(|s| &s.segments).map(|s| s.rows.len()).sum()
    }

    fn finished(&self, d: usize) -> bool {
        self.cursor[d].0 >= self.streams[d].segments.len()
    }

    /// The next record at `elapsed_s` seconds into the replay.
    pub fn next(&mut self, elapsed_s: f64) -> Step<'_> {
        let n = self.streams.len();
        if n > 0 && (0..n).all(|d| self.finished(d)) && self.looping && self.total_records() > 0 {
            self.cursor.iter_mut().for_each(|c| *c = (0, 0));
            self.pass_start = elapsed_s;
        }
        let mut earliest = f64::INFINITY;
        for k in 0..n {
            let d = (self.turn + k) % n;
            let (s, r) = self.cursor[d];
            let Some(seg) = self.streams[d].segments.get(s) else { continue };
            let due = self.pass_start + seg.not_before_s;
            if due > elapsed_s {
                earliest = earliest.min(due);
                continue;
            }
            self.turn = (d + 1) % n;
            self.cursor[d] = if r + 1 >= seg.rows.len() { (s + 1, 0) } else { (s, r + 1) };
            let benign = seg.class == "benign";
            let known_normal = benign && self.benign_labeled[d] < self.label_first;
            if known_normal {
                self.benign_labeled[d] += 1;
            }
            let seg = &self.streams[d].segments[s];
            return Step::Send { device: d, row: &seg.rows[r], class: &seg.class, known_normal };
        }
        if earliest.is_finite() {
            Step::WaitUntil(earliest)
        } else {
            Step::Done
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stream(device: &str, segs: &[(&str, usize)]) -> DeviceStream {
        DeviceStream {
            device: device.into(),
            segments: segs
                .iter()
                .map(|(c, n)| Segment {
                    class: c.to_string(),
                    not_before_s: 0.0,
                    rows: (0..*n).map(|i| vec![i as f32]).collect(),
                })
                .collect(),
        }
    }

    fn drain(r: &mut Replayer, at: f64) -> Vec<(usize, String, f32, bool)> {
        let mut out = Vec::new();
        while let Step::Send { device, row, class, known_normal } = r.next(at) {
            out.push((device, class.to_string(), row[0], known_normal));
        }
        out
    }

    #[test]
    fn schedule_text_parses_and_refuses_nonsense() {
        let s = parse_schedule("danmini:benign,gafgyt.udp@+60s; ecobee:mirai.udp").unwrap();
        assert_eq!(s[0].segments, vec![("benign".into(), 0.0), ("gafgyt.udp".into(), 60.0)]);
        assert_eq!(s[1].device, "ecobee");
        assert!(parse_schedule("danmini").is_err());
        assert!(parse_schedule("d:benign@+soon").is_err());
        assert!(parse_schedule("d:benign@+-3s").is_err());
    }

    #[test]
    fn devices_alternate_in_file_order_with_labels_on_the_first_benign() {
        let mut r = Replayer::new(
            vec![stream("a", &[("benign", 3), ("gafgyt.udp", 1)]), stream("b", &[("benign", 1)])],
            2,
            false,
        );
        let got = drain(&mut r, 0.0);
        let want = vec![
            (0, "benign".to_string(), 0.0, true),
            (1, "benign".to_string(), 0.0, true),
            (0, "benign".to_string(), 1.0, true),
            (0, "benign".to_string(), 2.0, false),
            (0, "gafgyt.udp".to_string(), 0.0, false),
        ];
        assert_eq!(got, want);
        assert_eq!(r.next(0.0), Step::Done);
    }

    #[test]
    fn held_back_segments_wait_and_prefixes_pick_devices() {
        let mut streams =
            vec![stream("danmini_doorbell", &[("benign", 2), ("gafgyt.scan", 1), ("gafgyt.udp", 1)])];
        apply_schedule(&mut streams, &parse_schedule("danmini:benign,gafgyt.udp@+60s").unwrap()).unwrap();
        let mut r = Replayer::new(streams, 0, false);
        assert_eq!(drain(&mut r, 0.0).len(), 2);
        assert_eq!(r.next(10.0), Step::WaitUntil(60.0));
        assert_eq!(drain(&mut r, 60.0), vec![(0, "gafgyt.udp".to_string(), 0.0, false)]);
        let mut bad = vec![stream("danmini_doorbell", &[("benign", 1)])];
        let err = apply_schedule(&mut bad, &parse_schedule("danmini:mirai.syn").unwrap()).unwrap_err();
        assert!(err.contains("has no 'mirai.syn'") && err.contains("benign"), "{err}");
        assert!(apply_schedule(&mut bad, &parse_schedule("ecobee:benign").unwrap()).is_err());
    }

    #[test]
    fn looping_starts_over_and_keeps_delays_relative_to_the_pass() {
        let mut streams = vec![stream("a", &[("benign", 1), ("attack", 1)])];
        apply_schedule(&mut streams, &parse_schedule("a:benign,attack@+5s").unwrap()).unwrap();
        let mut r = Replayer::new(streams, 1, true);
        assert_eq!(drain(&mut r, 0.0), vec![(0, "benign".to_string(), 0.0, true)]);
        // The attack at 5 s ends pass one; pass two begins at once, its attack waits
        // until 10 s, and its benign record is not labeled a second time.
        let want = vec![(0, "attack".to_string(), 0.0, false), (0, "benign".to_string(), 0.0, false)];
        assert_eq!(drain(&mut r, 5.0), want);
        assert_eq!(r.next(6.0), Step::WaitUntil(10.0));
    }
}
