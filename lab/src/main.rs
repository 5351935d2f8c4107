//! `metapu-lab`: experiments that measure the product, kept out of the operator's
//! `metapu` command. `eval` is the paper's experiment (ours, its ablations and the
//! baselines on the same target episodes, over splits). `train` is `metapu train` with
//! the meta-training knobs the experiments vary. `real-traffic` reads infected real
//! captures (from `scripts/real-data.sh`), streams each device through the daemon's
//! pipeline on capture time, and writes the labeled rows for the paper's protocol
//! (`eval --model`) and the peers (`scripts/real-results.py`). `fleet-incidents`
//! streams a simulated fleet through the same pipeline.

mod captures;
mod console;
mod eval_command;
mod model_options;
mod sim_days;
mod train_command;
mod week;

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::{Parser, Subcommand};

use metapu::daemon::config::DaemonConfig;
use metapu::data::split::Split;
use metapu::data::{csv_tasks, Label, Task};
use metapu::model::{default_device, file};
use metapu::traffic::feature_names;
use metapu_lab::eval::stream::{self, DeviceOutcome, DeviceStream, StreamConfig};

#[derive(Debug, Parser)]
#[command(name = "metapu-lab", version, about = "Experiments that measure metapu (not for operators)")]
struct Lab {
    #[command(subcommand)]
    command: LabCommand,
}

#[derive(Debug, Subcommand)]
enum LabCommand {
    /// The paper's experiment: ours, ablations and baselines on target tasks, over splits.
    Eval(Box<eval_command::EvalArgs>),
    /// Meta-train a model (as `metapu train`, every knob shown).
    Train(Box<train_command::LabTrainArgs>),
    /// Real captures made infected → labeled rows, and each device streamed through
    /// the daemon's engine with its first benign records labeled normal.
    RealTraffic(RealTrafficArgs),
    /// A simulated fleet (held-out device types) streamed through the daemon's engine
    /// and incident rules: attacked devices with an incident, false incidents, messages.
    FleetIncidents(FleetIncidentsArgs),
    /// Days of real devices' own traffic (and copies with an attack merged in) through
    /// the daemon's pipeline: false incidents per device-day, and whether each attack
    /// got an incident.
    Week(week::WeekArgs),
    /// Simulated devices over days (households: bursts and quiet by the hour), as
    /// captures `week` reads: devices whose time span matters, to choose on.
    SimDays(sim_days::SimDaysArgs),
    /// The console's pages, read-only, over what a replay published (`week --published`).
    Console(console::ConsoleArgs),
}

#[derive(Debug, clap::Args)]
struct FleetIncidentsArgs {
    #[arg(long)]
    model: PathBuf,
    #[arg(long, default_value_t = 100)]
    devices: usize,
    /// Simulated minutes per device.
    #[arg(long, default_value_t = 30.0)]
    minutes: f64,
    /// Device types (the shipped model never saw baby monitors and webcams).
    #[arg(long, default_value = "baby_monitor,webcam", value_delimiter = ',')]
    types: Vec<metapu::traffic::profiles::DeviceType>,
    #[arg(long, default_value_t = 0.5)]
    attacked: f64,
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Records kept per class and device, evenly spaced in time (a flood sends far
    /// more packets than the device's own traffic).
    #[arg(long, default_value_t = 2000)]
    max_rows_per_class: usize,
    /// Benign records labeled normal at each device's start.
    #[arg(long, default_value_t = 10)]
    labeled: usize,
}

/// Writes real.csv, real.split.json, stream.json and scores-ours.csv to `--out`.
#[derive(Debug, clap::Args)]
struct RealTrafficArgs {
    #[command(flatten)]
    run: captures::CaptureRun,
    /// Rows of each class a device needs to enter the protocol's targets.
    #[arg(long, default_value_t = 50)]
    min_rows: usize,
}

fn main() -> anyhow::Result<()> {
    // The streaming experiments run the daemon's pipeline, which logs every incident:
    // the lab reports them in its tables instead (RUST_LOG overrides).
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,metapu::daemon=warn"));
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).init();
    match Lab::parse().command {
        LabCommand::Eval(a) => eval_command::run(*a),
        LabCommand::Train(a) => train_command::run(*a),
        LabCommand::RealTraffic(a) => real_traffic(a),
        LabCommand::FleetIncidents(a) => fleet_incidents(a),
        LabCommand::Week(a) => week::run(a),
        LabCommand::SimDays(a) => sim_days::run(a),
        LabCommand::Console(a) => console::run(a),
    }
}

