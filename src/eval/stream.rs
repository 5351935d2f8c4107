//! A device's traffic as the daemon would live it: records in capture order, in
//! micro-batches cut by capture time, through the daemon's engine (windows, batched
//! scoring, threshold), with due devices re-adapted on the adaptation interval of
//! capture time; the first `labeled` benign records are marked known-normal, as an
//! operator onboards a device. What an analyst would have seen: alerts on benign
//! traffic (false positive rate), on attack traffic (true positive rate), and how
//! many attack records passed before the first alert; and the incidents the daemon's
//! rules open on those decisions, on the capture clock.

use crate::daemon::config::DaemonConfig;
use crate::daemon::devices::WindowSizes;
use crate::daemon::engine::{run_adaptation, Engine, Verdict};
use crate::daemon::incidents::{Decision, IncidentRules, IncidentTracker, Transition};
use crate::daemon::output::Source;
use crate::daemon::record::FeatureRecord;
use crate::data::{Label, Task};
use crate::model::Model;

/// One device's labeled records in capture order (the task's id names the device).
pub struct DeviceStream {
    pub task: Task,
    /// Capture time of each record, seconds.
    pub ts: Vec<f64>,
}

/// The daemon's settings that shape what it decides, and the onboarding.
#[derive(Debug, Clone)]
pub struct StreamConfig {
    pub sizes: WindowSizes,
    pub threshold: f32,
    pub max_batch: usize,
    pub batch_window_s: f64,
    pub max_per_device: usize,
    pub adapt_every_s: f64,
    pub adapt_batch: usize,
    /// Benign records marked known-normal at the start of each device.
    pub labeled: usize,
    pub incidents: IncidentRules,
}

impl StreamConfig {
    /// The daemon's configuration as deployed, with `labeled` onboarding records.
    pub fn from_daemon(cfg: &DaemonConfig, labeled: usize) -> Self {
        Self {
            sizes: WindowSizes {
                positive: cfg.windows.positive,
                unlabeled: cfg.windows.unlabeled,
                bootstrap_positives: cfg.windows.bootstrap_positives,
            },
            threshold: cfg.model.threshold,
            max_batch: cfg.scoring.max_batch,
            batch_window_s: cfg.scoring.max_wait_ms as f64 / 1000.0,
            max_per_device: cfg.scoring.max_per_device,
            adapt_every_s: cfg.adaptation.interval_ms as f64 / 1000.0,
            adapt_batch: cfg.adaptation.batch_size,
            labeled,
            incidents: IncidentRules {
                open_k: cfg.incidents.open_k,
                open_n: cfg.incidents.open_n,
                update_interval_ms: cfg.incidents.update_interval_s * 1000,
                quiet_ms: cfg.incidents.quiet_s * 1000,
                keep_records: cfg.windows.positive,
            },
        }
    }
}

/// What the daemon did with one device's records.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DeviceOutcome {
    pub name: String,
    /// Benign records after the labeled ones, and of those: alerted, never scored.
    pub benign: usize,
    pub benign_alerts: usize,
    pub benign_unscored: usize,
    pub attack: usize,
    pub attack_alerts: usize,
    pub attack_unscored: usize,
    /// Attack records up to and including the first alerted one (1 = the first).
    pub first_alert: Option<usize>,
    /// Per record: the anomaly score 1 − posterior, NaN while unscored.
    pub scores: Vec<f32>,
    /// Per record: whether it was marked known-normal.
    pub known: Vec<bool>,
    /// Records scored anomalous (alerts, were they published).
    pub anomalous: usize,
    /// Incidents opened before the device's first attack record (false ones), and from
    /// it on.
    pub incidents_before_attack: usize,
    pub incidents_in_attack: usize,
    /// An incident was open at some point of the attack (opened in it, or still open
    /// when it began).
    pub attack_covered: bool,
    /// Attack records up to and including the one that opened the attack's first
    /// incident (1 = the first attack record; an incident already open counts as 1).
    pub first_incident: Option<usize>,
    /// Incident events published: opened, updated, closed.
    pub incident_events: usize,
    /// Capture hours the stream spans.
    pub hours: f64,
}

impl DeviceOutcome {
    pub fn fpr(&self) -> f64 {
        self.benign_alerts as f64 / self.benign.max(1) as f64
    }

    pub fn tpr(&self) -> f64 {
        self.attack_alerts as f64 / self.attack.max(1) as f64
    }
}

/// Every device through one engine, one device after the other, each on its own
/// capture clock (the captures come from different years).
pub fn run(model: Model, devices: &[DeviceStream], cfg: &StreamConfig) -> Vec<DeviceOutcome> {
    let dim = model.dim();
    let mut engine = Engine::new(model, cfg.sizes, devices.len().max(1), cfg.threshold);
    engine.max_per_device = cfg.max_per_device;
    engine.adaptation_batch = cfg.adapt_batch;
    let mut offset = 0i64;
    devices
        .iter()
        .map(|d| {
            let out = run_device(&mut engine, d, dim, cfg, offset);
            offset += d.task.len() as i64;
            out
        })
        .collect()
}

