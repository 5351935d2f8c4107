use super::*;
use crate::monitor::devices::snapshot::Part;

#[test]
fn device_table_bootstraps_evicts_and_schedules() {
    let sizes = WindowSizes { positive: 2, unlabeled: 4, bootstrap_positives: 1, ..WindowSizes::default() };
    let mut t = DeviceTable::new(1, sizes, 2);
    t.observe("a", &[1.0], false, &at(0, 0), 0.0, 0); // bootstrap: first record is known-normal
    t.observe("a", &[2.0], false, &at(0, 1), 0.0, 1);
    assert_eq!(t.get("a").unwrap().positive.len(), 1);
    assert_eq!(t.get("a").unwrap().unlabeled.len(), 2);
    t.observe("b", &[3.0], false, &at(0, 2), 0.0, 2);
    t.observe("a", &[4.0], true, &at(0, 3), 0.0, 3); // a is now the most recent
    assert_eq!(t.observe("c", &[5.0], false, &at(0, 4), 0.0, 4).evicted, 1, "cap of 2: one eviction");
    assert!(
        t.get("b").is_some_and(|b| b.idle && b.positive.len() == 1),
        "least recently seen: idle, its known-normal record kept"
    );
    assert!(t.get("a").is_some());
    let due = t.due_for_adaptation(1);
    assert!(due.contains(&"a".to_string()) && due.contains(&"c".to_string()), "{due:?}");
    t.take_windows("a");
    assert!(!t.due_for_adaptation(1).contains(&"a".to_string()));
    assert_eq!(t.evict_idle(1000, 500).len(), 2);
}

#[test]
fn an_evicted_device_with_an_open_incident_is_kept_until_taken() {
    let sizes = WindowSizes { positive: 2, unlabeled: 4, bootstrap_positives: 1, ..WindowSizes::default() };
    let mut t = DeviceTable::new(1, sizes, 1);
    t.observe("quiet", &[1.0], true, &at(0, 0), 0.0, 0);
    t.observe("alarmed", &[2.0], true, &at(0, 1), 0.0, 1); // evicts "quiet": no incident
    assert!(t.take_evicted_with_incidents().is_empty());
    open_incident(&mut t, "alarmed");
    t.observe("new", &[3.0], true, &at(0, 2), 0.0, 2); // evicts "alarmed"
    let kept = t.take_evicted_with_incidents();
    assert_eq!(kept.len(), 1);
    assert_eq!(kept[0].0, "alarmed");
    assert_eq!(kept[0].1.positive.len(), 1, "with its windows, to explain the incident");
    assert!(t.take_evicted_with_incidents().is_empty(), "taken once");
    open_incident(&mut t, "new");
    assert_eq!(t.evict_idle(1000, 500), ["new"]);
    assert_eq!(t.take_evicted_with_incidents().len(), 1, "idle eviction too");
    t.observe("moved", &[4.0], true, &at(0, 3), 0.0, 3);
    open_incident(&mut t, "moved");
    t.remove("moved"); // revoked: the snapshot carries the incident to its new owner
    assert!(t.take_evicted_with_incidents().is_empty());
}

/// A verdict is the device's state: it is snapshotted at the next round even if the
/// device sends nothing more (a restart would otherwise forget the dismissal).
#[test]
fn a_verdict_marks_the_device_for_its_next_snapshot() {
    use crate::monitor::incidents::{Feedback, Verdict};
    let sizes = WindowSizes { positive: 2, unlabeled: 4, bootstrap_positives: 1, ..WindowSizes::default() };
    let mut t = DeviceTable::new(1, sizes, 10);
    t.observe("cam", &[1.0], true, &at(0, 0), 0.0, 0);
    open_incident(&mut t, "cam");
    t.devices.get_mut("cam").unwrap().unsnapshotted = false;
    let id = t.get("cam").unwrap().incidents.open().unwrap().id.clone();
    let fb = Feedback {
        device: "cam".into(),
        incident_id: id,
        verdict: Verdict::FalsePositive,
        by: "ana".into(),
        note: String::new(),
        id: String::new(),
        at: 0.0,
        from: String::new(),
    };
    let memory = MemoryRules {
        remember_ms: 1_000,
        volume_factor: 3.0,
        learn_quiet: false,
        learned_ms: 0,
        learning_ms: 0,
    };
    t.apply_feedback(&fb, 1.0, 60, &memory).expect("dismissed");
    let d = t.get("cam").unwrap();
    assert!(d.unsnapshotted && d.incidents.memory().len() == 1);
}

