//! The model file: `.safetensors` weights (f32) plus one metadata entry, "metapu",
//! holding JSON: format and version, architecture, preprocessing, feature names and
//! provenance. The file is byte-for-byte determined by the model (sorted names, no
//! clocks), so the same seed and data give the same file.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use safetensors::tensor::{Dtype, SafeTensors, TensorView};
use serde::{Deserialize, Serialize};
use tch::{Device, Kind, Tensor};

use super::{MetaPuNet, Model, NetConfig, PreprocessKind, Preprocessor, Provenance};

pub const FORMAT: &str = "metapu-model";
pub const FORMAT_VERSION: u32 = 1;
const META_KEY: &str = "metapu";
const SHIFT: &str = "preprocess.shift";
const SCALE: &str = "preprocess.scale";

#[derive(Debug, thiserror::Error)]
pub enum ModelFileError {
    #[error("cannot read model file {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("cannot write model file {path}: {source}")]
    Write { path: PathBuf, source: std::io::Error },
    #[error("model file {path} is corrupt or not a safetensors file: {reason}")]
    Corrupt { path: PathBuf, reason: String },
    #[error("{path} is not a metapu model file (no \"{META_KEY}\" metadata)")]
    NotAModel { path: PathBuf },
    #[error("model file {path} has format version {found}; this build reads version {FORMAT_VERSION}")]
    Version { path: PathBuf, found: u32 },
    #[error("model file {path} has inconsistent dimensions: {reason}")]
    Dimensions { path: PathBuf, reason: String },
}

#[derive(Debug, Serialize, Deserialize)]
struct Metadata {
    format: String,
    format_version: u32,
    net: NetConfig,
    preprocess: PreprocessKind,
    feature_names: Vec<String>,
    provenance: Provenance,
}

fn to_f32_vec(t: &Tensor) -> Vec<f32> {
    let flat = t.detach().to_kind(Kind::Float).to_device(Device::Cpu).contiguous().flatten(0, -1);
    Vec::<f32>::try_from(flat).unwrap_or_default()
}

fn le_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Serialise a model to bytes.
pub fn to_bytes(model: &Model) -> Result<Vec<u8>, safetensors::SafeTensorError> {
    let meta = Metadata {
        format: FORMAT.into(),
        format_version: FORMAT_VERSION,
        net: model.net.config.clone(),
        preprocess: model.preprocess.kind,
        feature_names: model.feature_names.clone(),
        provenance: model.provenance.clone(),
    };
    let mut named: Vec<(String, Vec<usize>, Vec<u8>)> = model
        .net
        .vs
        .variables()
        .into_iter()
        .map(|(name, t)| {
            let shape = t.size().iter().map(|&d| d as usize).collect();
            (name, shape, le_bytes(&to_f32_vec(&t)))
        })
        .collect();
    let dim = model.preprocess.dim();
    named.push((SHIFT.into(), vec![dim], le_bytes(&model.preprocess.shift)));
    named.push((SCALE.into(), vec![dim], le_bytes(&model.preprocess.scale)));
    named.sort_by(|a, b| a.0.cmp(&b.0));
    let views = named
        .iter()
        .map(|(name, shape, bytes)| Ok((name.clone(), TensorView::new(Dtype::F32, shape.clone(), bytes)?)))
        .collect::<Result<Vec<_>, safetensors::SafeTensorError>>()?;
    let json = serde_json::to_string(&meta).expect("metadata serialises");
    let info = Some(HashMap::from([(META_KEY.to_string(), json)]));
    safetensors::serialize(views, &info)
}

/// Write a model file atomically (temporary file, then rename).
pub fn save(model: &Model, path: &Path) -> Result<(), ModelFileError> {
    let bytes =
        to_bytes(model).map_err(|e| ModelFileError::Corrupt { path: path.into(), reason: e.to_string() })?;
    let tmp = path.with_extension("safetensors.tmp");
    std::fs::write(&tmp, bytes)
        .and_then(|()| std::fs::rename(&tmp, path))
        .map_err(|source| ModelFileError::Write { path: path.into(), source })
}

