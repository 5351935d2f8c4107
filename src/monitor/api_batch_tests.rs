//! Tests of `api_batch.rs`: a batch, the time's passing and restarts through the
//! monitor's door, on small devices of their own.

use super::*;
use crate::model::{MetaPuNet, Model, NetConfig, PreprocessKind, Preprocessor, Provenance};
use crate::monitor::decode::{decode_batch, releasable_offsets};
use crate::monitor::devices::owner::Scheduling;
use crate::monitor::devices::stream_time::StreamClocks;
use crate::monitor::devices::{DeviceTable, WindowSizes};
use crate::monitor::incidents::IncidentRules;
use crate::monitor::record;
use crate::monitor::telemetry::Tally;

/// An untrained model on two raw features, the same at every call: drawn from a
/// generator of its own, not torch's, which every test thread of the process draws from
/// (a lock around this file's draws did not keep other files' tests out: a restart test
/// once got other weights, and other decisions, in CI).
fn model() -> Model {
    let net = MetaPuNet::new(NetConfig::paper(2, 8), tch::Device::Cpu);
    net.init_from_seed(1);
    Model {
        net,
        preprocess: Preprocessor::identity(PreprocessKind::None, 2),
        feature_names: vec!["a".into(), "b".into()],
        provenance: Provenance::default(),
    }
}

/// Windows of 10 unlabeled rows, 4 of them spread over the device's earlier seconds (a
/// restart must bring the spread rows back as they were).
fn sizes() -> WindowSizes {
    WindowSizes {
        positive: 5,
        unlabeled: 10,
        bootstrap_positives: 0,
        unlabeled_spread: 4,
        spread_bucket_s: 1,
        drawn: DRAWN.get(),
    }
}