/// A device silent for the idle timeout keeps its known-normal records (and its
/// snapshot is written again, without the unlabeled window); its unlabeled window and
/// classifier go, and it is adapted again only once new records arrive. One that
/// was never onboarded is forgotten.
#[test]
fn an_idle_device_keeps_its_known_normal_records() {
    let sizes = WindowSizes { positive: 3, unlabeled: 4, bootstrap_positives: 0, ..WindowSizes::default() };
    let mut t = DeviceTable::new(1, sizes, 10);
    t.observe("cam", &[1.0], true, &at(0, 0), 0.0, 0);
    t.observe("cam", &[2.0], false, &at(0, 1), 0.0, 0);
    t.observe("plug", &[3.0], false, &at(0, 2), 0.0, 0);
    t.take_windows("cam");
    t.install("cam", 1, classifier(0.9));
    t.devices.get_mut("cam").unwrap().unsnapshotted = false;
    let mut idle = t.evict_idle(1000, 500);
    idle.sort();
    assert_eq!(idle, ["cam", "plug"]);
    let cam = t.get("cam").expect("an onboarded device stays");
    assert_eq!(cam.positive.rows(), [1.0], "its known-normal records kept");
    assert!(cam.unlabeled.is_empty() && cam.unlabeled.heap_bytes() == 0, "its unlabeled window freed");
    assert!(cam.classifier.is_none() && cam.idle && cam.unsnapshotted);
    assert!(t.get("plug").is_none(), "never onboarded: forgotten");
    assert_eq!(t.take_forgotten(), [("plug".to_string(), 0, None)], "and its snapshot with it");
    assert!(t.evict_idle(5000, 500).is_empty(), "idle once");
    t.invalidate_states(); // a model reload
    assert!(t.due_for_adaptation(1).is_empty(), "nothing to adapt on while idle");
    t.observe("cam", &[4.0], false, &at(0, 3), 0.0, 6000);
    let cam = t.get("cam").unwrap();
    assert!(!cam.idle && cam.unlabeled.len() == 1 && cam.positive.len() == 1);
    assert_eq!(t.due_for_adaptation(1), ["cam"]);
}

#[test]
fn evicted_devices_are_forgotten_unless_tracked_again_and_revoked_ones_are_not() {
    let sizes = WindowSizes { positive: 2, unlabeled: 4, bootstrap_positives: 0, ..WindowSizes::default() };
    let mut t = DeviceTable::new(1, sizes, 1);
    t.observe("a", &[1.0], false, &at(3, 0), 0.0, 0);
    t.observe("b", &[2.0], false, &at(4, 1), 0.0, 1); // evicts a (capacity)
    assert_eq!(t.take_forgotten(), [("a".to_string(), 3, None)]);
    assert!(t.take_forgotten().is_empty(), "taken once");
    t.observe("a", &[3.0], false, &at(3, 2), 0.0, 2); // evicts b, a is back
    t.observe("b", &[4.0], false, &at(4, 3), 0.0, 3); // evicts a, b is back
    assert_eq!(t.take_forgotten(), [("a".to_string(), 3, None)], "b is tracked again: its snapshot stays");
    t.remove("b"); // revoked: its snapshot is its new owner's to restore
    assert!(t.take_forgotten().is_empty());
    t.forget_again(("c".into(), 0, None));
    assert_eq!(t.take_forgotten(), [("c".to_string(), 0, None)]);
}

