use super::*;
use crate::model::{MetaPuNet, NetConfig, PreprocessKind, Preprocessor, Provenance};
use crate::monitor::devices::WindowSizes;

fn at(partition: i32, offset: i64) -> Source {
    Source::new("in", partition, offset)
}

/// A record of a batch, fresh from `source`.
fn fresh<'a>(record: &'a FeatureRecord, source: &'a Source) -> BatchRecord<'a> {
    BatchRecord { record, source, stamp: None }
}

/// An untrained model on two raw features, drawn from a generator of its own (torch's
/// is the process's, which other test threads draw from).
fn two_feature_model() -> Model {
    let net = MetaPuNet::new(NetConfig::paper(2, 8), tch::Device::Cpu);
    net.init_from_seed(1);
    Model {
        net,
        preprocess: Preprocessor::identity(PreprocessKind::None, 2),
        feature_names: vec!["a".into(), "b".into()],
        provenance: Provenance::default(),
    }
}

#[test]
fn the_devices_score_only_adapted_devices() {
    let model = two_feature_model;
    let sizes = WindowSizes { positive: 5, unlabeled: 10, bootstrap_positives: 0, ..WindowSizes::default() };
    let mut e = Devices::new(
        model(),
        DeviceTable::new(2, sizes, 10),
        0.5,
        Scheduling::default(),
        crate::monitor::incidents::TEST_RULES,
    );
    let rec = |d: &str, x: f32, normal: bool| crate::monitor::record::FeatureRecord {
        device: d.into(),
        ts: 0.0,
        features: vec![x, -x],
        known_normal: normal,
        context: None,
    };
    let (r1, r2, r3) = (rec("p", 0.1, true), rec("p", 0.3, false), rec("q", 0.2, false));
    let sources = [at(0, 0), at(0, 1), at(0, 2)];
    let batch = [fresh(&r1, &sources[0]), fresh(&r2, &sources[1]), fresh(&r3, &sources[2])];
    let processed = e.process(&batch, &[0.0; 3], Now::at(0, 0.0));
    let v = processed.outcomes;
    assert!(
        v[..2].iter().all(|v| matches!(v, RecordOutcome::Scored { .. })),
        "p adapted before scoring: {v:?}"
    );
    assert_eq!(v[2], RecordOutcome::Unknown, "q has no positive: no classifier");
    assert_eq!(processed.adapted, ["p"]);
    assert!(e.adaptation_jobs(1, 100).is_empty(), "p's windows were just adapted; q has no positive");
    let r4 = rec("p", 0.5, false);
    e.process(&[fresh(&r4, &at(0, 3))], &[0.0], Now::at(0, 0.0));
    let jobs = e.adaptation_jobs(1, 100);
    assert_eq!(jobs.len(), 1, "p changed since; q has no positive");
    assert_eq!(e.install(run_adaptation(&e.model, &jobs, 8)), ["p"]);
    // The adapter thread holds p's windows while an analyst's verdict adapts p at once:
    // the thread's classifier, adapted on the older windows, must not replace it.
    let r5 = rec("p", 0.7, true);
    e.process(&[fresh(&r5, &at(0, 4))], &[0.0], Now::at(0, 0.0));
    let held_by_the_adapter = e.adaptation_jobs(1, 100);
    assert_eq!(e.adapt_now(["p"]), ["p"]);
    assert!(e.install(run_adaptation(&e.model, &held_by_the_adapter, 8)).is_empty(), "stale classifier");
    let v = e.score([&r2, &r3].into_iter());
    assert!(matches!(v[0], RecordOutcome::Scored { posterior, .. } if (0.0..=1.0).contains(&posterior)));
    assert_eq!(v[1], RecordOutcome::Unknown);
    e.replace_model(model(), "w", None);
    assert_eq!(e.score([&r2].into_iter()), [RecordOutcome::Unknown], "states of the old model are dropped");
}
