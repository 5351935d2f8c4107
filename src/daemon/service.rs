//! The daemon's main loop: consume micro-batches, score, publish, store offsets
//! after acknowledgement; adapt in the background; restore and snapshot state;
//! reload the model; shut down cleanly.

use std::collections::{BTreeSet, HashMap};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::FutureExt;
use rdkafka::consumer::{CommitMode, Consumer, StreamConsumer};
use rdkafka::message::{Message, OwnedMessage};
use rdkafka::producer::{FutureProducer, FutureRecord, Producer};
use rdkafka::util::Timeout;
use tokio::sync::mpsc;

use crate::model::{file, Model};

use super::adapter::Adapter;
use super::config::DaemonConfig;
use super::delivery::{Deliveries, Output, PartitionOffset};
use super::devices::WindowSizes;
use super::engine::{run_adaptation, AdaptJob, Engine, Verdict};
use super::http::{self, HttpState};
use super::kafka::{self, AssignmentEvent, DaemonContext, Shared};
use super::metrics::Metrics;
use super::output::{self, Alert, DeadLetter, PriorUpdate, ScoreRecord, Source};
use super::record::{self, FeatureRecord};
use super::snapshot::Snapshot;

#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error("model: {0}")]
    Model(#[from] file::ModelFileError),
    #[error("kafka: {0}")]
    Kafka(#[from] rdkafka::error::KafkaError),
    #[error(
        "model {path} takes {found} features per record; the configuration (model.features) says {expected}"
    )]
    FeatureCount { path: std::path::PathBuf, found: usize, expected: usize },
    #[error("http listener on {addr}: {source}")]
    Http { addr: String, source: std::io::Error },
    #[error("the service thread panicked: {0}")]
    Panicked(String),
}

/// A lock poisoned by a thread that panicked while holding it: the daemon's state can no
/// longer be trusted, so the service stops rather than carrying on without it.
const POISONED: &str = "a daemon thread panicked while holding a lock";

/// Requests to a running daemon.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Control {
    Shutdown,
    Reload,
}

/// A running daemon: its HTTP address, metrics and a control channel.
pub struct Daemon {
    pub http_addr: SocketAddr,
    pub metrics: Arc<Metrics>,
    pub ready: Arc<AtomicBool>,
    control: mpsc::UnboundedSender<Control>,
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
        let _ = self.control.send(c);
    }

    /// Ask for a clean shutdown and wait for it.
    pub async fn shutdown(self) -> Result<(), DaemonError> {
        self.send(Control::Shutdown);
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

    /// The service thread's result; its panic becomes an error, never `Ok`.
    pub async fn wait(self) -> Result<(), DaemonError> {
        let thread = self.thread;
        let joined = tokio::task::spawn_blocking(move || thread.join())
            .await
            .map_err(|e| DaemonError::Panicked(e.to_string()))?;
        joined.map_err(|panic| {
            let text = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "no message".into());
            DaemonError::Panicked(text)
        })?
    }
}

/// A model loaded twice — one copy scores, one adapts on its own thread (torch
/// tensors are not `Sync`) — and its version: the first 12 hex digits of the
/// file's sha256.
pub struct LoadedModel {
    pub scoring: Model,
    pub adapting: Model,
    pub version: String,
}

pub fn load_model(path: &std::path::Path) -> Result<LoadedModel, file::ModelFileError> {
    use sha2::{Digest, Sha256};
    let bytes =
        std::fs::read(path).map_err(|source| file::ModelFileError::Read { path: path.into(), source })?;
    let device = crate::model::default_device();
    let scoring = file::from_bytes(&bytes, path, device)?;
    let adapting = file::from_bytes(&bytes, path, device)?;
    let version = Sha256::digest(&bytes)[..6].iter().map(|b| format!("{b:02x}")).collect();
    Ok(LoadedModel { scoring, adapting, version })
}

/// A topic's partition count from broker metadata (a blocking call, run off the runtime).
async fn partition_count(cfg: &DaemonConfig, topic: &str) -> Option<i32> {
    let (kc, topic) = (cfg.kafka.clone(), topic.to_string());
    tokio::task::spawn_blocking(move || kafka::partition_count(&kc, &topic, Duration::from_secs(5)))
        .await
        .ok()
        .flatten()
}

