//! The demo's traffic, built before anything starts: a simulated fleet (the
//! simulator's packets through AfterImage, as `metapu simulate`), the real Danmini
//! doorbell rows of N-BaIoT, and a real IoT Sentinel capture with nDPI's real SYN scan
//! merged in (`metapu datasets infect`) and read back through `metapu extract`'s path.
//! Each record carries the second of the demo at which it is sent and its ground truth.

use std::path::{Path, PathBuf};

use anyhow::Context;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use metapu::data::Label;
use metapu::traffic::capture::CaptureReader;
use metapu::traffic::devices::{parse_mac, Device as ListedDevice};
use metapu::traffic::extract::{labeled_device_task, read_labels};
use metapu::traffic::infect::Start;
use metapu::traffic::profiles::{ATTACKS, DEVICE_TYPES};
use metapu::traffic::replay;
use metapu::traffic::simulate::{device_rows, DevicePlan, FleetConfig};

use crate::cli::infect::{labels_path_for, make_infected, write_capture, write_labels, Infection};

pub struct Record {
    /// Seconds into the demo at which it is sent.
    pub at_s: f64,
    pub row: Vec<f32>,
    /// Ground truth: the attack sent it.
    pub attack: bool,
    /// Its packet, where the demo has one (the real capture's records).
    pub context: Option<metapu::traffic::context::Context>,
}

pub struct DemoDevice {
    pub name: String,
    /// Where its traffic comes from, in words.
    pub origin: String,
    /// The attack it comes under, if any.
    pub attack: Option<String>,
    pub records: Vec<Record>,
}

impl DemoDevice {
    /// Index of its first attack record.
    pub fn attack_start(&self) -> Option<usize> {
        self.records.iter().position(|r| r.attack)
    }
}

/// Simulated rows per class and device at most, per second of traffic: the
/// simulator's packets are thinned evenly in time (a flood sends hundreds a second),
/// as in the shipped model's training data.
const SIMULATED_ROWS_PER_S: f64 = 5.0;

/// `n` simulated devices of every type in turn for `span_s` seconds; every third is
/// attacked, each by another of the simulator's attack kinds (a seeded order),
/// starting between `attack_after_s` and 10 s later.
pub fn simulated_fleet(n: usize, seed: u64, attack_after_s: f64, span_s: f64) -> Vec<DemoDevice> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut kinds = ATTACKS.to_vec();
    kinds.shuffle(&mut rng);
    let cfg = FleetConfig {
        devices: n,
        duration_s: span_s,
        seed,
        max_rows_per_class: Some((span_s * SIMULATED_ROWS_PER_S).ceil() as usize),
        ..FleetConfig::default()
    };
    let plans: Vec<DevicePlan> = (0..n)
        .map(|index| {
            let kind = DEVICE_TYPES[index % DEVICE_TYPES.len()];
            let attacked = index % 3 == 2;
            let attack = attacked.then(|| {
                let at = attack_after_s + 10.0 * (index / 3) as f64 / (n / 3).max(1) as f64;
                (kinds[(index / 3) % kinds.len()], at)
            });
            DevicePlan {
                index,
                name: format!("{}-{:02}", kind.name().replace('_', "-"), index + 1),
                kind,
                attack,
            }
        })
        .collect();
    let rows = std::thread::scope(|s| {
        let handles: Vec<_> = plans.iter().map(|p| s.spawn(|| device_rows(&cfg, p))).collect();
        handles.into_iter().map(|h| h.join().expect("simulating a device panicked")).collect::<Vec<_>>()
    });
    plans
        .iter()
        .zip(rows)
        .map(|(plan, rows)| {
            // The simulator's devices start within the first minute, each at its own
            // moment, and the attack's start counts from there: the demo keeps that
            // clock for an attacked device (its attack starts when planned) and sends a
            // clean one from its first packet.
            let first_attack = rows.normal.iter().position(|n| !n);
            let t0 = match (plan.attack, first_attack) {
                (Some((_, at)), Some(i)) => rows.ts[i] - at,
                _ => rows.ts.first().copied().unwrap_or(0.0),
            };
            let dim = rows.features.len() / rows.ts.len().max(1);
            let records = (0..rows.ts.len())
                .map(|i| Record {
                    at_s: (rows.ts[i] - t0).max(0.0),
                    row: rows.features[i * dim..(i + 1) * dim].to_vec(),
                    attack: !rows.normal[i],
                    context: None,
                })
                .collect();
            DemoDevice {
                name: plan.name.clone(),
                origin: format!("simulated {}", plan.kind.name().replace('_', " ")),
                attack: plan.attack.map(|(a, _)| a.name().to_string()),
                records,
            }
        })
        .collect()
}

