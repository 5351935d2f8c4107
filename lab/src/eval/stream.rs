//! A device's traffic as the daemon would live it: records in capture order, each
//! arriving at its capture time, through the daemon's monitor on the monitor's
//! [`TestDriver`] (micro-batches cut by size and wait, deferred records, the windows,
//! batched scoring and threshold), re-adapted at the adaptation points the daemon's
//! event clock sets on capture time (`EventCadence`); the first `labeled` benign records
//! are marked known-normal, as an operator onboards a device. What an analyst would have seen: alerts on benign
//! traffic (false positive rate), on attack traffic (true positive rate), and how
//! many attack records passed before the first alert; and the incidents the daemon's
//! rules open on those decisions, on the capture clock.

use std::cell::RefCell;
use std::collections::HashSet;

use metapu::daemon::config::DaemonConfig;
use metapu::data::{Label, Task};
use metapu::model::Model;
use metapu::monitor::clock::Clock;
use metapu::monitor::devices::kinds::Share;
use metapu::monitor::feedback::{FeedbackMessage, Kind, Onboard};
use metapu::monitor::incidents::{Feedback, Verdict as FeedbackVerdict};
use metapu::monitor::output::IncidentEvent;
use metapu::monitor::record::{self, Source};
use metapu::monitor::settings::CoreSettings;
use metapu::monitor::{Emitted, Input, Monitor, Received, RecordOutputs, TestDriver};
use metapu::traffic::context::Context;

#[path = "stream_events.rs"]
mod events;

/// One device's labeled records in capture order (the task's id names the device).
pub struct DeviceStream {
    pub task: Task,
    /// Capture time of each record, seconds.
    pub ts: Vec<f64>,
    /// Each record's packet (as `metapu extract` puts it beside the features), or none.
    pub contexts: Vec<Context>,
    /// The device's kind, named as it is onboarded (`metapu onboard --kind`): what was
    /// accepted on the kind's devices before it is offered to it.
    pub kind: Option<String>,
}

/// The daemon's settings that shape what it decides, and the onboarding.
#[derive(Debug, Clone)]
pub struct StreamConfig {
    /// What the daemon's core decides with, on the event clock (each device on its
    /// capture's time).
    pub core: CoreSettings,
    /// Benign records marked known-normal at the start of each device.
    pub labeled: usize,
    /// Or onboarding by time (`metapu onboard --for`): from each device's first record
    /// for this many seconds of capture time; `labeled` is then not used.
    pub onboard_for_s: Option<f64>,
    /// An analyst calls every incident opened before the attack a false positive once it
    /// has closed (the daemon's `reviewed`), through the daemon's feedback path.
    pub analyst: bool,
    /// An analyst calls every incident raised at an attack record `confirmed` once it has
    /// closed, through the daemon's feedback path.
    pub confirm_attacks: bool,
    /// Where what the daemon would have published (incident events, prior updates) is
    /// written, a JSON line `{"topic": "incidents" | "priors", "value": …}` each, in the
    /// order it was emitted (`metapu-lab console` serves it).
    pub published: Option<std::path::PathBuf>,
}

