//! A capture's packets → feature rows per device: which devices a packet belongs to
//! (the whole capture is one device, or a LAN capture is split by MAC), its label
//! (from `metapu datasets infect`'s label file), and each device's own AfterImage.
//! `metapu extract` and the real-traffic experiment read captures through this.

use super::context::Context;
use std::path::{Path, PathBuf};

use crate::data::{Label, Task};

use super::capture::{CaptureError, CaptureReader, Frame};
use super::devices::{Device, DeviceListError, DeviceMap};
use super::frame::{frame_macs, udp_payload, Link};
use super::peer_names::DeviceNames;
use super::{AfterImage, Packet};

#[derive(Debug, thiserror::Error)]
pub enum ExtractError {
    #[error("packet {index} is {link:?}, which names no MAC address to tell devices apart by")]
    NoMac { index: u64, link: Link },
    #[error("no label for packet {0}")]
    NoLabel(u64),
    #[error("{}: {reason}", path.display())]
    Labels { path: PathBuf, reason: String },
}

/// Whose packets a capture holds.
pub enum Devices {
    /// The capture is one device's, under this name.
    Whole(String),
    /// A LAN capture: the listed devices' packets, each to its own device.
    Split(DeviceMap),
}

/// A packet and the devices (one or two) it gives a row to.
pub struct Routed {
    pub packet: Packet,
    pub label: Label,
    pub devices: [Option<usize>; 2],
    /// The packet's context as each slot's device sees it. Where devices are told apart
    /// by MAC, slot 0 is the sender and slot 1 the receiver, and the peer is named when
    /// the device looked it up (`peer_names.rs`); otherwise the capture is one device's
    /// and the direction unknown.
    pub contexts: [Option<Context>; 2],
}

impl Routed {
    /// The devices given a row, each with the packet's context as that device sees it.
    pub fn per_device(&self) -> impl Iterator<Item = (usize, &Context)> + '_ {
        self.devices.iter().zip(&self.contexts).filter_map(|(d, c)| Some(((*d)?, c.as_ref()?)))
    }
}

#[derive(Debug, Default, Clone, PartialEq)]
pub struct Counts {
    pub packets: u64,
    /// Frames too short for their headers.
    pub unparsed: u64,
    /// Packets of no listed device, dropped.
    pub unlisted: u64,
    /// Rows per device.
    pub rows: Vec<u64>,
    /// DNS answers to a device that matched no query of its own, ignored.
    pub dns_ignored: u64,
}

pub struct Extractor {
    names: Vec<String>,
    split: Option<DeviceMap>,
    labels: Option<Vec<Label>>,
    states: Vec<AfterImage>,
    peer_names: Vec<DeviceNames>,
    row: Vec<f32>,
    pub counts: Counts,
}

impl Extractor {
    pub fn new(devices: Devices, labels: Option<Vec<Label>>) -> Self {
        let (names, split) = match devices {
            Devices::Whole(name) => (vec![name], None),
            Devices::Split(map) => (map.devices().iter().map(|d| d.name.clone()).collect(), Some(map)),
        };
        let states = names.iter().map(|_| AfterImage::new()).collect();
        let peer_names = names.iter().map(|_| DeviceNames::default()).collect();
        let counts = Counts { rows: vec![0; names.len()], ..Counts::default() };
        Self { names, split, labels, states, peer_names, row: Vec::new(), counts }
    }

    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// Route by a new device list (a sensor's re-read file). A device listed before
    /// keeps its statistics and peer names (its records go on as if nothing changed),
    /// whatever its new index; a new one starts afresh; an unlisted one is dropped.
    pub fn set_devices(&mut self, map: DeviceMap) {
        let kept = self.states.drain(..).zip(self.peer_names.drain(..)).zip(self.counts.rows.drain(..));
        let mut old: std::collections::HashMap<String, ((AfterImage, DeviceNames), u64)> =
            self.names.drain(..).zip(kept).collect();
        for d in map.devices() {
            let ((state, names), rows) =
                old.remove(&d.name).unwrap_or_else(|| ((AfterImage::new(), DeviceNames::default()), 0));
            self.names.push(d.name.clone());
            self.states.push(state);
            self.peer_names.push(names);
            self.counts.rows.push(rows);
        }
        self.split = Some(map);
    }

    /// List one more device of a LAN capture (a sensor's discovered MAC); its index.
    pub fn add_device(&mut self, device: Device) -> Result<usize, DeviceListError> {
        let map = self.split.get_or_insert_with(DeviceMap::empty);
        let name = device.name.clone();
        let index = map.add(device)?;
        self.names.push(name);
        self.states.push(AfterImage::new());
        self.peer_names.push(DeviceNames::default());
        self.counts.rows.push(0);
        Ok(index)
    }