fn count(s: &DeviceStream, l: Label) -> usize {
    s.task.indices_of(l).len()
}

fn real_traffic(args: RealTrafficArgs) -> anyhow::Result<()> {
    let (a, min_rows) = (&args.run, args.min_rows);
    let streams = a.streams()?;
    std::fs::create_dir_all(&a.out)?;
    write_rows(&a.out.join("real.csv"), &streams)?;
    let (targets, streaming_only): (Vec<&DeviceStream>, Vec<&DeviceStream>) = streams
        .iter()
        .partition(|s| count(s, Label::Positive) >= min_rows && count(s, Label::Negative) >= min_rows);
    let split = Split { target: targets.iter().map(|s| s.task.id.clone()).collect(), ..Split::default() };
    split.save(&a.out.join("real.split.json"))?;
    println!(
        "real-traffic: {} devices; {} with ≥ {} rows of each class are protocol targets, {} streaming only",
        streams.len(),
        targets.len(),
        min_rows,
        streaming_only.len()
    );

    let model = file::load(&a.model, default_device())?;
    let cfg = a.stream_config();
    let outcomes = stream::run(model, &streams, &cfg);
    write_scores(&a.out.join("scores-ours.csv"), &streams, &outcomes)?;
    let report = serde_json::json!({
        "labeled": a.labeled,
        "min_rows": min_rows,
        "protocol_targets": split.target,
        "devices": outcomes.iter().map(|o| serde_json::json!({
            "device": o.name,
            "benign": o.benign,
            "benign_alerts": o.benign_alerts,
            "benign_unscored": o.benign_unscored,
            "attack": o.attack,
            "attack_alerts": o.attack_alerts,
            "attack_unscored": o.attack_unscored,
            "first_alert": o.first_alert,
        })).collect::<Vec<_>>(),
    });
    std::fs::write(a.out.join("stream.json"), serde_json::to_string_pretty(&report)?)?;
    print_summary(&outcomes);
    Ok(())
}

