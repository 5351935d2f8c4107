//! The model the daemon scores with: loaded at start, reloaded on SIGHUP.

use super::{InternalEvent, Metrics};

/// The model scoring from now on (its version, feature count and task-vector size).
pub(crate) struct ModelLoaded<'a> {
    pub version: &'a str,
    pub features: usize,
    pub task_dim: i64,
}

impl InternalEvent for ModelLoaded<'_> {
    fn emit(self, m: &Metrics) {
        m.set_model(self.version, self.features, self.task_dim);
    }
}

/// A reload's model took over.
pub(crate) struct ModelReloaded<'a>(pub ModelLoaded<'a>);

impl InternalEvent for ModelReloaded<'_> {
    fn emit(self, m: &Metrics) {
        tracing::info!(version = self.0.version, "model reloaded");
        self.0.emit(m);
        m.model_reloads.with_label_values(&["ok"]).inc();
    }
}

/// A reload's model was refused; the old one goes on scoring.
pub(crate) struct ModelReloadFailed<'a>(pub &'a dyn std::fmt::Display);

impl InternalEvent for ModelReloadFailed<'_> {
    fn emit(self, m: &Metrics) {
        tracing::error!(reason = %self.0, "model reload failed; keeping the old one");
        m.model_reloads.with_label_values(&["error"]).inc();
    }
}
