use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, Subcommand};

use metapu::data::csv_tasks;
use metapu::data::synthetic::{self, SyntheticConfig};

#[derive(Debug, Subcommand)]
pub enum DatasetsCommand {
    /// The paper's Synthetic benchmark: 140 rotated Gaussian-mixture / half-moon tasks
    /// as a labeled-task CSV, plus a 100/20/20 source/validation/target split file.
    Synthetic(SyntheticArgs),
    /// Feature ranges of simulated rows beside real N-BaIoT rows (docs/traffic.md).
    Compare(CompareArgs),
    /// Make a device look infected: real attack packets rewritten to come from the
    /// device, merged into its benign captures; a capture and per-packet labels.
    Infect(super::infect::InfectArgs),
    /// A simulated attack's packets alone, as a capture to merge with `infect`.
    Attack(AttackArgs),
}

#[derive(Debug, Args)]
pub struct AttackArgs {
    /// The attack (N-BaIoT's mirai.scan … gafgyt.combo, or telnet.bruteforce,
    /// cnc.beacon, dns.amplification, exfiltration.burst, arp.sweep, ssh.bruteforce,
    /// upload, beacon.slow).
    #[arg(long)]
    kind: metapu::traffic::profiles::Attack,
    /// upload and beacon.slow: the peer (a device's own cloud, by its address); default
    /// a public host the device never used.
    #[arg(long)]
    to: Option<std::net::IpAddr>,
    /// upload: how many bytes it sends.
    #[arg(long, default_value_t = 50 << 20)]
    bytes: u64,
    /// How long it runs (seconds).
    #[arg(long, default_value_t = 10.0)]
    duration: f64,
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// The capture (classic pcap, Ethernet).
    #[arg(long)]
    out: PathBuf,
}

fn attack_capture(a: AttackArgs) -> anyhow::Result<()> {
    use metapu::traffic::pcap::PcapWriter;
    use metapu::traffic::simulate;
    anyhow::ensure!(a.duration.is_finite() && a.duration > 0.0, "--duration must be positive");
    let upload = simulate::UploadPlan { to: a.to, bytes: a.bytes };
    let (device, packets) = simulate::attack_packets_with(a.kind, a.duration, a.seed, upload);
    let (mac, gateway) = simulate::device_macs(&device);
    let file = std::fs::File::create(&a.out).with_context(|| format!("creating {}", a.out.display()))?;
    let mut w = PcapWriter::new(std::io::BufWriter::new(file))?;
    for p in &packets {
        let to = if p.packet.src_mac == mac { gateway } else { mac };
        w.write(&p.packet, to, p.proto)?;
    }
    w.finish()?;
    println!("attack: {} packets of {} over {} s → {}", packets.len(), a.kind, a.duration, a.out.display());
    Ok(())
}

#[derive(Debug, Args)]
pub struct CompareArgs {
    /// Simulated labeled-task CSV (`metapu simulate --out`).
    #[arg(long)]
    simulated: PathBuf,
    /// Real N-BaIoT directory (UCI or Kaggle layout).
    #[arg(long)]
    real: PathBuf,
    /// Per-feature benign min/max of real devices (`feature,min,max`).
    #[arg(long)]
    bounds: Option<PathBuf>,
    /// Columns to show.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "MI_dir_L5_weight,MI_dir_L5_mean,MI_dir_L0.01_weight,H_L0.1_variance,HH_L0.01_weight,HH_L5_mean,HH_jit_L5_mean,HpHp_L5_weight,HpHp_L0.01_mean,HH_L0.01_pcc"
    )]
    features: Vec<String>,
}

#[derive(Debug, Args)]
pub struct SyntheticArgs {
    /// Output CSV.
    #[arg(long)]
    out: PathBuf,
    /// Split file to write [default: <out without .csv>.split.json].
    #[arg(long)]
    split: Option<PathBuf>,
    #[arg(long, default_value_t = 0)]
    seed: u64,
}

pub fn split_path_for(out: &std::path::Path) -> PathBuf {
    out.with_extension("split.json")
}

