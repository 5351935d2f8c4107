//! Tests of the incident tracker.

use super::*;
use crate::monitor::incidents::fanout::RaisedBy;
use crate::monitor::output::IncidentReport;

const RULES: IncidentRules = crate::monitor::incidents::TEST_RULES;

fn source(offset: i64) -> Source {
    Source::new("in", 0, offset)
}

/// Feed decisions (true = anomalous) at offsets from `first`, one per 100 ms.
fn feed(t: &mut IncidentTracker, decisions: &[bool], first: i64) -> Vec<Transition> {
    let mut out = Vec::new();
    for (i, &anomalous) in decisions.iter().enumerate() {
        let offset = first + i as i64;
        let s = source(offset);
        let posterior = if anomalous { 0.1 } else { 0.9 };
        let d = Decision {
            anomalous,
            posterior,
            prior: 0.7,
            ts: offset as f64,
            source: &s,
            features: &[1.0, 2.0],
            context: None,
            judged: true,
        };
        out.extend(t.observe("cam", d, &RULES, None, &[], offset as u64 * 100, 0.0));
    }
    out
}

#[test]
fn opens_on_k_of_n_and_not_before() {
    let mut t = IncidentTracker::default();
    assert!(feed(&mut t, &[true, false, false, true, false, false, false], 0).is_empty(), "2 of 5 never");
    let opened = feed(&mut t, &[true, true, true], 7);
    let [Transition::Opened(i)] = opened.as_slice() else { panic!("{opened:?}") };
    assert_eq!(i.opened_by.offset, 9, "opened by the third anomalous record of five");
    assert_eq!(i.id, incident_id("cam", &source(9)));
    assert!((i.attack_share - 0.3).abs() < 1e-6 && (i.figures.peak_score - 0.9).abs() < 1e-6);
}

#[test]
fn counts_while_open_updates_at_most_every_interval_and_closes_when_quiet() {
    let mut t = IncidentTracker::default();
    feed(&mut t, &[true, true, true], 0);
    assert!(t.tick(&RULES, 2, 250, 0.0).is_none(), "nothing new since opening");
    feed(&mut t, &[true, false, true, true], 3);
    assert!(t.tick(&RULES, 2, 1_199, 0.0).is_none(), "an update within the interval after opening");
    let Some(Transition::Updated(u)) = t.tick(&RULES, 2, 1_200, 0.0) else { panic!("no update") };
    assert_eq!((u.figures.records, u.figures.anomalous, u.figures.last_ts), (5, 4, 6.0));
    assert_eq!(u.kept, [1.0, 2.0, 1.0, 2.0], "two records kept");
    assert!(t.tick(&RULES, 2, 2_500, 0.0).is_none(), "no new records: no update");
    assert!(t.tick(&RULES, 2, 600 + 9_999, 0.0).is_none(), "quiet not yet over");
    let Some(Transition::Closed(c, Resolution::Quiet)) = t.tick(&RULES, 2, 600 + 10_000, 0.0) else {
        panic!()
    };
    assert_eq!(c.id, u.id);
    assert!(t.open.is_none() && t.recent == 0);
    // A fresh incident needs k new anomalous decisions.
    assert!(feed(&mut t, &[true, true], 200).is_empty());
    assert!(matches!(feed(&mut t, &[true], 202).as_slice(), [Transition::Opened(_)]));
}

#[test]
fn a_redelivered_record_is_not_counted_twice_and_opens_nothing_new() {
    let mut t = IncidentTracker::default();
    let first = feed(&mut t, &[true, true, true], 0);
    let again = feed(&mut t, &[true, true, true], 0);
    assert_eq!(first.len(), 1);
    assert!(again.is_empty());
    assert_eq!(t.open.as_ref().map(|i| i.figures.records), Some(1));
    // The same records on a restored tracker without the incident: the same id.
    let mut restored = IncidentTracker::default();
    let reopened = feed(&mut restored, &[true, true, true], 0);
    let [Transition::Opened(i)] = reopened.as_slice() else { panic!("{reopened:?}") };
    assert_eq!(Some(&i.id), t.open.as_ref().map(|o| &o.id));
}

fn verdict(t: &IncidentTracker, verdict: Verdict) -> Feedback {
    let incident_id = t.open.as_ref().or(t.last_closed.as_ref()).map(|i| i.id.clone()).unwrap_or_default();
    Feedback {
        device: "cam".into(),
        incident_id,
        verdict,
        by: "ana".into(),
        note: "firmware update".into(),
        id: String::new(),
        at: 0.0,
        from: String::new(),
    }
}

#[test]
fn a_false_positive_hands_over_its_records_and_closes_as_dismissed() {
    let mut t = IncidentTracker::default();
    feed(&mut t, &[true, true, true, true], 0);
    let confirmed = t.feedback(&verdict(&t, Verdict::Confirmed), 10.0, 60, &RULES.memory, 2);
    let Ok(Applied::Confirmed(Transition::Updated(i))) = confirmed else { panic!("{confirmed:?}") };
    assert_eq!(i.feedback.len(), 1);
    let dismissed = t.feedback(&verdict(&t, Verdict::FalsePositive), 10.0, 60, &RULES.memory, 2);
    let Ok(Applied::Dismissed(Transition::Closed(i, Resolution::Dismissed))) = dismissed else {
        panic!("{dismissed:?}")
    };
    assert_eq!((i.feedback.len(), i.feedback[1].by.as_str()), (2, "ana"));
    assert!(t.open.is_none());
    let again = t.feedback(&verdict(&t, Verdict::FalsePositive), 11.0, 60, &RULES.memory, 2);
    assert_eq!(again, Err(FeedbackError::AlreadyDismissed(i.id.clone())));
}

