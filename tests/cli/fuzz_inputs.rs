//! Property-based fuzzing of everything that parses outside input: the record decoder,
//! the labeled-task CSV loader and the N-BaIoT feature-CSV reader. None may panic, and
//! whatever they accept must be well-formed (right dimension, finite values).
//!
//! `make test` runs a fixed number of cases per target; `make soak` sets
//! METAPU_FUZZ_SECONDS and each target then runs fresh cases until that time is spent.

use std::time::{Duration, Instant};

use metapu::data::{csv_tasks, nbaiot};
use metapu::monitor::record::{decode, decode_message, encode, encode_binary, records_in, Batch};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};

const DIM: usize = 3;
const MAX_BYTES: usize = 4096;

/// Run `test` on cases of `strategy`: a fixed count, or for METAPU_FUZZ_SECONDS.
fn fuzz<S: Strategy>(name: &str, strategy: S, test: impl Fn(S::Value) -> Result<(), TestCaseError>)
where
    S::Value: std::fmt::Debug,
{
    let budget = std::env::var("METAPU_FUZZ_SECONDS").ok().and_then(|s| s.parse::<u64>().ok());
    let started = Instant::now();
    let mut cases = 0u64;
    loop {
        let chunk = 256;
        let mut runner =
            TestRunner::new(Config { cases: chunk, failure_persistence: None, ..Config::default() });
        if let Err(e) = runner.run(&strategy, &test) {
            panic!("{name}: {e}");
        }
        cases += u64::from(chunk);
        match budget {
            Some(s) if started.elapsed() < Duration::from_secs(s) => continue,
            _ => break,
        }
    }
    eprintln!("{name}: {cases} cases in {:.1} s", started.elapsed().as_secs_f64());
}

