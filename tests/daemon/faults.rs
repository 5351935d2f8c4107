//! Hostile traffic against the scoring engine and the real (fixture) model, no broker:
//! a device whose unlabeled window is all attack, and a device flooding a batch.

use crate::support::fixture;
use metapu::data::Label;
use metapu::model::file;
use metapu::monitor::clock::Now;
use metapu::monitor::engine::{Engine, Source, Verdict, WindowSizes};
use metapu::monitor::record::FeatureRecord;

fn engine(max_per_device: usize) -> Engine {
    let model = file::load(&fixture().model_path, tch::Device::Cpu).unwrap();
    let sizes = WindowSizes { positive: 50, unlabeled: 200, bootstrap_positives: 0 };
    let mut e = Engine::new(model, sizes, 1000, 0.5);
    e.max_per_device = max_per_device;
    e
}

fn record(device: &str, row: &[f32], known_normal: bool) -> FeatureRecord {
    FeatureRecord { device: device.into(), ts: 0.0, features: row.to_vec(), known_normal, context: None }
}

/// Feed records with consecutive offsets on partition 0.
fn feed(e: &mut Engine, records: &[FeatureRecord], first_offset: i64) -> Vec<Verdict> {
    let sources: Vec<Source> = (0..records.len() as i64)
        .map(|i| Source { topic: "in".into(), partition: 0, offset: first_offset + i })
        .collect();
    let pairs: Vec<(&FeatureRecord, &Source)> = records.iter().zip(&sources).collect();
    e.process(&pairs, Now::service(0)).verdicts
}

fn adapt_all(e: &mut Engine) {
    e.adapt_changed();
}

#[test]
fn a_window_of_nothing_but_attack_still_gives_a_finite_prior_and_alerts() {
    let fx = fixture();
    let (normal, attack) = (fx.rows(0, Label::Positive), fx.rows(0, Label::Negative));
    let mut e = engine(0);
    let mut stream: Vec<FeatureRecord> = normal.iter().take(10).map(|r| record("victim", r, true)).collect();
    // The unlabeled window then fills with attack records only: 200 of them push every
    // known-normal record out of it.
    stream.extend(attack.iter().cycle().take(200).map(|r| record("victim", r, false)));
    feed(&mut e, &stream, 0);
    let unlabeled = e.devices.get("victim").unwrap().unlabeled.rows().to_vec();
    assert!(unlabeled.chunks(2).all(|r| attack.iter().any(|a| a == r)), "window is all attack");
    adapt_all(&mut e);
    let prior = e.devices.get("victim").unwrap().state.as_ref().unwrap().prior;
    assert!(prior.is_finite() && (0.0..=1.0).contains(&prior), "prior {prior}");

    let probes: Vec<FeatureRecord> = attack.iter().take(100).map(|r| record("victim", r, false)).collect();
    let verdicts = e.score(probes.iter());
    let flagged = verdicts.iter().filter(|v| matches!(v, Verdict::Scored { anomalous: true, .. })).count();
    let finite =
        verdicts.iter().all(|v| matches!(v, Verdict::Scored { posterior, .. } if posterior.is_finite()));
    assert!(finite, "{verdicts:?}");
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
    let mut e = engine(8);
    // Ten quiet devices, onboarded and adapted.
    let quiet: Vec<String> = (0..10).map(|i| format!("quiet-{i}")).collect();
    let onboarding: Vec<FeatureRecord> =
        quiet.iter().flat_map(|d| normal.iter().take(5).map(move |r| record(d, r, true))).collect();
    feed(&mut e, &onboarding, 0);
    adapt_all(&mut e);

    // One batch: 1,000 records of a flooding device with the quiet devices' records
    // spread among them.
    let mut batch = Vec::new();
    for i in 0..1000 {
        batch.push(record("flood", &normal[i % normal.len()], false));
        if i % 20 == 0 {
            batch.push(record(&quiet[(i / 20) % 10], &normal[i % normal.len()], false));
        }
    }
    let verdicts = feed(&mut e, &batch, 1000);
    let (mut flood_taken, mut quiet_scored, mut quiet_total) = (0, 0, 0);
    for (r, v) in batch.iter().zip(&verdicts) {
        if r.device == "flood" {
            flood_taken += usize::from(*v != Verdict::Deferred);
        } else {
            quiet_total += 1;
            quiet_scored += usize::from(matches!(v, Verdict::Scored { .. }));
        }
    }
    assert_eq!(flood_taken, 8, "the flooding device is capped at its share");
    assert_eq!((quiet_scored, quiet_total), (50, 50), "every quiet device's record is scored");
    assert_eq!(e.devices.get("flood").unwrap().unlabeled.len(), 8, "shed records stay out of the windows");
    // No limit: everything is taken.
    let mut unlimited = engine(0);
    let taken = feed(&mut unlimited, &batch, 0).iter().filter(|v| **v != Verdict::Deferred).count();
    assert_eq!(taken, batch.len());
}
