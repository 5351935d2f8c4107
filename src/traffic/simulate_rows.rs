//! The simulator's last stage: a device's packets through AfterImage into labeled
//! feature rows, a fleet's on all cores, and a fleet as labeled tasks.

use super::{device_packets, plan, DevicePlan, FleetConfig};
use crate::data::{Label, Task, TaskSet};
use crate::traffic::afterimage::{feature_names, AfterImage, FEATURES};

/// A device's feature rows: row-major features, their timestamps and labels
/// (positive = benign packet, negative = a packet the botnet sent).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DeviceRows {
    /// Packets generated (rows are kept for some of them).
    pub packets: usize,
    pub features: Vec<f32>,
    pub ts: Vec<f64>,
    pub normal: Vec<bool>,
}

pub fn device_rows(cfg: &FleetConfig, device: &DevicePlan) -> DeviceRows {
    let packets = device_packets(cfg, device);
    let keep = cfg.keep_every.max(1);
    // Per class: keep a packet when it crosses the next evenly spaced mark.
    let total = |attack: bool| packets.iter().filter(|p| p.attack == attack).count() / keep;
    let stride = |attack: bool| match cfg.max_rows_per_class {
        Some(cap) if cap > 0 && total(attack) > cap => total(attack) as f64 / cap as f64,
        _ => 1.0,
    };
    let strides = [stride(false), stride(true)];
    let mut seen = [0usize; 2];
    let mut next_mark = [0.0f64; 2];
    let mut ai = AfterImage::new();
    let mut rows = DeviceRows { packets: packets.len(), ..DeviceRows::default() };
    let mut scratch = Vec::with_capacity(FEATURES);
    for (i, p) in packets.iter().enumerate() {
        scratch.clear();
        ai.push(&p.packet, &mut scratch);
        if i % keep != 0 {
            continue;
        }
        let c = usize::from(p.attack);
        let take = seen[c] as f64 >= next_mark[c];
        seen[c] += 1;
        if take {
            next_mark[c] += strides[c];
            rows.features.extend_from_slice(&scratch);
            rows.ts.push(p.packet.ts);
            rows.normal.push(!p.attack);
        }
    }
    rows
}

/// Rows of every planned device, in plan order, generated on all cores.
pub fn fleet_rows(cfg: &FleetConfig, devices: &[DevicePlan]) -> Vec<DeviceRows> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).min(devices.len().max(1));
    let chunk = devices.len().div_ceil(threads.max(1)).max(1);
    std::thread::scope(|s| {
        let handles: Vec<_> = devices
            .chunks(chunk)
            .map(|part| s.spawn(move || part.iter().map(|d| device_rows(cfg, d)).collect::<Vec<_>>()))
            .collect();
        // A generator that panicked is a bug: its panic goes on, not an empty device.
        handles.into_iter().flat_map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e))).collect()
    })
}

/// A simulated fleet as labeled tasks (device = task) with N-BaIoT's column names.
pub struct Fleet {
    pub plans: Vec<DevicePlan>,
    pub tasks: TaskSet,
    /// Row timestamps per device (same order as the tasks).
    pub timestamps: Vec<Vec<f64>>,
    pub packets: usize,
}

pub fn fleet_tasks(cfg: &FleetConfig) -> Fleet {
    let devices = plan(cfg);
    let rows = fleet_rows(cfg, &devices);
    let packets = rows.iter().map(|r| r.packets).sum();
    let timestamps = rows.iter().map(|r| r.ts.clone()).collect();
    let tasks = devices
        .iter()
        .zip(rows)
        .map(|(d, r)| Task {
            id: d.name.clone(),
            labels: r.normal.iter().map(|&n| if n { Label::Positive } else { Label::Negative }).collect(),
            x: r.features,
        })
        .collect();
    Fleet {
        plans: devices,
        tasks: TaskSet { feature_names: feature_names(), tasks, skipped_rows: 0 },
        timestamps,
        packets,
    }
}