/// Start the daemon: load the model, bind HTTP, connect to Kafka, run.
pub async fn start(cfg: DaemonConfig) -> Result<Daemon, DaemonError> {
    // Once at start (a reload loads onto the same device).
    let (_, compute, fallback) = crate::model::compute_report();
    if fallback {
        tracing::warn!(compute = %compute, "adapting and scoring on the CPU");
    } else {
        tracing::info!(compute = %compute, "adapting and scoring");
    }
    let loaded = load_model(&cfg.model.path)?;
    let expected = cfg.model.features;
    if expected != 0 && loaded.scoring.dim() != expected {
        let (path, found) = (cfg.model.path.clone(), loaded.scoring.dim());
        return Err(DaemonError::FeatureCount { path, found, expected });
    }
    let metrics = Arc::new(Metrics::new());
    metrics.set_model(&loaded.version, loaded.scoring.dim(), loaded.scoring.net.config.task_dim);
    let ready = Arc::new(AtomicBool::new(false));
    let (http_stop_tx, http_stop_rx) = tokio::sync::oneshot::channel::<()>();
    let (http_addr, http_task) = http::serve(
        &cfg.http.listen,
        HttpState { metrics: Arc::clone(&metrics), ready: Arc::clone(&ready) },
        async move {
            let _ = http_stop_rx.await;
        },
    )
    .await
    .map_err(|source| DaemonError::Http { addr: cfg.http.listen.clone(), source })?;

    let shared = Arc::new(Shared::default());
    let consumer: StreamConsumer<DaemonContext> = kafka::base_config(&cfg.kafka)
        .set("group.id", &cfg.kafka.group_id)
        .set("enable.auto.commit", "true")
        .set("auto.commit.interval.ms", "1000")
        // Offsets are stored by hand, only after the batch's outputs are acknowledged.
        .set("enable.auto.offset.store", "false")
        .set("auto.offset.reset", &cfg.kafka.auto_offset_reset)
        .set("statistics.interval.ms", "5000")
        .create_with_context(DaemonContext { shared: Arc::clone(&shared) })?;
    let producer: FutureProducer = kafka::base_config(&cfg.kafka)
        .set("acks", "all")
        .set("linger.ms", "5")
        .set("message.timeout.ms", "30000")
        .create()?;

    let input_partitions = partition_count(&cfg, &cfg.kafka.input_topics[0]).await.unwrap_or(1);
    let mut topics: Vec<(&str, i32)> = cfg.kafka.input_topics.iter().map(|t| (t.as_str(), 1)).collect();
    topics.extend([
        (cfg.kafka.alerts_topic.as_str(), 1),
        (cfg.kafka.priors_topic.as_str(), 1),
        (cfg.kafka.deadletter_topic.as_str(), 1),
        (cfg.kafka.state_topic.as_str(), input_partitions),
    ]);
    if cfg.kafka.publish_scores {
        topics.push((cfg.kafka.scores_topic.as_str(), 1));
    }
    if let Err(e) = kafka::ensure_topics(&cfg.kafka, &topics, Duration::from_secs(10)).await {
        tracing::warn!(error = %e, "could not ensure topics; relying on the broker's auto-creation");
    }
    let state_partitions = partition_count(&cfg, &cfg.kafka.state_topic).await.unwrap_or(input_partitions);
    let topics: Vec<&str> = cfg.kafka.input_topics.iter().map(String::as_str).collect();
    consumer.subscribe(&topics)?;

    let sizes = WindowSizes {
        positive: cfg.windows.positive,
        unlabeled: cfg.windows.unlabeled,
        bootstrap_positives: cfg.windows.bootstrap_positives,
    };
    let LoadedModel { scoring, adapting, version } = loaded;
    let mut engine = Engine::new(scoring, sizes, cfg.devices.max_tracked, cfg.model.threshold);
    engine.max_per_device = cfg.scoring.max_per_device;
    let (control_tx, control_rx) = mpsc::unbounded_channel();
    let service = Service {
        adapter: Adapter::spawn(adapting, 0, cfg.adaptation.batch_size),
        generation: 0,
        cfg,
        engine,
        version,
        metrics: Arc::clone(&metrics),
        ready: Arc::clone(&ready),
        shared,
        consumer: Some(consumer),
        deliveries: Deliveries::new(producer.clone(), MAX_BATCHES_IN_FLIGHT),
        producer,
        state_partitions,
        started: Instant::now(),
        snapshot_failures: mpsc::unbounded_channel(),
    };
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
                .map_err(|source| DaemonError::Http { addr: "runtime".into(), source })?;
            let result = runtime.block_on(service.run(control_rx));
            let _ = http_stop_tx.send(());
            result
        })
        .map_err(|source| DaemonError::Http { addr: "service thread".into(), source })?;
    drop(http_task);
    Ok(Daemon { http_addr, metrics, ready, control: control_tx, thread, finished })
}