/// Read and validate a model file onto `device`.
pub fn load(path: &Path, device: Device) -> Result<Model, ModelFileError> {
    let bytes = std::fs::read(path).map_err(|source| ModelFileError::Read { path: path.into(), source })?;
    from_bytes(&bytes, path, device)
}

pub fn from_bytes(bytes: &[u8], path: &Path, device: Device) -> Result<Model, ModelFileError> {
    let corrupt = |reason: String| ModelFileError::Corrupt { path: path.into(), reason };
    let dims = |reason: String| ModelFileError::Dimensions { path: path.into(), reason };
    let (_, header) = SafeTensors::read_metadata(bytes).map_err(|e| corrupt(e.to_string()))?;
    let json = header
        .metadata()
        .as_ref()
        .and_then(|m| m.get(META_KEY))
        .ok_or_else(|| ModelFileError::NotAModel { path: path.into() })?;
    // Read the version alone first so a future format gets a version error, not a parse error.
    let version: serde_json::Value =
        serde_json::from_str(json).map_err(|e| corrupt(format!("metadata: {e}")))?;
    if version.get("format").and_then(|v| v.as_str()) != Some(FORMAT) {
        return Err(ModelFileError::NotAModel { path: path.into() });
    }
    let found = version.get("format_version").and_then(|v| v.as_u64()).unwrap_or(0) as u32;
    if found != FORMAT_VERSION {
        return Err(ModelFileError::Version { path: path.into(), found });
    }
    let meta: Metadata = serde_json::from_value(version).map_err(|e| corrupt(format!("metadata: {e}")))?;
    let d = meta.net.input_dim;
    if d <= 0
        || meta.net.task_dim <= 0
        || meta.net.embed_dim <= 0
        || meta.net.hidden <= 0
        || meta.net.set_dim <= 0
    {
        return Err(dims(format!("non-positive size in {:?}", meta.net)));
    }
    if meta.feature_names.len() != d as usize {
        return Err(dims(format!("{} feature names for {} input features", meta.feature_names.len(), d)));
    }
    let tensors = SafeTensors::deserialize(bytes).map_err(|e| corrupt(e.to_string()))?;
    let read = |name: &str, shape: &[i64]| -> Result<Tensor, ModelFileError> {
        let view = tensors.tensor(name).map_err(|_| dims(format!("tensor {name} is missing")))?;
        let found: Vec<i64> = view.shape().iter().map(|&s| s as i64).collect();
        if view.dtype() != Dtype::F32 || found != shape {
            return Err(dims(format!("tensor {name} is {:?}{found:?}, expected F32{shape:?}", view.dtype())));
        }
        let values: Vec<f32> =
            view.data().chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
        if values.iter().any(|v| !v.is_finite()) {
            return Err(corrupt(format!("tensor {name} holds NaN or infinity")));
        }
        Ok(Tensor::from_slice(&values).reshape(shape))
    };
    let net = MetaPuNet::new(meta.net.clone(), device);
    let mut vars = net.vs.variables();
    if tensors.len() != vars.len() + 2 {
        return Err(dims(format!("{} tensors, expected {}", tensors.len(), vars.len() + 2)));
    }
    tch::no_grad(|| -> Result<(), ModelFileError> {
        for (name, var) in vars.iter_mut() {
            let value = read(name, &var.size())?;
            var.copy_(&value.to_device(device));
        }
        Ok(())
    })?;
    let to_vec = |t: Tensor| Vec::<f32>::try_from(t).unwrap_or_default();
    let preprocess = Preprocessor {
        kind: meta.preprocess,
        shift: to_vec(read(SHIFT, &[d])?),
        scale: to_vec(read(SCALE, &[d])?),
    };
    if preprocess.scale.contains(&0.0) {
        return Err(corrupt("preprocessing scale has a zero".into()));
    }
    Ok(Model { net, preprocess, feature_names: meta.feature_names, provenance: meta.provenance })
}