impl StreamConfig {
    /// The daemon's configuration as deployed, with `labeled` onboarding records.
    pub fn from_daemon(cfg: &DaemonConfig, labeled: usize) -> Self {
        let mut core = cfg.core_settings();
        // Captures come from different years: each device on its own capture clock.
        core.clock = Clock::Event;
        // The lab reads every record's score; its first records' labels are the
        // onboarding a trusted replay gives.
        core.outputs = RecordOutputs { scores: true, alerts: false };
        core.trust_input_labels = true;
        // The analyst answers each incident as its close arrives. Live, that is when the
        // quiet runs out; here a silent device's time moves only with its next record,
        // which can come days after its incident closed: its verdict is not late.
        core.feedback_max_age_s = u64::MAX / 2;
        Self { core, labeled, onboard_for_s: None, analyst: false, confirm_attacks: false, published: None }
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
    /// An incident (a false one) was already open when the attack began: the attack
    /// got no incident of its own.
    pub open_at_attack: bool,
    /// Attack records up to and including the one that opened the attack's first
    /// incident (1 = the first attack record; an incident already open counts as 1).
    pub first_incident: Option<usize>,
    /// Incident events published: opened, updated, closed.
    pub incident_events: usize,
    /// Ids of the incidents opened, in order (as the daemon's, from the opening
    /// record's source), and the capture time of each opening record.
    pub opened: Vec<String>,
    pub opened_ts: Vec<f64>,
    /// The capture time of each record that reopened an incident closed quietly a
    /// moment before (`incidents.reopen_s`: the same incident to an analyst).
    pub reopened_ts: Vec<f64>,
    /// The attack's first incident event was a reopening of an incident opened before it
    /// (a false one): the analyst saw an earlier incident come back, not a new one.
    pub attack_reopened: bool,
    /// The capture time of each record that opened (or reopened) an incident of a
    /// behaviour the analyst had dismissed: recorded, not raised.
    pub suppressed_ts: Vec<f64>,
    /// The capture time of each record that opened an incident that joined a sibling's
    /// fleet incident: recorded under it, not raised.
    pub joined_ts: Vec<f64>,
    /// Of the incidents opened, those that had been suppressed and went beyond the
    /// dismissed behaviour (news): why, in words.
    pub news: Vec<String>,
    /// An incident already open when the attack began told the analyst something new
    /// during it (an update with `news`): attack records up to it.
    pub attack_news: Option<usize>,
    /// Incidents a look on the packets raised (`fanout.rs`): the capture time of the
    /// record that crossed, and why.
    pub looks: Vec<(f64, String)>,
    /// Per record: anomalous (an alert, were they published), normal, or never scored.
    pub decisions: Vec<Option<bool>>,
    /// What reached the analyst, or was kept from them, at which record (in order).
    pub raised: Vec<(usize, HowRaised)>,
    /// Per record: an incident the analyst sees (not a suppressed one) was open when it
    /// was decided.
    pub open: Vec<bool>,
    /// Incidents that closed quietly and were not learned for the footprint they showed:
    /// the capture time each opened, and the footprint in words.
    pub not_learned: Vec<(f64, String)>,
    /// Incidents that closed learned (quietly, without a verdict): the capture times of
    /// their first and last anomalous records and their top peers, for what learning
    /// took of an attack.
    pub learned_spans: Vec<(f64, f64, Vec<String>)>,
    /// Capture hours the stream spans.
    pub hours: f64,
    /// Each prior update of the device (its time at it, Unix seconds, and the prior).
    pub priors: Vec<(f64, f32)>,
}

/// What an incident event at a record did for the analyst (the core's
/// `incidents::Raised` is another thing: an incident as a device's kind hears of it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HowRaised {
    /// A new incident, by the model's decisions.
    Opened,
    /// A new incident, by a look on the packets.
    Look,
    /// A suppressed incident went beyond what was remembered, or an open one told
    /// something new: news.
    News,
    /// An incident that had closed quietly a moment before opened again.
    Reopened,
    /// Of a remembered behaviour: recorded, not raised.
    Suppressed,
    /// Of the behaviour a sibling of its kind raised a moment before: named by that
    /// fleet incident, which the analyst sees.
    Joined,
}

impl DeviceOutcome {
    pub fn fpr(&self) -> f64 {
        self.benign_alerts as f64 / self.benign.max(1) as f64
    }

    pub fn tpr(&self) -> f64 {
        self.attack_alerts as f64 / self.attack.max(1) as f64
    }
}

/// Every device through one monitor, one device after the
/// other, each on its own capture clock (the captures come from different years).
pub fn run(model: Model, devices: &[DeviceStream], cfg: &StreamConfig) -> Vec<DeviceOutcome> {
    let dim = model.dim();
    // Each device on its capture's clock (the service clock stands still at 0), adapted
    // where the daemon's event clock adapts it.
    // No state topic in the lab.
    let core = CoreSettings { max_tracked: devices.len().max(1), state: None, ..cfg.core.clone() };
    // The service clock stands still (each device runs on its capture's time); the
    // real wall clock only stamps events.
    let mut driver = TestDriver::new(&core, model, None, "lab", None);
    let published = RefCell::new(Vec::new());
    let outcomes = devices
        .iter()
        .enumerate()
        .map(|(partition, d)| {
            let keep = cfg.published.as_ref().map(|_| &published);
            let mut lab = Lab { driver: &mut driver, published: keep };
            run_device(&mut lab, d, dim, cfg, partition as i32)
        })
        .collect();
    if let Some(path) = &cfg.published {
        let mut text = published.into_inner().join("\n");
        text.push('\n');
        if let Err(e) = std::fs::write(path, text) {
            panic!("writing {}: {e}", path.display());
        }
    }
    outcomes
}