thread_local! {
    /// This test's devices adapt on draws (`windows.drawn`): each test runs on a thread
    /// of its own, and builds its monitors on it.
    static DRAWN: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// The burst's first feature: one that this untrained model scores below the
/// threshold, on the windows and on draws.
fn burst() -> f32 {
    if DRAWN.get() {
        -3.0
    } else {
        3.0
    }
}

/// The default core's settings, publishing every record's score, in batches of up to
/// 100 records, trusting input labels (the tests label a device's first records).
fn settings() -> CoreSettings {
    let mut s = crate::daemon::config::DaemonConfig::defaults().core_settings();
    (s.outputs, s.max_batch, s.trust_input_labels) =
        (RecordOutputs { scores: true, alerts: false }, 100, true);
    s
}

/// A monitor on [`model`] (of version "v") with `threshold`, over `table`, publishing
/// every record's score.
fn monitor_on(threshold: f32, table: DeviceTable, scheduling: Scheduling, rules: IncidentRules) -> Monitor {
    let devices = Devices::new(model(), table, threshold, scheduling, rules).with_version("v");
    Monitor::with_devices(&settings(), devices)
}

fn monitor(max_per_device: usize) -> Monitor {
    let scheduling = Scheduling { max_per_device, ..Scheduling::default() };
    monitor_on(0.5, DeviceTable::new(2, sizes(), 10), scheduling, rules())
}

/// The service's clock at `ms`, with the wall clock.
fn service_now(ms: u64) -> Now {
    Now::at(ms, crate::wall_clock::unix_now())
}

fn message(partition: i32, offset: i64, payload: &[u8]) -> Received {
    Received { source: Source::new("in", partition, offset), key: None, payload: payload.to_vec() }
}

fn consumed(messages: Vec<Received>) -> Vec<Consumed> {
    decode_batch(messages, 2, 1024)
}

fn rules() -> IncidentRules {
    IncidentRules {
        open_k: 2,
        open_n: 3,
        update_interval_ms: 1000,
        quiet_ms: 5000,
        reopen_ms: 0,
        keep_records: 3,
        memory: crate::monitor::incidents::behaviours::MemoryRules::OFF,
        fan_out: crate::monitor::incidents::fanout::FanOutRules::OFF,
        fleet_ms: 0,
    }
}

fn record(device: &str, offset: i64, normal: bool) -> Received {
    let label = if normal { r#", "label": "normal""# } else { "" };
    let json = format!(r#"{{"device": "{device}", "ts": {offset}, "features": [0.1, 0.2]{label}}}"#);
    message(0, offset, json.as_bytes())
}

fn kinds(emitted: &[Emitted]) -> Vec<&'static str> {
    emitted
        .iter()
        .map(|e| match e {
            Emitted::Score(_) => "score",
            Emitted::Alert(_) => "alert",
            Emitted::Incident(_) => "incident",
            Emitted::Prior(_) => "prior",
            Emitted::Share(_) => "share",
            Emitted::DeadLetter { .. } => "dead letter",
        })
        .collect()
}

fn scores(emitted: &[Emitted]) -> impl Iterator<Item = &ScoreRecord> {
    emitted.iter().filter_map(|e| match e {
        Emitted::Score(s) => Some(s),
        _ => None,
    })
}

fn decisions(emitted: &[Emitted]) -> Vec<&str> {
    scores(emitted).map(|s| s.decision.as_str()).collect()
}

/// Two devices on the event clock: benign records, then a burst of others, then
/// benign again, a record every 0.3 s of capture time.
fn capture() -> Vec<Received> {
    (0..240i64)
        .map(|o| {
            let device = if o % 2 == 0 { "cam" } else { "lock" };
            let i = o / 2;
            let x = if (60..90).contains(&i) { burst() + (i % 5) as f32 * 0.1 } else { 0.1 * (i % 3) as f32 };
            let label = if i < 4 { r#", "label": "normal""# } else { "" };
            let json = format!(
                r#"{{"device": "{device}", "ts": {}, "features": [{x}, {}]{label}}}"#,
                0.3 * i as f64,
                -x
            );
            message(0, o, json.as_bytes())
        })
        .collect()
}

/// Every record's decision (by offset), and the incidents opened and closed.
type Replayed = (Vec<(i64, String)>, Vec<String>);

/// What a replay decided: every record's decision, and the incidents opened and
/// closed (id, records, anomalous), by device.
fn replay(batch_sizes: &[usize], service_ms_step: u64) -> Replayed {
    replay_with(batch_sizes, service_ms_step, 1).0
}

/// [`replay`] with `adaptation.min_records`; also the adaptations it made.
fn replay_with(batch_sizes: &[usize], service_ms_step: u64, min_records: usize) -> (Replayed, u64) {
    replay_solved(batch_sizes, service_ms_step, min_records, None)
}

/// The monitor of [`replay_solved`], its devices' model of `version`.
fn event_monitor(min_records: usize, version: &str) -> Monitor {
    let cadence =
        crate::monitor::devices::owner::EventCadence { interval_s: 1.0, min_records, after_records: 0 };
    let rules = IncidentRules {
        open_k: 3,
        open_n: 5,
        update_interval_ms: 2_000,
        quiet_ms: 3_000,
        reopen_ms: 0,
        keep_records: 3,
        memory: crate::monitor::incidents::behaviours::MemoryRules::OFF,
        fan_out: crate::monitor::incidents::fanout::FanOutRules::OFF,
        fleet_ms: 0,
    };
    let devices = Devices::new(
        model(),
        DeviceTable::new(2, sizes(), 10).on_clock(Clock::Event, StreamClocks::default()),
        0.9, // the burst scores 0.75-0.85, the rest over 0.9
        Scheduling { cadence: Some(cadence), ..Scheduling::default() },
        rules,
    )
    .with_version(version);
    Monitor::with_devices(&settings(), devices)
}

/// A restart of the replay after `after` messages: every device's snapshot, as the
/// daemon writes it at a shutdown, restored into a new monitor whose model is `model`
/// (the snapshots are written under "v").
struct Restart {
    after: usize,
    model: &'static str,
}

/// [`replay_with`] with the points' jobs solved by `solver` (inline if none).
fn replay_solved(
    batch_sizes: &[usize],
    service_ms_step: u64,
    min_records: usize,
    solver: Option<Box<dyn crate::monitor::devices::solver::Solver>>,
) -> (Replayed, u64) {
    replay_restarted(batch_sizes, service_ms_step, min_records, solver, None)
}

/// `monitor`'s devices written to the state topic and restored into a new monitor, as
/// a restart does (devices that kept no classifier of `model` adapted at once).
fn restarted(monitor: &mut Monitor, now: Now, model: &str, min_records: usize) -> Monitor {
    let ids: Vec<String> = ["cam", "lock"].map(String::from).to_vec();
    let writing = Writing { all_rows: true, unlabeled_interval_ms: 0, input_partitions: 1 };
    let records = monitor.devices.state_records(&ids, now.ms, writing);
    let mut next = event_monitor(min_records, model);
    let mut adapt = Vec::new();
    for id in &ids {
        let part = |p: crate::monitor::devices::snapshot::Part| {
            records.iter().find(|r| &r.device == id && r.part == p).and_then(|r| r.value.clone())
        };
        use crate::monitor::devices::snapshot::{Part, Snapshot};
        let main = part(Part::Main).expect("a main record");
        let (pos, unl) = (part(Part::Positive), part(Part::Unlabeled));
        let snapshot = Snapshot::assemble(&main, pos.as_deref(), unl.as_deref()).expect("a snapshot");
        if next.devices.restore(id, &snapshot, 0, 0, now.ms) {
            adapt.push(id.as_str());
        }
    }
    next.devices.adapt_now(adapt);
    next
}

/// [`replay_solved`], restarted once if `restart` says when.
fn replay_restarted(
    batch_sizes: &[usize],
    service_ms_step: u64,
    min_records: usize,
    solver: Option<Box<dyn crate::monitor::devices::solver::Solver>>,
    restart: Option<Restart>,
) -> (Replayed, u64) {
    let tally = Tally::default();
    let mut monitor = event_monitor(min_records, "v");
    if let Some(solver) = solver {
        monitor.set_solver(solver);
    }
    let mut messages = capture().into_iter().peekable();
    let (mut decisions, mut incidents) = (Vec::new(), Vec::new());
    let mut service_ms = 0;
    let mut sent = 0;
    for &size in batch_sizes.iter().cycle() {
        if messages.peek().is_none() {
            break;
        }
        if let Some(r) = restart.as_ref().filter(|r| r.after == sent) {
            assert!(monitor.deferred.is_empty(), "a restart loses no deferred record here");
            monitor = restarted(&mut monitor, service_now(service_ms), r.model, min_records);
        }
        let batch: Vec<Received> = messages.by_ref().take(size).collect();
        sent += batch.len();
        let (mut out, _) = monitor.run_batch(consumed(batch), service_now(service_ms), &tally);
        out.extend(monitor.incident_ticks(service_now(service_ms), &tally));
        service_ms += service_ms_step;
        for e in out {
            match e {
                Emitted::Score(s) => decisions.push((s.source.offset, s.decision)),
                Emitted::Incident(IncidentEvent::Opened(r)) => {
                    incidents.push(format!("opened {} {} {}", r.device, r.incident_id, r.figures.records))
                }
                Emitted::Incident(IncidentEvent::Closed(r)) => incidents.push(format!(
                    "closed {} {} {} {}",
                    r.device, r.incident_id, r.figures.records, r.figures.anomalous
                )),
                _ => {}
            }
        }
    }
    decisions.sort();
    incidents.sort();
    ((decisions, incidents), tally.get("adapted"))
}

/// On the event clock, adaptation and incidents follow the records' time: the same
/// capture cut into batches of any size, arriving at any speed, gets the same
/// decisions and the same incidents.
#[test]
fn on_the_event_clock_batching_and_speed_change_nothing() {
    let whole = replay(&[240], 0);
    assert!(
        whole.1.iter().any(|i| i.starts_with("opened cam")),
        "the burst opens an incident: {:?}",
        whole.1
    );
    assert!(whole.1.iter().any(|i| i.starts_with("closed cam")), "and it closes: {:?}", whole.1);
    assert_eq!(replay(&[1], 0), whole, "one record per batch");
    assert_eq!(replay(&[7, 1, 30], 0), whole, "batches of 7, 1, 30");
    assert_eq!(replay(&[1], 300), whole, "one record per batch, live speed");
    assert_eq!(replay(&[5], 1), whole, "1,500 times faster than live");
}

/// On draws too (`windows.drawn`): any batching, a solver thread and a restart between
/// points decide what one batch decided, for the draws are seeded by the device's
/// records so far, which its snapshot keeps.
#[test]
fn on_draws_batching_a_solver_thread_and_a_restart_change_nothing() {
    use crate::monitor::devices::solver::ThreadSolver;
    DRAWN.set(true);
    let whole = replay_with(&[240], 0, 1).0;
    assert!(
        whole.1.iter().any(|i| i.starts_with("opened cam")),
        "the burst opens an incident: {:?}",
        whole.1
    );
    assert_ne!(
        whole,
        {
            DRAWN.set(false);
            let w = replay_with(&[240], 0, 1).0;
            DRAWN.set(true);
            w
        },
        "draws decide otherwise than windows"
    );
    assert_eq!(replay_with(&[7, 1, 30], 300, 1).0, whole, "batches of 7, 1, 30, live speed");
    let threaded = replay_solved(&[1], 0, 1, Some(Box::new(ThreadSolver::spawn(vec![model(), model()], 32))));
    assert_eq!(threaded.0, whole, "a solver thread");
    for after in [30, 100, 130] {
        let (restarted, _) = replay_restarted(&[10], 0, 1, None, Some(Restart { after, model: "v" }));
        assert_eq!(restarted, replay_with(&[10], 0, 1).0, "restarted after {after} records");
    }
}

/// The adaptation points' jobs solved on a thread of their own while scoring goes on
/// decide what solving them in line decides: a classifier is installed at its device's
/// next point, however soon it is solved.
#[test]
fn a_solver_thread_decides_what_the_inline_solver_decides() {
    use crate::monitor::devices::solver::ThreadSolver;
    let inline = replay_with(&[240], 0, 1);
    assert!(inline.0 .1.iter().any(|i| i.starts_with("opened cam")), "an incident: {:?}", inline.0 .1);
    for sizes in [&[240usize][..], &[1], &[7, 1, 30]] {
        let threaded =
            replay_solved(sizes, 0, 1, Some(Box::new(ThreadSolver::spawn(vec![model(), model()], 32))));
        assert_eq!(threaded, inline, "batches {sizes:?}");
    }
}

/// A restart between two adaptation points decides what no restart decided: the
/// snapshots keep each device's classifier and the one waiting for its next point.
/// Restored under another model (adapted anew at once), the same restart decides
/// otherwise: what the kept classifiers are for.
#[test]
fn a_restart_between_points_decides_what_no_restart_decided() {
    let batches = [10usize];
    let whole = replay_with(&batches, 0, 1).0;
    assert!(whole.1.iter().any(|i| i.starts_with("opened cam")), "an incident: {:?}", whole.1);
    for after in [30, 100, 130] {
        let restart = Some(Restart { after, model: "v" });
        let (restarted, _) = replay_restarted(&batches, 0, 1, None, restart);
        assert_eq!(restarted, whole, "restarted after {after} records");
    }
    let anew = Some(Restart { after: 130, model: "another" });
    let (adapted_anew, _) = replay_restarted(&batches, 0, 1, None, anew);
    assert_ne!(adapted_anew.0, whole.0, "adapted anew at the restart");
}

/// With `min_records`, a device that sends a few records a second is re-adapted
/// every `min_records` records, not every second of its time; still on the records'
/// time alone: any batching and speed give the same decisions and incidents.
#[test]
fn min_records_spaces_adaptations_and_keeps_replays_alike() {
    let (_, every_n) = replay_with(&[240], 0, 1);
    let (spaced, spaced_n) = replay_with(&[240], 0, 10);
    // 120 records a device, 0.3 s apart: a point every 4 records, or, once the window
    // of 10 is full, every 10 (sooner while it fills).
    assert!(every_n >= 50, "every second of each device's time: {every_n}");
    assert!((20..=26).contains(&spaced_n), "every 10 records of each device: {spaced_n}");
    assert!(
        spaced.1.iter().any(|i| i.starts_with("opened cam")),
        "the burst still opens an incident: {:?}",
        spaced.1
    );
    for (sizes, step) in [(&[1usize][..], 0), (&[7, 1, 30][..], 0), (&[1][..], 300), (&[5][..], 1)] {
        assert_eq!(replay_with(sizes, step, 10), (spaced.clone(), spaced_n), "batches {sizes:?}, {step} ms");
    }
}

/// A monitor on the event clock that calls every record anomalous, and five records of
/// device `a` (the first known-normal), one a second of a capture's time years ago,
/// run at 1 s of the service's clock: its incident is open.
fn silent_after_an_incident(idle_after_ms: u64, tally: &Tally) -> Monitor {
    let table =
        DeviceTable::new(2, sizes(), 10).on_clock(Clock::Event, StreamClocks::new(idle_after_ms, 0.0));
    // Every record scores anomalous.
    let mut monitor = monitor_on(1.1, table, Scheduling::default(), rules());
    let old = 1.5e9;
    let messages: Vec<Received> = (0..5)
        .map(|o| {
            let label = if o == 0 { r#", "label": "normal""# } else { "" };
            let json =
                format!(r#"{{"device": "a", "ts": {}, "features": [0.1, 0.2]{label}}}"#, old + o as f64);
            message(0, o, json.as_bytes())
        })
        .collect();
    let (out, _) = monitor.run_batch(consumed(messages), service_now(1_000), tally);
    assert!(out.iter().any(|e| matches!(e, Emitted::Incident(IncidentEvent::Opened(_)))));
    monitor
}

fn closed(out: &[Emitted]) -> bool {
    out.iter().any(|e| matches!(e, Emitted::Incident(IncidentEvent::Closed(_))))
}

/// On the event clock a device whose partition falls silent still sees time pass: its
/// open incident closes `quiet` after its last record, on the service's clock, and the
/// idle partition is counted once.
#[test]
fn a_silent_partition_s_incidents_close_on_the_wall_clock() {
    let tally = Tally::default();
    let mut monitor = silent_after_an_incident(0, &tally);
    assert!(!closed(&monitor.incident_ticks(service_now(5_000), &tally)), "4 s of quiet < 5 s");
    let out = monitor.incident_ticks(service_now(6_100), &tally);
    assert!(closed(&out), "5.1 s after its last record: closed");
    assert_eq!(tally.get("stream_idle"), 1, "the partition went idle once");
}

/// Silent for less than idle_after: the service's lag moves no partition's time, so a
/// tick between two records of live traffic decides what a replay decides.
#[test]
fn a_lagging_service_moves_no_partition_s_time_until_it_is_silent_for_idle_after() {
    let tally = Tally::default();
    let mut monitor = silent_after_an_incident(10_000, &tally);
    assert!(
        !closed(&monitor.incident_ticks(service_now(10_900), &tally)),
        "9.9 s silent: its time stands at its last record's"
    );
    let out = monitor.incident_ticks(service_now(11_000), &tally);
    assert!(closed(&out), "10 s silent: moved on by all of it, past quiet");
}

/// A silent device on a partition whose other devices go on sending: its time is the
/// partition's stream time, which their records move, whatever the wall clock does.
#[test]
fn a_silent_device_s_incident_closes_as_its_partition_s_records_pass_its_quiet() {
    let tally = Tally::default();
    let mut monitor = silent_after_an_incident(u64::MAX, &tally);
    let at = |o: i64, ts: f64| {
        message(0, o, format!(r#"{{"device": "b", "ts": {ts}, "features": [0.1, 0.2]}}"#).as_bytes())
    };
    // a's last record at 1.5e9 + 4; quiet_s is 5.
    let (out, _) = monitor.run_batch(consumed(vec![at(5, 1.5e9 + 8.0)]), service_now(2_000), &tally);
    assert!(!closed(&out));
    assert!(!closed(&monitor.incident_ticks(service_now(600_000), &tally)), "4 s of quiet");
    monitor.run_batch(consumed(vec![at(6, 1.5e9 + 9.5)]), service_now(600_001), &tally);
    let out = monitor.incident_ticks(service_now(600_002), &tally);
    assert!(closed(&out), "5.5 s of the partition's time: closed");
    assert_eq!(tally.get("stream_idle"), 0, "never idle: the wall clock moved nothing");
}

#[test]
fn released_offsets_stop_below_a_deferred_record() {
    let batch = consumed((10..=20).map(|o| message(0, o, b"x")).chain([message(1, 7, b"x")]).collect());
    let deferred = consumed(vec![message(0, 15, b"x"), message(0, 18, b"x"), message(2, 0, b"x")]);
    let mut released = releasable_offsets(&batch, &deferred);
    released.sort();
    assert_eq!(released, vec![("in".to_string(), 0, 14), ("in".to_string(), 1, 7)]);
    let first_deferred = consumed(vec![message(0, 0, b"x")]);
    assert!(releasable_offsets(&consumed(vec![message(0, 3, b"x")]), &first_deferred).is_empty());
}

/// A device over its share of a batch: the rest lead the next batches, in order, and
/// the batch releases offsets only below them; every record is scored in the end.
#[test]
fn records_over_a_share_wait_for_the_next_batch_and_hold_back_offsets() {
    let tally = Tally::default();
    let mut monitor = monitor(2);
    let fresh = consumed((0..5).map(|o| record("a", o, o == 0)).collect());
    let (outputs, offsets) = monitor.run_batch(fresh, service_now(0), &tally);
    assert_eq!(kinds(&outputs), ["score", "score", "prior"]);
    assert_eq!(offsets, vec![("in".to_string(), 0, 1)]);
    assert!(!monitor.deferred.is_empty());
    let (outputs, offsets) = monitor.run_batch(Vec::new(), service_now(0), &tally);
    assert_eq!((outputs.len(), offsets), (2, vec![("in".to_string(), 0, 3)]));
    let (outputs, offsets) = monitor.run_batch(consumed(vec![record("b", 5, false)]), service_now(0), &tally);
    assert_eq!((outputs.len(), offsets), (2, vec![("in".to_string(), 0, 5)]));
    assert!(monitor.deferred.is_empty());
    assert_eq!(tally.get("deferred"), 3 + 1, "deferrals counted per batch");
    assert_eq!(monitor.device("a").map(|d| d.seen), Some(5), "every record of a entered its windows once");
}

/// The first records of a device with a known-normal record are scored, not
/// `unknown`: it is adapted before scoring. Bad input becomes a dead letter.
#[test]
fn a_new_device_is_adapted_before_scoring_and_bad_input_is_dead_lettered() {
    let tally = Tally::default();
    let mut monitor = monitor(0);
    let mut messages: Vec<Received> = (0..4).map(|o| record("a", o, o == 0)).collect();
    messages.push(record("c", 4, false));
    messages.push(message(0, 5, b"{not json"));
    let (outputs, _) = monitor.run_batch(consumed(messages), service_now(0), &tally);
    let decisions = decisions(&outputs);
    assert!(decisions[..4].iter().all(|d| *d != "unknown"), "{decisions:?}");
    assert_eq!(decisions[4], "unknown", "a device with no known-normal record cannot be scored");
    assert_eq!(kinds(&outputs)[5..], ["dead letter", "prior"]);
    let Emitted::Prior(update) = &outputs[6] else { panic!("a prior update: {:?}", outputs[6]) };
    assert_eq!((update.device.as_str(), update.positive_window, update.unlabeled_window), ("a", 1, 4));
    // What the console plots: the device's own time, its records scored so far (the
    // batch's four) and when its known-normal record was taken.
    assert_eq!((update.ts, update.scored, update.known_normal_span), (3.0, 4, Some((0.0, 0.0))));
    assert!(update.alerted <= update.scored);
    assert_eq!(tally.get("adapted"), 1);
    assert_eq!(tally.get("refused/malformed"), 1);
}

/// Records taken as known-normal (here a new device's first three) are being learned
/// as normal: however they score, they open no incident; the records after them do.
#[test]
fn records_taken_as_normal_open_no_incident() {
    let tally = Tally::default();
    let sizes = WindowSizes { positive: 5, unlabeled: 10, bootstrap_positives: 3, ..WindowSizes::default() };
    // Every record scores anomalous.
    let mut monitor = monitor_on(1.1, DeviceTable::new(2, sizes, 10), Scheduling::default(), rules());
    let opened = |outputs: &[Emitted]| outputs.iter().filter(|o| matches!(o, Emitted::Incident(_))).count();
    let mut run = |offsets: std::ops::Range<i64>| {
        let fresh = consumed(offsets.map(|o| record("a", o, false)).collect());
        monitor.run_batch(fresh, service_now(0), &tally).0
    };
    let outputs = run(0..3);
    assert_eq!(opened(&outputs), 0, "bootstrap records are learned as normal: no incident");
    let anomalous = decisions(&outputs).iter().filter(|d| **d == "anomalous").count();
    assert_eq!(anomalous, 3, "yet scored anomalous");
    let outputs = run(3..5);
    assert_eq!(opened(&outputs), 1, "2 of the last 3 decisions anomalous");
}

/// A batch message's records are scored, refused and recognised as redelivered each
/// on its own, under their places in the batch; its offset is released as one.
#[test]
fn a_batch_message_s_records_count_one_by_one() {
    let tally = Tally::default();
    let mut monitor = monitor(0);
    let rec = |ts: f64, features: &[f32]| record::encode_binary("a", ts, features, ts == 0.0, None);
    let mut batch = record::Batch::default();
    for r in [rec(0.0, &[0.1, 0.2]), rec(1.0, &[0.1, 0.2]), rec(2.0, &[0.1]), rec(3.0, &[0.2, 0.1])] {
        batch.push(&r);
    }
    let batch = batch.take();
    let messages = || vec![message(0, 0, &batch), message(0, 1, &rec(4.0, &[0.1, 0.1]))];
    let (outputs, offsets) = monitor.run_batch(consumed(messages()), service_now(0), &tally);
    assert_eq!(kinds(&outputs), ["score", "score", "dead letter", "score", "score", "prior"]);
    assert_eq!(offsets, vec![("in".to_string(), 0, 1)]);
    let scored =
        |outputs: &[Emitted]| -> Vec<(i64, u32)> { scores(outputs).map(|s| s.source.position()).collect() };
    assert_eq!(scored(&outputs), [(0, 0), (0, 1), (0, 3), (1, 0)]);
    let Emitted::DeadLetter { letter, .. } = &outputs[2] else { unreachable!() };
    assert_eq!(letter.source.position(), (0, 2));
    assert!(letter.reason.contains("1 features"), "{}", letter.reason);
    assert_eq!(letter.payload_bytes, rec(2.0, &[0.1]).len(), "the refused record's own bytes");
    // Each place has its own alert id; the first keeps a lone record's.
    let at = |index| Source { index, ..Source::new("in", 0, 0) };
    assert_ne!(output::alert_id(&at(0)), output::alert_id(&at(1)));
    assert_eq!(output::alert_id(&at(0)), output::alert_id(&Source::new("in", 0, 0)));

    // A device over its share stops inside a batch: the message's offset is held back,
    // and after a restart the redelivered batch's records before the stop are known
    // and the rest enter the windows once.
    let mut monitor = self::monitor(2);
    let (outputs, offsets) = monitor.run_batch(consumed(messages()), service_now(0), &tally);
    assert_eq!(scored(&outputs), [(0, 0), (0, 1)]);
    assert!(offsets.is_empty(), "{offsets:?}");
    assert_eq!(seen(&monitor), 2);
    // A restart: the deferred records are gone with the process, the devices stay.
    monitor.devices.set_scheduling(Scheduling::default());
    monitor.deferred.clear();
    monitor.run_batch(consumed(messages()), service_now(0), &tally);
    assert_eq!(seen(&monitor), 4, "the first two once, the last two once");
}

fn seen(monitor: &Monitor) -> u64 {
    monitor.device("a").map_or(0, |d| d.seen)
}

/// A device's kind named on the feedback topic (`metapu kind`): the device joins it, the
/// join is published and what it knows as normal is shared; an unknown device or a
/// kind's bad name is a dead letter.
#[test]
fn a_kind_request_joins_a_seen_device_and_refuses_the_rest() {
    let tally = Tally::default();
    let mut monitor = monitor(100);
    monitor.run_batch(consumed(vec![record("cam", 0, true)]), service_now(0), &tally);
    let request = |device: &str, kind: &str| {
        let json = format!(r#"{{"type": "kind", "device": "{device}", "kind": "{kind}", "by": "ops"}}"#);
        message(0, 0, json.as_bytes())
    };
    let out = monitor.feedback(&[request("cam", "edimax")], service_now(10), &tally);
    // Its labeled row is known-normal, so it is shared with the kind at once.
    match &out[..] {
        [Emitted::Incident(IncidentEvent::KindJoined { device, kind, by, .. }), Emitted::Share(share)] => {
            assert_eq!((device.as_str(), kind.as_str(), by.as_str()), ("cam", "edimax", "ops"));
            assert_eq!(
                (share.kind.as_str(), share.device.as_str(), &share.normal[..]),
                ("edimax", "cam", &[0.1, 0.2][..])
            );
        }
        other => panic!("{other:?}"),
    }
    let mut refused = |device: &str, kind: &str, why: &str| {
        let out = monitor.feedback(&[request(device, kind)], service_now(20), &tally);
        match &out[..] {
            [Emitted::DeadLetter { letter, .. }] => {
                assert_eq!(letter.kind, "bad_feedback");
                assert!(letter.reason.contains(why), "{}", letter.reason);
            }
            other => panic!("{other:?}"),
        }
    };
    refused("door", "edimax", "unknown device door");
    refused("cam", "no spaces", "kind");
    assert_eq!(tally.get("feedback/refused"), 2);
}

/// On the event clock a device that leaves its kind for another withdraws what it
/// shared there at its own time (its records' `ts`), the clock its siblings' shares are
/// stamped with, not the wall's.
#[test]
fn a_device_leaving_its_kind_withdraws_at_its_own_time() {
    let tally = Tally::default();
    let mut monitor = event_monitor(1, "v");
    let json = br#"{"device": "cam", "ts": 1000, "features": [0.1, 0.2], "label": "normal"}"#;
    monitor.run_batch(consumed(vec![message(0, 0, json)]), service_now(0), &tally);
    let request = |kind: &str| {
        let json = format!(r#"{{"type": "kind", "device": "cam", "kind": "{kind}"}}"#);
        message(0, 0, json.as_bytes())
    };
    monitor.feedback(&[request("edimax")], service_now(10), &tally);
    let out = monitor.feedback(&[request("ednet")], service_now(20), &tally);
    let withdrawn: Vec<_> = out
        .iter()
        .filter_map(|e| match e {
            Emitted::Share(s) if s.kind == "edimax" => Some((s.normal.len(), s.at)),
            _ => None,
        })
        .collect();
    assert_eq!(withdrawn, [(0, 1000.0)], "{out:?}");
}