/// `max_tracked` bounds the active devices. The least recently seen one with
/// known-normal records goes idle to make room (its unlabeled window and classifier
/// freed, its known-normal records and snapshot kept) and comes back when it sends;
/// idle ones do not count.
#[test]
fn at_capacity_an_onboarded_device_goes_idle_and_keeps_its_known_normal_records() {
    let sizes = WindowSizes { positive: 2, unlabeled: 4, bootstrap_positives: 0, ..WindowSizes::default() };
    let mut t = DeviceTable::new(1, sizes, 2);
    t.observe("cam", &[1.0], true, &at(0, 0), 0.0, 0);
    t.observe("plug", &[2.0], true, &at(0, 1), 0.0, 1);
    let made_room = t.observe("lock", &[3.0], true, &at(0, 2), 0.0, 2);
    assert_eq!(made_room.evicted, 1);
    let cam = t.get("cam").expect("kept");
    assert!(cam.idle && cam.unlabeled.is_empty() && cam.positive.rows() == [1.0] && cam.unsnapshotted);
    assert!(t.take_forgotten().is_empty(), "its snapshot stays");
    assert_eq!(t.len(), 3, "two active, one idle");
    // Back: the least recently seen active one (plug) goes idle in its place.
    assert_eq!(t.observe("cam", &[4.0], false, &at(0, 3), 0.0, 3).evicted, 1);
    assert!(!t.get("cam").unwrap().idle && t.get("plug").unwrap().idle && !t.get("lock").unwrap().idle);
    assert_eq!(t.get("cam").unwrap().positive.rows(), [1.0]);
    // A device never onboarded is forgotten instead.
    t.observe("tv", &[5.0], false, &at(0, 4), 0.0, 4); // lock goes idle
    t.observe("plug", &[6.0], false, &at(0, 5), 0.0, 5); // cam goes idle
    t.observe("lock", &[7.0], false, &at(0, 6), 0.0, 6); // tv is forgotten
    assert!(t.get("tv").is_none());
    assert_eq!(t.take_forgotten(), [("tv".to_string(), 0, None)]);
    assert_eq!(t.len(), 3);
}

/// A kind's members: one onboarded shares its rows; a new sibling with none of its
/// own is offered them (so it can be scored at once) after its own, as its window has
/// room; one forgotten, or gone to another kind, withdraws what it shared.
#[test]
fn a_kinds_members_are_offered_what_their_siblings_were_onboarded_on() {
    let sizes = WindowSizes { positive: 3, unlabeled: 8, bootstrap_positives: 0, ..WindowSizes::default() };
    let mut t = DeviceTable::new(1, sizes, 10);
    t.set_time(100.0);
    t.observe("cam-a", &[0.0], false, &at(0, 0), 0.0, 0);
    t.start_onboarding("cam-a", 3600.0, Some("cam"), "ops".into(), "".into(), 100.0).unwrap();
    assert!(t.start_onboarding("cam-a", 60.0, Some("a b"), "ops".into(), "".into(), 100.0).is_err());
    for i in 1..=2 {
        t.observe("cam-a", &[i as f32], false, &at(0, i), 0.0, 0);
    }
    assert!(t.take_shares().is_empty(), "nothing shared until the onboarding ends");
    t.end_onboarding_due(0);
    assert!(t.take_onboarded().is_empty());
    t.devices.get_mut("cam-a").unwrap().onboarding.as_mut().unwrap().until = 0.0;
    t.end_onboarding_due(0);
    assert_eq!(t.take_onboarded().len(), 1);
    let shares = t.take_shares();
    assert_eq!(shares.len(), 1);
    assert_eq!((shares[0].key().as_str(), &shares[0].normal[..]), ("cam/cam-a", &[1.0, 2.0][..]));

    // A sibling with no known-normal row of its own: unscored until its kind offers.
    t.observe("cam-b", &[9.0], false, &at(0, 3), 0.0, 0);
    t.join_kind("cam-b", "cam", 100.0).unwrap();
    assert!(!t.get("cam-b").unwrap().adaptable());
    t.apply_share(shares[0].clone(), &MemoryRules::OFF).unwrap();
    assert!(t.get("cam-b").unwrap().awaits_first_classifier(), "offered rows are something to adapt on");
    assert!(t.get("cam-a").unwrap().offered.is_none(), "never offered its own");
    // Its own rows first, then the offered ones its window has room for.
    t.devices.get_mut("cam-b").unwrap().positive.push(&[7.0]);
    let job = t.take_windows("cam-b").unwrap();
    assert_eq!(&job.positive[..], &[7.0, 2.0, 1.0]);
    // Gone to another kind: what it shared is withdrawn from the first.
    t.join_kind("cam-a", "plug", 100.0).unwrap();
    let moved = t.take_shares();
    let keys: Vec<(String, bool)> = moved.iter().map(|s| (s.key(), s.is_empty())).collect();
    assert_eq!(keys, [("cam/cam-a".into(), true), ("plug/cam-a".into(), false)], "withdrawn, then shared");
    t.apply_share(moved[0].clone(), &MemoryRules::OFF).unwrap();
    assert!(t.get("cam-b").unwrap().offered.is_none() && t.kind_counts().is_empty());
    t.apply_share(moved[1].clone(), &MemoryRules::OFF).unwrap();
    assert_eq!(t.kind_counts(), [("plug".to_string(), 1)]);
    // Forgotten: withdrawn from its kind.
    t.forget("cam-b");
    assert_eq!(t.take_shares()[0].key(), "cam/cam-b");
    // Records labeled normal by a trusted producer are accepted rows too: one share
    // however many arrive; a bootstrap's first records are not.
    t.observe("cam-c", &[5.0], false, &at(0, 4), 0.0, 0);
    t.join_kind("cam-c", "cam", 100.0).unwrap();
    assert!(t.take_shares().is_empty(), "nothing accepted on it yet");
    t.observe("cam-c", &[6.0], true, &at(0, 5), 0.0, 0);
    t.observe("cam-c", &[7.0], true, &at(0, 6), 0.0, 0);
    let labeled = t.take_shares();
    assert_eq!((labeled.len(), &labeled[0].normal[..]), (1, &[6.0, 7.0][..]));
}