fn compare(a: CompareArgs) -> anyhow::Result<()> {
    use metapu::data::{nbaiot, Label};
    use metapu::traffic::ranges;
    let sim = csv_tasks::load(&a.simulated, false)?;
    let dim = sim.dim();
    let cols: Vec<usize> = a
        .features
        .iter()
        .map(|f| sim.feature_names.iter().position(|n| n == f).with_context(|| format!("no column {f}")))
        .collect::<anyhow::Result<_>>()?;
    // Groups: simulated device type × class, then each real file.
    let mut groups: std::collections::BTreeMap<String, Vec<f32>> = Default::default();
    for t in &sim.tasks {
        let kind = t.id.rsplit_once('-').map_or(t.id.as_str(), |(k, _)| k);
        for (i, l) in t.labels.iter().enumerate() {
            let class = if *l == Label::Positive { "benign" } else { "attack" };
            groups.entry(format!("sim {kind} {class}")).or_default().extend_from_slice(t.row(i, dim));
        }
    }
    let mut real: Vec<(String, Vec<f32>)> = Vec::new();
    for f in nbaiot::discover(&a.real)? {
        let (header, values) = nbaiot::read_feature_csv(&f.path, false, &mut 0)?;
        anyhow::ensure!(
            header == sim.feature_names,
            "{}: columns differ from the simulated file",
            f.path.display()
        );
        real.push((format!("real {} {}", f.device, f.class), values));
    }
    println!("| rows | n | {} |", a.features.join(" | "));
    println!("|---|---|{}", "---|".repeat(cols.len()));
    for (name, rows) in real.iter().map(|(n, r)| (n, r)).chain(groups.iter()) {
        let cells: Vec<String> = cols
            .iter()
            .map(|&c| match ranges::spread(rows, dim, c) {
                Some(s) => format!("{} [{}–{}]", Sig(s.median), Sig(s.min), Sig(s.max)),
                None => "-".into(),
            })
            .collect();
        println!("| {name} | {} | {} |", rows.len() / dim, cells.join(" | "));
    }
    if let Some(path) = &a.bounds {
        let bounds = ranges::read_bounds(path)?;
        anyhow::ensure!(
            bounds.len() == dim,
            "{}: {} features, the data has {dim}",
            path.display(),
            bounds.len()
        );
        println!(
            "\nShare of values inside the real benign min/max of all nine devices, per stream family:\n"
        );
        println!("| rows | MI_dir | H | HH | HH_jit | HpHp | all |");
        println!("|---|---|---|---|---|---|---|");
        let families = [(0, 15), (15, 30), (30, 65), (65, 80), (80, 115)];
        for (name, rows) in real.iter().map(|(n, r)| (n, r)).chain(groups.iter()) {
            let share = ranges::share_within(rows, dim, &bounds);
            let mean = |lo: usize, hi: usize| share[lo..hi].iter().sum::<f64>() / (hi - lo) as f64;
            let cells: Vec<String> =
                families.iter().map(|&(lo, hi)| format!("{:.0} %", 100.0 * mean(lo, hi))).collect();
            println!("| {name} | {} | {:.0} % |", cells.join(" | "), 100.0 * mean(0, dim));
        }
    }
    Ok(())
}

/// Three significant digits, scientific beyond 1e5.
struct Sig(f32);

impl std::fmt::Display for Sig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let v = self.0;
        if v != 0.0 && (v.abs() >= 1e5 || v.abs() < 1e-3) {
            write!(f, "{v:.2e}")
        } else {
            write!(f, "{}", (v * 1000.0).round() / 1000.0)
        }
    }
}

pub fn run(cmd: DatasetsCommand) -> anyhow::Result<()> {
    match cmd {
        DatasetsCommand::Compare(a) => compare(a),
        DatasetsCommand::Infect(a) => super::infect::run(a),
        DatasetsCommand::Attack(a) => attack_capture(a),
        DatasetsCommand::Synthetic(a) => {
            let (set, split) = synthetic::generate(&SyntheticConfig::default(), a.seed);
            let mut file = std::io::BufWriter::new(
                std::fs::File::create(&a.out).with_context(|| format!("creating {}", a.out.display()))?,
            );
            csv_tasks::write(&set, &mut file).with_context(|| format!("writing {}", a.out.display()))?;
            let split_path = a.split.unwrap_or_else(|| split_path_for(&a.out));
            split.save(&split_path)?;
            println!(
                "wrote {} ({} tasks, {} rows) and {} ({} source / {} validation / {} target)",
                a.out.display(),
                set.tasks.len(),
                set.rows(),
                split_path.display(),
                split.source.len(),
                split.validation.len(),
                split.target.len()
            );
            Ok(())
        }
    }
}
