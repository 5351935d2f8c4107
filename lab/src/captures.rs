//! A folder of device captures as the real-traffic and week experiments read it:
//! `NAME.pcap` and `NAME.mac`, and `NAME.labels.csv` where an attack was merged in
//! (`metapu datasets infect`); a capture without labels is the device's own traffic.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};

use metapu::daemon::config::DaemonConfig;
use metapu::data::{Label, Task};
use metapu::traffic::capture::CaptureReader;
use metapu::traffic::devices::{parse_mac, Device};
use metapu::traffic::extract::{labeled_device_task, read_labels};
use metapu_lab::eval::stream::{DeviceStream, StreamConfig};

/// The options of an experiment that streams a folder of captures.
#[derive(Debug, clap::Args)]
pub struct CaptureRun {
    /// A folder of `NAME.pcap`, `NAME.mac` and, where an attack was merged in,
    /// `NAME.labels.csv` (scripts/real-data.sh, scripts/week-data.sh).
    #[arg(long)]
    pub captures: PathBuf,
    #[arg(long)]
    pub model: PathBuf,
    /// Where the results are written.
    #[arg(long)]
    pub out: PathBuf,
    /// Also write what the daemon would have published (incident events and prior
    /// updates, a JSON line each) to this file: `metapu-lab console` shows it.
    #[arg(long)]
    pub published: Option<PathBuf>,
    /// Benign records labeled normal at each device's start.
    #[arg(long, default_value_t = 10)]
    pub labeled: usize,
    /// Onboard each device as `metapu onboard --for` does instead, from its first record
    /// for this many seconds (of capture time); --labeled is then not used.
    #[arg(long)]
    pub onboard_for: Option<f64>,
    /// Known-normal records kept per device (windows.positive; default the daemon's).
    #[arg(long)]
    pub positive: Option<usize>,
    /// windows.unlabeled (default the daemon's): unlabeled rows kept per device.
    #[arg(long)]
    pub unlabeled: Option<usize>,
    /// windows.unlabeled_spread (default the daemon's; 0 = the newest records only) and
    /// windows.spread_bucket_s: the unlabeled rows spread over a device's earlier time.
    #[arg(long)]
    pub unlabeled_spread: Option<usize>,
    #[arg(long)]
    pub spread_bucket_s: Option<u64>,
    /// windows.drawn: adapt each device on draws at the model's trained shape.
    #[arg(long)]
    pub drawn: bool,

    /// An analyst calls every incident before the attack a false positive as it opens
    /// (`metapu feedback --false-positive`, through the daemon's feedback path).
    #[arg(long)]
    pub analyst: bool,
    /// An analyst calls every incident raised during an attack `confirmed` once it has
    /// closed (`metapu feedback --confirmed`): what was learned of it is undone.
    #[arg(long)]
    pub confirm_attacks: bool,
    /// incidents.reopen_s (default the daemon's; 0 = every incident after a quiet close
    /// is a new one).
    #[arg(long)]
    pub reopen_s: Option<u64>,
    /// adaptation.min_records (default the daemon's): records a device sends between two
    /// adaptations at least.
    #[arg(long)]
    pub min_records: Option<usize>,
    /// adaptation.interval_ms (default the daemon's): a device's time between two
    /// adaptation points at least.
    #[arg(long)]
    pub adapt_interval_ms: Option<u64>,
    /// adaptation.after_records (default the daemon's): records after which a device
    /// reaches an adaptation point whatever its time (0 = time only).
    #[arg(long)]
    pub after_records: Option<usize>,
    /// incidents.scan_window_s (default the daemon's; 0 = the fan-out look off) and
    /// incidents.flood_packets.
    #[arg(long)]
    pub scan_window_s: Option<u64>,
    #[arg(long)]
    pub flood_packets: Option<u32>,
    /// incidents.learn_quiet_closes (default the daemon's): what closes quietly
    /// unanswered is learned.
    #[arg(long)]
    pub learn_quiet_closes: Option<bool>,
    /// PREFIX=KIND: the captures whose name starts with PREFIX are devices of KIND
    /// (`metapu onboard --kind`), run in name order: what was onboarded and dismissed on
    /// the earlier ones is offered to the later ones. Repeatable.
    #[arg(long = "kind", value_parser = parse_kind)]
    pub kinds: Vec<(String, String)>,
    /// NAME: the capture NAME split at its middle (in capture time) into two devices,
    /// NAME.1 and NAME.2, the second arriving as the first leaves (with --kind, one
    /// model's second device, say).
    #[arg(long)]
    pub split: Option<String>,
}

fn parse_kind(s: &str) -> Result<(String, String), String> {
    let (prefix, kind) = s.split_once('=').ok_or("PREFIX=KIND")?;
    metapu::monitor::devices::kinds::check_name(kind).map_err(|e| e.to_string())?;
    Ok((prefix.to_string(), kind.to_string()))
}

