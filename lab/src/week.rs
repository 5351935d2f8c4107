//! `metapu-lab week`: days of real devices' own traffic through the daemon's pipeline
//! on capture time, onboarded as the lab onboards (the first benign records labeled
//! normal): false incidents per device-day and when they open, the alert rate per day
//! since onboarding, and for a capture with an attack merged in whether an incident
//! was open while it ran. A folder holds `NAME.pcap` and `NAME.mac`, and
//! `NAME.labels.csv` where an attack was merged in (`scripts/week-data.sh`); a capture
//! without labels is the device's own traffic alone.

use clap::Args;
use serde::Serialize;

use metapu::data::Label;
use metapu::model::{default_device, file};
use metapu_lab::eval::stream::{self, DeviceOutcome, DeviceStream, HowRaised};

use crate::captures::CaptureRun;

/// Writes week.json to `--out`.
#[derive(Debug, Args)]
pub struct WeekArgs {
    #[command(flatten)]
    run: CaptureRun,
    /// Also write each record's decision as CSV (capture, record, hours since
    /// onboarding, label, known-normal, decision, peer, its place in its burst and the
    /// silence before that burst): where a device's alerts sit (scripts/alert-places.py).
    #[arg(long)]
    records: Option<std::path::PathBuf>,
}

/// Records of a device this far apart (seconds) are two bursts.
const BURST_GAP_S: f64 = 60.0;

/// Each record's decision with its peer and its place in its burst, as CSV lines.
fn record_lines(s: &DeviceStream, o: &DeviceOutcome, out: &mut String) {
    use std::fmt::Write;
    let t0 = (0..s.ts.len()).find(|&i| o.known[i]).map_or(0.0, |i| s.ts[i]);
    let (mut place, mut silence) = (0usize, f64::INFINITY);
    for i in 0..s.ts.len() {
        let gap = if i == 0 { f64::INFINITY } else { s.ts[i] - s.ts[i - 1] };
        (place, silence) = if gap > BURST_GAP_S { (0, gap) } else { (place + 1, silence) };
        let peer =
            s.contexts.get(i).and_then(|c| c.device_and_peer()).and_then(|d| d.1.map(|p| p.to_string()));
        let decision = match o.decisions[i] {
            Some(true) => "anomalous",
            Some(false) => "normal",
            None => "unscored",
        };
        let _ = writeln!(
            out,
            "{},{i},{:.4},{},{},{decision},{},{place},{silence:.0}",
            o.name,
            (s.ts[i] - t0) / 3600.0,
            if s.task.labels[i] == Label::Positive { "benign" } else { "attack" },
            u8::from(o.known[i]),
            peer.unwrap_or_default()
        );
    }
}

/// One capture as the analyst would have lived it.
#[derive(Debug, Serialize)]
struct Week {
    capture: String,
    /// Capture hours after onboarding, before any attack.
    benign_hours: f64,
    /// Incidents opened before any attack: false ones, with the capture hour of day
    /// (UTC) and the day since onboarding of each.
    false_incidents: Vec<(f64, u64)>,
    /// Hours since onboarding at which each false incident opened (cold start: issue #53,
    /// part 4, asks for none in the first hour).
    false_incident_hours: Vec<f64>,
    /// False incidents that closed quietly and came back within `incidents.reopen_s`:
    /// reopened, not new (hour of day, day since onboarding).
    false_reopened: Vec<(f64, u64)>,
    /// Incidents of a behaviour the analyst had dismissed, before any attack: suppressed
    /// (recorded, not raised); and of the false incidents, those that had been
    /// suppressed and went beyond it (news).
    suppressed: Vec<(f64, u64)>,
    /// Incidents that joined a sibling's fleet incident before any attack: recorded
    /// under it and answered by its verdict, not raised (a kind's members only).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    joined: Vec<(f64, u64)>,
    news: Vec<String>,
    /// Per day since onboarding: benign records alerted, benign records.
    benign_by_day: Vec<(usize, usize)>,
    /// Per day since onboarding: the mean prior of the device's adaptations that day,
    /// and their count (a day without one: none), before any attack.
    prior_by_day: Vec<(Option<f32>, usize)>,
    /// The merged attack: its records, whether an incident was open while it ran, and
    /// its records up to that incident (1 = the first).
    attack: usize,
    attack_covered: bool,
    /// A false incident was already open when the attack began (it got none of its own).
    open_at_attack: bool,
    /// The attack's first incident event reopened a false incident closed shortly before.
    attack_reopened: bool,
    first_incident: Option<usize>,
    /// Inside a false incident already open, the attack was news to the analyst (an
    /// update that said so) at this attack record.
    attack_news: Option<usize>,
    /// Incidents the fan-out look raised, before any attack (false ones) and after.
    looks_before_attack: Vec<String>,
    looks_after: Vec<String>,
    /// Incidents before any attack that closed quietly and were not learned for the
    /// footprint they showed, in words.
    not_learned: Vec<String>,
    /// The merged attack's waves (`metapu datasets infect --again-after`: attack records
    /// more than [`WAVE_GAP_S`] apart begin another), and what the analyst got of each.
    waves: Vec<Wave>,
}

