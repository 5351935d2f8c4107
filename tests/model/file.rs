//! The model file: round trip, and the documented errors for bad files.

use std::collections::HashMap;

use metapu::model::file::{self, ModelFileError};
use metapu::model::{
    MetaPuNet, Model, NetConfig, PreprocessKind, Preprocessor, PriorEstimate, Provenance, Support,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use safetensors::SafeTensors;
use tch::Device;

fn trained_like_model() -> Model {
    let net = MetaPuNet::new(NetConfig::paper(4, 16), Device::Cpu);
    net.init_from_seed(3);
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    let fit_rows: Vec<f32> = (0..400).map(|_| rng.gen_range(-1e3..1e9)).collect();
    Model {
        net,
        preprocess: Preprocessor::fit(PreprocessKind::LogStandard, &fit_rows, 4),
        feature_names: vec!["a".into(), "b".into(), "c".into(), "d".into()],
        provenance: Provenance {
            seed: 9,
            iterations: 12,
            data_sha256: "abc".into(),
            ..Provenance::default()
        },
    }
}

fn scores(m: &Model) -> Vec<u32> {
    let mut rng = ChaCha8Rng::seed_from_u64(2);
    let p: Vec<f32> = (0..12).map(|_| rng.gen_range(0.0..1e6)).collect();
    let u: Vec<f32> = (0..80).map(|_| rng.gen_range(0.0..1e6)).collect();
    let state = m.adapt(Support { positives: &p, unlabeled: &u }).unwrap();
    let records: Vec<f32> = (0..40).map(|_| rng.gen_range(0.0..1e6)).collect();
    let s = m.score(&[&state], &[0; 10], &records, 0.5).unwrap();
    s.posterior.iter().map(|v| v.to_bits()).chain([state.prior.to_bits()]).collect()
}

/// Rewrite a file's "metapu" metadata JSON with `edit`, keeping its tensors.
fn with_metadata(bytes: &[u8], edit: impl Fn(&mut serde_json::Value)) -> Vec<u8> {
    let (_, header) = SafeTensors::read_metadata(bytes).unwrap();
    let mut meta: serde_json::Value =
        serde_json::from_str(&header.metadata().as_ref().unwrap()["metapu"]).unwrap();
    edit(&mut meta);
    let tensors = SafeTensors::deserialize(bytes).unwrap();
    let info = Some(HashMap::from([("metapu".to_string(), meta.to_string())]));
    safetensors::serialize(tensors.tensors(), &info).unwrap()
}

fn load_bytes(bytes: &[u8]) -> Result<Model, ModelFileError> {
    file::from_bytes(bytes, std::path::Path::new("test.safetensors"), Device::Cpu)
}

#[test]
fn save_then_load_gives_bit_identical_scores() {
    let m = trained_like_model();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.safetensors");
    file::save(&m, &path).unwrap();
    let loaded = file::load(&path, Device::Cpu).unwrap();
    assert_eq!(scores(&m), scores(&loaded));
    assert_eq!(loaded.feature_names, m.feature_names);
    assert_eq!(loaded.provenance, m.provenance);
    assert_eq!(loaded.preprocess, m.preprocess);
    assert_eq!(loaded.net.config, m.net.config);
    // Same model, same bytes.
    assert_eq!(file::to_bytes(&m).unwrap(), std::fs::read(&path).unwrap());
}

#[test]
fn missing_file_names_the_path() {
    let err = file::load(std::path::Path::new("/nonexistent/m.safetensors"), Device::Cpu).unwrap_err();
    assert!(matches!(err, ModelFileError::Read { .. }));
    assert!(err.to_string().contains("/nonexistent/m.safetensors"), "{err}");
}

#[test]
fn corrupt_bytes_are_refused() {
    let good = file::to_bytes(&trained_like_model()).unwrap();
    for bad in [good[..good.len() / 2].to_vec(), b"not a model at all".to_vec(), vec![]] {
        let err = load_bytes(&bad).unwrap_err();
        assert!(matches!(err, ModelFileError::Corrupt { .. }), "{err}");
        assert!(err.to_string().contains("corrupt"), "{err}");
    }
}

#[test]
fn wrong_format_version_is_refused() {
    let good = file::to_bytes(&trained_like_model()).unwrap();
    let future = with_metadata(&good, |m| m["format_version"] = 99.into());
    let err = load_bytes(&future).unwrap_err();
    assert!(matches!(err, ModelFileError::Version { found: 99, .. }), "{err}");
    assert!(err.to_string().contains("version 99"), "{err}");
}

#[test]
fn wrong_dimensions_are_refused() {
    let good = file::to_bytes(&trained_like_model()).unwrap();
    let wider = with_metadata(&good, |m| {
        m["net"]["input_dim"] = 5.into();
        m["feature_names"] = serde_json::json!(["a", "b", "c", "d", "e"]);
    });
    let err = load_bytes(&wider).unwrap_err();
    assert!(matches!(err, ModelFileError::Dimensions { .. }), "{err}");
    assert!(err.to_string().contains("expected F32"), "{err}");

    let names = with_metadata(&good, |m| m["feature_names"] = serde_json::json!(["a"]));
    assert!(matches!(load_bytes(&names).unwrap_err(), ModelFileError::Dimensions { .. }));
}

#[test]
fn a_plain_safetensors_file_is_not_a_model() {
    let good = file::to_bytes(&trained_like_model()).unwrap();
    let tensors = SafeTensors::deserialize(&good).unwrap();
    let plain = safetensors::serialize(tensors.tensors(), &None).unwrap();
    assert!(matches!(load_bytes(&plain).unwrap_err(), ModelFileError::NotAModel { .. }));
}

#[test]
fn data_with_another_feature_count_is_refused() {
    let m = trained_like_model();
    assert!(m.check_feature_count(4).is_ok());
    let err = m.check_feature_count(115).unwrap_err();
    assert_eq!(err.to_string(), "the model expects 4 features per record, the data has 115");
}

#[test]
fn a_prior_head_round_trips_and_older_files_load_without_one() {
    let mut m = trained_like_model();
    let mut config = m.net.config.clone();
    config.prior_head = true;
    m.net = MetaPuNet::new(config, Device::Cpu);
    m.net.init_from_seed(4);
    let bytes = file::to_bytes(&m).unwrap();
    let loaded = load_bytes(&bytes).unwrap();
    assert!(loaded.net.config.prior_head);
    assert_eq!(scores(&m), scores(&loaded));

    // Without the head the key is not written (`make iot-model` stays byte for byte the
    // committed model), and a file without it loads as the paper's model.
    // One model for both sides: `trained_like_model` seeds torch's global generator,
    // which tests on other threads also draw from, so two calls can differ.
    let paper = trained_like_model();
    let plain = file::to_bytes(&paper).unwrap();
    let (_, header) = SafeTensors::read_metadata(&plain).unwrap();
    assert!(!header.metadata().as_ref().unwrap()["metapu"].contains("prior_head"));
    let older = with_metadata(&plain, |meta| {
        meta["net"].as_object_mut().unwrap().remove("prior_head");
    });
    let loaded = load_bytes(&older).unwrap();
    assert!(!loaded.net.config.prior_head);
    assert_eq!(scores(&loaded), scores(&paper));
}

#[test]
fn the_prior_estimate_round_trips_and_older_files_load_as_the_papers() {
    let mut m = trained_like_model();
    m.net.config.prior_estimate = PriorEstimate::KnownNormalMedian;
    let bytes = file::to_bytes(&m).unwrap();
    let (_, header) = SafeTensors::read_metadata(&bytes).unwrap();
    assert!(
        header.metadata().as_ref().unwrap()["metapu"].contains("\"prior_estimate\":\"known-normal-median\"")
    );
    let loaded = load_bytes(&bytes).unwrap();
    assert_eq!(loaded.net.config.prior_estimate, PriorEstimate::KnownNormalMedian);
    assert_eq!(scores(&m), scores(&loaded));

    // The paper's estimate is not written, so files from before the option load as it.
    m.net.config.prior_estimate = PriorEstimate::SupportMax;
    let plain = file::to_bytes(&m).unwrap();
    let (_, header) = SafeTensors::read_metadata(&plain).unwrap();
    assert!(!header.metadata().as_ref().unwrap()["metapu"].contains("prior_estimate"));
    assert_eq!(load_bytes(&plain).unwrap().net.config.prior_estimate, PriorEstimate::SupportMax);
    // The two estimates give the same ratio and another prior.
    assert_ne!(scores(&m).last(), scores(&loaded).last());
}

/// `metapu info` describes the shipped model, and a reader that stops early (`| head`)
/// is not an error: the binary used to panic on the broken pipe.
#[test]
fn info_describes_the_shipped_model_and_a_closed_pipe_ends_it_quietly() {
    let model = concat!(env!("CARGO_MANIFEST_DIR"), "/models/iot-default.safetensors");
    let text = crate::support::metapu(&["info", model]);
    assert!(text.contains("features     115"), "{text}");
    assert!(text.contains("prior        known-normal-median"), "{text}");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_metapu"))
        .args(["info", model])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Close the read end before the model has loaded: every write then fails.
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{:?}: {stderr}", out.status);
    assert!(!stderr.contains("panicked"), "{stderr}");
}