    /// The devices a frame gives rows to, or `None` when it gives none (too short to
    /// parse, or of no listed device).
    pub fn route(&mut self, frame: &Frame) -> Result<Option<Routed>, ExtractError> {
        self.counts.packets += 1;
        let Some(packet) = frame.packet() else {
            self.counts.unparsed += 1;
            return Ok(None);
        };
        // The frame's source and destination MACs (as the link type has them).
        let macs: [Option<u64>; 2] = frame_macs(frame.link, frame.data).into();
        let devices = match &self.split {
            None => [Some(0), None],
            Some(map) => {
                let [src, dst] = macs;
                if src.is_none() && dst.is_none() {
                    return Err(ExtractError::NoMac { index: frame.index, link: frame.link });
                }
                map.route(src, dst)
            }
        };
        if devices == [None, None] {
            self.counts.unlisted += 1;
            return Ok(None);
        }
        let label = match &self.labels {
            Some(labels) => *labels.get(frame.index as usize).ok_or(ExtractError::NoLabel(frame.index))?,
            None => Label::Unlabeled,
        };
        let by_mac = self.split.is_some();
        let contexts = [0, 1].map(|slot| {
            devices[slot]?;
            let mut context = Context::of_packet(&packet, slot == 0, macs[slot]);
            if !by_mac {
                context.direction = None;
                context.device_mac = None;
            }
            Some(context)
        });
        let mut routed = Routed { packet, label, devices, contexts };
        if by_mac {
            self.name_peers(&mut routed, frame);
        }
        Ok(Some(routed))
    }

    /// Each device's lookups learn from the packet, and name its peer.
    fn name_peers(&mut self, routed: &mut Routed, frame: &Frame) {
        let p = &routed.packet;
        let dns = p.proto == 17 && (p.src_port == 53 || p.dst_port == 53);
        let udp = if dns { udp_payload(frame.link, frame.data) } else { None };
        for (d, context) in routed.devices.iter().zip(&mut routed.contexts) {
            let (Some(d), Some(context)) = (d, context) else { continue };
            let names = &mut self.peer_names[*d];
            let ignored = names.ignored;
            context.peer_name = names.observe(context, p.ts, udp);
            self.counts.dns_ignored += names.ignored - ignored;
        }
    }

    /// The packet's row for one of its devices, after that device's statistics took it.
    pub fn features(&mut self, device: usize, packet: &Packet) -> &[f32] {
        self.row.clear();
        self.states[device].push(packet, &mut self.row);
        self.counts.rows[device] += 1;
        &self.row
    }
}

#[derive(Debug, thiserror::Error)]
pub enum LabeledCaptureError {
    #[error(transparent)]
    Capture(#[from] CaptureError),
    #[error(transparent)]
    Device(#[from] DeviceListError),
    #[error("{}: {source}", path.display())]
    Extract { path: PathBuf, source: ExtractError },
}

/// One device's rows of a labeled capture (`metapu datasets infect`'s capture and
/// labels), in capture order, as `metapu extract --device-mac MAC --labels L` computes
/// them: a task named after the device, and each row's packet time (seconds).
pub fn labeled_device_task(
    pcap: &Path,
    device: Device,
    labels: Vec<Label>,
) -> Result<(Task, Vec<f64>, Vec<Context>), LabeledCaptureError> {
    let mut task = Task::new(device.name.clone());
    let mut extractor = Extractor::new(Devices::Split(DeviceMap::new(vec![device])?), Some(labels));
    let mut reader = CaptureReader::open(pcap)?;
    let (mut ts, mut contexts) = (Vec::new(), Vec::new());
    while let Some(frame) = reader.next_frame()? {
        let routed = extractor
            .route(&frame)
            .map_err(|source| LabeledCaptureError::Extract { path: pcap.into(), source })?;
        let Some(routed) = routed else { continue };
        let Some((_, context)) = routed.per_device().next() else { continue };
        task.x.extend_from_slice(extractor.features(0, &routed.packet));
        task.labels.push(routed.label);
        ts.push(routed.packet.ts);
        contexts.push(context.clone());
    }
    Ok((task, ts, contexts))
}

/// `metapu datasets infect`'s label file (`packet,label,source`): a label per packet
/// record, in order (benign → positive, attack → negative).
pub fn read_labels(path: &Path) -> Result<Vec<Label>, ExtractError> {
    let bad = |line: usize, reason: String| ExtractError::Labels {
        path: path.into(),
        reason: format!("line {line}: {reason}"),
    };
    let mut reader = csv::Reader::from_path(path)
        .map_err(|e| ExtractError::Labels { path: path.into(), reason: e.to_string() })?;
    let mut labels = Vec::new();
    for (i, record) in reader.records().enumerate() {
        let record = record.map_err(|e| bad(i + 2, e.to_string()))?;
        if record.get(0).and_then(|p| p.trim().parse::<usize>().ok()) != Some(i) {
            return Err(bad(i + 2, format!("expected packet {i} (rows in packet order, from 0)")));
        }
        labels.push(match record.get(1).map(str::trim) {
            Some("benign") => Label::Positive,
            Some("attack") => Label::Negative,
            other => return Err(bad(i + 2, format!("label {other:?} is neither benign nor attack"))),
        });
    }
    Ok(labels)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_files_are_read_in_packet_order_and_bad_ones_name_the_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.labels.csv");
        std::fs::write(&path, "packet,label,source\n0,benign,\n1,attack,synscan.pcap\n").unwrap();
        assert_eq!(read_labels(&path).unwrap(), [Label::Positive, Label::Negative]);
        std::fs::write(&path, "packet,label,source\n0,benign,\n2,attack,synscan.pcap\n").unwrap();
        assert!(read_labels(&path).unwrap_err().to_string().contains("line 3: expected packet 1"));
        std::fs::write(&path, "packet,label,source\n0,evil,\n").unwrap();
        assert!(read_labels(&path).unwrap_err().to_string().contains("line 2: label Some(\"evil\")"));
    }
}