impl CaptureRun {
    /// The folder's device streams, split and of the kinds this run says.
    pub fn streams(&self) -> anyhow::Result<Vec<DeviceStream>> {
        let mut streams = device_streams(&self.captures)?;
        if let Some(name) = &self.split {
            let i = streams
                .iter()
                .position(|s| &s.task.id == name)
                .with_context(|| format!("no capture {name}"))?;
            let whole = streams.remove(i);
            let (first, second) = split_at_middle(whole);
            streams.insert(i, second);
            streams.insert(i, first);
        }
        for s in &mut streams {
            s.kind =
                self.kinds.iter().find(|(p, _)| s.task.id.starts_with(p.as_str())).map(|(_, k)| k.clone());
        }
        Ok(streams)
    }

    /// The daemon's defaults with this run's onboarding and window.
    pub fn stream_config(&self) -> StreamConfig {
        let mut daemon = DaemonConfig::defaults();
        if let Some(p) = self.positive {
            daemon.windows.positive = p;
        }
        if let Some(n) = self.unlabeled {
            daemon.windows.unlabeled = n;
        }
        if let Some(n) = self.unlabeled_spread {
            daemon.windows.unlabeled_spread = n;
        }
        if let Some(b) = self.spread_bucket_s {
            daemon.windows.spread_bucket_s = b;
        }
        daemon.windows.drawn |= self.drawn;
        if let Some(r) = self.reopen_s {
            daemon.incidents.reopen_s = r;
        }
        if let Some(m) = self.min_records {
            daemon.adaptation.min_records = m;
        }
        if let Some(i) = self.adapt_interval_ms {
            daemon.adaptation.interval_ms = i;
        }
        if let Some(a) = self.after_records {
            daemon.adaptation.after_records = a;
        }
        if let Some(w) = self.scan_window_s {
            daemon.incidents.scan_window_s = w;
        }
        if let Some(f) = self.flood_packets {
            daemon.incidents.flood_packets = f;
        }
        if let Some(l) = self.learn_quiet_closes {
            daemon.incidents.learn_quiet_closes = l;
        }
        let mut cfg = StreamConfig::from_daemon(&daemon, self.labeled);
        cfg.onboard_for_s = self.onboard_for;
        cfg.analyst = self.analyst;
        cfg.confirm_attacks = self.confirm_attacks;
        cfg.published = self.published.clone();
        cfg
    }
}

/// Every capture of the folder, one stream per device, in name order.
pub fn device_streams(dir: &Path) -> anyhow::Result<Vec<DeviceStream>> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .with_context(|| dir.display().to_string())?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "pcap"))
        .filter_map(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
        .collect();
    names.sort();
    if names.is_empty() {
        bail!("{}: no NAME.pcap files", dir.display());
    }
    names.iter().map(|n| device_stream(dir, n)).collect()
}

/// One capture's device: its records in capture order.
fn device_stream(dir: &Path, name: &str) -> anyhow::Result<DeviceStream> {
    let mac_file = dir.join(format!("{name}.mac"));
    let mac = parse_mac(
        std::fs::read_to_string(&mac_file).with_context(|| mac_file.display().to_string())?.trim(),
    )?;
    let pcap = dir.join(format!("{name}.pcap"));
    let labels_file = dir.join(format!("{name}.labels.csv"));
    let labels = match labels_file.exists() {
        true => read_labels(&labels_file)?,
        false => vec![Label::Positive; packets(&pcap)?],
    };
    let (task, ts, contexts) = labeled_device_task(&pcap, Device { name: name.to_string(), mac }, labels)?;
    Ok(DeviceStream { task, ts, contexts, kind: None })
}

/// A device's stream cut at the middle of its capture time: two devices.
fn split_at_middle(s: DeviceStream) -> (DeviceStream, DeviceStream) {
    let (t0, t1) = (s.ts.first().copied().unwrap_or(0.0), s.ts.last().copied().unwrap_or(0.0));
    let cut = s.ts.partition_point(|&t| t < (t0 + t1) / 2.0);
    let dim = if s.task.is_empty() { 0 } else { s.task.x.len() / s.task.len() };
    let part = |range: std::ops::Range<usize>, n: u8| {
        let mut task = Task::new(format!("{}.{n}", s.task.id));
        task.x = s.task.x[range.start * dim..range.end * dim].to_vec();
        task.labels = s.task.labels[range.clone()].to_vec();
        let contexts = if s.contexts.is_empty() { Vec::new() } else { s.contexts[range.clone()].to_vec() };
        DeviceStream { task, ts: s.ts[range].to_vec(), contexts, kind: s.kind.clone() }
    };
    (part(0..cut, 1), part(cut..s.ts.len(), 2))
}

fn packets(pcap: &Path) -> anyhow::Result<usize> {
    let mut reader = CaptureReader::open(pcap)?;
    let mut n = 0;
    while reader.next_frame()?.is_some() {
        n += 1;
    }
    Ok(n)
}
