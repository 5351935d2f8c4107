//! The pipeline core without Kafka: what the daemon decides on a device's records and
//! an analyst's verdicts, checked on the core directly as the daemon's settings build it
//! (the broker tests check the paths in and out).

use crate::support::*;
use metapu::daemon::config::DaemonConfig;
use metapu::data::Label;
use metapu::model::file;
use metapu::monitor::feedback::FeedbackMessage;
use metapu::monitor::incidents::{Feedback, IncidentRules, Verdict};
use metapu::monitor::output::IncidentEvent;
use metapu::monitor::record::{self, Source};
use metapu::monitor::{Emitted, Input, Received, RecordOutputs, TestDriver};

/// The daemon's monitor on the test model, with quick incidents.
struct Core {
    driver: TestDriver,
    feedback_topic: String,
    offset: i64,
}

impl Core {
    fn new() -> Self {
        let cfg = DaemonConfig::defaults();
        let model = file::load(&fixture().model_path, tch::Device::Cpu).unwrap();
        // The daemon's core as configured (event clock, its adaptation points), with
        // quick incidents, every record's score, and trusted labels.
        let mut settings = cfg.core_settings();
        settings.incidents = IncidentRules {
            open_k: 3,
            open_n: 5,
            update_interval_ms: 5_000,
            quiet_ms: 600_000,
            reopen_ms: 0,
            ..cfg.incident_rules()
        };
        // Its devices raise within seconds of onboarding (support::daemon_config's reason).
        settings.incidents.memory.learning_ms = 0;
        settings.outputs = RecordOutputs { scores: true, alerts: false };
        settings.trust_input_labels = true;
        Self {
            driver: TestDriver::new(&settings, model, None, "v", None),
            feedback_topic: settings.feedback_topic.clone(),
            offset: 0,
        }
    }

    /// The device's records, a second apart, arriving at once: one micro-batch, run
    /// until no record waits.
    fn feed(&mut self, rows: &[Vec<f32>], known: bool) -> Vec<Emitted> {
        for row in rows {
            self.offset += 1;
            let payload = record::encode("cam", self.offset as f64, row, known);
            self.driver.pipe_payload("in", self.offset, payload);
        }
        self.driver.run()
    }

    fn verdict(&mut self, incident: &str, verdict: Verdict) -> Vec<Emitted> {
        let fb = Feedback {
            device: "cam".into(),
            incident_id: incident.into(),
            verdict,
            by: "ana".into(),
            note: "firmware update".into(),
            id: String::new(),
            at: 0.0,
            from: String::new(),
        };
        let m = Received {
            source: Source::new(self.feedback_topic.clone(), 0, 0),
            key: Some(b"cam".to_vec()),
            payload: FeedbackMessage::Verdict(fb).encode(),
        };
        // On the feedback topic: applied after the batch's records.
        self.driver.pipe(m);
        self.driver.tell(Input::Run).emitted
    }
}

fn opened(emitted: &[Emitted]) -> Vec<String> {
    emitted
        .iter()
        .filter_map(|e| match e {
            Emitted::Incident(IncidentEvent::Opened(r)) => Some(r.incident_id.clone()),
            _ => None,
        })
        .collect()
}

fn anomalous(emitted: &[Emitted]) -> (usize, usize) {
    let scores: Vec<&str> = emitted
        .iter()
        .filter_map(|e| match e {
            Emitted::Score(s) => Some(s.decision.as_str()),
            _ => None,
        })
        .collect();
    (scores.iter().filter(|d| **d == "anomalous").count(), scores.len())
}

