//! Starting a daemon and the handle to a running one: load the model, bind HTTP,
//! connect to Kafka, assemble the service's parts and run them on a thread of their
//! own; control requests in, the service's result out.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::producer::FutureProducer;
use tokio::sync::mpsc;

use super::config::DaemonConfig;
pub use super::control::{Control, DaemonError};
use super::health::Health;
use super::http::{self, HttpState};
use super::kafka::{self, Assignment, DaemonContext, TopicSpec};
use super::model_host::{load_model, LoadedModel, ModelHost};
use super::outbox::{Outbox, Topics};
use super::service::Service;
use super::sinks::Sinks;
use super::state::StateStore;
use super::Metrics;
use crate::monitor::clock::Clock;
use crate::monitor::devices::solver::ThreadSolver;
use crate::monitor::Monitor;

/// A running daemon: its HTTP address, metrics and a control channel.
pub struct Daemon {
    pub http_addr: SocketAddr,
    pub metrics: Arc<Metrics>,
    control: mpsc::UnboundedSender<Control>,
    /// Set on shutdown: the service's loop and a restore in progress both watch it.
    stop: tokio::sync::watch::Sender<bool>,
    thread: std::thread::JoinHandle<Result<(), DaemonError>>,
    finished: tokio::sync::watch::Receiver<bool>,
}

/// Marks the service thread finished when dropped: on return and on a panic alike.
struct FinishedOnDrop(tokio::sync::watch::Sender<bool>);

impl Drop for FinishedOnDrop {
    fn drop(&mut self) {
        let _ = self.0.send(true);
    }
}

impl Daemon {
    pub fn send(&self, c: Control) {
        // A send fails only once the service has ended, which `finished` reports.
        let _ = self.control.send(c);
    }

    /// Ask for a clean shutdown and wait for it.
    pub async fn shutdown(self) -> Result<(), DaemonError> {
        let _ = self.stop.send(true);
        self.wait().await
    }

    /// Resolves once the service thread has ended, asked to or not (`serve` exits on it
    /// rather than keeping a process alive whose pipeline is gone).
    pub fn finished(&self) -> impl std::future::Future<Output = ()> + 'static {
        let mut finished = self.finished.clone();
        async move {
            let _ = finished.wait_for(|done| *done).await;
        }
    }

    /// The service thread's result; its panic becomes an error, never `Ok`. Waits on
    /// the thread's finished flag, not in a blocking task: a caller that gives up on it
    /// (a timeout) leaves nothing behind that its runtime would wait for at its end.
    pub async fn wait(self) -> Result<(), DaemonError> {
        self.finished().await;
        // The flag is set as the thread's closure returns: joining takes no time.
        self.thread.join().map_err(|panic| {
            let text = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "no message".into());
            DaemonError::Panicked(text)
        })?
    }
}

/// Create our topics where the broker lacks them; the state topic gets as many
/// partitions as the first input topic and is created compacted, and an existing one
/// that is not is refused (`state.require_compacted`). Returns the state topic's and the
/// first input topic's partition counts.
async fn ensure_topics(cfg: &DaemonConfig) -> Result<(i32, i32), DaemonError> {
    let k = &cfg.kafka;
    let input = kafka::topic_metadata_off_runtime(k, &k.input_topics[0]).await;
    let input_partitions = input.and_then(|m| m.partitions).unwrap_or(1);
    let replication = state_replication(cfg, input.map(|m| m.brokers));
    let mut topics: Vec<TopicSpec<'_>> = k.input_topics.iter().map(|t| TopicSpec::plain(t, 1)).collect();
    topics.extend([
        TopicSpec::plain(&k.alerts_topic, 1),
        TopicSpec::plain(&k.priors_topic, 1),
        TopicSpec::plain(&k.deadletter_topic, 1),
        TopicSpec::plain(&k.incidents_topic, 1),
        TopicSpec::plain(&k.feedback_topic, input_partitions),
        TopicSpec {
            name: &k.kinds_topic,
            partitions: 1,
            replication,
            configs: state_topic_configs(replication),
        },
        TopicSpec {
            name: &k.state_topic,
            partitions: input_partitions,
            replication,
            configs: state_topic_configs(replication),
        },
    ]);
    if k.publish_scores {
        topics.push(TopicSpec::plain(&k.scores_topic, 1));
    }
    if let Err(e) = kafka::ensure_topics(k, &topics, Duration::from_secs(10)).await {
        tracing::warn!(error = %e, "could not ensure topics; relying on the broker's auto-creation");
    }
    check_state_topic(cfg).await?;
    let state_partitions = kafka::topic_metadata_off_runtime(k, &k.state_topic)
        .await
        .and_then(|m| m.partitions)
        .unwrap_or(input_partitions);
    Ok((state_partitions, input_partitions))
}

