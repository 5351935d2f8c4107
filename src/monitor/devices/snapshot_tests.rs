//! Tests of `snapshot.rs`.
use super::*;
use crate::monitor::incidents::{Decision, IncidentRules};

#[test]
fn snapshots_round_trip_and_reject_garbage() {
    let s = Snapshot {
        positive: vec![1.0, 2.0],
        unlabeled: vec![3.0, 4.0, 5.0, 6.0],
        seen: 9,
        last_source: Some(Source::new("in", 3, 41)),
        ..Snapshot::empty(2)
    };
    assert_eq!(Snapshot::decode(&s.encode()).unwrap(), s);
    let none = Snapshot { last_source: None, ..s.clone() };
    assert_eq!(Snapshot::decode(&none.encode()).unwrap(), none);
    let points = Snapshot {
        points: Some(SavedPoints {
            clock: 1.7e9,
            next: Some(1.7e9 + 30.0),
            since: 4,
            classifiers: Some(SavedClassifiers {
                model: "abc".into(),
                scoring: TaskState {
                    z_p: vec![0.5],
                    z_u: vec![-1.0],
                    w: vec![0.25, 2.0],
                    prior: 0.75,
                    // Its other draws' solves travel with it (a restart scores as before).
                    draws: vec![crate::model::support::DrawnSolve { w: vec![1.5, 0.0], prior: 0.5 }],
                },
                next: None,
            }),
        }),
        ..s.clone()
    };
    assert_eq!(Snapshot::decode(&points.encode_main()).unwrap().points, points.points);
    // An open incident travels with the windows (its clock fields restart at restore).
    let rules = IncidentRules {
        open_k: 1,
        open_n: 1,
        update_interval_ms: 1,
        quiet_ms: 1,
        reopen_ms: 0,
        keep_records: 1,
        memory: crate::monitor::incidents::behaviours::MemoryRules::OFF,
        fan_out: crate::monitor::incidents::fanout::FanOutRules::OFF,
        fleet_ms: 0,
    };
    let mut with_incident = s.clone();
    let d = Decision {
        anomalous: true,
        posterior: 0.2,
        prior: 0.6,
        ts: 5.0,
        source: &Source::new("in", 3, 40),
        features: &[1.0, 2.0],
        context: None,
        judged: true,
    };
    assert!(with_incident.incidents.observe("a", d, &rules, None, &[], 0, 1.5e9).len() == 1);
    assert_eq!(Snapshot::decode(&with_incident.encode()).unwrap(), with_incident);
    // So do the behaviours analysts dismissed.
    let mut remembered = with_incident.clone();
    let id = remembered.incidents.open().map(|i| i.id.clone()).unwrap();
    let fb = crate::monitor::incidents::Feedback {
        device: "a".into(),
        incident_id: id,
        verdict: crate::monitor::incidents::Verdict::FalsePositive,
        by: "ana".into(),
        note: "nightly upload".into(),
        id: String::new(),
        at: 0.0,
        from: String::new(),
    };
    let memory = crate::monitor::incidents::behaviours::MemoryRules {
        remember_ms: 1_000,
        volume_factor: 3.0,
        learn_quiet: false,
        learned_ms: 0,
        learning_ms: 0,
    };
    remembered.incidents.feedback(&fb, 1.5e9, 60, &memory, 2).expect("dismissed");
    assert_eq!(remembered.incidents.memory().len(), 1);
    assert_eq!(Snapshot::decode(&remembered.encode()).unwrap(), remembered);
    // And an onboarding under way and the last one done.
    let span = Onboarding { from: 1.0, until: 3601.0, records: 7, by: "ops".into(), note: "joined".into() };
    let onboarding =
        Snapshot { onboarding: Some(span.clone()), onboarded: Some(span), pinned: 2, ..s.clone() };
    assert_eq!(Snapshot::decode(&onboarding.encode()).unwrap(), onboarding);
    let member = Snapshot { kind: Some("edimax-cam".into()), rows_accepted: true, ..onboarding.clone() };
    assert_eq!(Snapshot::decode(&member.encode()).unwrap(), member);
    // A record inside a batch message keeps its place.
    let batched =
        Snapshot { last_source: Some(Source { index: 3, ..Source::new("in", 3, 41) }), ..s.clone() };
    assert_eq!(Snapshot::decode(&batched.encode()).unwrap(), batched);
    let tail = 4 + serde_json::to_vec(&Tail {
        incidents: &s.incidents,
        onboarding: None,
        onboarded: None,
        kind: None,
        rows_accepted: false,
        pinned: 0,
        input_partitions: 0,
        points: None,
        last_index: 0,
    })
    .unwrap()
    .len();
    let mut before = s.encode();
    before.truncate(before.len() - tail);
    let old_tail = serde_json::to_vec(&s.incidents).unwrap();
    before.extend_from_slice(&(old_tail.len() as u32).to_le_bytes());
    before.extend_from_slice(&old_tail);
    assert_eq!(Snapshot::decode(&before).unwrap(), s);
    // The second layout (no incident state) still reads.
    let mut v2 = s.encode();
    v2[..4].copy_from_slice(b"MPS2");
    v2.truncate(v2.len() - tail);
    assert_eq!(Snapshot::decode(&v2).unwrap(), s);
    // The first layout (no source) still reads.
    let mut v1 = b"MPS1".to_vec();
    for n in [2u32, 1, 0] {
        v1.extend_from_slice(&n.to_le_bytes());
    }
    v1.extend_from_slice(&7u64.to_le_bytes());
    v1.extend_from_slice(&1f32.to_le_bytes());
    v1.extend_from_slice(&2f32.to_le_bytes());
    let old = Snapshot::decode(&v1).unwrap();
    assert_eq!((old.positive, old.seen, old.last_source), (vec![1.0, 2.0], 7, None));
    assert_eq!(Snapshot::decode(b"nope"), Err(SnapshotError::BadMagic));
    let mut cut = s.encode();
    cut.pop();
    assert_eq!(Snapshot::decode(&cut), Err(SnapshotError::BadLength));
    let bad = Snapshot { positive: vec![f32::NAN, 0.0], ..s };
    assert_eq!(Snapshot::decode(&bad.encode()), Err(SnapshotError::NonFinite));
}