/// What the daemon publishes of `emitted`, as lines for [`StreamConfig::published`].
fn published_lines(emitted: &[Emitted]) -> impl Iterator<Item = String> + '_ {
    emitted.iter().filter_map(|e| {
        let (topic, value) = match e {
            Emitted::Incident(i) => ("incidents", serde_json::to_value(i)),
            Emitted::Prior(p) => ("priors", serde_json::to_value(p)),
            _ => return None,
        };
        let value = value.expect("published outputs serialise");
        Some(serde_json::json!({ "topic": topic, "value": value }).to_string())
    })
}

/// The source the lab gives a device's record at `offset`: each device on a partition
/// of its own, `partition` its place in the list (incident ids are derived from it, as
/// the daemon's are from Kafka's). Devices run one after the other, each on its
/// capture's time: a partition's stream time is its device's.
pub fn source(partition: i32, offset: i64) -> Source {
    Source::new(STREAM_TOPIC, partition, offset)
}

/// The topic name of [`source`].
pub const STREAM_TOPIC: &str = "stream";

/// What one run of the pipeline showed, by record (see `DeviceRun::read_events`).
struct RunEvents {
    verdicts: Vec<Option<bool>>,
    opened_at: Vec<usize>,
    reopened_at: Vec<usize>,
    news_at: Vec<usize>,
    closed_at: Vec<usize>,
}

/// The monitor as the lab drives it.
struct Lab<'a> {
    driver: &'a mut TestDriver,
    /// What the daemon would have published, kept when asked for.
    published: Option<&'a RefCell<Vec<String>>>,
}

impl Lab<'_> {
    fn tell(&mut self, input: Input) -> metapu::monitor::Output {
        let out = self.driver.tell(input);
        if let Some(p) = self.published {
            p.borrow_mut().extend(published_lines(&out.emitted));
        }
        out
    }
}

/// One device's stream as it is being read: what the outcome counts so far, and what
/// carries from one run of the pipeline to the next.
struct DeviceRun<'a> {
    d: &'a DeviceStream,
    cfg: &'a StreamConfig,
    out: DeviceOutcome,
    /// The next record no run has decided yet.
    cursor: usize,
    /// An incident was open (as the analyst sees it) when the next run began.
    open: bool,
    false_incidents: HashSet<String>,
    /// Incidents raised at an attack record, to be confirmed once closed.
    attack_incidents: HashSet<String>,
    /// An incident's news stays on its later events: each is counted once, at its record.
    news_seen: HashSet<i64>,
}