/// A device's benign behaviour changes (a firmware update, a new service): an incident
/// opens; the analyst calls it a false positive; it closes as dismissed. The verdict
/// leaves the device's known-normal records and classifier as they were (a verdict
/// cannot make the device noisier); the behaviour is remembered, and when it comes back
/// its incident is suppressed (recorded, not raised), before and after the device is
/// re-adapted on a window full of it.
#[test]
fn a_false_positive_verdict_is_remembered_and_leaves_the_classifier_as_it_was() {
    let fx = fixture();
    let (normal, changed) = (fx.rows(0, Label::Positive), fx.rows(0, Label::Negative));
    let mut core = Core::new();
    let onboarded = core.feed(&normal[..10], true);
    assert!(opened(&onboarded).is_empty());
    let normal_out = core.feed(&normal[10..30], false);
    assert!(opened(&normal_out).is_empty(), "normal traffic opens nothing");
    // The device is re-adapted at its adaptation points while the new behaviour
    // arrives: on a window that holds some of it (what PU learning looks for).
    let first = core.feed(&changed[..15], false);
    let ids = opened(&first);
    assert_eq!(ids.len(), 1, "the new behaviour opens one incident: {:?}", anomalous(&first));

    let device = |core: &Core| {
        let d = core.driver.monitor().device("cam").unwrap();
        (d.known_normal, d.prior)
    };
    let before = device(&core);
    let out = core.verdict(&ids[0], Verdict::FalsePositive);
    let closed: Vec<&IncidentEvent> = out
        .iter()
        .filter_map(|e| match e {
            Emitted::Incident(i @ IncidentEvent::Closed(_)) => Some(i),
            _ => None,
        })
        .collect();
    let [IncidentEvent::Closed(r)] = closed[..] else { panic!("one close: {out:?}") };
    assert_eq!((r.incident_id.as_str(), r.resolution.as_deref()), (ids[0].as_str(), Some("dismissed")));
    assert_eq!((r.feedback[0].by.as_str(), r.feedback[0].note.as_str()), ("ana", "firmware update"));
    assert!(!out.iter().any(|e| matches!(e, Emitted::Prior(_))), "not re-adapted: {out:?}");
    assert_eq!(device(&core), before, "known-normal records and classifier as they were");
    let again = core.verdict(&ids[0], Verdict::FalsePositive);
    assert!(matches!(again[..], [Emitted::DeadLetter { .. }]), "a second dismissal is refused: {again:?}");

    // It comes back, about as long as it was (the dismissed incident had 11 anomalous
    // records; the records carry no packet context, so its feature rows and its
    // length stand for it).
    let after = core.feed(&changed[15..45], false);
    assert!(opened(&after).is_empty(), "the dismissed behaviour raised: {:?} anomalous", anomalous(&after));
    let suppressed: Vec<_> = after
        .iter()
        .filter_map(|e| match e {
            Emitted::Incident(IncidentEvent::Suppressed(r)) => Some(r),
            _ => None,
        })
        .collect();
    let [r] = suppressed[..] else { panic!("one suppressed incident: {after:?}") };
    assert_eq!(r.suppressed.as_ref().map(|d| d.incident_id.as_str()), Some(ids[0].as_str()));
    assert!(r.summary.contains("suppressed: the behaviour dismissed in incident"), "{}", r.summary);
    let open = core.driver.monitor().open_incident("cam").cloned().expect("recorded as open");
    assert!(open.suppressed.is_some() && open.news.is_none());

    // It goes on past three times its length: news, under the same id.
    let longer = core.feed(&changed[45..95], false);
    let news: Vec<_> = longer
        .iter()
        .filter_map(|e| match e {
            Emitted::Incident(IncidentEvent::Opened(r)) => Some(r),
            _ => None,
        })
        .collect();
    let [r] = news[..] else { panic!("one incident raised: {longer:?}") };
    assert_eq!(r.incident_id, open.id);
    let why = &r.news.as_ref().expect("news").why;
    assert!(why.contains("anomalous records, 3× the 11 it had"), "{why}");
    assert!(
        r.suppressed.is_none() && r.summary.contains("news: like the behaviour dismissed"),
        "{}",
        r.summary
    );

    // Each published fact reaches the telemetry once, as the output that carries it.
    let outputs = [&onboarded, &normal_out, &first, &out, &again, &after, &longer];
    let published = |name: &str| {
        let of = |e: &Emitted| matches!(e, Emitted::Incident(i) if i.name() == name);
        outputs.iter().flat_map(|o| o.iter()).filter(|e| of(e)).count() as u64
    };
    let tally = core.driver.telemetry();
    assert_eq!(published("opened"), 2, "the incident, and its news");
    for name in ["opened", "updated", "suppressed", "closed"] {
        assert_eq!(tally.get(&format!("published/{name}")), published(name), "{name}");
    }
    let priors = outputs.iter().flat_map(|o| o.iter()).filter(|e| matches!(e, Emitted::Prior(_))).count();
    assert!(priors > 0);
    assert_eq!(tally.get("published/prior"), priors as u64);
}