/// The state topic's replicas: configured, or the cluster's broker count up to 3.
fn state_replication(cfg: &DaemonConfig, brokers: Option<usize>) -> i32 {
    if cfg.state.replication > 0 {
        return cfg.state.replication;
    }
    brokers.unwrap_or(1).clamp(1, 3) as i32
}

/// A changelog's configs: compacted, so the last snapshot of every device stays; with
/// replicas, a write needs two of them.
fn state_topic_configs(replication: i32) -> Vec<(&'static str, &'static str)> {
    let mut configs = vec![("cleanup.policy", "compact")];
    if replication >= 3 {
        configs.push(("min.insync.replicas", "2"));
    }
    configs
}

/// The state topic must be compacted; a broker that cannot say is believed, with a
/// warning.
async fn check_state_topic(cfg: &DaemonConfig) -> Result<(), DaemonError> {
    let topic = &cfg.kafka.state_topic;
    match kafka::topic_config(&cfg.kafka, topic, "cleanup.policy", Duration::from_secs(10)).await {
        Ok(Some(policy)) if policy.split(',').any(|p| p.trim() == "compact") => Ok(()),
        Ok(Some(policy)) => {
            let e = DaemonError::StateTopicNotCompacted {
                topic: topic.clone(),
                policy,
                brokers: cfg.kafka.brokers.clone(),
            };
            if cfg.state.require_compacted {
                return Err(e);
            }
            tracing::warn!("{e}");
            Ok(())
        }
        Ok(None) | Err(_) => {
            tracing::warn!(topic, "could not read the state topic's cleanup.policy; it must be compact");
            Ok(())
        }
    }
}

/// One torch thread per thread that calls torch, for the daemon's process: a device's
/// matrices are small, the daemon's own threads (scoring, adapter, solvers) already
/// share the cores, and torch's pool spun a core of its own idle beside them
/// (docs/benchmarks.md). Process-wide, so the binary calls it, not [`start`]: a process
/// that also trains (the tests train their fixture model) would otherwise train on
/// whatever thread count its first daemon happened to leave.
pub fn use_one_torch_thread() {
    tch::set_num_threads(1);
}