fn run_device(
    lab: &mut Lab<'_>,
    d: &DeviceStream,
    dim: usize,
    cfg: &StreamConfig,
    partition: i32,
) -> DeviceOutcome {
    let (task, n) = (&d.task, d.task.len());
    let mut out = DeviceOutcome {
        name: task.id.clone(),
        scores: vec![f32::NAN; n],
        decisions: vec![None; n],
        open: vec![false; n],
        ..DeviceOutcome::default()
    };
    let mut benign_seen = 0;
    out.known = match cfg.onboard_for_s {
        // The span's records are known-normal (the operator said so), not measured.
        Some(span) => d.ts.iter().map(|&t| t < d.ts.first().copied().unwrap_or(0.0) + span).collect(),
        None => task
            .labels
            .iter()
            .map(|&l| {
                let known = l == Label::Positive && benign_seen < cfg.labeled;
                benign_seen += usize::from(l == Label::Positive);
                known
            })
            .collect(),
    };
    let labels_known = cfg.onboard_for_s.is_none();
    out.hours = (d.ts.last().copied().unwrap_or(0.0) - d.ts.first().copied().unwrap_or(0.0)) / 3600.0;
    let mut run = DeviceRun {
        d,
        cfg,
        out,
        cursor: 0,
        open: false,
        false_incidents: HashSet::new(),
        attack_incidents: HashSet::new(),
        news_seen: HashSet::new(),
    };
    run.open = run.open_now(lab.driver.monitor());
    // Each record arrives at its capture time, as the daemon's consumer would see it
    // live: the monitor cuts the micro-batches (size and wait) and runs deferred records.
    for i in 0..n {
        let message = Received {
            source: source(partition, i as i64),
            key: Some(task.id.as_bytes().to_vec()),
            payload: record::encode_binary(
                &task.id,
                d.ts[i],
                task.row(i, dim),
                labels_known && run.out.known[i],
                d.contexts.get(i),
            ),
        };
        let arrival_ms = (d.ts[i].max(0.0) * 1000.0) as u64;
        if lab.driver.monitor().expired(arrival_ms) {
            run.drain(lab);
        }
        lab.tell(Input::Arrived { message, at_ms: arrival_ms });
        if lab.driver.monitor().batch_full() {
            run.drain(lab);
        }
    }
    run.drain(lab);
    run.out
}

impl DeviceRun<'_> {
    /// Open as the analyst sees it: a suppressed incident is not.
    fn open_now(&self, monitor: &Monitor) -> bool {
        monitor.open_incident(&self.d.task.id).is_some_and(|i| !i.quiet())
    }

    /// Run what the monitor holds, one run of the pipeline at a time, until nothing waits.
    fn drain(&mut self, lab: &mut Lab<'_>) {
        loop {
            let out = lab.tell(Input::Run);
            if !out.ran {
                break;
            }
            self.step(lab, out.emitted);
        }
    }

    /// What one run of the pipeline decided: the records it scored (the next ones in
    /// order; the rest wait as the daemon's deferred records do), the incidents it
    /// opened, then the ticks, the analyst's verdicts and the kind shares that follow.
    fn step(&mut self, lab: &mut Lab<'_>, emitted: Vec<Emitted>) {
        let d = self.d;
        let start = self.cursor;
        let end = emitted
            .iter()
            .filter_map(|e| match e {
                Emitted::Score(s) => Some(s.source.offset as usize + 1),
                _ => None,
            })
            .max()
            .unwrap_or(start);
        self.cursor = end;
        if start == 0 && end > 0 {
            self.begin(lab);
        }
        // An incident already open when the attack begins covers it.
        let attack_begins = (start..end).find(|&i| d.task.labels[i] == Label::Negative);
        let events = self.read_events(&emitted, start, end, attack_begins);
        self.walk(start, end, attack_begins, events);
        self.after_run(lab, &emitted);
    }

    /// After the run: updates and quiet closes, the analyst's verdicts on what closed,
    /// and the shares read back as the kinds topic brings them.
    fn after_run(&mut self, lab: &mut Lab<'_>, emitted: &[Emitted]) {
        let task = &self.d.task;
        // Updates and quiet closes, on the capture clock. Devices run one after the
        // other, each on its own clock: what the tick does to an earlier device's
        // incident is no event of this one.
        let mut shares = Vec::new();
        let ticked: Vec<Emitted> = lab
            .tell(Input::Tick)
            .emitted
            .into_iter()
            .filter(|e| match e {
                Emitted::Share(s) => {
                    shares.push(s.clone());
                    false
                }
                Emitted::Incident(i) => i.device() == task.id,
                _ => false,
            })
            .collect();
        self.out.incident_events += ticked.len();
        // The analyst reviews each false incident once it has closed, and each of the
        // attack's when asked to.
        for e in emitted.iter().chain(&ticked) {
            if let Emitted::Incident(IncidentEvent::Closed(r)) = e {
                if let (Some(f), false, Some("quiet")) = (&r.footprint, r.learned, r.resolution.as_deref()) {
                    self.out.not_learned.push((r.figures.first_ts, f.words()));
                }
                if r.learned {
                    let peers =
                        r.traffic.as_ref().map(|t| t.top_peers.iter().map(|p| p.value.clone()).collect());
                    self.out.learned_spans.push((
                        r.figures.first_ts,
                        r.figures.last_ts,
                        peers.unwrap_or_default(),
                    ));
                }
                if self.false_incidents.remove(&r.incident_id) {
                    let verdict = FeedbackVerdict::FalsePositive;
                    self.out.incident_events += answer(lab, &task.id, &r.incident_id, verdict, &mut shares);
                }
                if self.attack_incidents.remove(&r.incident_id) {
                    let verdict = FeedbackVerdict::Confirmed;
                    self.out.incident_events += answer(lab, &task.id, &r.incident_id, verdict, &mut shares);
                }
            }
        }
        // What the device shares with its kind comes back as the kinds topic would
        // bring it (every daemon reads it, this one included).
        share_back(lab, shares);
        self.open = self.open_now(lab.driver.monitor());
    }

    /// The device is tracked from its first run on: onboard it from there (`metapu
    /// onboard --for`, through the feedback path), or place it in its kind.
    fn begin(&mut self, lab: &mut Lab<'_>) {
        let d = self.d;
        let id = &d.task.id;
        if let Some(span) = self.cfg.onboard_for_s {
            let onboard = FeedbackMessage::Onboard(Onboard {
                device: id.clone(),
                onboard_for_s: span,
                kind: d.kind.clone(),
                by: "lab".into(),
                note: String::new(),
            });
            let emitted = feedback(lab, id, onboard);
            if let Some(reason) = dead_letter(&emitted) {
                panic!("onboarding {id}: {reason}");
            }
        } else if let Some(kind) = &d.kind {
            let join = FeedbackMessage::Kind(Kind {
                device: id.clone(),
                kind: kind.clone(),
                by: "lab".into(),
                note: String::new(),
            });
            if let Some(reason) = dead_letter(&feedback(lab, id, join)) {
                panic!("{id} joining {kind}: {reason}");
            }
        }
    }
}