/// Feed decisions as `feed` does, on the device clock `now_unix` (seconds).
fn feed_at(
    t: &mut IncidentTracker,
    rules: &IncidentRules,
    decisions: &[bool],
    first: i64,
    now_unix: f64,
) -> Vec<Transition> {
    let mut out = Vec::new();
    for (i, &anomalous) in decisions.iter().enumerate() {
        let offset = first + i as i64;
        let s = source(offset);
        let features = [offset as f32, 0.0];
        let d = Decision {
            anomalous,
            posterior: if anomalous { 0.1 } else { 0.9 },
            prior: 0.7,
            ts: now_unix,
            source: &s,
            features: &features,
            context: None,
            judged: true,
        };
        out.extend(t.observe("cam", d, rules, None, &[], offset as u64 * 100, now_unix));
    }
    out
}

#[test]
fn a_quiet_close_reopens_within_the_window_under_its_id_and_a_dismissed_one_never() {
    let rules = IncidentRules { reopen_ms: 600_000, ..RULES };
    let mut t = IncidentTracker::default();
    let opened = feed_at(&mut t, &rules, &[true, true, true], 0, 1_000.0);
    let [Transition::Opened(first)] = opened.as_slice() else { panic!("{opened:?}") };
    // Seen 89.8 s after the quiet ran out (the last anomalous record at 200 ms):
    // closed when it ran out.
    let Some(Transition::Closed(c, Resolution::Quiet)) = t.tick(&rules, 2, 100_000, 1_100.0) else {
        panic!()
    };
    assert!((c.closed_at.unwrap() - 1_010.2).abs() < 1e-6, "{:?}", c.closed_at);
    // Eight minutes later (device time), three anomalous of five again: the same incident.
    let again = feed_at(&mut t, &rules, &[true, true, true], 10, 1_500.0);
    let [Transition::Reopened(i)] = again.as_slice() else { panic!("{again:?}") };
    assert_eq!((i.id.as_str(), i.reopened, i.closed_at), (first.id.as_str(), 1, None));
    assert_eq!(i.reopened_by.as_ref().map(|s| s.offset), Some(12));
    assert_eq!(
        (i.figures.records, i.figures.anomalous),
        (2, 2),
        "counted while open: its first and the reopening record"
    );
    assert!(t.last_closed.is_none() && t.open.is_some());
    // Closed again (at 1,800 − 188.8 s), and past the window: a new incident.
    t.tick(&rules, 2, 200_000, 1_800.0).expect("closed");
    let later = feed_at(&mut t, &rules, &[true, true, true], 20, 1_611.2 + 601.0);
    assert!(matches!(later.as_slice(), [Transition::Opened(i)] if i.id != first.id), "{later:?}");
    // Dismissed, then back within the window: news, so a new incident.
    let fb = verdict(&t, Verdict::FalsePositive);
    assert!(t.feedback(&fb, 2_402.0, 60, &RULES.memory, 2).is_ok());
    let after_verdict = feed_at(&mut t, &rules, &[true, true, true], 30, 2_410.0);
    assert!(matches!(after_verdict.as_slice(), [Transition::Opened(_)]), "{after_verdict:?}");
    // Dismissed after a quiet close: the same.
    t.tick(&rules, 2, 400_000, 2_500.0).expect("closed");
    let fb = verdict(&t, Verdict::FalsePositive);
    assert!(t.feedback(&fb, 2_501.0, 3_600, &RULES.memory, 2).is_ok());
    assert!(matches!(
        feed_at(&mut t, &rules, &[true, true, true], 40, 2_510.0).as_slice(),
        [Transition::Opened(_)]
    ));
}

#[test]
fn late_feedback_reaches_a_recently_closed_incident_and_no_other() {
    let mut t = IncidentTracker::default();
    feed(&mut t, &[true, true, true], 0);
    t.tick(&RULES, 2, 10_200, 1_000.0).expect("closed when quiet");
    let fb = verdict(&t, Verdict::FalsePositive);
    let Ok(Applied::Dismissed(Transition::Reviewed(i))) =
        t.clone().feedback(&fb, 1_050.0, 60, &RULES.memory, 2)
    else {
        panic!()
    };
    assert_eq!(i.feedback.len(), 1);
    let late = t.clone().feedback(&fb, 1_061.0, 60, &RULES.memory, 2);
    assert!(matches!(late, Err(FeedbackError::UnknownIncident { .. })), "{late:?}");
    let wrong = Feedback { incident_id: "nope".into(), ..fb };
    assert!(matches!(
        t.feedback(&wrong, 1_001.0, 60, &RULES.memory, 2),
        Err(FeedbackError::UnknownIncident { .. })
    ));
}