/// Start the daemon: load the model, bind HTTP, connect to Kafka, run.
pub async fn start(mut cfg: DaemonConfig) -> Result<Daemon, DaemonError> {
    // Once at start (a reload loads onto the same device).
    let (_, compute, fallback) = crate::model::compute_report();
    if fallback {
        tracing::warn!(compute = %compute, "adapting and scoring on the CPU");
    } else {
        tracing::info!(compute = %compute, "adapting and scoring");
    }
    // The solver threads are counted once: a reload loads a model copy for each.
    cfg.adaptation.solver_threads = cfg.adaptation.solvers(cfg.time.clock);
    let LoadedModel { scoring, adapting, solving, version } =
        load_model(&cfg.model.path, cfg.adaptation.solver_threads)?;
    let expected = cfg.model.features;
    if expected != 0 && scoring.dim() != expected {
        let (path, found) = (cfg.model.path.clone(), scoring.dim());
        return Err(DaemonError::FeatureCount { path, found, expected });
    }
    let metrics = Arc::new(Metrics::new());
    let (features, task_dim) = (scoring.dim(), scoring.net.config.task_dim);
    metrics.emit(super::internal_events::ModelLoaded { version: &version, features, task_dim });
    let health = Arc::new(Health::new(Arc::clone(&metrics)));
    let (http_stop_tx, http_stop_rx) = tokio::sync::oneshot::channel::<()>();
    let (http_addr, _http_task) = http::serve(
        &cfg.http.listen,
        HttpState { metrics: Arc::clone(&metrics), health: Arc::clone(&health) },
        async move {
            let _ = http_stop_rx.await;
        },
    )
    .await
    .map_err(|source| DaemonError::Http { addr: cfg.http.listen.clone(), source })?;

    let (stop, stop_rx) = tokio::sync::watch::channel(false);
    let assignment = Arc::new(Assignment::default());
    let (assignments_tx, assignments) = mpsc::unbounded_channel();
    let context = DaemonContext {
        health: Arc::clone(&health),
        assignment: Arc::clone(&assignment),
        events: assignments_tx,
    };
    let consumer: StreamConsumer<DaemonContext> = kafka::consumer_config(&cfg.kafka)
        .set("group.id", &cfg.kafka.group_id)
        .set("enable.auto.commit", "true")
        .set("auto.commit.interval.ms", "1000")
        // Offsets are stored by hand, only after the batch's outputs are acknowledged.
        .set("enable.auto.offset.store", "false")
        .set("auto.offset.reset", &cfg.kafka.auto_offset_reset)
        .set("statistics.interval.ms", super::health::STATISTICS_INTERVAL.as_millis().to_string())
        .create_with_context(context)?;
    let producer: FutureProducer = kafka::producer_config(&cfg.kafka)
        .set("acks", "all")
        .set("linger.ms", "5")
        .set("message.timeout.ms", "30000")
        .create()?;
    let (state_partitions, input_partitions) = ensure_topics(&cfg).await?;
    let kinds_partitions = kafka::topic_metadata_off_runtime(&cfg.kafka, &cfg.kafka.kinds_topic)
        .await
        .and_then(|m| m.partitions)
        .unwrap_or(1);
    let kinds = kafka::kinds_reader(&cfg.kafka, kinds_partitions)?;
    let credentials = std::env::var_os("CREDENTIALS_DIRECTORY").map(std::path::PathBuf::from);
    let sinks =
        Sinks::start(&cfg.sinks, credentials.as_deref(), Arc::clone(&metrics)).map_err(DaemonError::Sink)?;
    let mut topics: Vec<&str> = cfg.kafka.input_topics.iter().map(String::as_str).collect();
    topics.push(&cfg.kafka.feedback_topic);
    consumer.subscribe(&topics)?;

    let mut settings = cfg.core_settings();
    if let Some(state) = &mut settings.state {
        state.input_partitions = input_partitions.max(1) as u32;
    }
    let mut monitor = Monitor::new(&settings, scoring, &version);
    if settings.clock == Clock::Event {
        // The event clock's adaptation points are solved while scoring goes on, on
        // threads of their own.
        monitor.set_solver(Box::new(ThreadSolver::spawn(solving, settings.adaptation_batch)));
    }
    let service = Service {
        monitor,
        model_host: ModelHost::new(adapting, settings.adaptation_batch),
        outbox: Outbox::new(
            Topics::of(&cfg.kafka),
            producer.clone(),
            assignment,
            Arc::clone(&metrics),
            Arc::clone(&health),
            sinks,
        ),
        state: StateStore::new(
            &cfg,
            producer.clone(),
            state_partitions,
            input_partitions,
            Arc::clone(&metrics),
            Arc::clone(&health),
        ),
        health,
        metrics: Arc::clone(&metrics),
        consumer,
        kinds,
        assignments,
        stop: stop_rx,
        restore_abandoned: false,
        started: Instant::now(),
        cfg,
    };
    let (control, control_rx) = mpsc::unbounded_channel();
    // The service owns non-`Sync` torch state, so it runs on a thread of its own with
    // a single-threaded runtime; HTTP stays on the caller's runtime.
    let (finished_tx, finished) = tokio::sync::watch::channel(false);
    let thread = std::thread::Builder::new()
        .name("metapu-service".into())
        .spawn(move || {
            let _finished = FinishedOnDrop(finished_tx);
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|source| DaemonError::Spawn { what: "service runtime", source })?;
            let result = runtime.block_on(service.run(control_rx));
            let _ = http_stop_tx.send(());
            result
        })
        .map_err(|source| DaemonError::Spawn { what: "service thread", source })?;
    Ok(Daemon { http_addr, metrics, control, stop, thread, finished })
}