struct Service {
    cfg: DaemonConfig,
    engine: Engine,
    version: String,
    metrics: Arc<Metrics>,
    ready: Arc<AtomicBool>,
    shared: Arc<Shared>,
    consumer: Option<StreamConsumer<DaemonContext>>,
    /// Outputs of micro-batches not yet wholly acknowledged.
    deliveries: Deliveries,
    /// Priors and snapshots; batch outputs go through `deliveries`.
    producer: FutureProducer,
    adapter: Adapter,
    /// Bumped at each model reload; adaptation results of older models are dropped.
    generation: u64,
    state_partitions: i32,
    started: Instant,
    /// Devices whose background snapshot failed (to mark for a retry).
    snapshot_failures: (mpsc::UnboundedSender<Vec<String>>, mpsc::UnboundedReceiver<Vec<String>>),
}

/// Send encoded snapshots (device, state partition, bytes) and wait for their
/// acknowledgement; counts them and returns the devices whose snapshot failed.
async fn send_snapshots(
    producer: &FutureProducer,
    topic: &str,
    metrics: &Metrics,
    records: &[(String, i32, Vec<u8>)],
) -> Vec<String> {
    let sends = records.iter().map(|(id, partition, bytes)| {
        let rec = FutureRecord::to(topic).key(id).payload(bytes).partition(*partition);
        producer.send(rec, Timeout::After(Duration::from_secs(30)))
    });
    let results = futures::future::join_all(sends).await;
    let failed: Vec<String> =
        records.iter().zip(&results).filter(|(_, r)| r.is_err()).map(|((id, _, _), _)| id.clone()).collect();
    metrics.snapshots.inc_by((results.len() - failed.len()) as u64);
    if !failed.is_empty() {
        metrics.produce_errors.inc_by(failed.len() as u64);
        tracing::warn!(failed = failed.len(), "state snapshots failed; will retry");
    }
    failed
}

/// Period of the service loop's housekeeping (adaptation, snapshots, health).
const HOUSEKEEPING: Duration = Duration::from_millis(100);

/// Micro-batches whose outputs may await acknowledgement while the next are scored.
/// Bounds the outputs (and unreleased offsets) held when the brokers are slow.
const MAX_BATCHES_IN_FLIGHT: usize = 4;

/// One consumed message with its decode result.
struct Consumed {
    source: Source,
    message: OwnedMessage,
    decoded: Result<FeatureRecord, record::InvalidRecord>,
}

impl Consumed {
    fn payload(&self) -> &[u8] {
        self.message.payload().unwrap_or_default()
    }
}

/// Below this many messages a micro-batch is decoded on the service thread alone.
const PARALLEL_DECODE_FROM: usize = 512;

/// Decode a micro-batch, on two threads when it is large: decoding (JSON above all)
/// costs as much as scoring, and the scoring forward is not running meanwhile.
fn decode_batch(messages: Vec<OwnedMessage>, dim: usize, max_bytes: usize) -> Vec<Consumed> {
    let decode_one = |m: OwnedMessage| {
        let source = Source { topic: m.topic().to_string(), partition: m.partition(), offset: m.offset() };
        let decoded = record::decode(m.key(), m.payload().unwrap_or_default(), dim, max_bytes);
        Consumed { source, message: m, decoded }
    };
    if messages.len() < PARALLEL_DECODE_FROM {
        return messages.into_iter().map(decode_one).collect();
    }
    let mut first = messages;
    let second = first.split_off(first.len() / 2);
    std::thread::scope(|s| {
        let other = s.spawn(|| second.into_iter().map(decode_one).collect::<Vec<_>>());
        let mut out: Vec<Consumed> = first.into_iter().map(decode_one).collect();
        // Decoding does not panic on any input (fuzzed). Should it, the panic goes on
        // as it would have on one thread, rather than half the batch going missing.
        out.extend(other.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic)));
        out
    })
}

/// Highest offset per input partition of a micro-batch.
fn highest_offsets(batch: &[Consumed]) -> Vec<PartitionOffset> {
    let mut highest: HashMap<(&str, i32), i64> = HashMap::new();
    for c in batch {
        let e = highest.entry((c.source.topic.as_str(), c.source.partition)).or_insert(c.source.offset);
        *e = (*e).max(c.source.offset);
    }
    highest.into_iter().map(|((t, p), o)| (t.to_string(), p, o)).collect()
}

