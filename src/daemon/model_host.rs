//! The model file and the adapter thread: what the monitor asks to be adapted is run on
//! the background [`Adapter`], and a reload (SIGHUP) loads the file three times: one copy
//! for the monitor to score with, one for the adapter, one for the event clock's solver.

use std::path::Path;

use crate::model::{file, Model};
use crate::monitor::{Command, Input};

use super::adapter::{Adapter, Finished};
use super::internal_events::{ModelLoaded, ModelReloadFailed, ModelReloaded};
use super::Metrics;

pub(crate) struct ModelHost {
    adapter: Adapter,
}

impl ModelHost {
    /// The adapter solves in batches of `batch_size` devices.
    pub(crate) fn new(adapting: Model, batch_size: usize) -> Self {
        Self { adapter: Adapter::spawn(adapting, 0, batch_size) }
    }

    /// Carry out the monitor's adaptation commands; the others are not the model host's
    /// and are handed back.
    pub(crate) fn carry_out(&mut self, commands: Vec<Command>) -> Vec<Command> {
        let mut rest = Vec::new();
        for command in commands {
            match command {
                Command::Adapt { generation, jobs } => {
                    self.adapter.submit(generation, jobs);
                }
                Command::AdapterModel { generation, model } => self.adapter.set_model(*model, generation),
                other => rest.push(other),
            }
        }
        rest
    }

    /// The adapter's next result, as the monitor's input.
    pub(crate) async fn adapted(&mut self) -> Option<Input> {
        let Finished { generation, states, elapsed, batches } = self.adapter.results.recv().await?;
        self.adapter.busy = false;
        let seconds_per_batch = elapsed.as_secs_f64() / batches.max(1) as f64;
        Some(Input::Adapted { generation, states, seconds_per_batch })
    }
}

/// Load the model file again (SIGHUP), as the monitor's input. A file that does not
/// load or has another feature count than `dim` leaves the running model in place.
pub(crate) fn reload(path: &Path, solvers: usize, dim: usize, metrics: &Metrics) -> Option<Input> {
    let loaded = match load_model(path, solvers) {
        Ok(loaded) => loaded,
        Err(e) => {
            metrics.emit(ModelReloadFailed(&e));
            return None;
        }
    };
    let found = loaded.scoring.dim();
    if found != dim {
        let reason = format!("the new model takes {found} features, the running one {dim}");
        metrics.emit(ModelReloadFailed(&reason));
        return None;
    }
    let LoadedModel { scoring, adapting, solving, version } = loaded;
    let (features, task_dim) = (scoring.dim(), scoring.net.config.task_dim);
    metrics.emit(ModelReloaded(ModelLoaded { version: &version, features, task_dim }));
    Some(Input::Model { scoring: Box::new(scoring), adapting: Box::new(adapting), solving, version })
}

/// A model loaded once per thread that uses it — one copy scores, one adapts on the
/// adapter thread, one per solver thread solves the event clock's jobs (torch tensors
/// are not `Sync`) — and its version: the first 12 hex digits of the file's sha256.
pub(crate) struct LoadedModel {
    pub(crate) scoring: Model,
    pub(crate) adapting: Model,
    pub(crate) solving: Vec<Model>,
    pub(crate) version: String,
}

pub(crate) fn load_model(path: &Path, solvers: usize) -> Result<LoadedModel, file::ModelFileError> {
    use sha2::{Digest, Sha256};
    let bytes =
        std::fs::read(path).map_err(|source| file::ModelFileError::Read { path: path.into(), source })?;
    let device = crate::model::default_device();
    let scoring = file::from_bytes(&bytes, path, device)?;
    let adapting = file::from_bytes(&bytes, path, device)?;
    let solving = (0..solvers).map(|_| file::from_bytes(&bytes, path, device)).collect::<Result<_, _>>()?;
    let version = Sha256::digest(&bytes)[..6].iter().map(|b| format!("{b:02x}")).collect();
    Ok(LoadedModel { scoring, adapting, solving, version })
}