/// An operator's onboarding: refused for what cannot be onboarded; while it runs the
/// device's records are known-normal whatever their label, and its decisions open
/// no incident; it ends on time even for a silent device, once, with its count.
#[test]
fn onboarding_takes_a_span_of_records_and_ends_on_time() {
    use crate::monitor::clock::Now;
    use crate::monitor::incidents::Decision;
    let sizes = WindowSizes { positive: 4, unlabeled: 8, bootstrap_positives: 0, ..WindowSizes::default() };
    let mut t = DeviceTable::new(1, sizes, 10);
    let now = crate::wall_clock::unix_now();
    t.set_time(now);
    let start = |t: &mut DeviceTable, id: &str, span: f64| {
        t.start_onboarding(id, span, None, "ops".into(), "".into(), now)
    };
    assert!(start(&mut t, "cam", 60.0).unwrap_err().contains("unknown device cam"));
    t.observe("cam", &[0.0], false, &at(0, 0), 0.0, 0);
    assert!(start(&mut t, "cam", 0.0).unwrap_err().contains("more than 0 s"));
    assert!(start(&mut t, "cam", -5.0).is_err() && start(&mut t, "cam", f64::NAN).is_err());
    assert_eq!(start(&mut t, "cam", 3600.0).unwrap().until, now + 3600.0);
    assert!(start(&mut t, "cam", 60.0).unwrap_err().contains("cam is already being onboarded"));
    let taken: Vec<bool> =
        (1..=6).map(|i| t.observe("cam", &[i as f32], false, &at(0, i), 0.0, 0).taken_as_normal).collect();
    assert_eq!(taken, [true; 6]);
    let cam = t.get("cam").unwrap();
    assert_eq!((cam.positive.len(), cam.onboarding.as_ref().unwrap().records), (4, 6));
    let rules = one_anomaly_opens();
    let d = Decision {
        anomalous: true,
        posterior: 0.1,
        prior: 0.7,
        ts: 0.0,
        source: &at(0, 6),
        features: &[6.0],
        context: None,
        judged: true,
    };
    assert!(t.observe_decision("cam", d, &rules, Now::at(0, now)).is_empty(), "no incident while onboarding");
    t.set_time(now + 10.0);
    t.end_onboarding_due(0);
    assert!(t.take_onboarded().is_empty(), "not yet");
    t.set_time(now + 3600.0);
    t.end_onboarding_due(0); // silent since
    let ended = t.take_onboarded();
    assert_eq!(ended.len(), 1);
    assert_eq!((ended[0].0.as_str(), ended[0].1.records, ended[0].2), ("cam", 6, 4));
    let cam = t.get("cam").unwrap();
    assert!(cam.onboarding.is_none() && cam.onboarded.as_ref().is_some_and(|o| o.by == "ops"));
    t.set_time(now + 7200.0);
    t.end_onboarding_due(0);
    assert!(t.take_onboarded().is_empty(), "ended once");
    assert!(!t.observe("cam", &[9.0], false, &at(0, 9), 0.0, 0).taken_as_normal, "labels rule again");
}

