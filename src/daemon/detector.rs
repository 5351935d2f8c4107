//! The detector: the scoring engine, its background adapter and the model version and
//! generation they share. Adaptation is scheduled from here and its results installed;
//! a reload swaps the model in both.

use std::path::Path;

use crate::model::{file, Model};

use super::adapter::{Adapter, Finished};
use super::events;
use super::metrics::Metrics;
use crate::monitor::engine::Engine;
use crate::monitor::output::{unix_now, PriorUpdate};

pub(crate) struct Detector {
    pub(crate) engine: Engine,
    adapter: Adapter,
    /// The first 12 hex digits of the model file's sha256.
    version: String,
    /// Bumped at each reload; adaptation results of older models are dropped.
    generation: u64,
}

impl Detector {
    /// The adapter solves in batches of the engine's `adaptation_batch` devices.
    pub(crate) fn new(engine: Engine, adapting: Model, version: String) -> Self {
        let adapter = Adapter::spawn(adapting, 0, engine.adaptation_batch);
        Self { engine, adapter, version, generation: 0 }
    }

    pub(crate) fn version(&self) -> &str {
        &self.version
    }

    /// The engine to score with, and the version of its model.
    pub(crate) fn engine_and_version(&mut self) -> (&mut Engine, &str) {
        (&mut self.engine, &self.version)
    }

    /// Hand the devices whose windows changed by `min_changed` records to the adapter,
    /// unless it is busy. Returns whether a job was handed over.
    pub(crate) fn schedule(&mut self, min_changed: usize) -> bool {
        if self.adapter.busy {
            return false;
        }
        let jobs = self.engine.adaptation_jobs(min_changed, usize::MAX);
        self.adapter.submit(self.generation, jobs)
    }

    /// The adapter's next result.
    pub(crate) async fn adapted(&mut self) -> Option<Finished> {
        self.adapter.results.recv().await
    }

    /// Install an adaptation result of the current model; the prior updates to publish.
    pub(crate) fn install(&mut self, done: Finished, metrics: &Metrics) -> Vec<PriorUpdate> {
        self.adapter.busy = false;
        if done.generation != self.generation {
            return vec![]; // adapted under a model that was replaced meanwhile
        }
        metrics.adaptation_seconds.observe(done.elapsed.as_secs_f64() / done.batches.max(1) as f64);
        metrics.adaptations.inc_by(done.states.len() as u64);
        for adapted in &done.states {
            metrics.priors.observe(f64::from(adapted.state.prior));
        }
        self.engine
            .install(done.states)
            .iter()
            .filter_map(|id| self.engine.devices.get(id)?.prior_update(id, &self.version, unix_now()))
            .collect()
    }

    /// Load the model file again (SIGHUP). A file that does not load or has another
    /// feature count leaves the running model in place.
    pub(crate) fn reload(&mut self, path: &Path, metrics: &Metrics) {
        let loaded = match load_model(path) {
            Ok(loaded) => loaded,
            Err(e) => return events::model_reload_failed(metrics, &e),
        };
        let (expected, found) = (self.engine.devices.dim(), loaded.scoring.dim());
        if found != expected {
            let reason = format!("the new model takes {found} features, the running one {expected}");
            return events::model_reload_failed(metrics, &reason);
        }
        let LoadedModel { scoring, adapting, version } = loaded;
        events::model_reloaded(metrics, &version, scoring.dim(), scoring.net.config.task_dim);
        self.version = version;
        self.generation += 1;
        self.adapter.set_model(adapting, self.generation);
        self.engine.replace_model(scoring);
        self.schedule(1);
    }
}

/// A model loaded twice — one copy scores, one adapts on its own thread (torch
/// tensors are not `Sync`) — and its version: the first 12 hex digits of the
/// file's sha256.
pub(crate) struct LoadedModel {
    pub(crate) scoring: Model,
    pub(crate) adapting: Model,
    pub(crate) version: String,
}

pub(crate) fn load_model(path: &Path) -> Result<LoadedModel, file::ModelFileError> {
    use sha2::{Digest, Sha256};
    let bytes =
        std::fs::read(path).map_err(|source| file::ModelFileError::Read { path: path.into(), source })?;
    let device = crate::model::default_device();
    let scoring = file::from_bytes(&bytes, path, device)?;
    let adapting = file::from_bytes(&bytes, path, device)?;
    let version = Sha256::digest(&bytes)[..6].iter().map(|b| format!("{b:02x}")).collect();
    Ok(LoadedModel { scoring, adapting, version })
}