/// Attack records this far apart (seconds of capture time) are two waves.
const WAVE_GAP_S: f64 = 600.0;

/// One wave of an attack as the analyst lived it.
#[derive(Debug, Serialize)]
struct Wave {
    /// Hours since onboarding at its first record, its records, and how many of them the
    /// model decided anomalous.
    hour: f64,
    records: usize,
    alerted: usize,
    /// `own` (a new incident by the model), `look` (a new incident by a look), `news`
    /// (a suppressed or open incident told the analyst), `reopened` (an incident closed a
    /// moment before opened again), `inside` (an incident already open, nothing new
    /// said), `suppressed` (recorded, not raised), or `none`.
    raised: &'static str,
    /// Its records up to the one that raised it (1 = its first).
    at: Option<usize>,
    /// Incidents learned without a verdict (closed quietly) within its time, with one of
    /// its peers among their top ones.
    learned: usize,
}

fn waves(s: &DeviceStream, o: &DeviceOutcome, t0: f64) -> Vec<Wave> {
    let labels = &s.task.labels;
    let attack: Vec<usize> = (0..labels.len()).filter(|&i| labels[i] == Label::Negative).collect();
    attack
        .chunk_by(|&i, &j| s.ts[j] - s.ts[i] <= WAVE_GAP_S)
        .map(|wave| {
            let (a, b) = (wave[0], wave[wave.len() - 1]);
            let alerted = wave.iter().filter(|&&i| o.decisions[i] == Some(true)).count();
            let within = || o.raised.iter().filter(|(at, _)| (a..=b).contains(at));
            let raised_by = within().find(|(_, r)| *r != HowRaised::Suppressed);
            let (raised, at) = match raised_by {
                Some((at, r)) => (
                    match r {
                        HowRaised::Opened => "own",
                        HowRaised::Look => "look",
                        HowRaised::News => "news",
                        HowRaised::Reopened => "reopened",
                        HowRaised::Joined => "joined",
                        HowRaised::Suppressed => unreachable!("filtered"),
                    },
                    Some(wave.iter().take_while(|&&i| i <= *at).count()),
                ),
                None if o.open[a] => ("inside", Some(1)),
                None if within().next().is_some() => ("suppressed", None),
                None => ("none", None),
            };
            // Learned: closed quietly unanswered within the wave, with one of its peers.
            let (from, to) = (s.ts[a], s.ts[b]);
            let peers: std::collections::HashSet<String> = wave
                .iter()
                .filter_map(|&i| s.contexts.get(i)?.device_and_peer()?.1.map(|p| p.to_string()))
                .collect();
            let learned = o
                .learned_spans
                .iter()
                .filter(|(f, l, top)| *f <= to && *l >= from && top.iter().any(|p| peers.contains(p)))
                .count();
            Wave { hour: (s.ts[a] - t0) / 3600.0, records: wave.len(), alerted, raised, at, learned }
        })
        .collect()
}