/// Outputs could not be delivered: count them and report not-ready until messages
/// flow again (the housekeeping tick or the next consumed message clears it).
fn mark_delivery_failed(metrics: &Metrics, shared: &Shared, ready: &AtomicBool, failed: usize) {
    metrics.produce_errors.inc_by(failed as u64);
    tracing::warn!(failed, "deliveries failed; retrying");
    shared.brokers_down.store(true, Ordering::Relaxed);
    ready.store(false, Ordering::Relaxed);
    metrics.ready.set(0.0);
}

impl Service {
    fn now_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    async fn run(mut self, mut control: mpsc::UnboundedReceiver<Control>) -> Result<(), DaemonError> {
        let Some(consumer) = self.consumer.take() else { return Ok(()) };
        let max_wait = Duration::from_millis(self.cfg.scoring.max_wait_ms.max(1));
        let adapt_every = Duration::from_millis(self.cfg.adaptation.interval_ms.max(1));
        let mut housekeeping = tokio::time::interval(HOUSEKEEPING);
        let watchdog = super::notify::watchdog_interval();
        let (mut last_adapt, mut last_watchdog, mut last_idle) =
            (Instant::now(), Instant::now(), Instant::now());
        let mut last_message = Instant::now();
        super::notify::notify("READY=1");
        self.ready.store(true, Ordering::Relaxed);
        self.metrics.ready.set(1.0);
        tracing::info!(version = %self.version, topics = ?self.cfg.kafka.input_topics, "metapu daemon running");

        let mut stopping = false;
        while !stopping {
            let mut batch: Vec<OwnedMessage> = Vec::new();
            let mut deadline: Option<tokio::time::Instant> = None;
            loop {
                let sleep = async {
                    match deadline {
                        Some(d) => tokio::time::sleep_until(d).await,
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    biased;
                    c = control.recv() => match c {
                        Some(Control::Reload) => self.reload(),
                        Some(Control::Shutdown) | None => { stopping = true; break; }
                    },
                    done = self.adapter.results.recv() => if let Some(done) = done { self.installed(done) },
                    m = consumer.recv() => match m {
                        Ok(m) => {
                            last_message = Instant::now();
                            self.shared.brokers_down.store(false, Ordering::Relaxed);
                            batch.push(m.detach());
                            // Take what is already queued without a trip through the
                            // select! per message (a backlog arrives thousands at a time).
                            while batch.len() < self.cfg.scoring.max_batch {
                                match consumer.recv().now_or_never() {
                                    Some(Ok(m)) => batch.push(m.detach()),
                                    Some(Err(e)) => { tracing::warn!(error = %e, "consume"); break; }
                                    None => break,
                                }
                            }
                            deadline.get_or_insert_with(|| tokio::time::Instant::now() + max_wait);
                            if batch.len() >= self.cfg.scoring.max_batch { break; }
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, "consume");
                            tokio::time::sleep(Duration::from_millis(100)).await;
                        }
                    },
                    _ = sleep => break,
                    _ = housekeeping.tick() => {
                        if last_adapt.elapsed() >= adapt_every || self.cfg.adaptation.after_records > 0 {
                            let min = if last_adapt.elapsed() >= adapt_every { 1 } else { self.cfg.adaptation.after_records };
                            if self.schedule_adaptation(min) || last_adapt.elapsed() >= adapt_every {
                                last_adapt = Instant::now();
                            }
                        }
                        self.snapshot_due();
                        if last_idle.elapsed() >= Duration::from_secs(1) {
                            self.evict_idle();
                            last_idle = Instant::now();
                        }
                        if let Some(w) = watchdog {
                            if last_watchdog.elapsed() >= w {
                                super::notify::notify("WATCHDOG=1");
                                last_watchdog = Instant::now();
                            }
                        }
                        self.settle(&consumer, false).await;
                        self.refresh_health(last_message).await;
                    }
                }
            }
            self.metrics.records_consumed.inc_by(batch.len() as u64);
            self.handle_assignment_events(&consumer).await;
            if !batch.is_empty() {
                let decoded =
                    decode_batch(batch, self.engine.model.dim(), self.cfg.scoring.max_message_bytes);
                self.process(&consumer, decoded).await;
            }
        }
        self.shutdown(consumer).await;
        Ok(())
    }