/// N-BaIoT's Danmini doorbell rows (recorded features, no timestamps): its benign
/// rows spread over the first `attack_after_s` seconds, then its BASHLITE rows at
/// the same pace.
pub fn danmini(dir: &Path, attack_after_s: f64) -> anyhow::Result<DemoDevice> {
    let (_, streams) = replay::load(&[dir.to_path_buf()])?;
    let stream = streams
        .into_iter()
        .find(|s| s.device.starts_with("danmini"))
        .with_context(|| format!("{}: no Danmini doorbell rows", dir.display()))?;
    let benign: Vec<&Vec<f32>> =
        stream.segments.iter().filter(|s| s.class == "benign").flat_map(|s| &s.rows).collect();
    let attack: Vec<(&str, &Vec<f32>)> = stream
        .segments
        .iter()
        .filter(|s| s.class != "benign")
        .flat_map(|s| s.rows.iter().map(move |r| (s.class.as_str(), r)))
        .collect();
    anyhow::ensure!(
        !benign.is_empty() && !attack.is_empty(),
        "{}: Danmini needs benign and attack rows",
        dir.display()
    );
    let step = attack_after_s / benign.len() as f64;
    let mut classes: Vec<&str> = attack.iter().map(|(c, _)| *c).collect();
    classes.dedup();
    let records = benign
        .iter()
        .map(|r| (*r, false))
        .chain(attack.iter().map(|(_, r)| (*r, true)))
        .enumerate()
        .map(|(i, (row, attack))| Record { at_s: i as f64 * step, row: row.clone(), attack, context: None })
        .collect();
    Ok(DemoDevice {
        name: stream.device,
        origin: "real N-BaIoT rows".into(),
        attack: Some(classes.join("+")),
        records,
    })
}

/// The IoT Sentinel device whose captures the demo replays, and the real attack
/// merged into them: the longest capture of the dataset and the longest attack.
pub const CAPTURE_DEVICE: &str = "D-LinkHomeHub";
pub const CAPTURE_ATTACK: &str = "ndpi/synscan.pcap";

/// A real device's setup captures, concatenated, with nDPI's SYN scan rewritten to
/// come from it `attack_after_s` seconds in; written to `work` as a capture and a
/// label file, then read back as `metapu extract --device-mac … --labels …` does and
/// sent at the capture's own pace.
pub fn infected_capture(pcap: &Path, work: &Path, attack_after_s: f64) -> anyhow::Result<DemoDevice> {
    let dir = pcap.join("iot-sentinel").join(CAPTURE_DEVICE);
    let mac_file = dir.join("_iotdevice-mac.txt");
    let mac = parse_mac(
        std::fs::read_to_string(&mac_file).with_context(|| format!("reading {}", mac_file.display()))?.trim(),
    )?;
    let mut benign: Vec<PathBuf> = std::fs::read_dir(&dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("Setup-")))
        .collect();
    benign.sort();
    let attacks = [pcap.join(CAPTURE_ATTACK)];
    let first_ns = first_packet_ns(&benign[..1.min(benign.len())])?;
    let infection = Infection {
        benign: &benign,
        concatenate: true,
        device_mac: mac,
        device_ip: None,
        attacks: &attacks,
        attacker: None,
        start: Start::At(first_ns + (attack_after_s * 1e9) as u64),
        again_after_ns: Vec::new(),
    };
    let merged = make_infected(&infection, |_| {})?;
    std::fs::create_dir_all(work).with_context(|| format!("creating {}", work.display()))?;
    let out = work.join(format!("{CAPTURE_DEVICE}.syn-scan.pcap"));
    write_capture(&out, &merged.frames)?;
    write_labels(&labels_path_for(&out), &merged.frames, &attacks)?;

    let name = CAPTURE_DEVICE.to_lowercase();
    let labels = read_labels(&labels_path_for(&out))?;
    let (task, ts, contexts) = labeled_device_task(&out, ListedDevice { name: name.clone(), mac }, labels)?;
    let dim = task.x.len() / ts.len().max(1);
    let t0 = ts.first().copied().unwrap_or(0.0);
    let records = ts
        .iter()
        .zip(&task.labels)
        .zip(task.x.chunks_exact(dim.max(1)))
        .zip(contexts)
        .map(|(((t, label), row), context)| Record {
            at_s: t - t0,
            row: row.to_vec(),
            attack: *label == Label::Negative,
            context: Some(context),
        })
        .collect();
    Ok(DemoDevice {
        name,
        origin: format!("real capture, IoT Sentinel, {}", out.display()),
        attack: Some("real syn scan".into()),
        records,
    })
}

fn first_packet_ns(paths: &[PathBuf]) -> anyhow::Result<u64> {
    let path = paths.first().context("no Setup-*.pcap capture")?;
    let mut reader = CaptureReader::open(path)?;
    let frame = reader.next_frame()?.with_context(|| format!("{}: no packets", path.display()))?;
    Ok(frame.ts.nanos())
}

/// Every record of every device in sending order: (seconds, device, record).
pub fn schedule(devices: &[DemoDevice], until_s: f64) -> Vec<(f64, usize, usize)> {
    let mut out: Vec<(f64, usize, usize)> = devices
        .iter()
        .enumerate()
        .flat_map(|(d, dev)| dev.records.iter().enumerate().map(move |(i, r)| (r.at_s, d, i)))
        .filter(|(t, _, _)| *t < until_s)
        .collect();
    out.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)));
    out
}