#[test]
fn a_verdict_id_is_taken_once_even_after_a_restore() {
    let mut t = IncidentTracker::default();
    feed(&mut t, &[true, true, true], 0);
    let confirmed = Feedback { id: "v-1".into(), ..verdict(&t, Verdict::Confirmed) };
    assert!(matches!(t.feedback(&confirmed, 1_000.0, 60, &RULES.memory, 2), Ok(Applied::Confirmed(_))));
    // The state as a snapshot keeps it: the same id after a restart changes nothing.
    let mut restored: IncidentTracker = serde_json::from_str(&serde_json::to_string(&t).unwrap()).unwrap();
    let before = restored.clone();
    let replay = restored.feedback(&confirmed, 1_001.0, 60, &RULES.memory, 2);
    assert_eq!(replay, Err(FeedbackError::Replayed("v-1".into())));
    assert_eq!(restored, before, "a replay changes nothing");
    // Another id is another verdict; a message without an id is taken as before ids.
    let again = Feedback { id: "v-2".into(), ..confirmed.clone() };
    assert!(restored.feedback(&again, 1_002.0, 60, &RULES.memory, 2).is_ok());
    let anonymous = Feedback { id: String::new(), ..confirmed };
    assert!(restored.feedback(&anonymous, 1_003.0, 60, &RULES.memory, 2).is_ok());
    assert!(restored.feedback(&anonymous, 1_004.0, 60, &RULES.memory, 2).is_ok());
    // A refused verdict's id is not taken: the same id may come again once it can apply.
    let mut fresh = IncidentTracker::default();
    let early = Feedback { id: "v-3".into(), incident_id: "nope".into(), ..verdict(&t, Verdict::Confirmed) };
    assert!(fresh.feedback(&early, 1_000.0, 60, &RULES.memory, 2).is_err());
    assert!(fresh.verdict_ids.is_empty());
    // The ids kept are bounded.
    for i in 0..2 * VERDICT_IDS_KEPT {
        let v = Feedback { id: format!("n-{i}"), ..verdict(&t, Verdict::Confirmed) };
        t.feedback(&v, 1_000.0, 60, &RULES.memory, 2).unwrap();
    }
    assert_eq!(t.verdict_ids.len(), VERDICT_IDS_KEPT);
}

/// An outbound TCP packet (ACK, PSH) of `bytes` from the device to `peer`:`port`.
fn packet(peer: &str, port: u16, bytes: u32) -> Context {
    Context::outbound(peer, port, 6, 0x18, bytes)
}

/// Anomalous records of packets `c`, one per second of device time from `t0`.
fn feed_packets(
    t: &mut IncidentTracker,
    rules: &IncidentRules,
    c: &Context,
    n: usize,
    first: i64,
    t0: f64,
) -> Vec<Transition> {
    feed_beside(t, rules, c, (n, first, t0), &[])
}

/// [`feed_packets`] beside siblings that raised `siblings`.
fn feed_beside(
    t: &mut IncidentTracker,
    rules: &IncidentRules,
    c: &Context,
    (n, first, t0): (usize, i64, f64),
    siblings: &[Raised],
) -> Vec<Transition> {
    let mut out = Vec::new();
    for i in 0..n {
        let offset = first + i as i64;
        let s = source(offset);
        let now = t0 + i as f64;
        let d = Decision {
            anomalous: true,
            posterior: 0.1,
            prior: 0.7,
            ts: now,
            source: &s,
            features: &[1.0, 2.0],
            context: Some(c),
            judged: true,
        };
        out.extend(t.observe("cam", d, rules, None, siblings, (now * 1000.0) as u64, now));
    }
    out
}

/// What sibling `device` raised at `at`: an incident of `c`'s behaviour.
fn raised_on(device: &str, c: &Context, at: f64) -> Raised {
    let mut traffic = Traffic::default();
    traffic.add(c, at);
    let itself = Dismissal {
        incident_id: format!("{device}-1"),
        by: String::new(),
        note: String::new(),
        at,
        on: Some(device.into()),
        learned: false,
        expires_at: None,
    };
    Raised {
        device: device.into(),
        incident_id: format!("{device}-1"),
        at,
        behaviour: Behaviour::of(&traffic, 1, &[], 2, itself),
        joined: None,
    }
}

#[test]
fn an_attack_inside_a_raised_incident_is_told_at_its_footprint() {
    let rules = IncidentRules { open_k: 1, open_n: 1, ..RULES };
    let mut t = IncidentTracker::default();
    let opened = feed_packets(&mut t, &rules, &packet("52.1.2.3", 443, 900), 2, 0, 1_000.0);
    assert!(matches!(opened.as_slice(), [Transition::Opened(_)]), "{opened:?}");
    let mut out = Vec::new();
    for h in 1..=9u8 {
        let syn = Context::outbound(&format!("52.9.9.{h}"), 23, 6, 0x02, 60);
        out.extend(feed_packets(&mut t, &rules, &syn, 1, 10 + i64::from(h), 1_002.0 + f64::from(h)));
    }
    // Told once, at the eighth host; nothing at the ninth.
    let [Transition::Updated(i)] = out.as_slice() else { panic!("{out:?}") };
    let news = i.news.as_ref().expect("news");
    assert!(news.why.starts_with("it now shows a scan"), "{}", news.why);
    assert_eq!(news.by.offset, 18);
}