    /// Score a micro-batch, publish its outputs, and store its offsets once every
    /// output is acknowledged.
    async fn process(&mut self, consumer: &StreamConsumer<DaemonContext>, batch: Vec<Consumed>) {
        let started = Instant::now();
        let now_ms = self.now_ms();
        let valid: Vec<(&FeatureRecord, &Source)> =
            batch.iter().filter_map(|c| c.decoded.as_ref().ok().map(|r| (r, &c.source))).collect();
        let processed = self.engine.process(&valid, now_ms);
        self.metrics.devices_evicted.with_label_values(&["capacity"]).inc_by(processed.evicted as u64);
        self.metrics.records_redelivered.inc_by(processed.replayed as u64);
        self.metrics.scoring_seconds.observe(started.elapsed().as_secs_f64());
        self.metrics.batch_records.observe(batch.len() as f64);
        let verdicts = processed.verdicts;

        let mut outputs: Vec<Output> = Vec::new();
        let mut verdict = verdicts.into_iter();
        for c in &batch {
            let refused = match &c.decoded {
                Ok(r) => match verdict.next().unwrap_or(Verdict::Unknown) {
                    Verdict::Shed => {
                        self.metrics.records_shed.inc();
                        let limit = self.cfg.scoring.max_per_device;
                        Some(("device_over_budget", format!("over {limit} records of one device in a batch")))
                    }
                    v => {
                        self.outputs_for(r, &c.source, v, &mut outputs);
                        None
                    }
                },
                Err(reason) => {
                    self.metrics.records_invalid.with_label_values(&[reason.kind()]).inc();
                    Some((reason.kind(), reason.to_string()))
                }
            };
            if let Some((kind, reason)) = refused {
                let dl = DeadLetter {
                    reason,
                    kind: kind.into(),
                    source: c.source.clone(),
                    payload: output::payload_excerpt(c.payload()),
                    payload_bytes: c.payload().len(),
                    time: output::unix_now(),
                };
                outputs.push(Output {
                    topic: self.cfg.kafka.deadletter_topic.clone(),
                    key: c.message.key().map(|k| String::from_utf8_lossy(k).into_owned()),
                    value: serde_json::to_vec(&dl).expect("outputs serialise"),
                });
            }
        }
        self.deliveries.submit(outputs, highest_offsets(&batch));
        self.settle(consumer, false).await;
    }

    fn outputs_for(&self, r: &FeatureRecord, source: &Source, v: Verdict, out: &mut Vec<Output>) {
        let (score, decision) = match v {
            Verdict::Unknown | Verdict::Shed => {
                self.metrics.records_unknown.inc();
                (None, "unknown")
            }
            Verdict::Scored { posterior, anomalous, prior } => {
                self.metrics.records_scored.inc();
                if anomalous {
                    self.metrics.alerts.inc();
                    let alert = Alert {
                        alert_id: output::alert_id(source),
                        device: r.device.clone(),
                        ts: r.ts,
                        score: posterior,
                        prior,
                        model_version: self.version.clone(),
                        source: source.clone(),
                    };
                    out.push(Output {
                        topic: self.cfg.kafka.alerts_topic.clone(),
                        key: Some(r.device.clone()),
                        value: serde_json::to_vec(&alert).expect("outputs serialise"),
                    });
                }
                (Some(posterior), if anomalous { "anomalous" } else { "normal" })
            }
        };
        if self.cfg.kafka.publish_scores {
            let s = ScoreRecord {
                device: r.device.clone(),
                ts: r.ts,
                score,
                decision: decision.into(),
                source: source.clone(),
            };
            out.push(Output {
                topic: self.cfg.kafka.scores_topic.clone(),
                key: Some(r.device.clone()),
                value: serde_json::to_vec(&s).expect("outputs serialise"),
            });
        }
    }

    /// Store the offsets of batches whose outputs are all acknowledged. With `all`,
    /// wait for every batch in flight (revocation, shutdown); otherwise wait only while
    /// too many are in flight.
    async fn settle(&mut self, consumer: &StreamConsumer<DaemonContext>, all: bool) {
        let settled = self.deliveries.poll();
        if settled.failed > 0 {
            self.delivery_failed(settled.failed);
        }
        self.store_offsets(consumer, &settled.offsets);
        while self.deliveries.full() || (all && self.deliveries.in_flight() > 0) {
            let (metrics, shared, ready) = (&self.metrics, &self.shared, &self.ready);
            let offsets =
                self.deliveries.wait_oldest(|n| mark_delivery_failed(metrics, shared, ready, n)).await;
            self.store_offsets(consumer, &offsets);
        }
    }