fn week(s: &DeviceStream, o: &DeviceOutcome) -> Week {
    let labels = &s.task.labels;
    let onboarded = (0..labels.len()).find(|&i| o.known[i]).map_or(0, |i| i);
    let t0 = s.ts.get(onboarded).copied().unwrap_or(0.0);
    let attack_ts = (0..labels.len()).find(|&i| labels[i] == Label::Negative).map(|i| s.ts[i]);
    let benign_end = attack_ts.unwrap_or_else(|| s.ts.last().copied().unwrap_or(t0));
    let day = |ts: f64| ((ts - t0).max(0.0) / 86_400.0) as u64;
    let mut benign_by_day: Vec<(usize, usize)> = Vec::new();
    for (i, (&label, &ts)) in labels.iter().zip(&s.ts).enumerate() {
        if label != Label::Positive || o.known[i] || attack_ts.is_some_and(|a| ts >= a) {
            continue;
        }
        let d = day(ts) as usize;
        if benign_by_day.len() <= d {
            benign_by_day.resize(d + 1, (0, 0));
        }
        benign_by_day[d].1 += 1;
        benign_by_day[d].0 += usize::from(o.decisions[i] == Some(true));
    }
    let mut prior_by_day: Vec<(Option<f32>, usize)> = Vec::new();
    for &(ts, prior) in o.priors.iter().filter(|(ts, _)| *ts >= t0 && attack_ts.is_none_or(|a| *ts < a)) {
        let d = day(ts) as usize;
        if prior_by_day.len() <= d {
            prior_by_day.resize(d + 1, (None, 0));
        }
        let (mean, n) = &mut prior_by_day[d];
        *mean = Some((mean.unwrap_or(0.0) * *n as f32 + prior) / (*n + 1) as f32);
        *n += 1;
    }
    let before_attack = |times: &[f64]| -> Vec<f64> {
        times.iter().copied().filter(|&ts| attack_ts.is_none_or(|a| ts < a)).collect()
    };
    let when = |times: &[f64]| -> Vec<(f64, u64)> {
        times.iter().map(|&ts| ((ts.rem_euclid(86_400.0)) / 3600.0, day(ts))).collect()
    };
    let (opened, reopened) = (before_attack(&o.opened_ts), before_attack(&o.reopened_ts));
    Week {
        capture: o.name.clone(),
        benign_hours: (benign_end - t0).max(0.0) / 3600.0,
        false_incidents: when(&opened),
        false_incident_hours: opened.iter().map(|&ts| (ts - t0).max(0.0) / 3600.0).collect(),
        false_reopened: when(&reopened),
        suppressed: when(&before_attack(&o.suppressed_ts)),
        joined: when(&before_attack(&o.joined_ts)),
        news: o.news.clone(),
        benign_by_day,
        prior_by_day,
        attack: o.attack,
        attack_covered: o.attack_covered,
        open_at_attack: o.open_at_attack,
        attack_reopened: o.attack_reopened,
        first_incident: o.first_incident,
        attack_news: o.attack_news,
        looks_before_attack: o
            .looks
            .iter()
            .filter(|l| attack_ts.is_none_or(|a| l.0 < a))
            .map(|l| l.1.clone())
            .collect(),
        looks_after: o
            .looks
            .iter()
            .filter(|l| attack_ts.is_some_and(|a| l.0 >= a))
            .map(|l| l.1.clone())
            .collect(),
        waves: waves(s, o, t0),
        not_learned: o
            .not_learned
            .iter()
            .filter(|l| attack_ts.is_none_or(|a| l.0 < a))
            .map(|l| l.1.clone())
            .collect(),
    }
}

pub fn run(args: WeekArgs) -> anyhow::Result<()> {
    let a = &args.run;
    let streams = a.streams()?;
    let model = file::load(&a.model, default_device())?;
    let cfg = a.stream_config();
    let outcomes = stream::run(model, &streams, &cfg);
    let weeks: Vec<Week> = streams.iter().zip(&outcomes).map(|(s, o)| week(s, o)).collect();
    if let Some(path) = &args.records {
        let mut csv =
            String::from("capture,record,hours,label,known,decision,peer,burst_record,silence_before_s\n");
        streams.iter().zip(&outcomes).for_each(|(s, o)| record_lines(s, o, &mut csv));
        std::fs::write(path, csv)?;
    }
    std::fs::create_dir_all(&a.out)?;
    std::fs::write(a.out.join("week.json"), serde_json::to_string_pretty(&weeks)?)?;
    for w in &weeks {
        let (alerts, benign) = w.benign_by_day.iter().fold((0, 0), |(a, b), d| (a + d.0, b + d.1));
        println!(
            "week: {}: {:.1} benign hours, {} false incidents ({:.2} per device-day; {} reopened; {} suppressed), benign FPR {:.2} %{}",
            w.capture,
            w.benign_hours,
            w.false_incidents.len(),
            w.false_incidents.len() as f64 / (w.benign_hours / 24.0).max(1e-9),
            w.false_reopened.len(),
            w.suppressed.len(),
            100.0 * alerts as f64 / benign.max(1) as f64,
            match (w.attack, w.first_incident, w.open_at_attack) {
                (0, ..) => String::new(),
                (n, _, true) => format!(
                    "; attack of {n} records: inside a false incident already open{}",
                    w.attack_news.map(|k| format!(", news at record {k}")).unwrap_or_default()
                ),
                (n, Some(k), false) if w.attack_reopened => {
                    format!("; attack of {n} records: reopened a false incident at record {k}")
                }
                (n, Some(k), false) => format!("; attack of {n} records: incident at record {k}"),
                (n, None, false) => format!("; attack of {n} records: NO incident"),
            }
        );
        let days: Vec<String> = w
            .benign_by_day
            .iter()
            .enumerate()
            .map(|(d, (alerts, benign))| {
                let prior = w.prior_by_day.get(d).and_then(|p| p.0);
                format!(
                    "d{d} {} π {}",
                    if *benign == 0 {
                        "–".to_string()
                    } else {
                        format!("{:.1} %", 100.0 * *alerts as f64 / *benign as f64)
                    },
                    prior.map_or("–".to_string(), |p| format!("{p:.2}"))
                )
            })
            .collect();
        println!("week: {}: by day (benign alert rate, mean prior): {}", w.capture, days.join(", "));
        if w.waves.len() > 1 {
            let each: Vec<String> = w
                .waves
                .iter()
                .map(|v| {
                    format!(
                        "{} at {:.1} h ({} of {} records alerted)",
                        v.raised, v.hour, v.alerted, v.records
                    )
                })
                .collect();
            println!("week: {}: waves: {}", w.capture, each.join(", "));
        }
    }
    Ok(())
}