#[test]
fn an_unmonitored_device_is_reported_once() {
    let sizes = WindowSizes { positive: 2, unlabeled: 4, bootstrap_positives: 0, ..WindowSizes::default() };
    let mut t = DeviceTable::new(1, sizes, 10);
    t.observe("a", &[1.0], false, &at(0, 0), 0.0, 0);
    t.observe("b", &[1.0], true, &at(0, 1), 0.0, 0);
    let reported =
        |t: &mut DeviceTable| t.unmonitored(1000, 500).1.into_iter().map(|r| r.0).collect::<Vec<_>>();
    assert_eq!(reported(&mut t), ["a"]);
    assert!(reported(&mut t).is_empty(), "once (its delivery is retried until acknowledged)");
    assert_eq!(t.unmonitored(1000, 500).0, 1, "still counted");
}

/// Incident rules under which one anomalous decision opens an incident.
fn one_anomaly_opens() -> crate::monitor::incidents::IncidentRules {
    crate::monitor::incidents::IncidentRules {
        open_k: 1,
        open_n: 1,
        update_interval_ms: 1_000,
        quiet_ms: 10_000,
        reopen_ms: 0,
        keep_records: 1,
        memory: crate::monitor::incidents::behaviours::MemoryRules::OFF,
        fan_out: crate::monitor::incidents::fanout::FanOutRules::OFF,
        fleet_ms: 0,
    }
}

fn open_incident(t: &mut DeviceTable, id: &str) {
    use crate::monitor::incidents::Decision;
    let rules = one_anomaly_opens();
    let source = at(0, 99);
    let d = Decision {
        anomalous: true,
        posterior: 0.1,
        prior: 0.7,
        ts: 0.0,
        source: &source,
        features: &[0.0],
        context: None,
        judged: true,
    };
    t.devices.get_mut(id).unwrap().incidents.observe(id, d, &rules, None, &[], 0, 0.0).pop().expect("opened");
    assert!(t.get(id).unwrap().incidents.open().is_some());
}

fn classifier(prior: f32) -> TaskState {
    TaskState { z_p: vec![], z_u: vec![], w: vec![], prior, draws: vec![] }
}

#[test]
fn a_classifier_adapted_on_older_windows_never_replaces_a_newer_one() {
    let sizes = WindowSizes { positive: 2, unlabeled: 4, bootstrap_positives: 1, ..WindowSizes::default() };
    let mut t = DeviceTable::new(1, sizes, 2);
    t.observe("a", &[1.0], true, &at(0, 0), 0.0, 0);
    let older = t.take_windows("a").unwrap();
    t.observe("a", &[2.0], true, &at(0, 1), 0.0, 1);
    let newer = t.take_windows("a").unwrap();
    // The newer job finishes first (an analyst's verdict adapts at once); the older
    // one, still running on the adapter thread, finishes after it.
    assert!(t.install("a", newer.handover, classifier(0.7)));
    assert!(!t.install("a", older.handover, classifier(0.2)), "stale classifier installed");
    assert_eq!(t.get("a").unwrap().classifier.as_ref().unwrap().prior, 0.7);
    // A job handed out before the device went idle cannot land after it.
    let evicted = t.take_windows("a").unwrap();
    assert_eq!(t.evict_idle(1000, 500).len(), 1);
    t.observe("a", &[3.0], true, &at(0, 2), 0.0, 1000);
    assert!(!t.install("a", evicted.handover, classifier(0.3)));
    assert!(t.get("a").unwrap().classifier.is_none());
    let fresh = t.take_windows("a").unwrap();
    assert!(t.install("a", fresh.handover, classifier(0.9)));
    assert!(!t.install("gone", fresh.handover + 1, classifier(0.9)), "untracked device");
}

