//! How far one record and one verdict walk through the monitor: the daemon's core on
//! its default settings and the shipped model, fed one device's real N-BaIoT rows one
//! message at a time, as `Input::Arrived` then `Input::Run`.
//!
//! `scripts/walk-count.sh` runs it under callgrind, which counts the calls made between
//! `begin_measure` and `end_measure`: 200 records of a device already adapted (scored
//! normal: `WALK_THRESHOLD=0`), or one false-positive verdict on an open incident
//! (`WALK_RECORDS=0`). Messages are built before the measure begins.

use metapu::daemon::config::DaemonConfig;
use metapu::model::file;
use metapu::monitor::clock::Now;
use metapu::monitor::feedback::FeedbackMessage;
use metapu::monitor::incidents::{Feedback, IncidentRules, Verdict};
use metapu::monitor::output::IncidentEvent;
use metapu::monitor::record::{self, Source};
use metapu::monitor::telemetry::Tally;
use metapu::monitor::{Emitted, Input, Monitor, Received, RecordOutputs};

const ROWS: &str = "../shared/data/nbaiot/nbaiot_real_subset_labeled.csv";

/// The doorbell's rows of one label ("benign", "gafgyt", "mirai").
fn rows(label: &str) -> Vec<Vec<f32>> {
    let path = std::env::var("WALK_ROWS").unwrap_or_else(|_| ROWS.into());
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    text.lines()
        .skip(1)
        .filter(|l| l.contains("Danmini_Doorbell") && l.contains(label))
        .map(|l| l.split(',').take(115).map(|v| v.parse().expect("a feature")).collect())
        .collect()
}

// Callgrind's --zero-before and --dump-after mark the measured calls.
#[inline(never)]
fn begin_measure() {
    std::hint::black_box("begin");
}

#[inline(never)]
fn end_measure() {
    std::hint::black_box("end");
}

fn env<T: std::str::FromStr>(name: &str) -> Option<T> {
    std::env::var(name).ok()?.parse().ok()
}

/// The monitor and the messages it is fed, on one device's clock (a record a second).
struct Feed {
    monitor: Monitor,
    telemetry: Tally,
    offset: i64,
}

impl Feed {
    fn now(&self) -> Now {
        Now::at(self.offset as u64 * 1000, 1.7e9 + self.offset as f64)
    }

    /// The next message of the device, and when it arrives.
    fn message(&mut self, row: &[f32], known_normal: bool) -> (Received, Now) {
        self.offset += 1;
        let now = self.now();
        let payload = record::encode("cam", now.unix, row, known_normal);
        (Received { source: Source::new("in", 0, self.offset), key: None, payload }, now)
    }

    /// One message in and its batch run; time passes after it unless measured.
    fn pass(&mut self, (message, now): (Received, Now), tick: bool) -> Vec<Emitted> {
        self.monitor.handle(Input::Arrived { message, at_ms: now.ms }, now, &self.telemetry);
        let emitted = self.monitor.handle(Input::Run, now, &self.telemetry).emitted;
        if tick {
            self.monitor.handle(Input::Tick, now, &self.telemetry);
        }
        emitted
    }
}

fn main() {
    let cfg = DaemonConfig::defaults();
    let model = file::load(std::path::Path::new("models/iot-default.safetensors"), tch::Device::Cpu)
        .expect("the shipped model");
    let mut settings = cfg.core_settings();
    settings.incidents = IncidentRules { open_k: 3, open_n: 5, ..cfg.incident_rules() };
    settings.incidents.memory.learning_ms = 0;
    settings.outputs = RecordOutputs { scores: false, alerts: true };
    settings.trust_input_labels = true;
    if let Some(threshold) = env("WALK_THRESHOLD") {
        settings.threshold = threshold;
    }
    let feedback_topic = settings.feedback_topic.clone();
    let mut feed =
        Feed { monitor: Monitor::new(&settings, model, "v"), telemetry: Tally::default(), offset: 0 };
    let benign = rows("benign");
    // Known-normal records, then unlabeled ones until the device's windows are full.
    for (i, row) in benign.iter().take(200).enumerate() {
        let m = feed.message(row, i < 100);
        feed.pass(m, true);
    }
    let measured: usize = env("WALK_RECORDS").unwrap_or(200);
    if measured > 0 {
        let messages: Vec<(Received, Now)> =
            benign.iter().cycle().skip(200).take(measured).map(|r| feed.message(r, false)).collect();
        let mut alerts = 0;
        begin_measure();
        for m in messages {
            alerts += feed.pass(m, false).iter().filter(|e| matches!(e, Emitted::Alert(_))).count();
        }
        end_measure();
        println!("{measured} records measured, {alerts} of them alerts");
        return;
    }
    let attack: Vec<Vec<f32>> = rows("gafgyt").into_iter().chain(rows("mirai")).collect();
    let mut incident = None;
    for row in attack.iter().take(40) {
        let m = feed.message(row, false);
        for e in feed.pass(m, true) {
            if let Emitted::Incident(IncidentEvent::Opened(o)) = e {
                incident = Some(o.incident_id);
            }
        }
    }
    let verdict = Feedback {
        device: "cam".into(),
        incident_id: incident.expect("the attack opens an incident"),
        verdict: Verdict::FalsePositive,
        by: "ana".into(),
        note: "walk".into(),
        id: String::new(),
        at: 0.0,
        from: String::new(),
    };
    let message = Received {
        source: Source::new(feedback_topic, 0, 0),
        key: Some(b"cam".to_vec()),
        payload: FeedbackMessage::Verdict(verdict).encode(),
    };
    let now = feed.now();
    begin_measure();
    let emitted = feed.pass((message, now), false);
    end_measure();
    let closed = emitted.iter().any(|e| matches!(e, Emitted::Incident(IncidentEvent::Closed(_))));
    println!("1 verdict measured; its incident closed: {closed}");
}