/// A message on the feedback topic, through the daemon's feedback path.
fn feedback(lab: &mut Lab<'_>, device: &str, message: FeedbackMessage) -> Vec<Emitted> {
    let message =
        Received { source: source(0, -1), key: Some(device.as_bytes().to_vec()), payload: message.encode() };
    lab.tell(Input::Feedback(message)).emitted
}

/// The reason of the first dead letter among `emitted`.
fn dead_letter(emitted: &[Emitted]) -> Option<&str> {
    emitted.iter().find_map(|e| match e {
        Emitted::DeadLetter { letter, .. } => Some(letter.reason.as_str()),
        _ => None,
    })
}

/// The analyst's verdict on an incident, through the daemon's feedback path; the
/// incident events it gives.
fn answer(
    lab: &mut Lab<'_>,
    device: &str,
    incident_id: &str,
    verdict: FeedbackVerdict,
    shares: &mut Vec<Share>,
) -> usize {
    let verdict = FeedbackMessage::Verdict(Feedback {
        device: device.into(),
        incident_id: incident_id.into(),
        verdict,
        by: "lab analyst".into(),
        note: String::new(),
        id: String::new(),
        at: 0.0,
        from: String::new(),
    });
    let emitted = feedback(lab, device, verdict);
    if let Some(reason) = dead_letter(&emitted) {
        panic!("the analyst's verdict on {incident_id} was refused: {reason}");
    }
    shares.extend(emitted.iter().filter_map(|e| match e {
        Emitted::Share(s) => Some(s.clone()),
        _ => None,
    }));
    emitted.iter().filter(|e| matches!(e, Emitted::Incident(i) if i.device() == device)).count()
}

/// Shares a device published, read back as the kinds topic's messages.
fn share_back(lab: &mut Lab<'_>, shares: Vec<Share>) {
    let messages: Vec<Received> = shares
        .iter()
        .map(|s| Received {
            source: source(0, -1),
            key: Some(s.key().into_bytes()),
            payload: serde_json::to_vec(s).expect("a share serialises"),
        })
        .collect();
    if let Some(reason) = dead_letter(&lab.tell(Input::Shares(messages)).emitted) {
        panic!("a share was refused: {reason}");
    }
}