fn fleet_incidents(a: FleetIncidentsArgs) -> anyhow::Result<()> {
    use metapu::traffic::simulate::{fleet_rows, plan, FleetConfig};
    let fleet = FleetConfig {
        devices: a.devices,
        types: a.types.clone(),
        duration_s: a.minutes * 60.0,
        seed: a.seed,
        attacked_share: a.attacked,
        max_rows_per_class: Some(a.max_rows_per_class),
        ..FleetConfig::default()
    };
    let devices = plan(&fleet);
    let streams: Vec<DeviceStream> = devices
        .iter()
        .zip(fleet_rows(&fleet, &devices))
        .map(|(d, rows)| {
            let mut task = Task::new(d.name.clone());
            task.x = rows.features;
            task.labels =
                rows.normal.iter().map(|&n| if n { Label::Positive } else { Label::Negative }).collect();
            DeviceStream { task, ts: rows.ts, contexts: Vec::new(), kind: None }
        })
        .collect();
    let model = file::load(&a.model, default_device())?;
    let cfg = StreamConfig::from_daemon(&DaemonConfig::defaults(), a.labeled);
    let outcomes = stream::run(model, &streams, &cfg);
    let (attacked, clean): (Vec<&DeviceOutcome>, Vec<&DeviceOutcome>) =
        outcomes.iter().partition(|o| o.attack > 0);
    let covered = attacked.iter().filter(|o| o.attack_covered).count();
    let clean_hours: f64 = clean.iter().map(|o| o.hours).sum();
    let false_clean: usize = clean.iter().map(|o| o.incidents_before_attack).sum();
    let false_before: usize = attacked.iter().map(|o| o.incidents_before_attack).sum();
    let mut firsts: Vec<usize> = attacked.iter().filter_map(|o| o.first_incident).collect();
    firsts.sort_unstable();
    let (events, anomalous): (usize, usize) =
        outcomes.iter().fold((0, 0), |(e, n), o| (e + o.incident_events, n + o.anomalous));
    println!(
        "fleet-incidents: {} devices ({:?}), {} attacked, {:.0} simulated minutes each, seed {}, k = {} of n = {}",
        outcomes.len(),
        a.types,
        attacked.len(),
        a.minutes,
        a.seed,
        cfg.core.incidents.open_k,
        cfg.core.incidents.open_n
    );
    println!(
        "  attacked devices with an incident: {covered} of {}; median attack records to it: {}",
        attacked.len(),
        firsts.get(firsts.len() / 2).map_or("-".into(), |v| v.to_string())
    );
    println!(
        "  false incidents: {false_clean} on never-attacked devices in {clean_hours:.1} device-hours \
         ({:.1} per 100 device-hours), {false_before} on attacked devices before their attack",
        100.0 * false_clean as f64 / clean_hours.max(1e-9)
    );
    println!(
        "  messages: {events} incident events against {anomalous} anomalous records ({:.0}× fewer)",
        anomalous as f64 / events.max(1) as f64
    );
    Ok(())
}

fn write_rows(path: &Path, streams: &[DeviceStream]) -> anyhow::Result<()> {
    let mut out =
        std::io::BufWriter::new(std::fs::File::create(path).with_context(|| path.display().to_string())?);
    csv_tasks::write_tasks(&feature_names(), streams.iter().map(|s| &s.task), &mut out)?;
    out.flush()?;
    Ok(())
}

/// Per record, in the stream's order: device, 1 for attack, the anomaly score (0.5
/// while the device had no classifier), as `benches/peers.py` reads them.
fn write_scores(path: &Path, streams: &[DeviceStream], outcomes: &[DeviceOutcome]) -> anyhow::Result<()> {
    let mut out =
        std::io::BufWriter::new(std::fs::File::create(path).with_context(|| path.display().to_string())?);
    writeln!(out, "device,label,score")?;
    for (s, o) in streams.iter().zip(outcomes) {
        for (l, score) in s.task.labels.iter().zip(&o.scores) {
            let score = if score.is_nan() { 0.5 } else { *score };
            writeln!(out, "{},{},{score}", s.task.id, u8::from(*l == Label::Negative))?;
        }
    }
    out.flush()?;
    Ok(())
}

fn print_summary(outcomes: &[DeviceOutcome]) {
    let sum = |f: fn(&DeviceOutcome) -> usize| outcomes.iter().map(f).sum::<usize>();
    let (benign, alerts) = (sum(|o| o.benign), sum(|o| o.benign_alerts));
    let (attack, hits) = (sum(|o| o.attack), sum(|o| o.attack_alerts));
    let mut firsts: Vec<usize> = outcomes.iter().filter_map(|o| o.first_alert).collect();
    firsts.sort_unstable();
    let attacked = outcomes.iter().filter(|o| o.attack > 0).count();
    println!(
        "real-traffic stream: benign FPR {:.2} % ({alerts} of {benign}), attack TPR {:.2} % ({hits} of {attack}); \
         {} of {attacked} attacked devices alerted, median first alert at attack record {}",
        100.0 * alerts as f64 / benign.max(1) as f64,
        100.0 * hits as f64 / attack.max(1) as f64,
        firsts.len(),
        firsts.get(firsts.len() / 2).map_or("-".into(), |v| v.to_string())
    );
}