#[test]
fn an_incident_joins_a_siblings_of_its_behaviour_and_leaves_for_what_that_one_never_did() {
    let rules = IncidentRules { open_k: 1, open_n: 1, fleet_ms: 600_000, ..RULES };
    let upload = packet("52.1.2.3", 443, 900);
    let siblings = [raised_on("cam-a", &upload, 1_000.0)];
    let mut t = IncidentTracker::default();
    let joined = feed_beside(&mut t, &rules, &upload, (3, 0, 1_005.0), &siblings);
    let [Transition::Joined(j)] = joined.as_slice() else { panic!("{joined:?}") };
    assert_eq!(j.fleet, Some(Fleet { incident_id: "cam-a-1".into(), device: "cam-a".into() }));
    assert!(IncidentReport::of("cam", j, None, "v", vec![], 0.0)
        .summary
        .contains("joined fleet incident cam-a-1"));
    // No updates while joined; a new peer raises it on its own.
    assert!(t.tick(&rules, 2, 1_008_500, 1_008.5).is_none());
    let other = feed_beside(&mut t, &rules, &packet("52.7.7.7", 443, 900), (1, 10, 1_009.0), &siblings);
    let [Transition::Opened(news)] = other.as_slice() else { panic!("{other:?}") };
    assert!(news.fleet.is_none());
    assert_eq!(
        news.news.as_ref().map(|n| n.why.as_str()),
        Some("joined fleet incident cam-a-1 raised on cam-a, but with a new peer, 52.7.7.7")
    );
    // Too long after the sibling's, or on its own clock before it: raised.
    for at in [1_000.0 + 601.0, 999.0] {
        let mut t = IncidentTracker::default();
        let own = feed_beside(&mut t, &rules, &upload, (1, 0, at), &siblings);
        assert!(matches!(own.as_slice(), [Transition::Opened(_)]), "at {at}: {own:?}");
    }
    // What shows an attack's footprint (a local peer its normal traffic never had)
    // is raised on each device, whatever a sibling raised.
    let local = packet("192.168.1.9", 443, 900);
    let mut t = IncidentTracker::default();
    let own = feed_beside(&mut t, &rules, &local, (1, 0, 1_005.0), &[raised_on("cam-a", &local, 1_000.0)]);
    let [Transition::Opened(i)] = own.as_slice() else { panic!("{own:?}") };
    assert!(i.footprint.is_some() && i.fleet.is_none());
}

#[test]
fn a_dismissed_behaviour_that_returns_is_suppressed_until_it_goes_beyond() {
    let rules = remembering();
    let upload = packet("52.1.2.3", 443, 1_000);
    let mut t = IncidentTracker::default();
    let opened = feed_packets(&mut t, &rules, &upload, 10, 0, 1_000.0);
    assert!(matches!(opened.as_slice(), [Transition::Opened(_)]), "{opened:?}");
    let fb = verdict(&t, Verdict::FalsePositive);
    assert!(t.feedback(&fb, 1_010.0, 60, &rules.memory, 2).is_ok());
    assert_eq!(t.memory.len(), 1);
    // The next evening: the same upload, a little larger. Suppressed, and no updates.
    let again = feed_packets(&mut t, &rules, &upload, 20, 100, 80_000.0);
    let [Transition::Suppressed(i)] = again.as_slice() else { panic!("{again:?}") };
    assert_eq!(
        i.suppressed.as_ref().map(|d| (d.incident_id.as_str(), d.by.as_str())),
        Some((fb.incident_id.as_str(), "ana"))
    );
    assert!(t.tick(&rules, 2, 80_025_000, 80_025.0).is_none(), "no update of a suppressed incident");
    // It closes, and is recorded as it was.
    let Some(Transition::Closed(c, Resolution::Quiet)) = t.tick(&rules, 2, 80_200_000, 80_200.0) else {
        panic!()
    };
    assert!(c.suppressed.is_some());
    // Suppressed to its end, it grew the behaviour: 18 packets (from its third record
    // on), 18,000 bytes where the dismissed incident had 8,000.
    assert_eq!((t.memory.behaviours[0].bytes, t.memory.behaviours[0].first_bytes), (18_000, 8_000));
    // Far more to the same peer: news at the record that passed 3× the grown bound.
    let exfil = feed_packets(&mut t, &rules, &upload, 100, 1_000, 90_000.0);
    let [Transition::Suppressed(_), Transition::Opened(news)] = exfil.as_slice() else { panic!("{exfil:?}") };
    let n = news.news.as_ref().expect("news");
    assert_eq!(n.by.offset, 1_002 + 54, "its 55th packet passed 3× 18,000 bytes");
    assert!(n.why.contains("bytes") && news.suppressed.is_none(), "{}", n.why);
    t.tick(&rules, 2, 90_400_000, 90_400.0).expect("closed");
    // A new peer during a suppressed incident: news at once.
    feed_packets(&mut t, &rules, &upload, 5, 2_000, 100_000.0);
    let other = feed_packets(&mut t, &rules, &packet("203.0.113.9", 443, 60), 1, 2_005, 100_005.0);
    let [Transition::Opened(news)] = other.as_slice() else { panic!("{other:?}") };
    assert!(news.news.as_ref().unwrap().why.contains("a new peer, 203.0.113.9"), "{news:?}");
    t.tick(&rules, 2, 100_400_000, 100_400.0).expect("closed");
    // Past the memory's expiry: an incident again.
    let later = feed_packets(&mut t, &rules, &upload, 10, 3_000, 1_010.0 + 200_001.0);
    assert!(matches!(later.as_slice(), [Transition::Opened(i)] if i.news.is_none()), "{later:?}");
    assert!(t.memory.is_empty());
}