fn at(partition: i32, offset: i64) -> Source {
    Source::new("in", partition, offset)
}

#[test]
fn redelivered_records_do_not_enter_the_windows_twice() {
    let sizes = WindowSizes { positive: 4, unlabeled: 8, bootstrap_positives: 0, ..WindowSizes::default() };
    let mut t = DeviceTable::new(1, sizes, 10);
    for offset in 0..3 {
        assert!(!t.observe("a", &[offset as f32], offset == 0, &at(0, offset), 0.0, 0).replayed);
    }
    // A restart replays from the last committed offset: 1 and 2 are already in.
    assert!(t.observe("a", &[1.0], false, &at(0, 1), 0.0, 0).replayed);
    assert!(t.observe("a", &[2.0], false, &at(0, 2), 0.0, 0).replayed);
    assert!(!t.observe("a", &[3.0], false, &at(0, 3), 0.0, 0).replayed);
    assert_eq!(t.get("a").unwrap().unlabeled.len(), 4);
    assert_eq!(t.get("a").unwrap().seen, 4);
    // Another partition (the device's key moved) or topic: offsets are not comparable.
    assert!(!t.observe("a", &[9.0], false, &at(1, 0), 0.0, 0).replayed);
    let other_topic = Source::new("other", 1, 0);
    assert!(!t.observe("a", &[9.0], false, &other_topic, 0.0, 0).replayed);
}

/// Members of a kind that raise the same behaviour minutes apart: the first is raised,
/// the second joins it (named by it, not raised), and the verdict on the first answers
/// the second once given on its clock. One raised before the first never joins it.
#[test]
fn a_kinds_members_raising_one_behaviour_form_one_fleet_incident_with_one_verdict() {
    use crate::monitor::incidents::{fleet_note, Decision, Resolution};
    use crate::monitor::incidents::{Feedback, Verdict};
    use crate::traffic::context::Context;
    let sizes = WindowSizes { positive: 2, unlabeled: 4, bootstrap_positives: 0, ..WindowSizes::default() };
    let mut t = DeviceTable::new(1, sizes, 10);
    let memory = MemoryRules { remember_ms: 86_400_000, ..MemoryRules::OFF };
    let rules = IncidentRules { memory, fleet_ms: 600_000, ..one_anomaly_opens() };
    for (i, cam) in ["cam-a", "cam-b", "cam-c"].into_iter().enumerate() {
        t.observe(cam, &[0.0], true, &at(0, i as i64), 0.0, 0);
        t.join_kind(cam, "cam", 900.0).unwrap();
    }
    let upload = Context::outbound("52.1.2.3", 443, 6, 0x18, 900);
    let decide = |t: &mut DeviceTable, cam: &str, offset: i64, ts: f64, c: &Context| {
        let source = at(0, offset);
        let d = Decision {
            anomalous: true,
            posterior: 0.1,
            prior: 0.7,
            ts,
            source: &source,
            features: &[0.0],
            context: Some(c),
            judged: true,
        };
        t.observe_decision(cam, d, &rules, Now::event(ts)).pop()
    };
    let hear = |t: &mut DeviceTable| {
        let shares = t.take_shares();
        shares.into_iter().flat_map(|s| t.apply_share(s, &memory).unwrap()).collect::<Vec<_>>()
    };
    let Some(Transition::Opened(head)) = decide(&mut t, "cam-a", 10, 1000.0, &upload) else {
        panic!("the first member's incident is raised")
    };
    assert!(hear(&mut t).is_empty());
    // Before the head was raised, on its own clock: its own incident.
    assert!(matches!(decide(&mut t, "cam-c", 11, 999.0, &upload), Some(Transition::Opened(_))));
    let Some(Transition::Joined(joined)) = decide(&mut t, "cam-b", 12, 1005.0, &upload) else {
        panic!("the second member's incident of the same behaviour joins the first")
    };
    assert_eq!(
        joined.fleet.as_ref().map(|f| (f.incident_id.as_str(), f.device.as_str())),
        Some((head.id.as_str(), "cam-a"))
    );
    // The fleet incident hears of its member: an update that names it.
    let heard = hear(&mut t);
    let named = heard.iter().find_map(|(d, t)| match t {
        Transition::Updated(i) if d == "cam-a" => Some(i.members.clone()),
        _ => None,
    });
    assert_eq!(named, Some(BTreeSet::from(["cam-b".to_string()])));
    // The analyst dismisses the fleet incident at 1,100 s.
    let fb = Feedback {
        device: "cam-a".into(),
        incident_id: head.id.clone(),
        verdict: Verdict::FalsePositive,
        by: "ana".into(),
        note: String::new(),
        id: String::new(),
        at: 0.0,
        from: String::new(),
    };
    t.apply_feedback(&fb, 1100.0, 3600, &memory).unwrap();
    t.set_time(1050.0);
    let heard = hear(&mut t);
    assert!(!heard.iter().any(|(d, _)| d == "cam-b"), "not yet given on cam-b's clock: {heard:?}");
    let answered = t.tick_incident("cam-b", &rules, Now::event(1100.0));
    let Some(Transition::Closed(i, Resolution::Dismissed)) = answered.first() else {
        panic!("the verdict on the fleet incident answers its member: {answered:?}")
    };
    assert_eq!(i.id, joined.id);
    assert_eq!(
        (i.feedback[0].by.as_str(), i.feedback[0].note.clone()),
        ("ana", fleet_note(joined.fleet.as_ref().unwrap()))
    );
    // Its behaviour is the member's own to remember now; cam-c, raised on its own, is not answered.
    assert!(t.get("cam-b").unwrap().incidents.memory().find(&joined.id).is_some());
    let own = t.tick_incident("cam-c", &rules, Now::event(1100.0));
    assert!(matches!(&own[..], [Transition::Closed(_, Resolution::Quiet)]), "{own:?}");
}

