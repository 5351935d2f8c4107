//! `metapu datasets infect`: a device's benign captures with real attack packets
//! rewritten to come from the device, as one capture and a per-packet label file.

use std::io::Write;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context};
use clap::Args;
use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};
use pcap_file::{DataLink, Endianness, TsResolution};

use metapu::traffic::capture::CaptureReader;
use metapu::traffic::devices::{format_mac, parse_mac};
use metapu::traffic::frame::{mac_of_bytes, Link};
use metapu::traffic::infect::{self, Identity, Origin, OwnedFrame, Start};

#[derive(Debug, Args)]
#[command(group = clap::ArgGroup::new("when").args(["start", "start_at"]))]
pub struct InfectArgs {
    /// The device's benign captures (pcap or pcapng, Ethernet), merged by time.
    #[arg(long, required = true, num_args = 1..)]
    benign: Vec<PathBuf>,
    /// Place the benign captures one after the other in the given order (each
    /// keeping its own timing, 1 s apart) instead of at their recorded times.
    #[arg(long)]
    concatenate: bool,
    /// The device's MAC address.
    #[arg(long)]
    device_mac: String,
    /// The device's IPv4 address [default: the source address its packets use most].
    #[arg(long)]
    device_ip: Option<Ipv4Addr>,
    /// Attack captures, placed one after the other from the start.
    #[arg(long, required = true, num_args = 1..)]
    attack: Vec<PathBuf>,
    /// The attacking host's IPv4 address in every attack capture [default: per
    /// capture, the source that sends the most packets].
    #[arg(long)]
    attacker: Option<Ipv4Addr>,
    /// Where the attack starts: this share of the benign span [default: 0.5].
    #[arg(long)]
    start: Option<f64>,
    /// Or at this time (Unix seconds).
    #[arg(long)]
    start_at: Option<f64>,
    /// The attacks again, as another wave, this many seconds after the first began
    /// (repeatable: one wave each).
    #[arg(long = "again-after", value_name = "SECONDS")]
    again_after: Vec<f64>,
    /// The merged capture (classic pcap, nanosecond times).
    #[arg(long)]
    out: PathBuf,
    /// Per-packet labels, `packet,label,source` [default: <out>.labels.csv].
    #[arg(long)]
    labels: Option<PathBuf>,
}

/// Between concatenated captures: longer than a packet gap inside a session, far
/// shorter than the damped statistics' memory (λ = 0.01: about 100 s).
const CONCATENATION_GAP_NS: u64 = 1_000_000_000;

/// `x.pcap` → `x.labels.csv`.
pub fn labels_path_for(out: &Path) -> PathBuf {
    out.with_extension("labels.csv")
}

/// Every packet record of an Ethernet capture.
fn read_ethernet(path: &Path) -> anyhow::Result<Vec<OwnedFrame>> {
    let mut reader = CaptureReader::open(path)?;
    let mut frames = Vec::new();
    while let Some(f) = reader.next_frame()? {
        if f.link != Link::Ethernet {
            bail!(
                "{}: packet {} is {:?}, and infect rewrites Ethernet frames only",
                path.display(),
                f.index,
                f.link
            );
        }
        frames.push(OwnedFrame { ts_ns: f.ts.nanos(), orig_len: f.orig_len, data: f.data.to_vec() });
    }
    Ok(frames)
}

fn source_name(path: &Path) -> String {
    path.file_name().map_or_else(|| path.display().to_string(), |n| n.to_string_lossy().into_owned())
}

/// What to infect with what: the inputs of `metapu datasets infect` (and of the demo's
/// real capture).
pub struct Infection<'a> {
    pub benign: &'a [PathBuf],
    pub concatenate: bool,
    pub device_mac: u64,
    pub device_ip: Option<Ipv4Addr>,
    pub attacks: &'a [PathBuf],
    pub attacker: Option<Ipv4Addr>,
    pub start: Start,
    /// Further waves, this long after the first began (nanoseconds).
    pub again_after_ns: Vec<u64>,
}