/// Without an analyst: an incident that closes quietly, unanswered, is remembered as
/// the daemon's own dismissal (said on its close); its return is suppressed; a new
/// peer is news; a `confirmed` verdict undoes what was learned; a look's finding and
/// an incident with a verdict are never learned, nor anything with the rule off.
#[test]
fn an_unanswered_quiet_close_is_learned_and_a_confirmed_verdict_undoes_it() {
    let memory = MemoryRules {
        remember_ms: 200_000_000,
        volume_factor: 3.0,
        learn_quiet: true,
        learned_ms: 200_000_000,
        learning_ms: 0,
    };
    let rules = IncidentRules { memory, keep_records: 2, ..RULES };
    let upload = packet("52.1.2.3", 443, 1_000);
    let mut t = IncidentTracker::default();
    feed_packets(&mut t, &rules, &upload, 10, 0, 1_000.0);
    let Some(Transition::Closed(c, Resolution::Quiet)) = t.tick(&rules, 2, 1_200_000, 1_200.0) else {
        panic!()
    };
    assert!(c.learned);
    let learned = &t.memory.behaviours[0].dismissal;
    assert!(learned.learned && learned.by == LEARNED_BY && learned.incident_id == c.id);
    // The next evening: suppressed, as the daemon's own dismissal.
    let again = feed_packets(&mut t, &rules, &upload, 10, 100, 80_000.0);
    let [Transition::Suppressed(i)] = again.as_slice() else { panic!("{again:?}") };
    assert_eq!(i.suppressed.as_ref().map(|d| d.incident_id.as_str()), Some(c.id.as_str()));
    // A suppressed incident closing adds nothing; a new peer in it is news.
    let other = feed_packets(&mut t, &rules, &packet("203.0.113.9", 443, 60), 1, 110, 80_010.0);
    assert!(matches!(other.as_slice(), [Transition::Opened(n)] if n.news.is_some()), "{other:?}");
    let Some(Transition::Closed(news, Resolution::Quiet)) = t.tick(&rules, 2, 80_400_000, 80_400.0) else {
        panic!()
    };
    // The news closed quietly too: learned in its turn (two behaviours now).
    assert!(news.learned && t.memory.len() == 2);
    // An analyst confirms it was an attack: what was learned of it goes.
    let confirmed = verdict(&t, Verdict::Confirmed);
    let Ok(Applied::Confirmed(Transition::Reviewed(r))) =
        t.feedback(&confirmed, 80_030.0, 60, &rules.memory, 2)
    else {
        panic!()
    };
    assert!(!r.learned && t.memory.find(&news.id).is_none() && t.memory.len() == 1);
    // The first incident is long gone (another closed since): a confirmed verdict on it
    // still makes the device forget what it learned of it.
    let first = Feedback { incident_id: c.id.clone(), ..confirmed.clone() };
    assert_eq!(t.feedback(&first, 90_000.0, 60, &rules.memory, 2), Ok(Applied::Unlearned));
    assert!(t.memory.is_empty());
    let unknown = t.feedback(&first, 90_001.0, 60, &rules.memory, 2);
    assert!(matches!(unknown, Err(FeedbackError::UnknownIncident { .. })), "{unknown:?}");

    // Rule off: nothing learned.
    let off = IncidentRules { memory: MemoryRules { learn_quiet: false, ..memory }, ..rules };
    let mut t = IncidentTracker::default();
    feed_packets(&mut t, &off, &upload, 10, 0, 1_000.0);
    let Some(Transition::Closed(c, _)) = t.tick(&off, 2, 1_200_000, 1_200.0) else { panic!() };
    assert!(!c.learned && t.memory.is_empty());
}

/// Anomalous records of `packets` in turn, one per second of device time from `t0`.
fn feed_each(
    t: &mut IncidentTracker,
    rules: &IncidentRules,
    packets: &[Context],
    first: i64,
    t0: f64,
) -> Vec<Transition> {
    let mut out = Vec::new();
    for (i, c) in packets.iter().enumerate() {
        out.extend(feed_packets(t, rules, c, 1, first + i as i64, t0 + i as f64));
    }
    out
}

/// What analysts dismiss is remembered; nothing is learned without them.
fn remembering() -> IncidentRules {
    let memory = MemoryRules {
        remember_ms: 200_000_000,
        volume_factor: 3.0,
        learn_quiet: false,
        learned_ms: 0,
        learning_ms: 0,
    };
    IncidentRules { memory, keep_records: 2, ..RULES }
}

/// Learning on, as deployed: what closes quietly unanswered is learned for a day.
fn learning() -> IncidentRules {
    let memory = MemoryRules {
        remember_ms: 2_592_000_000,
        volume_factor: 3.0,
        learn_quiet: true,
        learned_ms: 86_400_000,
        learning_ms: 0,
    };
    IncidentRules { memory, keep_records: 2, ..RULES }
}