/// Text that looks like a record: valid pieces spliced with hostile ones.
fn record_like() -> impl Strategy<Value = String> {
    let number = prop_oneof![
        any::<f64>().prop_map(|v| format!("{v:e}")),
        any::<i64>().prop_map(|v| v.to_string()),
        Just("NaN".to_string()),
        Just("-Infinity".to_string()),
        Just("1e999".to_string()),
        Just("\"1\"".to_string()),
        Just("null".to_string()),
    ];
    let features = prop::collection::vec(number.clone(), 0..6).prop_map(|v| format!("[{}]", v.join(", ")));
    let label = prop_oneof![
        Just(String::new()),
        Just(r#", "label": "normal""#.to_string()),
        Just(r#", "label": "anomalous""#.to_string()),
        "[ -~]{0,8}".prop_map(|s| format!(r#", "label": {s:?}"#)),
    ];
    let device = prop_oneof![Just(String::new()), "[ -~]{0,6}".prop_map(|s| format!(r#""device": {s:?}, "#))];
    (device, number, features, label, "[ -~]{0,3}")
        .prop_map(|(d, ts, f, l, junk)| format!(r#"{{{d}"ts": {ts}, "features": {f}{l}}}{junk}"#))
}

fn check_decoded(key: Option<&[u8]>, value: &[u8]) -> Result<(), TestCaseError> {
    if let Ok(r) = decode(key, value, DIM, MAX_BYTES) {
        prop_assert_eq!(r.features.len(), DIM);
        prop_assert!(r.features.iter().all(|v| v.is_finite()));
        prop_assert!(r.ts.is_finite());
        prop_assert!(!r.device.is_empty());
    }
    Ok(())
}

#[test]
fn the_decoder_takes_any_bytes() {
    let key = prop::option::of(prop::collection::vec(any::<u8>(), 0..12));
    let value = prop::collection::vec(any::<u8>(), 0..MAX_BYTES + 64);
    fuzz("decoder/bytes", (key, value), |(k, v)| check_decoded(k.as_deref(), &v));
}

#[test]
fn the_decoder_takes_any_record_like_text() {
    let key = prop::option::of("[ -~]{0,6}");
    fuzz("decoder/records", (key, record_like()), |(k, v)| {
        check_decoded(k.as_deref().map(str::as_bytes), v.as_bytes())
    });
}

#[test]
fn valid_records_decode_to_what_was_encoded() {
    let row = prop::collection::vec(-1e30f32..1e30, DIM);
    fuzz("decoder/round-trip", ("[a-z0-9-]{1,12}", row, any::<bool>()), |(device, row, normal)| {
        let r = decode(None, &encode(&device, 1.0, &row, normal), DIM, MAX_BYTES)
            .map_err(|e| TestCaseError::fail(format!("refused a valid record: {e}")))?;
        prop_assert_eq!((r.device, r.features, r.known_normal), (device, row, normal));
        Ok(())
    });
}

#[test]
fn binary_records_round_trip_and_any_binary_tail_is_safe() {
    let row = prop::collection::vec(-1e30f32..1e30, DIM);
    fuzz("decoder/binary-round-trip", ("[a-z0-9-]{1,12}", row, any::<bool>()), |(device, row, normal)| {
        let r = decode(None, &encode_binary(&device, 1.0, &row, normal, None), DIM, MAX_BYTES)
            .map_err(|e| TestCaseError::fail(format!("refused a valid binary record: {e}")))?;
        prop_assert_eq!((r.device, r.features, r.known_normal), (device, row, normal));
        Ok(())
    });
    // The magic followed by anything: truncations, wrong counts, NaN bits, junk.
    let tail = prop::collection::vec(any::<u8>(), 0..64);
    fuzz("decoder/binary-bytes", (prop::option::of("[ -~]{0,6}"), tail), |(k, tail)| {
        let mut v = b"MPR1".to_vec();
        v.extend(tail);
        check_decoded(k.as_deref().map(str::as_bytes), &v)
    });
}

#[test]
fn batches_round_trip_and_any_batch_bytes_are_safe() {
    let row = prop::collection::vec(-1e30f32..1e30, DIM);
    let rows = prop::collection::vec(row, 1..8);
    fuzz("decoder/batch-round-trip", ("[a-z0-9-]{1,12}", rows), |(device, rows)| {
        let mut batch = Batch::default();
        for (i, row) in rows.iter().enumerate() {
            batch.push(&encode_binary(&device, i as f64, row, false, None));
        }
        let message = batch.take();
        prop_assert_eq!(records_in(&message), rows.len());
        let back = decode_message(None, &message, DIM, 1 << 20);
        prop_assert_eq!(back.len(), rows.len());
        for (r, row) in back.into_iter().zip(&rows) {
            let r = r.map_err(|e| TestCaseError::fail(format!("refused a valid batched record: {e}")))?;
            prop_assert_eq!(&r.features, row);
        }
        Ok(())
    });
    // The batch magic followed by anything: lengths past the end, records of junk.
    let tail = prop::collection::vec(any::<u8>(), 0..96);
    fuzz("decoder/batch-bytes", (prop::option::of("[ -~]{0,6}"), tail), |(k, tail)| {
        let mut v = b"MPB1".to_vec();
        v.extend(tail);
        let decoded = decode_message(k.as_deref().map(str::as_bytes), &v, DIM, MAX_BYTES);
        prop_assert!(records_in(&v) >= 1);
        prop_assert!(!decoded.is_empty(), "a message is at least one record or one refusal");
        for r in decoded.into_iter().flatten() {
            prop_assert_eq!(r.features.len(), DIM);
            prop_assert!(r.features.iter().all(|v| v.is_finite()) && r.ts.is_finite());
        }
        Ok(())
    });
}

/// CSV-like text: a header, then rows of cells drawn from numbers, labels and junk.
fn csv_like(header: &'static str) -> impl Strategy<Value = String> {
    let cell = prop_oneof![
        Just("1".to_string()),
        Just("0".to_string()),
        Just(String::new()),
        Just("nan".to_string()),
        Just("inf".to_string()),
        Just("1e40".to_string()),
        Just("\"a,b\"".to_string()),
        Just("\"".to_string()),
        any::<f32>().prop_map(|v| v.to_string()),
        "[ -~]{0,5}",
    ];
    let row = prop::collection::vec(cell, 0..6).prop_map(|c| c.join(","));
    prop::collection::vec(row, 0..8).prop_map(move |rows| format!("{header}\n{}\n", rows.join("\n")))
}

#[test]
fn the_task_csv_loader_takes_any_text() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tasks.csv");
    let text = prop_oneof![csv_like("task,label,a,b"), csv_like("a,task,b,label"), "[ -~\n]{0,80}"];
    fuzz("csv/tasks", (text, any::<bool>()), |(text, skip)| {
        std::fs::write(&path, &text).unwrap();
        if let Ok(set) = csv_tasks::load(&path, skip) {
            let dim = set.dim();
            for t in &set.tasks {
                prop_assert_eq!(t.x.len(), t.labels.len() * dim);
                prop_assert!(t.x.iter().all(|v| v.is_finite()));
            }
        }
        Ok(())
    });
}

#[test]
fn the_feature_csv_reader_takes_any_text() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("benign_traffic.csv");
    let text = prop_oneof![csv_like("MI_dir_L5_weight,MI_dir_L5_mean,H_L5_weight"), "[ -~\n]{0,80}"];
    fuzz("csv/features", (text, any::<bool>()), |(text, skip)| {
        std::fs::write(&path, &text).unwrap();
        let mut skipped = 0;
        if let Ok((header, values)) = nbaiot::read_feature_csv(&path, skip, &mut skipped) {
            prop_assert_eq!(values.len() % header.len().max(1), 0);
            prop_assert!(values.iter().all(|v| v.is_finite()));
        }
        Ok(())
    });
}
