//! `metapu extract`, `metapu simulate` and `metapu replay`: traffic into feature rows
//! and feature rows into Kafka.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};

use metapu::data::split::Split;
use metapu::data::{csv_tasks, Label};
use metapu::traffic::capture::{CaptureError, CaptureReader};
use metapu::traffic::devices::DeviceMap;
use metapu::traffic::extract::{read_labels, Devices, Extractor};
use metapu::traffic::feature_names;
use metapu::traffic::profiles::{Attack, DeviceType};
use metapu::traffic::replay::{self, Replayer, Step};
use metapu::traffic::simulate::{self, FleetConfig};

use super::feed::{Feed, Format, Pacer};

/// "600", "600s", "10m", "2h" → seconds.
pub(crate) fn parse_duration(s: &str) -> Result<f64, String> {
    let s = s.trim();
    let (num, unit) = match s.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => (&s[..i], c),
        _ => (s, 's'),
    };
    let v: f64 = num.parse().map_err(|_| format!("'{s}' is not a duration (600, 600s, 10m, 2h)"))?;
    let scale = match unit {
        's' => 1.0,
        'm' => 60.0,
        'h' => 3600.0,
        _ => return Err(format!("'{s}': unit must be s, m or h")),
    };
    if v.is_finite() && v > 0.0 {
        Ok(v * scale)
    } else {
        Err(format!("'{s}' must be positive"))
    }
}

