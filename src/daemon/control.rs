//! What a running daemon takes (control requests) and what it can fail with: shared by
//! the handle that starts it and the service loop that runs it.

use crate::model::file;

#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error("model: {0}")]
    Model(#[from] file::ModelFileError),
    #[error("sinks: {0}")]
    Sink(String),
    #[error("kafka: {0}")]
    Kafka(#[from] rdkafka::error::KafkaError),
    #[error(
        "model {path} takes {found} features per record; the configuration (model.features) says {expected}"
    )]
    FeatureCount { path: std::path::PathBuf, found: usize, expected: usize },
    #[error("http listener on {addr}: {source}")]
    Http { addr: String, source: std::io::Error },
    #[error("starting the {what}: {source}")]
    Spawn { what: &'static str, source: std::io::Error },
    #[error("the service thread panicked: {0}")]
    Panicked(String),
    #[error("the adaptation thread ended while the daemon ran")]
    AdapterGone,
    #[error(
        "state topic {topic} has cleanup.policy={policy}: with it the broker deletes snapshots at \
         retention and devices lose their known-normal records at the next restart. Make it a \
         compacted changelog: kafka-configs.sh --bootstrap-server {brokers} --alter --entity-type \
         topics --entity-name {topic} --add-config cleanup.policy=compact (or set \
         state.require_compacted = false to start anyway)"
    )]
    StateTopicNotCompacted { topic: String, policy: String, brokers: String },
}

/// Requests to a running daemon (a stop is [`super::Daemon::shutdown`]'s flag, which a
/// restore in progress watches too).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Control {
    /// Load the model file again (SIGHUP).
    Reload,
}
