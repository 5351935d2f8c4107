use super::*;
use crate::monitor::incidents::Incident;

fn report(id: &str, device: &str, time: f64) -> IncidentReport {
    let mut i = Incident::sample(10, 8);
    i.id = id.into();
    IncidentReport::of(device, &i, None, "v", Vec::new(), time)
}

fn event(e: IncidentEvent) -> Vec<u8> {
    serde_json::to_vec(&e).unwrap()
}

fn prior(device: &str, ts: f64, scored: u64, alerted: u64) -> Vec<u8> {
    serde_json::to_vec(&PriorUpdate {
        device: device.into(),
        prior: 0.9,
        attack_share: 0.1,
        positive_window: 50,
        unlabeled_window: 200,
        time: 0.0,
        model_version: "v".into(),
        ts,
        scored,
        alerted,
        kind: None,
        known_normal_span: None,
        remembered: Vec::new(),
    })
    .unwrap()
}

#[test]
fn an_incident_s_events_fold_into_one_case_that_closes() {
    let mut desk = Desk::new(10);
    desk.incident_event(&event(IncidentEvent::Opened(report("i1", "cam", 100.0)))).unwrap();
    desk.incident_event(&event(IncidentEvent::Updated(report("i1", "cam", 130.0)))).unwrap();
    assert_eq!(desk.case("i1").unwrap().standing, Standing::Open);
    let mut closed = report("i1", "cam", 160.0);
    closed.resolution = Some("dismissed".into());
    desk.incident_event(&event(IncidentEvent::Closed(closed))).unwrap();
    let case = desk.case("i1").unwrap();
    assert_eq!((case.standing, case.events.len(), case.last_time), (Standing::Closed, 3, 160.0));
    assert_eq!(desk.device("cam").unwrap().incidents, ["i1"]);
    assert!(desk.incident_event(b"{\"event\":\"opened\"}").is_err(), "an unreadable event is an error");
}

#[test]
fn a_verdict_needs_a_known_incident_a_name_and_no_twin() {
    let mut desk = Desk::new(10);
    desk.incident_event(&event(IncidentEvent::Opened(report("i1", "cam", 100.0)))).unwrap();
    let fp = Verdict::FalsePositive;
    assert!(matches!(
        desk.check_verdict("nope", None, fp, "ana", "", ""),
        Err(VerdictError::UnknownIncident(_))
    ));
    assert_eq!(desk.check_verdict("i1", None, fp, " ", "", ""), Err(VerdictError::Anonymous));
    assert!(matches!(
        desk.check_verdict("i1", Some("tv"), fp, "ana", "", ""),
        Err(VerdictError::WrongDevice { .. })
    ));
    let fb = desk.check_verdict("i1", Some("cam"), fp, "ana", "backup", "v1").unwrap();
    assert_eq!(fb.id, "v1");
    assert_eq!((fb.device.as_str(), fb.by.as_str()), ("cam", "ana"));
    desk.sent(&fb, 1.0);
    assert!(matches!(desk.check_verdict("i1", None, fp, "bo", "", ""), Err(VerdictError::Replayed { .. })));
    assert!(
        desk.check_verdict("i1", None, Verdict::Confirmed, "bo", "", "v2").is_ok(),
        "another verdict may follow"
    );
    // The daemon recorded it: no longer pending, and still a replay.
    let mut closed = report("i1", "cam", 160.0);
    closed.feedback = vec![fb.clone()];
    closed.resolution = Some("dismissed".into());
    let closed = event(IncidentEvent::Closed(closed));
    desk.incident_event(&closed).unwrap();
    assert!(desk.case("i1").unwrap().pending().is_empty());
    // The same id again, whatever it says, is a replay: a restarted console knows it
    // from the daemon's record.
    let mut restarted = Desk::new(10);
    restarted.incident_event(&closed).unwrap();
    assert_eq!(
        restarted.check_verdict("i1", None, Verdict::Confirmed, "bo", "", "v1"),
        Err(VerdictError::ReplayedId("v1".into()))
    );
    assert!(matches!(desk.check_verdict("i1", None, fp, "bo", "", ""), Err(VerdictError::Replayed { .. })));
}

#[test]
fn a_refused_verdict_is_noted_on_its_incident() {
    let mut desk = Desk::new(10);
    desk.incident_event(&event(IncidentEvent::Opened(report("i1", "cam", 100.0)))).unwrap();
    let fb = desk.check_verdict("i1", None, Verdict::FalsePositive, "ana", "", "").unwrap();
    desk.sent(&fb, 1.0);
    let letter = DeadLetter {
        reason: "no incident i1 on device cam".into(),
        kind: "bad_feedback".into(),
        source: crate::monitor::record::Source::new("feedback", 0, 3),
        payload: String::from_utf8(FeedbackMessage::Verdict(fb).encode()).unwrap(),
        payload_bytes: 0,
        time: 2.0,
    };
    desk.dead_letter(&serde_json::to_vec(&letter).unwrap()).unwrap();
    let case = desk.case("i1").unwrap();
    assert_eq!(case.refused.len(), 1);
    assert!(case.pending().is_empty(), "answered by its refusal");
}

#[test]
fn alerts_by_day_come_from_counters_that_a_restart_begins_again() {
    let mut desk = Desk::new(10);
    for (ts, scored, alerted) in [(10.0, 100, 1), (DAY_S + 10.0, 300, 4), (DAY_S + 20.0, 50, 0)] {
        desk.prior_update(&prior("cam", ts, scored, alerted)).unwrap();
    }
    let d = desk.device("cam").unwrap();
    let days: Vec<(u64, u64)> = d.days.values().map(|d| (d.scored, d.alerted)).collect();
    assert_eq!(days, [(100, 1), (250, 3)], "the third update began its counters again");
    assert_eq!(d.points.len(), 3);
}

#[test]
fn past_its_size_the_desk_forgets_the_oldest_closed_incidents_first() {
    let mut desk = Desk::new(2);
    desk.incident_event(&event(IncidentEvent::Opened(report("open", "a", 1.0)))).unwrap();
    let mut closed = report("old", "b", 2.0);
    closed.resolution = Some("quiet".into());
    desk.incident_event(&event(IncidentEvent::Closed(closed))).unwrap();
    desk.incident_event(&event(IncidentEvent::Opened(report("new", "c", 3.0)))).unwrap();
    assert!(desk.case("open").is_some() && desk.case("new").is_some());
    assert!(desk.case("old").is_none());
    assert!(desk.device("b").unwrap().incidents.is_empty());
}

#[test]
fn a_named_kind_makes_the_device_a_sibling_of_its_kind() {
    let mut desk = Desk::new(10);
    let onboarding = |device: &str, kind: Option<&str>| IncidentEvent::Onboarding {
        device: device.into(),
        kind: kind.map(Into::into),
        from: 0.0,
        until: 60.0,
        by: "ops".into(),
        note: String::new(),
        time: 0.0,
    };
    desk.incident_event(&event(onboarding("cam-a", Some("edimax")))).unwrap();
    desk.incident_event(&event(onboarding("cam-b", None))).unwrap();
    assert!(desk.siblings("cam-a", "edimax").is_empty());
    let named = IncidentEvent::KindJoined {
        device: "cam-b".into(),
        kind: "edimax".into(),
        by: "ops".into(),
        note: String::new(),
        time: 10.0,
    };
    desk.incident_event(&event(named)).unwrap();
    assert_eq!(desk.siblings("cam-a", "edimax"), ["cam-b"]);
    assert_eq!(desk.device("cam-b").unwrap().kind.as_deref(), Some("edimax"));
}