/// A new device's first hour: what the model raises is held and learned as it
/// closes; a return after the hour is suppressed as learned; a scan in the hour is
/// raised at the record that makes it one; after the hour the model raises again.
#[test]
fn the_learning_period_holds_and_learns_but_never_an_attacks_footprint() {
    let rules =
        IncidentRules { memory: MemoryRules { learning_ms: 3_600_000, ..learning().memory }, ..learning() };
    let upload = packet("52.1.2.3", 443, 1_000);
    let mut t = IncidentTracker::default();
    let held = feed_packets(&mut t, &rules, &upload, 10, 0, 1_000.0);
    let [Transition::Suppressed(i)] = held.as_slice() else { panic!("{held:?}") };
    let hold = i.suppressed.as_ref().unwrap();
    assert_eq!(
        (hold.incident_id.as_str(), hold.by.as_str(), hold.note.as_str()),
        (i.id.as_str(), LEARNED_BY, LEARNING_NOTE)
    );
    assert_eq!(hold.expires_at, Some(4_600.0), "the hour from the first judged record");
    let Some(Transition::Closed(c, Resolution::Quiet)) = t.tick(&rules, 2, 1_100_000, 1_100.0) else {
        panic!()
    };
    assert!(c.learned && t.memory.find(&c.id).is_some_and(|b| b.dismissal.note == LEARNING_NOTE));
    // Its return hours later, the hour long over: suppressed as what was learned.
    let back = feed_packets(&mut t, &rules, &upload, 10, 100, 50_000.0);
    let [Transition::Suppressed(s)] = back.as_slice() else { panic!("{back:?}") };
    assert_eq!(s.suppressed.as_ref().map(|d| d.incident_id.as_str()), Some(c.id.as_str()));
    // A scan of the internet in the hour (a local host would be a footprint at
    // once), its first packets held: raised at its eighth host.
    let mut t = IncidentTracker::default();
    let mut out = Vec::new();
    for h in 1..=12u8 {
        let (c, at) = (Context::outbound(&format!("52.9.9.{h}"), 23, 6, 0x02, 60), 1_000.0 + f64::from(h));
        let s = source(i64::from(h));
        let d = Decision {
            anomalous: true,
            posterior: 0.1,
            prior: 0.7,
            ts: at,
            source: &s,
            features: &[1.0, 2.0],
            context: Some(&c),
            judged: true,
        };
        out.extend(t.observe("cam", d, &rules, None, &[], (at * 1000.0) as u64, at));
    }
    let [Transition::Suppressed(_), Transition::Opened(news)] = out.as_slice() else { panic!("{out:?}") };
    let why = &news.news.as_ref().unwrap().why;
    assert!(
        why.starts_with("in the device's learning period, but it shows what is never learned: a scan"),
        "{why}"
    );
    // After the hour, the model's incident is raised.
    let mut t = IncidentTracker::default();
    feed_packets(&mut t, &rules, &packet("52.1.2.3", 80, 60), 1, 0, 1_000.0);
    let later = feed_packets(&mut t, &rules, &upload, 10, 10, 5_000.0);
    assert!(matches!(later.as_slice(), [Transition::Opened(_)]), "{later:?}");
    // A snapshot from before learning periods: long over.
    let old: IncidentTracker = serde_json::from_str(
        &serde_json::to_string(&IncidentTracker::default()).unwrap().replace(r#","learning_until":null"#, ""),
    )
    .unwrap();
    assert_eq!(old.learning_until, Some(0.0));
}

/// Closed quietly at `at` (device seconds) of the tracker's open incident.
fn close_quietly(t: &mut IncidentTracker, rules: &IncidentRules, at: f64) -> Incident {
    match t.tick(rules, 2, (at * 1000.0) as u64, at) {
        Some(Transition::Closed(c, Resolution::Quiet)) => c,
        other => panic!("{other:?}"),
    }
}

/// A scan, connection attempts on one service and traffic with a local host the
/// device's normal traffic never had close quietly unanswered and are not learned,
/// saying why; each comes back as an incident of its own.
#[test]
fn a_learned_scan_is_impossible_and_its_second_wave_is_raised() {
    let rules = learning();
    let scan: Vec<Context> =
        (1..=10).map(|h| Context::outbound(&format!("52.0.0.{h}"), 23, 6, 0x02, 60)).collect();
    let sweep: Vec<Context> =
        (1..=10).map(|h| Context::arp_request(&format!("10.0.0.{}", 100 + h))).collect();
    let guesses: Vec<Context> = (0..12).map(|_| Context::outbound("52.0.0.9", 22, 6, 0x02, 74)).collect();
    let neighbour: Vec<Context> =
        (0..6).map(|_| Context::outbound("10.0.0.77", 8080, 6, 0x18, 400)).collect();
    for (name, wave, kind) in [
        ("a TCP scan", &scan, "scan"),
        ("an ARP sweep", &sweep, "scan"),
        ("a password guesser", &guesses, "repeated_attempts"),
        ("a new neighbour", &neighbour, "new_local_peer"),
    ] {
        let mut t = IncidentTracker::default();
        // A day of normal traffic with its gateway: its history.
        let gateway = Context::outbound("10.0.0.1", 53, 17, 0, 80);
        for i in 0..5 {
            let s = source(i);
            let d = Decision {
                anomalous: false,
                posterior: 0.9,
                prior: 0.7,
                ts: 500.0,
                source: &s,
                features: &[1.0, 2.0],
                context: Some(&gateway),
                judged: true,
            };
            t.observe("cam", d, &rules, None, &[], 500_000, 500.0);
        }
        let first = feed_each(&mut t, &rules, wave, 10, 1_000.0);
        // Raised, and told at once when its footprint shows after its first record.
        assert!(matches!(first.first(), Some(Transition::Opened(_))), "{name}: {first:?}");
        assert!(
            first[1..].iter().all(|t| matches!(t, Transition::Updated(i) if i.news.is_some())),
            "{name}: {first:?}"
        );
        let c = close_quietly(&mut t, &rules, 1_200.0);
        let footprint = serde_json::to_value(&c.footprint).unwrap();
        assert!(!c.learned && t.memory.is_empty(), "{name} learned: {footprint}");
        assert_eq!(footprint["kind"], kind, "{name}");
        let words = IncidentReport::of("cam", &c, Some("quiet"), "v", Vec::new(), 1_200.0).summary;
        assert!(words.contains("never learned without a verdict: it showed"), "{name}: {words}");
        // The next day, nobody having answered: raised again.
        let second = feed_each(&mut t, &rules, wave, 100, 90_000.0);
        assert!(
            matches!(second.first(), Some(Transition::Opened(i)) if i.suppressed.is_none()),
            "{name}: {second:?}"
        );
    }
}

/// What the daemon learned holds a day after its last return: a return it suppresses
/// renews it (the suppression says until when); one that stops coming back lapses and
/// is raised again.
#[test]
fn a_learned_upload_expires_unless_seen_again() {
    let rules = learning();
    let upload = packet("52.1.2.3", 443, 1_000);
    let mut t = IncidentTracker::default();
    feed_packets(&mut t, &rules, &upload, 10, 0, 1_000.0);
    let learned = close_quietly(&mut t, &rules, 1_200.0);
    assert!(learned.learned);
    let until = t.memory.behaviours[0].dismissal.expires_at.expect("an expiry");
    assert!((until - (1_019.0 + 86_400.0)).abs() < 1e-6, "closed at 1,019, held a day: {until}");
    // Twenty hours later: suppressed, and renewed from then.
    let again = feed_packets(&mut t, &rules, &upload, 10, 100, 73_000.0);
    let [Transition::Suppressed(s)] = again.as_slice() else { panic!("{again:?}") };
    let renewed = t.memory.behaviours[0].dismissal.expires_at.unwrap();
    assert!((renewed - (73_002.0 + 86_400.0)).abs() < 1e-6, "renewed at its return: {renewed}");
    let words = IncidentReport::of("cam", s, None, "v", Vec::new(), 73_002.0).summary;
    assert!(words.contains("(learned until 1970-01-02T20:16:42Z unless seen again)"), "{words}");
    close_quietly(&mut t, &rules, 73_200.0);
    // More than a day after that return: it lapsed, and the upload is raised.
    let lapsed = feed_packets(&mut t, &rules, &upload, 10, 200, 73_002.0 + 86_401.0);
    assert!(matches!(lapsed.as_slice(), [Transition::Opened(i)] if i.suppressed.is_none()), "{lapsed:?}");
    assert!(t.memory.find(&learned.id).is_none());
}

/// A return of a learned SSH session that starts guessing passwords on the same peer
/// and port is news at the tenth attempt: the daemon's learning quiets no attack. Ten
/// connections to a cloud's 443/tcp are its routine, no guesser's.
#[test]
fn a_learned_behaviour_s_return_that_guesses_passwords_is_news() {
    let rules = learning();
    let upload = packet("52.1.2.3", 22, 1_000);
    let mut t = IncidentTracker::default();
    feed_packets(&mut t, &rules, &upload, 10, 0, 1_000.0);
    let learned = close_quietly(&mut t, &rules, 1_200.0);
    let guesses = Context { tcp_flags: 0x02, bytes: 74, ..upload };
    let back = feed_packets(&mut t, &rules, &guesses, 12, 100, 50_000.0);
    let [Transition::Suppressed(_), Transition::Opened(news)] = back.as_slice() else { panic!("{back:?}") };
    let n = news.news.as_ref().expect("news");
    assert_eq!(n.by.offset, 100 + 11, "the tenth connection attempt after the two before it opened");
    assert!(
        n.why.contains(&learned.id) && n.why.contains("10 connection attempts to 52.1.2.3 on 22/tcp"),
        "{}",
        n.why
    );
    assert!(news.suppressed.is_none());
    let mut t = IncidentTracker::default();
    let tls = packet("52.1.2.3", 443, 1_000);
    feed_packets(&mut t, &rules, &tls, 10, 0, 1_000.0);
    close_quietly(&mut t, &rules, 1_200.0);
    let connections = Context { tcp_flags: 0x02, bytes: 74, ..tls };
    let back = feed_packets(&mut t, &rules, &connections, 30, 100, 50_000.0);
    assert!(matches!(back.as_slice(), [Transition::Suppressed(_)]), "{back:?}");
}

/// A cloud answered by two addresses, each dismissed once: a return on one that moves
/// to the other is the device's, not news; a third address is.
#[test]
fn news_is_judged_against_everything_the_device_remembers() {
    let rules = remembering();
    let (a, b) = (packet("52.1.2.3", 443, 1_000), packet("3.4.5.6", 443, 1_000));
    let mut t = IncidentTracker::default();
    for (i, upload) in [&a, &b].into_iter().enumerate() {
        let first = 100 * i as i64;
        feed_packets(&mut t, &rules, upload, 10, first, 1_000.0 + 1_000.0 * i as f64);
        let fb = verdict(&t, Verdict::FalsePositive);
        assert!(t.feedback(&fb, 1_020.0 + 1_000.0 * i as f64, 60, &rules.memory, 2).is_ok());
    }
    assert_eq!(t.memory.len(), 2);
    let back = feed_packets(&mut t, &rules, &b, 5, 1_000, 80_000.0);
    assert!(matches!(back.as_slice(), [Transition::Suppressed(_)]), "{back:?}");
    let moved = feed_packets(&mut t, &rules, &a, 5, 1_005, 80_005.0);
    assert!(moved.is_empty(), "the other address, dismissed too: {moved:?}");
    let third = feed_packets(&mut t, &rules, &packet("8.8.4.4", 443, 1_000), 1, 1_010, 80_010.0);
    let [Transition::Opened(news)] = third.as_slice() else { panic!("{third:?}") };
    assert!(news.news.as_ref().unwrap().why.contains("a new peer, 8.8.4.4"), "{news:?}");
}

#[test]
fn without_memory_a_dismissed_behaviour_opens_again() {
    let upload = packet("52.1.2.3", 443, 1_000);
    let mut t = IncidentTracker::default();
    feed_packets(&mut t, &RULES, &upload, 10, 0, 1_000.0);
    let fb = verdict(&t, Verdict::FalsePositive);
    assert!(t.feedback(&fb, 1_010.0, 60, &RULES.memory, 2).is_ok());
    assert!(t.memory.is_empty());
    let again = feed_packets(&mut t, &RULES, &upload, 10, 100, 80_000.0);
    assert!(matches!(again.as_slice(), [Transition::Opened(_)]), "{again:?}");
}

/// The looks on, as deployed.
fn looking() -> IncidentRules {
    let fan_out = FanOutRules::DEFAULTS;
    IncidentRules { open_k: 1, open_n: 1, fan_out, ..learning() }
}

/// A password guesser that starts while an upload's incident (no evidence: the
/// device's routine, maybe) is open gets its own incident; the upload's ends there,
/// unlearned and not to be reopened.
#[test]
fn an_attack_inside_an_open_incident_without_evidence_is_an_incident_of_its_own() {
    let rules =
        IncidentRules { memory: MemoryRules { learning_ms: 3_600_000, ..learning().memory }, ..looking() };
    let mut t = IncidentTracker::default();
    // Its cloud, in its learning period.
    let cloud = packet("52.1.2.3", 443, 900);
    let s = source(0);
    let d = Decision {
        anomalous: false,
        posterior: 0.9,
        prior: 0.99,
        ts: 0.0,
        source: &s,
        features: &[1.0, 2.0],
        context: Some(&cloud),
        judged: true,
    };
    assert!(t.observe("cam", d, &rules, None, &[], 0, 0.0).is_empty());
    let opened = feed_packets(&mut t, &rules, &cloud, 3, 1, 10_000.0);
    let [Transition::Opened(upload)] = opened.as_slice() else { panic!("{opened:?}") };
    let guesses: Vec<Context> = (0..10).map(|_| Context::outbound("52.9.9.9", 22, 6, 0x02, 74)).collect();
    let out = feed_each(&mut t, &rules, &guesses, 10, 10_010.0);
    // Its first connection is to a host the device never used: a new incident there;
    // the look's finding at the fifth (a login service it never used) is told in it.
    let [Transition::Closed(ended, Resolution::Quiet), Transition::Opened(guesser), Transition::Updated(told), ..] =
        out.as_slice()
    else {
        panic!("{out:?}")
    };
    assert_eq!(ended.id, upload.id);
    assert!(!ended.learned && t.memory.is_empty(), "an incident cut by an attack is not learned");
    assert_eq!(guesser.footprint, Some(Footprint::Stranger { peer: "52.9.9.9".into() }));
    assert_eq!(guesser.opened_by.offset, 10);
    assert!(told.id == guesser.id && told.news.as_ref().is_some_and(|n| n.why.starts_with("login guessing")));
    assert_eq!(told.look.as_ref().map(|l| l.look), Some(RaisedBy::LoginGuessing), "the look's now");
    assert_ne!(guesser.id, upload.id);
    assert!(!t.closed_quietly, "the upload's incident is not reopened");
    let closed = close_quietly(&mut t, &rules, 20_000.0);
    assert!(!closed.learned && t.memory.is_empty(), "the guesser's is never learned");
}

/// A device's cloud, looked up by name in its learning period, is its own after it at
/// any address; a beacon to a host it never used is raised at its tenth check-in, and
/// nothing of it is learned.
#[test]
fn a_beacon_to_a_stranger_is_raised_and_the_cloud_by_name_is_not() {
    let rules =
        IncidentRules { memory: MemoryRules { learning_ms: 3_600_000, ..learning().memory }, ..looking() };
    let named = |peer: &str, name: &str, flags: u8| Context {
        peer_name: Some(crate::traffic::peer_names::PeerName::new(name).unwrap()),
        tcp_flags: flags,
        ..packet(peer, 443, 200)
    };
    let mut t = IncidentTracker::default();
    let normal = |t: &mut IncidentTracker, c: &Context, offset: i64, at: f64| {
        let s = source(offset);
        let d = Decision {
            anomalous: false,
            posterior: 0.9,
            prior: 0.99,
            ts: at,
            source: &s,
            features: &[1.0, 2.0],
            context: Some(c),
            judged: true,
        };
        t.observe("cam", d, &rules, None, &[], (at * 1000.0) as u64, at)
    };
    assert!(normal(&mut t, &named("52.0.0.1", "cloud.example.com", 0x18), 0, 1_000.0).is_empty());
    let mut out = Vec::new();
    for i in 0..20 {
        let at = 10_000.0 + f64::from(i) * 60.0;
        out.extend(normal(&mut t, &named("3.3.3.3", "cloud.example.com", 0x02), 1 + 2 * i64::from(i), at));
        out.extend(normal(
            &mut t,
            &named("198.51.100.9", "c2.example.net", 0x02),
            2 + 2 * i64::from(i),
            at + 1.0,
        ));
    }
    let [Transition::Opened(beacon)] = out.as_slice() else { panic!("{out:?}") };
    let look = beacon.look.as_ref().expect("a look's");
    assert_eq!(look.look, RaisedBy::DataToStranger);
    assert!(
        look.why.contains("c2.example.net (198.51.100.9)") && look.why.contains("10 exchanges"),
        "{}",
        look.why
    );
    assert_eq!(look.by.offset, 2 + 2 * 9, "its tenth check-in");
    close_quietly(&mut t, &rules, 20_000.0);
    assert!(t.memory.is_empty() && t.history.remote.known_count() == 1, "only its cloud is known");
}