    fn delivery_failed(&self, failed: usize) {
        mark_delivery_failed(&self.metrics, &self.shared, &self.ready, failed);
    }

    fn store_offsets(&self, consumer: &StreamConsumer<DaemonContext>, offsets: &[PartitionOffset]) {
        if offsets.is_empty() {
            return;
        }
        let assigned = self.shared.assignment.lock().expect(POISONED).clone();
        for (topic, partition, offset) in offsets {
            // Never store offsets of partitions that moved away meanwhile.
            if !assigned.iter().any(|(t, p)| t == topic && p == partition) {
                continue;
            }
            if let Err(e) = consumer.store_offset(topic, *partition, *offset) {
                tracing::debug!(error = %e, topic, partition, "store offset");
            }
        }
    }

    fn schedule_adaptation(&mut self, min_changed: usize) -> bool {
        if self.adapter.busy {
            return false;
        }
        let jobs = self.engine.adaptation_jobs(min_changed, usize::MAX);
        self.adapter.submit(self.generation, jobs)
    }

    fn installed(&mut self, done: super::adapter::Finished) {
        self.adapter.busy = false;
        if done.generation != self.generation {
            return; // adapted under a model that was replaced meanwhile
        }
        self.metrics.adaptation_seconds.observe(done.elapsed.as_secs_f64() / done.batches.max(1) as f64);
        self.metrics.adaptations.inc_by(done.states.len() as u64);
        let mut outputs = Vec::new();
        for (device, state) in &done.states {
            self.metrics.priors.observe(f64::from(state.prior));
            let Some(d) = self.engine.devices.get(device) else { continue };
            let update = PriorUpdate {
                device: device.clone(),
                prior: state.prior,
                attack_share: 1.0 - state.prior,
                positive_window: d.positive.len(),
                unlabeled_window: d.unlabeled.len(),
                time: output::unix_now(),
                model_version: self.version.clone(),
            };
            outputs.push((device.clone(), serde_json::to_vec(&update).expect("outputs serialise")));
        }
        self.engine.install(done.states);
        // Prior updates are informational: sent without holding up scoring.
        let producer = self.producer.clone();
        let topic = self.cfg.kafka.priors_topic.clone();
        let metrics = Arc::clone(&self.metrics);
        tokio::spawn(async move {
            let sends = outputs.iter().map(|(k, v)| {
                producer
                    .send(FutureRecord::to(&topic).key(k).payload(v), Timeout::After(Duration::from_secs(30)))
            });
            let failed = futures::future::join_all(sends).await.iter().filter(|r| r.is_err()).count();
            metrics.produce_errors.inc_by(failed as u64);
        });
    }

    fn evict_idle(&mut self) {
        if self.cfg.devices.idle_timeout_s > 0 {
            let gone = self.engine.devices.evict_idle(self.now_ms(), self.cfg.devices.idle_timeout_s * 1000);
            self.metrics.devices_evicted.with_label_values(&["idle"]).inc_by(gone.len() as u64);
        }
        self.metrics.devices_tracked.set(self.engine.devices.len() as i64);
    }

    async fn refresh_health(&mut self, last_message: Instant) {
        self.metrics.consumer_lag.set(self.shared.lag.load(Ordering::Relaxed));
        self.metrics.devices_tracked.set(self.engine.devices.len() as i64);
        let mut down = self.shared.brokers_down.load(Ordering::Relaxed);
        if down && last_message.elapsed() > Duration::from_secs(1) {
            // No traffic to prove the brokers are back: ask for metadata.
            let producer = self.producer.clone();
            let ok = tokio::task::spawn_blocking(move || {
                producer.client().fetch_metadata(None, Duration::from_millis(500)).is_ok()
            })
            .await
            .unwrap_or(false);
            if ok {
                self.shared.brokers_down.store(false, Ordering::Relaxed);
                down = false;
            }
        }
        self.ready.store(!down, Ordering::Relaxed);
        self.metrics.ready.set(if down { 0.0 } else { 1.0 });
    }

