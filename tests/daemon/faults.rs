//! Hostile traffic against the monitor and the real (fixture) model, no broker: a
//! device whose unlabeled window is all attack, and a device flooding a batch.

use crate::support::fixture;
use metapu::daemon::config::DaemonConfig;
use metapu::data::Label;
use metapu::model::file;
use metapu::monitor::clock::Clock;
use metapu::monitor::record;
use metapu::monitor::record::Source;
use metapu::monitor::settings::CoreSettings;
use metapu::monitor::{Emitted, Input, Output, Received, RecordOutputs, TestDriver};

/// The daemon's monitor on the service clock (the adapter runs when time passes),
/// every record's score published, labels trusted; `max_per_device` as given.
fn monitor(max_per_device: usize) -> TestDriver {
    monitor_with(max_per_device, |_| {})
}

fn monitor_with(max_per_device: usize, change: impl FnOnce(&mut CoreSettings)) -> TestDriver {
    let mut s = DaemonConfig::defaults().core_settings();
    change(&mut s);
    (s.clock, s.max_per_device, s.max_tracked, s.max_batch) = (Clock::Service, max_per_device, 1000, 10_000);
    (s.outputs, s.trust_input_labels, s.state) = (RecordOutputs { scores: true, alerts: false }, true, None);
    s.sizes.bootstrap_positives = 0;
    let model = || file::load(&fixture().model_path, tch::Device::Cpu).unwrap();
    TestDriver::new(&s, model(), Some(model()), "v", None)
}

/// Records with consecutive offsets on partition 0, one micro-batch: what it scored
/// (device, decision, score), in order; deferred records are not among them.
fn feed(
    m: &mut TestDriver,
    records: &[(&str, &[f32], bool)],
    first_offset: i64,
) -> Vec<(String, String, f32)> {
    for (i, (device, row, known)) in records.iter().enumerate() {
        let offset = first_offset + i as i64;
        let message = Received {
            source: Source::new("in", 0, offset),
            key: None,
            payload: record::encode(device, 0.0, row, *known),
        };
        m.pipe(message);
    }
    scored(&m.tell(Input::Run))
}

fn scored(out: &Output) -> Vec<(String, String, f32)> {
    out.emitted
        .iter()
        .filter_map(|e| match e {
            Emitted::Score(s) => Some((s.device.clone(), s.decision.clone(), s.score.unwrap_or(f32::NAN))),
            _ => None,
        })
        .collect()
}

/// An hour passes on the service clock: the adaptation round it schedules, solved
/// and installed.
fn adapt_all(m: &mut TestDriver) {
    m.advance_time(3_600_000);
}

#[test]
fn a_window_of_nothing_but_attack_still_gives_a_finite_prior_and_alerts() {
    let fx = fixture();
    let (normal, attack) = (fx.rows(0, Label::Positive), fx.rows(0, Label::Negative));
    let dim = normal[0].len();
    // The newest records only (no spread over earlier time), so that the attack can
    // fill the whole unlabeled window.
    let mut m = monitor_with(0, |s| s.sizes.unlabeled_spread = 0);
    let mut stream: Vec<(&str, &[f32], bool)> =
        normal.iter().take(10).map(|r| ("victim", &r[..], true)).collect();
    // The unlabeled window then fills with attack records only: 200 of them push every
    // known-normal record out of it.
    stream.extend(attack.iter().cycle().take(200).map(|r| ("victim", &r[..], false)));
    feed(&mut m, &stream, 0);
    let unlabeled = m.monitor().device("victim").unwrap().unlabeled;
    assert!(unlabeled.chunks(dim).all(|r| attack.iter().any(|a| a == r)), "window is all attack");
    // Adapted on that window: at once (its first classifier), and again by any round.
    adapt_all(&mut m);
    let prior = m.monitor().device("victim").unwrap().prior.expect("adapted");
    assert!(prior.is_finite() && (0.0..=1.0).contains(&prior), "prior {prior}");

    let probes: Vec<(&str, &[f32], bool)> =
        attack.iter().take(100).map(|r| ("victim", &r[..], false)).collect();
    let verdicts = feed(&mut m, &probes, 1000);
    assert_eq!(verdicts.len(), 100);
    let flagged = verdicts.iter().filter(|(_, d, _)| d == "anomalous").count();
    assert!(verdicts.iter().all(|(_, _, score)| score.is_finite()), "{verdicts:?}");
    assert!(
        flagged >= 80,
        "only {flagged} of 100 attack records alerted under a poisoned window (prior {prior})"
    );
    eprintln!("all-attack window: prior {prior:.3}, {flagged}/100 attack records alerted");
}

#[test]
fn a_flooding_device_gets_its_share_of_a_batch_and_no_more() {
    let fx = fixture();
    let normal = fx.rows(0, Label::Positive);
    let dim = normal[0].len();
    let mut m = monitor(8);
    // Ten quiet devices, onboarded and adapted.
    let quiet: Vec<String> = (0..10).map(|i| format!("quiet-{i}")).collect();
    let onboarding: Vec<(&str, &[f32], bool)> =
        quiet.iter().flat_map(|d| normal.iter().take(5).map(move |r| (d.as_str(), &r[..], true))).collect();
    feed(&mut m, &onboarding, 0);
    adapt_all(&mut m);

    // One batch: 1,000 records of a flooding device with the quiet devices' records
    // spread among them.
    let mut batch: Vec<(&str, &[f32], bool)> = Vec::new();
    for i in 0..1000 {
        batch.push(("flood", &normal[i % normal.len()], false));
        if i % 20 == 0 {
            batch.push((&quiet[(i / 20) % 10], &normal[i % normal.len()], false));
        }
    }
    let scored = feed(&mut m, &batch, 1000);
    let flood_taken = scored.iter().filter(|(d, _, _)| d == "flood").count();
    let quiet_scored = scored.iter().filter(|(d, decision, _)| d != "flood" && decision != "unknown").count();
    assert_eq!(flood_taken, 8, "the flooding device is capped at its share");
    assert_eq!(quiet_scored, 50, "every quiet device's record is scored");
    let flood = m.monitor().device("flood").unwrap();
    assert_eq!(flood.unlabeled.len() / dim, 8, "shed records stay out of the windows");
    // No limit: everything is taken.
    let mut unlimited = monitor(0);
    assert_eq!(feed(&mut unlimited, &batch, 0).len(), batch.len());
}