fn spinner(total: Option<u64>, what: &str) -> ProgressBar {
    let bar = match total {
        Some(n) => ProgressBar::new(n),
        None => ProgressBar::new_spinner(),
    };
    let template = format!("{what} [{{elapsed_precise}}] {{bar:30}} {{pos}}/{{len}} {{per_sec}} eta {{eta}}");
    bar.set_style(ProgressStyle::with_template(&template).unwrap_or_else(|_| ProgressStyle::default_bar()));
    if std::env::var_os("CI").is_some() {
        bar.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    bar
}

#[derive(Debug, Args)]
#[command(group = clap::ArgGroup::new("sink").required(true).args(["out", "topic"]))]
pub struct ExtractArgs {
    /// A packet capture, classic pcap or pcapng (by its magic bytes, not its name), of
    /// Ethernet, raw IP or Linux cooked frames; `-` reads it from standard input
    /// (`tcpdump -w - | metapu extract --pcap - …`, naming the device or devices).
    #[arg(long)]
    pcap: PathBuf,
    /// Write the rows as CSV: N-BaIoT's 115 columns, or with the device flags or
    /// --labels a labeled-task CSV (task = device, label = 1 benign / 0 attack).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Or produce them to this Kafka topic as input records, keyed by device.
    #[arg(long)]
    topic: Option<String>,
    #[arg(long, default_value = "127.0.0.1:9092")]
    brokers: String,
    /// The device's name when the capture is one device (default: the file stem).
    #[arg(long, conflicts_with_all = ["device_mac", "devices"])]
    device: Option<String>,
    /// A capture of many hosts: keep the packets these devices sent or received, each
    /// device with its own feature state, named by its MAC; others are dropped.
    #[arg(long, value_delimiter = ',', conflicts_with = "devices")]
    device_mac: Vec<String>,
    /// Or the devices as `name,mac` lines.
    #[arg(long)]
    devices: Option<PathBuf>,
    /// Per-packet labels from `metapu datasets infect` (`packet,label,source`).
    #[arg(long)]
    labels: Option<PathBuf>,
    /// Kafka record format: json (`{"device", "ts", "features", "label"}`) or binary (`MPR1`…).
    #[arg(long, value_enum, default_value_t = Format::Json)]
    format: Format,
}

pub fn extract(a: ExtractArgs) -> anyhow::Result<()> {
    let from_stdin = a.pcap.as_os_str() == "-";
    if from_stdin && a.device.is_none() && a.device_mac.is_empty() && a.devices.is_none() {
        bail!("--pcap -: a capture on standard input has no file name to call its device by: give --device NAME, or --device-mac / --devices");
    }
    let (name, input): (PathBuf, Box<dyn std::io::Read>) = if from_stdin {
        ("standard input".into(), Box::new(std::io::stdin().lock()))
    } else {
        let file = std::fs::File::open(&a.pcap)
            .map_err(|reason| CaptureError::Io { path: a.pcap.clone(), reason })?;
        (a.pcap.clone(), Box::new(file))
    };
    let mut reader = CaptureReader::new(name, input)?;
    let devices = match (&a.device_mac[..], &a.devices) {
        ([], None) => Devices::Whole(a.device.clone().unwrap_or_else(|| {
            a.pcap.file_stem().map_or("device".into(), |s| s.to_string_lossy().into_owned())
        })),
        (_, Some(path)) => Devices::Split(DeviceMap::from_file(path)?),
        (macs, None) => Devices::Split(DeviceMap::from_macs(macs)?),
    };
    let tasks_csv = matches!(devices, Devices::Split(_)) || a.labels.is_some();
    let labels = a.labels.as_deref().map(read_labels).transpose()?;
    let mut extractor = Extractor::new(devices, labels);
    let names = extractor.names().to_vec();
    let started = Instant::now();
    let mut csv_out = match &a.out {
        Some(path) => {
            let f = std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
            let mut w = csv::Writer::from_writer(std::io::BufWriter::new(f));
            w.write_record(if tasks_csv { csv_tasks::header(&feature_names()) } else { feature_names() })?;
            Some(w)
        }
        None => None,
    };
    let feed = match &a.topic {
        Some(topic) => Some(Feed::connect(&a.brokers, topic)?),
        None => None,
    };
    while let Some(frame) = reader.next_frame()? {
        let routed = extractor.route(&frame).with_context(|| a.pcap.display().to_string())?;
        let Some(routed) = routed else { continue };
        let (packet, label) = (routed.packet, routed.label);
        for (d, context) in routed.per_device() {
            let row = extractor.features(d, &packet);
            if let Some(w) = csv_out.as_mut() {
                if tasks_csv {
                    w.write_field(&names[d])?;
                    w.write_field(csv_tasks::label_field(label))?;
                }
                w.write_record(row.iter().map(|v| v.to_string()))?;
            }
            if let Some(feed) = &feed {
                feed.send(&names[d], &a.format.encode(&names[d], packet.ts, row, false, Some(context)))?;
            }
        }
    }
    if let Some(mut w) = csv_out {
        w.flush()?;
    }
    let secs = started.elapsed().as_secs_f64();
    let counts = &extractor.counts;
    let total: u64 = counts.rows.iter().sum();
    println!(
        "extract: {} packets → {total} rows of 115 features in {secs:.2} s ({:.0} packets/s)",
        counts.packets,
        counts.packets as f64 / secs.max(1e-9)
    );
    if counts.unparsed > 0 || counts.unlisted > 0 || reader.truncated() {
        println!(
            "extract: {} packets too short to parse, {} of no listed device (dropped){}",
            counts.unparsed,
            counts.unlisted,
            if reader.truncated() { "; the last record was cut short and left out" } else { "" }
        );
    }
    if counts.dns_ignored > 0 {
        println!(
            "extract: {} DNS answers matched no query of the device's own and named nothing",
            counts.dns_ignored
        );
    }
    if names.len() > 1 || tasks_csv {
        for (name, n) in names.iter().zip(&counts.rows) {
            println!("extract: {name:<24} {n:>9} rows");
        }
    }
    if let Some(feed) = feed {
        feed.finish("extract", Duration::from_secs(30))?;
    }
    Ok(())
}

#[derive(Debug, Args)]
#[command(group = clap::ArgGroup::new("sink").required(true).args(["out", "topic"]))]
pub struct SimulateArgs {
    #[arg(long, default_value_t = 10)]
    devices: usize,
    /// Device types, assigned in turn.
    #[arg(long, value_delimiter = ',', default_value = "doorbell,thermostat,camera,baby_monitor,webcam")]
    types: Vec<DeviceType>,
    /// Attacks to draw from (default: N-BaIoT's, mirai.scan … gafgyt.combo; also
    /// telnet.bruteforce, cnc.beacon, dns.amplification, exfiltration.burst, arp.sweep,
    /// ssh.bruteforce).
    #[arg(long, value_delimiter = ',')]
    attacks: Vec<Attack>,
    /// Simulated capture length per device (600, 600s, 10m, 1h).
    #[arg(long, default_value = "10m", value_parser = parse_duration)]
    duration: f64,
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Share of devices that come under attack (the attack runs from 50–80 % of
    /// the duration to the end).
    #[arg(long, default_value_t = 0.5)]
    attacked: f64,
    /// Keep every k-th packet's row (the statistics still see every packet).
    #[arg(long, default_value_t = 1)]
    keep_every: usize,
    /// At most this many rows per class and device, evenly spaced in time.
    #[arg(long)]
    max_rows_per_class: Option<usize>,
    /// Labeled-task CSV (device = task; 1 = benign packet, 0 = attack packet).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Also write a split file: held-out types are targets, the rest source/validation.
    #[arg(long, requires = "out")]
    split_out: Option<PathBuf>,
    #[arg(long, value_delimiter = ',', requires = "split_out")]
    holdout_types: Vec<DeviceType>,
    /// Share of the non-held-out devices used for validation.
    #[arg(long, default_value_t = 0.2)]
    validation_share: f64,
    /// Or produce the fleet's records, in time order, to this Kafka topic.
    #[arg(long)]
    topic: Option<String>,
    #[arg(long, default_value = "127.0.0.1:9092")]
    brokers: String,
    /// Kafka only: label each device's first N benign records "normal" (taken by a daemon
    /// with windows.trust_input_labels).
    #[arg(long, default_value_t = 0)]
    label_first: usize,
    /// Kafka only: records per second (0 = as fast as the broker takes them).
    #[arg(long, default_value_t = 0.0)]
    rate: f64,
    /// Kafka record format: json (`{"device", "ts", "features", "label"}`) or binary (`MPR1`…).
    #[arg(long, value_enum, default_value_t = Format::Json)]
    format: Format,
}

pub fn simulate_cmd(a: SimulateArgs) -> anyhow::Result<()> {
    if !(0.0..=1.0).contains(&a.attacked) {
        bail!("--attacked must be within 0..1");
    }
    let cfg = FleetConfig {
        devices: a.devices,
        types: a.types.clone(),
        attacks: a.attacks.clone(),
        duration_s: a.duration,
        seed: a.seed,
        attacked_share: a.attacked,
        keep_every: a.keep_every,
        max_rows_per_class: a.max_rows_per_class,
        ..FleetConfig::default()
    };
    let started = Instant::now();
    let fleet = simulate::fleet_tasks(&cfg);
    let (plans, set) = (&fleet.plans, &fleet.tasks);
    let rows = set.rows();
    let negatives: usize = set.tasks.iter().map(|t| t.indices_of(Label::Negative).len()).sum();
    let secs = started.elapsed().as_secs_f64();
    println!(
        "simulate: {} devices ({} attacked), {} packets → {rows} rows ({negatives} attack) in {secs:.1} s ({:.0} packets/s)",
        plans.len(),
        plans.iter().filter(|p| p.attack.is_some()).count(),
        fleet.packets,
        fleet.packets as f64 / secs.max(1e-9)
    );
    if let Some(path) = &a.out {
        let f = std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
        let mut w = std::io::BufWriter::new(f);
        csv_tasks::write(set, &mut w)?;
        w.flush()?;
        println!("simulate: wrote {}", path.display());
    }
    if let Some(path) = &a.split_out {
        let mut split = Split::default();
        // Every 1/share-th device of the others validates.
        let every = (1.0 / a.validation_share.clamp(0.01, 1.0)).round().max(1.0) as usize;
        let mut k = 0usize;
        for p in plans {
            if a.holdout_types.contains(&p.kind) {
                split.target.push(p.name.clone());
            } else {
                k += 1;
                if k % every == 0 {
                    split.validation.push(p.name.clone());
                } else {
                    split.source.push(p.name.clone());
                }
            }
        }
        split.save(path)?;
        println!(
            "simulate: split {} (source {}, validation {}, target {})",
            path.display(),
            split.source.len(),
            split.validation.len(),
            split.target.len()
        );
    }
    if let Some(topic) = &a.topic {
        // All devices' records in time order, as a site's sensors would deliver them.
        let mut order: Vec<(f64, usize, usize)> = Vec::with_capacity(rows);
        let dim = set.dim();
        for (d, stamps) in fleet.timestamps.iter().enumerate() {
            order.extend(stamps.iter().enumerate().map(|(i, &ts)| (ts, d, i)));
        }
        order.sort_by(|x, y| x.0.total_cmp(&y.0));
        let feed = Feed::connect(&a.brokers, topic)?;
        let mut pacer = Pacer::new(Some(a.rate));
        let bar = spinner(Some(order.len() as u64), "simulate");
        let mut labeled = vec![0usize; plans.len()];
        for (ts, d, i) in order {
            pacer.wait_turn();
            let task = &set.tasks[d];
            let known = task.labels[i] == Label::Positive && labeled[d] < a.label_first;
            labeled[d] += usize::from(known);
            feed.send(&task.id, &a.format.encode(&task.id, ts, task.row(i, dim), known, None))?;
            bar.inc(1);
        }
        bar.finish_and_clear();
        feed.finish("simulate", Duration::from_secs(60))?;
    }
    Ok(())
}

#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// N-BaIoT directories or files (UCI or Kaggle layout) or labeled-task CSVs.
    #[arg(required = true)]
    inputs: Vec<PathBuf>,
    #[arg(long)]
    topic: String,
    #[arg(long, default_value = "127.0.0.1:9092")]
    brokers: String,
    /// Records per second over all devices (default 1000; 0 = unthrottled).
    #[arg(long)]
    rate: Option<f64>,
    /// Run the schedule's delays X times faster (@+60s at --speedup 10 comes after 6 s).
    #[arg(long, default_value_t = 1.0)]
    speedup: f64,
    /// Start over when every device has sent everything (until Ctrl-C).
    #[arg(long = "loop")]
    looping: bool,
    /// Per device: which segments, in which order, held back by how long:
    /// `danmini:benign,gafgyt.udp@+60s` (repeat the flag or separate devices by ';').
    #[arg(long)]
    schedule: Vec<String>,
    /// Label each device's first N benign records "normal" (taken by a daemon with
    /// windows.trust_input_labels).
    #[arg(long, default_value_t = 0)]
    label_first: usize,
    /// Kafka record format: json (`{"device", "ts", "features", "label"}`) or binary (`MPR1`…).
    #[arg(long, value_enum, default_value_t = Format::Json)]
    format: Format,
}

pub fn replay_cmd(a: ReplayArgs) -> anyhow::Result<()> {
    if !(a.speedup.is_finite() && a.speedup > 0.0) {
        bail!("--speedup must be positive");
    }
    let (dim, mut streams) = replay::load(&a.inputs)?;
    for s in &a.schedule {
        let entries = replay::parse_schedule(s).map_err(|e| anyhow::anyhow!("--schedule: {e}"))?;
        replay::apply_schedule(&mut streams, &entries).map_err(anyhow::Error::msg)?;
    }
    let mut replayer = Replayer::new(streams, a.label_first, a.looping);
    let total = replayer.total_records();
    println!(
        "replay: {} devices, {total} records of {dim} features → {} on {}{}",
        replayer.streams().len(),
        a.topic,
        a.brokers,
        if a.looping { " (looping)" } else { "" }
    );
    let names: Vec<String> = replayer.streams().iter().map(|s| s.device.clone()).collect();
    let feed = Feed::connect(&a.brokers, &a.topic)?;
    let rate = a.rate.unwrap_or(1000.0);
    let mut pacer = Pacer::new(Some(rate));
    let bar = spinner((!a.looping).then_some(total as u64), "replay");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    {
        let stop = std::sync::Arc::clone(&stop);
        let _ = ctrlc::set_handler(move || stop.store(true, std::sync::atomic::Ordering::Relaxed));
    }
    let mut counts: BTreeMap<(String, String), (u64, u64)> = BTreeMap::new();
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        let at = pacer.elapsed() * a.speedup;
        match replayer.next(at) {
            Step::Send { device, row, class, known_normal } => {
                pacer.wait_turn();
                let name = &names[device];
                let ts = metapu::daemon::unix_now();
                feed.send(name, &a.format.encode(name, ts, row, known_normal, None))?;
                let c = counts.entry((name.clone(), class.to_string())).or_default();
                c.0 += 1;
                c.1 += u64::from(known_normal);
                bar.inc(1);
            }
            Step::WaitUntil(t) => {
                let wait = ((t - at) / a.speedup).clamp(0.001, 0.25);
                std::thread::sleep(Duration::from_secs_f64(wait));
            }
            Step::Done => break,
        }
    }
    bar.finish_and_clear();
    println!("{:<28} {:<16} {:>9} {:>9}", "device", "class", "records", "labeled");
    for ((device, class), (n, labeled)) in &counts {
        println!("{device:<28} {class:<16} {n:>9} {labeled:>9}");
    }
    feed.finish(&format!("replay ({:.1} s)", pacer.elapsed()), Duration::from_secs(60))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::parse_duration;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("600"), Ok(600.0));
        assert_eq!(parse_duration("10m"), Ok(600.0));
        assert_eq!(parse_duration("1.5h"), Ok(5400.0));
        assert!(parse_duration("-1").is_err());
        assert!(parse_duration("5d").is_err());
    }
}