    fn reload(&mut self) {
        match load_model(&self.cfg.model.path) {
            Ok(loaded) if loaded.scoring.dim() == self.engine.devices.dim() => {
                tracing::info!(version = %loaded.version, "model reloaded");
                self.metrics.set_model(
                    &loaded.version,
                    loaded.scoring.dim(),
                    loaded.scoring.net.config.task_dim,
                );
                self.metrics.model_reloads.with_label_values(&["ok"]).inc();
                self.version = loaded.version;
                self.generation += 1;
                self.adapter.set_model(loaded.adapting, self.generation);
                self.engine.replace_model(loaded.scoring);
                self.schedule_adaptation(1);
            }
            Ok(loaded) => {
                tracing::error!(
                    expected = self.engine.model.dim(),
                    found = loaded.scoring.dim(),
                    "new model has another feature count; keeping the old one"
                );
                self.metrics.model_reloads.with_label_values(&["error"]).inc();
            }
            Err(e) => {
                tracing::error!(error = %e, "model reload failed; keeping the old one");
                self.metrics.model_reloads.with_label_values(&["error"]).inc();
            }
        }
    }

    async fn handle_assignment_events(&mut self, consumer: &StreamConsumer<DaemonContext>) {
        let events: Vec<AssignmentEvent> = std::mem::take(&mut *self.shared.events.lock().expect(POISONED));
        if !events.is_empty() {
            // Outputs of records from revoked partitions are settled while we still own them.
            self.settle(consumer, true).await;
        }
        for event in events {
            match event {
                AssignmentEvent::Assigned(parts) => self.restore(&parts).await,
                AssignmentEvent::Revoked(parts) => {
                    let still: BTreeSet<i32> =
                        self.shared.assignment.lock().expect(POISONED).iter().map(|(_, p)| *p).collect();
                    let gone: Vec<i32> =
                        parts.iter().map(|(_, p)| *p).filter(|p| !still.contains(p)).collect();
                    let devices = self.engine.devices.on_partitions(&gone);
                    self.snapshot(Some(&devices)).await;
                    for d in devices {
                        self.engine.devices.remove(&d);
                        self.metrics.devices_evicted.with_label_values(&["revoked"]).inc();
                    }
                }
            }
        }
    }

    fn state_partition(&self, input_partition: i32) -> i32 {
        input_partition.rem_euclid(self.state_partitions.max(1))
    }

    /// Read the state topic for newly assigned partitions; keep in-memory windows
    /// where we have them (they are newer).
    async fn restore(&mut self, parts: &[(String, i32)]) {
        let wanted: BTreeSet<i32> = parts.iter().map(|(_, p)| self.state_partition(*p)).collect();
        let kc = self.cfg.kafka.clone();
        let list: Vec<i32> = wanted.into_iter().collect();
        let read = tokio::task::spawn_blocking(move || {
            kafka::read_changelog(&kc, &list, Duration::from_secs(2), Duration::from_secs(20))
        })
        .await;
        let Ok(Ok(entries)) = read else {
            tracing::warn!("state restore failed; devices start empty");
            return;
        };
        let assigned: Vec<i32> = parts.iter().map(|(_, p)| *p).collect();
        let now = self.now_ms();
        let mut restored = Vec::new();
        for (device, (state_partition, bytes)) in entries {
            if self.engine.devices.get(&device).is_some() {
                continue;
            }
            match Snapshot::decode(&bytes) {
                Ok(s) if s.dim == self.engine.devices.dim() => {
                    let partition = s.last_source.as_ref().map(|l| l.partition).unwrap_or_else(|| {
                        assigned
                            .iter()
                            .copied()
                            .find(|p| self.state_partition(*p) == state_partition)
                            .unwrap_or(0)
                    });
                    self.engine.devices.restore(&device, &s, partition, now);
                    restored.push(device);
                }
                Ok(_) => tracing::warn!(device, "snapshot has another feature count; ignored"),
                Err(e) => tracing::warn!(device, error = %e, "bad snapshot; ignored"),
            }
        }
        self.metrics.state_restored_devices.inc_by(restored.len() as u64);
        if restored.is_empty() {
            return;
        }
        // Adapt restored devices here, before any record of theirs is scored: a restart
        // must not leave them `unknown` until the next adaptation round.
        let started = Instant::now();
        let mut jobs = Vec::with_capacity(restored.len());
        for device in &restored {
            if let Some((positive, unlabeled)) = self.engine.devices.take_windows(device) {
                if !positive.is_empty() {
                    jobs.push(AdaptJob { device: device.clone(), positive, unlabeled });
                }
            }
        }
        let states = run_adaptation(&self.engine.model, &jobs, self.cfg.adaptation.batch_size);
        self.metrics.adaptations.inc_by(states.len() as u64);
        self.engine.install(states);
        tracing::info!(
            restored = restored.len(),
            adapted = jobs.len(),
            seconds = started.elapsed().as_secs_f64(),
            "device windows restored from the state topic"
        );
    }