/// On the event clock a device's time and adaptation points travel in its snapshot: a
/// restart goes on with the same points.
#[test]
fn a_restored_device_keeps_its_time_and_adaptation_points() {
    let sizes = WindowSizes { positive: 2, unlabeled: 4, bootstrap_positives: 0, ..WindowSizes::default() };
    let mut t = DeviceTable::new(1, sizes, 10);
    t.clock = Clock::Event;
    t.observe("a", &[1.0], true, &at(0, 0), 1_000.0, 0);
    t.observe("a", &[2.0], false, &at(0, 1), 1_002.0, 1);
    t.set_adaptation_point("a", 1_030.0, 2);
    let state = |w: f32| TaskState { z_p: vec![0.0], z_u: vec![1.0], w: vec![w], prior: 0.5, draws: vec![] };
    let handover = t.take_windows("a").unwrap().handover;
    assert!(t.install("a", handover, state(1.0)));
    let next = [("a".to_string(), state(2.0))].into_iter().collect();
    let kept = Classifiers { model: "m1", next };
    let records = t.state_records(&["a".to_string()], 5, true, 0, 1, &kept);
    let part = |p: Part| records.iter().find(|r| r.part == p).and_then(|r| r.value.clone());
    let main = part(Part::Main).expect("a main record");
    let (pos, unl) = (part(Part::Positive), part(Part::Unlabeled));
    let snapshot = Snapshot::assemble(&main, pos.as_deref(), unl.as_deref()).unwrap();
    let mut restored = DeviceTable::new(1, sizes, 10);
    restored.clock = Clock::Event;
    // Its classifiers come back with it: the one scoring, and its next point's.
    let kept = restored.restore("a", &snapshot, 0, 0, 99, "m1");
    assert!(matches!(&kept, Kept::Next { state: s, .. } if *s == state(2.0)), "{kept:?}");
    assert_eq!(restored.get("a").unwrap().classifier, Some(state(1.0)));
    let point = restored.adaptation_point("a");
    assert_eq!((point.clock, point.next, point.since), (1_002.0, Some(1_030.0), 2));
    assert_eq!(restored.now_of("a", 99).unix, 1_002.0, "its partition's time starts at its own");
    // Under another model it has none and is adapted anew.
    let mut other = DeviceTable::new(1, sizes, 10);
    other.clock = Clock::Event;
    assert_eq!(other.restore("a", &snapshot, 0, 0, 99, "m2"), Kept::Nothing);
    assert_eq!(other.get("a").unwrap().classifier, None);
}