/// The merged capture; `say` hears what was rewritten.
pub fn make_infected(i: &Infection, mut say: impl FnMut(String)) -> anyhow::Result<infect::Merged> {
    let mac = infect::mac_bytes(i.device_mac);
    let mac_text = format_mac(i.device_mac);
    let captures = i.benign.iter().map(|p| read_ethernet(p)).collect::<anyhow::Result<Vec<_>>>()?;
    let benign: Vec<OwnedFrame> = if i.concatenate {
        infect::concatenate(captures, CONCATENATION_GAP_NS)
    } else {
        captures.into_iter().flatten().collect()
    };
    let ip = match i.device_ip {
        Some(ip) => ip,
        None => infect::device_ip(&benign, mac).with_context(|| {
            format!("no IPv4 packet comes from {mac_text} in the benign captures: name its address with --device-ip")
        })?,
    };
    let device = Identity { mac, ip };
    let mut attacks = Vec::new();
    for path in i.attacks {
        let mut frames = read_ethernet(path)?;
        let from = infect::attacker(&frames, i.attacker).with_context(|| {
            format!(
                "{}: no IPv4 packet from {}",
                path.display(),
                i.attacker.map_or("any host".into(), |ip| ip.to_string())
            )
        })?;
        let rewritten = frames
            .iter_mut()
            .map(|f| infect::rewrite(&mut f.data, &from, &device))
            .filter(|&changed| changed)
            .count();
        say(format!(
            "{}: {} of {} packets name the attacker {} ({}) → the device {} ({})",
            path.display(),
            rewritten,
            frames.len(),
            from.ip,
            format_mac(mac_of_bytes(&from.mac)),
            device.ip,
            format_mac(mac_of_bytes(&device.mac))
        ));
        attacks.push(frames);
    }
    Ok(infect::merge(benign, attacks, i.start, &i.again_after_ns)?)
}

pub fn run(a: InfectArgs) -> anyhow::Result<()> {
    let start = match (a.start, a.start_at) {
        (_, Some(t)) if t.is_finite() && t >= 0.0 => Start::At((t * 1e9).round() as u64),
        (_, Some(t)) => bail!("--start-at {t} is not a time"),
        (share, None) => Start::Share(share.unwrap_or(0.5)),
    };
    let mut again_after_ns = Vec::new();
    for &s in &a.again_after {
        if !(s.is_finite() && s > 0.0) {
            bail!("--again-after {s} is not a positive number of seconds");
        }
        again_after_ns.push((s * 1e9).round() as u64);
    }
    let infection = Infection {
        benign: &a.benign,
        concatenate: a.concatenate,
        device_mac: parse_mac(&a.device_mac)?,
        device_ip: a.device_ip,
        attacks: &a.attack,
        attacker: a.attacker,
        start,
        again_after_ns,
    };
    let merged = make_infected(&infection, |line| println!("infect: {line}"))?;
    write_capture(&a.out, &merged.frames)?;
    let labels = a.labels.clone().unwrap_or_else(|| labels_path_for(&a.out));
    write_labels(&labels, &merged.frames, &a.attack)?;
    let attack_packets = merged.frames.iter().filter(|(_, o)| *o != Origin::Benign).count();
    println!(
        "infect: wrote {} ({} packets, {attack_packets} attack, from {:.3} to {:.3} s) and {}",
        a.out.display(),
        merged.frames.len(),
        merged.attack_start_ns as f64 * 1e-9,
        merged.attack_end_ns as f64 * 1e-9,
        labels.display()
    );
    Ok(())
}

pub fn write_capture(path: &Path, frames: &[(OwnedFrame, Origin)]) -> anyhow::Result<()> {
    let file = std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
    let snaplen = frames.iter().map(|(f, _)| f.data.len() as u32).max().unwrap_or(0).max(65_535);
    let header = PcapHeader {
        snaplen,
        datalink: DataLink::ETHERNET,
        ts_resolution: TsResolution::NanoSecond,
        endianness: Endianness::Little,
        ..PcapHeader::default()
    };
    let mut w = PcapWriter::with_header(std::io::BufWriter::new(file), header)?;
    for (f, _) in frames {
        let orig_len = f.orig_len.max(f.data.len() as u32);
        w.write_packet(&PcapPacket::new(Duration::from_nanos(f.ts_ns), orig_len, &f.data))
            .with_context(|| format!("writing {}", path.display()))?;
    }
    w.into_writer().flush().with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

pub fn write_labels(path: &Path, frames: &[(OwnedFrame, Origin)], attacks: &[PathBuf]) -> anyhow::Result<()> {
    let mut w = csv::Writer::from_path(path).with_context(|| format!("creating {}", path.display()))?;
    w.write_record(["packet", "label", "source"])?;
    for (i, (_, origin)) in frames.iter().enumerate() {
        let (label, source) = match origin {
            Origin::Benign => ("benign", String::new()),
            Origin::Attack(k) => ("attack", source_name(&attacks[*k])),
        };
        w.write_record([i.to_string().as_str(), label, &source])?;
    }
    w.flush()?;
    Ok(())
}