    /// Paced background snapshots, one housekeeping tick's share: changed devices whose
    /// last snapshot is `state.snapshot_interval_s` old, at most the fleet's size spread
    /// over the interval (twice over, to catch up). Writing every window at once would
    /// stall consumption for seconds on a large fleet. Sends are not awaited here;
    /// failures come back through `snapshot_failures` and are retried.
    fn snapshot_due(&mut self) {
        while let Ok(failed) = self.snapshot_failures.1.try_recv() {
            for id in failed {
                if let Some(d) = self.engine.devices.get_mut(&id) {
                    d.unsnapshotted = true;
                }
            }
        }
        let now = self.now_ms();
        let interval_ms = self.cfg.state.snapshot_interval_s.max(1) * 1000;
        let tracked = self.engine.devices.len() as u64;
        let budget = (2 * tracked * HOUSEKEEPING.as_millis() as u64).div_ceil(interval_ms).max(16) as usize;
        let due: Vec<String> = self
            .engine
            .devices
            .iter()
            .filter(|(_, d)| d.unsnapshotted && now.saturating_sub(d.last_snapshot_ms) >= interval_ms)
            .take(budget)
            .map(|(id, _)| id.clone())
            .collect();
        let records = self.snapshot_records(&due);
        if records.is_empty() {
            return;
        }
        let (producer, topic, metrics) =
            (self.producer.clone(), self.cfg.kafka.state_topic.clone(), Arc::clone(&self.metrics));
        let failures = self.snapshot_failures.0.clone();
        tokio::spawn(async move {
            let failed = send_snapshots(&producer, &topic, &metrics, &records).await;
            if !failed.is_empty() {
                let _ = failures.send(failed);
            }
        });
    }

    /// Encoded snapshots (device, state partition, bytes) of the given devices, marked
    /// as snapshotted now.
    fn snapshot_records(&mut self, ids: &[String]) -> Vec<(String, i32, Vec<u8>)> {
        let now = self.now_ms();
        let dim = self.engine.devices.dim();
        let partitions = self.state_partitions.max(1);
        let mut records = Vec::with_capacity(ids.len());
        for id in ids {
            if let Some(d) = self.engine.devices.get_mut(id) {
                d.unsnapshotted = false;
                d.last_snapshot_ms = now;
                let snap = Snapshot {
                    dim,
                    positive: d.positive.rows().to_vec(),
                    unlabeled: d.unlabeled.rows().to_vec(),
                    seen: d.seen,
                    last_source: d.last_source.clone(),
                };
                records.push((id.clone(), d.partition.rem_euclid(partitions), snap.encode()));
            }
        }
        records
    }

    /// Write snapshots of changed devices (or of `only`) to the state topic and wait
    /// for their acknowledgement (revocation, shutdown).
    async fn snapshot(&mut self, only: Option<&[String]>) {
        let ids: Vec<String> = match only {
            Some(ids) => ids.to_vec(),
            None => self
                .engine
                .devices
                .iter()
                .filter(|(_, d)| d.unsnapshotted)
                .map(|(id, _)| id.clone())
                .collect(),
        };
        let records = self.snapshot_records(&ids);
        if records.is_empty() {
            return;
        }
        let failed =
            send_snapshots(&self.producer, &self.cfg.kafka.state_topic, &self.metrics, &records).await;
        for id in failed {
            if let Some(d) = self.engine.devices.get_mut(&id) {
                d.unsnapshotted = true;
            }
        }
    }

    async fn shutdown(&mut self, consumer: StreamConsumer<DaemonContext>) {
        super::notify::notify("STOPPING=1");
        self.ready.store(false, Ordering::Relaxed);
        self.metrics.ready.set(0.0);
        tracing::info!("shutting down: flushing, snapshotting, committing");
        self.settle(&consumer, true).await;
        self.snapshot(None).await;
        let producer = self.producer.clone();
        let _ = tokio::task::spawn_blocking(move || producer.flush(Duration::from_secs(10))).await;
        if let Err(e) = consumer.commit_consumer_state(CommitMode::Sync) {
            tracing::debug!(error = %e, "final commit");
        }
        // Closing a group consumer can block for its session timeout: do it off the runtime.
        let _ = tokio::task::spawn_blocking(move || {
            consumer.unsubscribe();
            drop(consumer);
        })
        .await;
        tracing::info!("stopped");
    }
}