#[test]
fn a_split_state_reads_back_whole_and_older_snapshots_still_read() {
    let s = Snapshot {
        positive: vec![1.0, 2.0, 3.0, 4.0],
        unlabeled: vec![5.0, 6.0],
        seen: 9,
        last_source: Some(Source::new("in", 1, 7)),
        pinned: 1,
        input_partitions: 4,
        ..Snapshot::empty(2)
    };
    let mut topic = StateTopic::default();
    let rows = |r: &[f32]| encode_rows(2, r);
    topic.apply(&Part::Main.key("cam"), 1, Some(&s.encode_main()));
    topic.apply(&Part::Positive.key("cam"), 1, rows(&s.positive).as_deref());
    topic.apply(&Part::Unlabeled.key("cam"), 1, rows(&s.unlabeled).as_deref());
    // A device of the old layout, one whose unlabeled rows were deleted (idle), one
    // forgotten (main deleted, rows left over), and a key that is no device's.
    topic.apply(b"old", 0, Some(&s.encode()));
    topic.apply(&Part::Unlabeled.key("old"), 0, rows(&[9.0, 9.0]).as_deref());
    topic.apply(&Part::Main.key("idle"), 0, Some(&s.encode_main()));
    topic.apply(&Part::Positive.key("idle"), 0, rows(&s.positive).as_deref());
    topic.apply(&Part::Unlabeled.key("idle"), 0, None);
    topic.apply(&Part::Main.key("gone"), 0, Some(&s.encode_main()));
    topic.apply(&Part::Positive.key("gone"), 0, rows(&s.positive).as_deref());
    topic.apply(&Part::Main.key("gone"), 0, None);
    topic.apply(&[0xC3, 0x28], 0, Some(b"x"));
    assert_eq!(topic.len(), 3);
    let mut read: Vec<(String, i32, Snapshot)> =
        topic.snapshots().map(|(d, p, s)| (d, p, s.expect("reads"))).collect();
    read.sort_by(|a, b| a.0.cmp(&b.0));
    let apart = Snapshot { rows_apart: true, ..s.clone() };
    assert_eq!(read[0], ("cam".to_string(), 1, apart.clone()));
    assert_eq!(read[1].2, Snapshot { unlabeled: vec![], ..apart }, "idle: no unlabeled rows");
    assert_eq!(read[2].2, s, "a whole snapshot keeps its own rows");
    // The main record holds no rows; rows of another width are refused.
    assert_eq!(s.encode_main().len(), s.encode().len() - 4 * 6);
    assert_eq!(encode_rows(2, &[]), None, "an empty window is a tombstone");
    let bad = Snapshot::assemble(&s.encode_main(), encode_rows(3, &[1.0; 3]).as_deref(), None);
    assert_eq!(bad, Err(SnapshotError::BadLength));
    assert_eq!(Part::of_key(&Part::Unlabeled.key("a\u{ff}u")), Some(("a\u{ff}u", Part::Unlabeled)));
    assert_eq!(Part::of_key("ÿu".as_bytes()), Some(("ÿu", Part::Main)), "UTF-8's ÿ is not the mark");
}

#[test]
fn unlabeled_rows_keep_their_layout_and_older_records_read_without() {
    let s = Snapshot {
        unlabeled: vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0],
        unlabeled_layout: Some(SpanLayout {
            recent: 2,
            next: 1,
            buckets: vec![7, 9, -3],
            pushes: 40,
            priorities: vec![5],
        }),
        ..Snapshot::empty(2)
    };
    let [_, (_, unlabeled), (_, main)] = s.records("cam");
    let (unlabeled, main) = (unlabeled.expect("rows"), main.expect("main"));
    assert_eq!(&unlabeled[..4], b"MPW2");
    let back = Snapshot::assemble(&main, None, Some(&unlabeled)).expect("reads");
    assert_eq!(back, Snapshot { rows_apart: true, ..s.clone() });
    // An MPW1 record: the rows, no layout.
    let old = Snapshot::assemble(&main, None, encode_rows(2, &s.unlabeled).as_deref()).expect("reads");
    assert_eq!((old.unlabeled, old.unlabeled_layout), (s.unlabeled.clone(), None));
    // A layout cut short, or one bucket too few, is refused.
    assert_eq!(
        Snapshot::assemble(&main, None, Some(&unlabeled[..unlabeled.len() - 1])),
        Err(SnapshotError::BadLength)
    );
    let layout = SpanLayout { recent: 2, next: 1, buckets: vec![7, 9], pushes: 40, priorities: vec![5] };
    let short = encode_span_rows(2, &s.unlabeled, &layout);
    assert_eq!(Snapshot::assemble(&main, None, short.as_deref()), Err(SnapshotError::BadLength));
}