fn run_device(
    engine: &mut Engine,
    d: &DeviceStream,
    dim: usize,
    cfg: &StreamConfig,
    offset: i64,
) -> DeviceOutcome {
    let (task, n) = (&d.task, d.task.len());
    let mut out =
        DeviceOutcome { name: task.id.clone(), scores: vec![f32::NAN; n], ..DeviceOutcome::default() };
    let mut benign_seen = 0;
    out.known = task
        .labels
        .iter()
        .map(|&l| {
            let known = l == Label::Positive && benign_seen < cfg.labeled;
            benign_seen += usize::from(l == Label::Positive);
            known
        })
        .collect();
    let mut next_adapt = d.ts.first().copied().unwrap_or(0.0) + cfg.adapt_every_s;
    out.hours = (d.ts.last().copied().unwrap_or(0.0) - d.ts.first().copied().unwrap_or(0.0)) / 3600.0;
    let mut tracker = IncidentTracker::default();
    let clock_ms = |ts: f64| (ts.max(0.0) * 1000.0) as u64;
    let mut start = 0;
    while start < n {
        // A micro-batch: what arrives within the batching window, up to max_batch and
        // the device's share of a batch (the daemon defers the rest to the next).
        let cap = if cfg.max_per_device > 0 { cfg.max_batch.min(cfg.max_per_device) } else { cfg.max_batch };
        let mut end = start + 1;
        while end < n && end - start < cap && d.ts[end] - d.ts[start] <= cfg.batch_window_s {
            end += 1;
        }
        let now = d.ts[end - 1];
        if now >= next_adapt {
            let jobs = engine.adaptation_jobs(1, usize::MAX);
            let states = run_adaptation(&engine.model, &jobs, cfg.adapt_batch);
            engine.install(states);
            next_adapt = now + cfg.adapt_every_s;
        }
        let records: Vec<FeatureRecord> = (start..end)
            .map(|i| FeatureRecord {
                device: task.id.clone(),
                ts: d.ts[i],
                features: task.row(i, dim).to_vec(),
                known_normal: out.known[i],
            })
            .collect();
        let sources: Vec<Source> = (start..end)
            .map(|i| Source { topic: "stream".into(), partition: 0, offset: offset + i as i64 })
            .collect();
        let refs: Vec<_> = records.iter().zip(&sources).collect();
        let processed = engine.process(&refs, (now * 1000.0).max(0.0) as u64);
        for (i, v) in (start..end).zip(processed.verdicts) {
            let attack_started = out.attack > 0 || task.labels[i] == Label::Negative;
            if task.labels[i] == Label::Negative && out.attack == 0 && tracker.open.is_some() {
                out.attack_covered = true;
                out.first_incident = Some(1);
            }
            let alerted = match v {
                Verdict::Scored { posterior, anomalous, prior, taken_as_normal } => {
                    out.scores[i] = 1.0 - posterior;
                    out.anomalous += usize::from(anomalous);
                    let r = &records[i - start];
                    let decision =
                        Decision::of(r, &sources[i - start], posterior, anomalous, prior, taken_as_normal);
                    if let Some(Transition::Opened(_)) =
                        tracker.observe(&task.id, decision, &cfg.incidents, clock_ms(r.ts), r.ts)
                    {
                        out.incident_events += 1;
                        if attack_started {
                            out.incidents_in_attack += 1;
                            out.attack_covered = true;
                        } else {
                            out.incidents_before_attack += 1;
                        }
                    }
                    Some(anomalous)
                }
                Verdict::Unknown | Verdict::Deferred => None,
            };
            match (task.labels[i], out.known[i]) {
                (_, true) | (Label::Unlabeled, _) => {}
                (Label::Positive, false) => {
                    out.benign += 1;
                    out.benign_alerts += usize::from(alerted == Some(true));
                    out.benign_unscored += usize::from(alerted.is_none());
                }
                (Label::Negative, _) => {
                    out.attack += 1;
                    out.attack_alerts += usize::from(alerted == Some(true));
                    out.attack_unscored += usize::from(alerted.is_none());
                    if alerted == Some(true) && out.first_alert.is_none() {
                        out.first_alert = Some(out.attack);
                    }
                    if out.first_incident.is_none() && tracker.open.is_some() {
                        out.first_incident = Some(out.attack);
                    }
                }
            }
        }
        // Updates and quiet closes, on the capture clock.
        while let Some(t) = tracker.tick(&cfg.incidents, clock_ms(now), now) {
            out.incident_events += 1;
            if matches!(t, Transition::Closed(..)) {
                break;
            }
        }
        start = end;
    }
    out
}
