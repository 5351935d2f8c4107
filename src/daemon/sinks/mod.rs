//! Incident events out of Kafka, to where analysts work: an HTTP webhook (a SIEM's
//! ingest endpoint, Splunk HEC, TheHive, a chat's incoming webhook) and syslog (RFC 5424
//! over TCP, optionally TLS). The incidents topic stays the durable copy; each sink
//! gets every event the daemon emits, in order, through a bounded queue of its own and
//! a task that sends it again with a backoff until the receiver takes it.
//!
//! A sink never holds up scoring or the input's offsets: when its queue is full (the
//! receiver has been down for `max_queued` events) a new event goes to the dead-letter
//! topic instead, counted; so does one the receiver refuses for good (HTTP 4xx other
//! than 408 and 429). Events still queued at shutdown are given the shutdown's time to
//! go; a crash loses them for the sink (they stay on the incidents topic).

pub mod ecs;
mod syslog;
mod webhook;

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

use super::internal_events::{
    SinkDelivered, SinkDequeued, SinkDropped, SinkQueued, SinkRejected, SinkRetried,
};
use super::Metrics;
use crate::monitor::output::{payload_excerpt, DeadLetter, IncidentEvent};
use crate::monitor::record::Source;
use crate::monitor::Emitted;
use crate::wall_clock::unix_now;

pub use syslog::SyslogConfig;
pub use webhook::{WebhookConfig, TOKEN_CREDENTIAL as WEBHOOK_TOKEN_CREDENTIAL};

/// What a sink sends for an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SinkFormat {
    /// The Elastic Common Schema document (`ecs.rs`), metapu's event under `metapu`.
    Ecs,
    /// metapu's event as on the incidents topic.
    Metapu,
    /// `{"text": the summary}`, for chat webhooks.
    Text,
}

impl SinkFormat {
    pub fn render(self, event: &IncidentEvent) -> serde_json::Value {
        match self {
            SinkFormat::Ecs => ecs::document(event),
            SinkFormat::Metapu => serde_json::to_value(event).expect("an incident event serialises"),
            SinkFormat::Text => {
                let doc = ecs::document(event);
                serde_json::json!({ "text": doc["message"] })
            }
        }
    }
}

/// `[sinks]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SinksConfig {
    pub webhook: WebhookConfig,
    pub syslog: SyslogConfig,
}

/// Why an attempt failed: send again later, or never.
#[derive(Debug)]
enum Failure {
    Retry(String),
    Refused(String),
}

/// One receiver: send one event (rendered), or say why not.
trait Receiver: Send + 'static {
    fn name(&self) -> &'static str;
    fn send(
        &mut self,
        event: &IncidentEvent,
    ) -> impl std::future::Future<Output = Result<(), Failure>> + Send;
}

/// The daemon's side of the sinks: queues to hand events to, and the dead letters of
/// events no sink could take, to put on the dead-letter topic.
pub struct Sinks {
    queues: Vec<(&'static str, mpsc::Sender<IncidentEvent>)>,
    dead: mpsc::UnboundedReceiver<Emitted>,
    dead_tx: mpsc::UnboundedSender<Emitted>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    metrics: Arc<Metrics>,
}

impl Sinks {
    /// Start the configured sinks (none configured: nothing runs) on the current runtime.
    pub fn start(
        cfg: &SinksConfig,
        credentials: Option<&std::path::Path>,
        metrics: Arc<Metrics>,
    ) -> Result<Self, String> {
        let (dead_tx, dead) = mpsc::unbounded_channel();
        let mut sinks = Self { queues: Vec::new(), dead, dead_tx, tasks: Vec::new(), metrics };
        if !cfg.webhook.url.is_empty() {
            let receiver = webhook::Webhook::new(&cfg.webhook, credentials)?;
            sinks.spawn(receiver, cfg.webhook.max_queued);
        }
        if !cfg.syslog.address.is_empty() {
            let receiver = syslog::Syslog::new(&cfg.syslog)?;
            sinks.spawn(receiver, cfg.syslog.max_queued);
        }
        Ok(sinks)
    }

    fn spawn<R: Receiver>(&mut self, receiver: R, max_queued: usize) {
        let name = receiver.name();
        let (tx, rx) = mpsc::channel(max_queued.max(1));
        let (metrics, dead) = (Arc::clone(&self.metrics), self.dead_tx.clone());
        self.tasks.push(tokio::spawn(forward(receiver, rx, metrics, dead)));
        self.queues.push((name, tx));
    }

    /// Hand the incident events among `emitted` to every sink, never waiting: an event a
    /// full queue cannot take is dead-lettered.
    pub fn offer(&self, emitted: &[Emitted]) {
        for e in emitted {
            let Emitted::Incident(event) = e else { continue };
            for (name, queue) in &self.queues {
                match queue.try_send(event.clone()) {
                    Ok(()) => self.metrics.emit(SinkQueued(name)),
                    Err(_) => {
                        self.metrics.emit(SinkDropped(name));
                        let reason = format!(
                            "the {name} sink's queue is full (its receiver has not taken events for a while): \
                             this event was not forwarded; it is on the incidents topic"
                        );
                        let _ = self.dead_tx.send(dead_letter(name, event, "sink_queue_full", reason));
                    }
                }
            }
        }
    }

    /// Dead letters of events the sinks dropped or had refused, to publish.
    pub fn dead_letters(&mut self) -> Vec<Emitted> {
        let mut out = Vec::new();
        while let Ok(e) = self.dead.try_recv() {
            out.push(e);
        }
        out
    }

    /// Stop taking events and give the sinks up to `limit` to send what they hold; the
    /// dead letters left to publish.
    pub async fn drain(&mut self, limit: Duration) -> Vec<Emitted> {
        self.queues.clear(); // closes the queues: each task ends once its queue is empty
        let tasks = std::mem::take(&mut self.tasks);
        let aborts: Vec<_> = tasks.iter().map(|t| t.abort_handle()).collect();
        if tokio::time::timeout(limit, futures::future::join_all(tasks)).await.is_err() {
            tracing::warn!("sinks did not deliver every queued incident event before shutdown");
            // A receiver still down: stop retrying (the events stay on the incidents topic).
            aborts.iter().for_each(tokio::task::AbortHandle::abort);
        }
        self.dead_letters()
    }
}

/// A sink's task: each event in order, sent again with a backoff (0.5 s doubling to
/// 30 s) until the receiver takes it or refuses it for good.
async fn forward<R: Receiver>(
    mut receiver: R,
    mut queue: mpsc::Receiver<IncidentEvent>,
    metrics: Arc<Metrics>,
    dead: mpsc::UnboundedSender<Emitted>,
) {
    let name = receiver.name();
    let mut told_down = false;
    while let Some(event) = queue.recv().await {
        let mut backoff = Duration::from_millis(500);
        loop {
            match receiver.send(&event).await {
                Ok(()) => {
                    metrics.emit(SinkDelivered { sink: name, recovered: std::mem::take(&mut told_down) });
                    break;
                }
                Err(Failure::Refused(reason)) => {
                    metrics.emit(SinkRejected { sink: name, reason: &reason });
                    let _ = dead.send(dead_letter(name, &event, "sink_rejected", reason));
                    break;
                }
                Err(Failure::Retry(reason)) => {
                    let first = !std::mem::replace(&mut told_down, true);
                    metrics.emit(SinkRetried { sink: name, reason: &reason, first });
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(30));
                }
            }
        }
        metrics.emit(SinkDequeued(name));
    }
}

fn dead_letter(sink: &str, event: &IncidentEvent, kind: &str, reason: String) -> Emitted {
    let payload = serde_json::to_vec(event).expect("an incident event serialises");
    Emitted::DeadLetter {
        key: Some(event.device().to_string()),
        letter: DeadLetter {
            reason,
            kind: kind.into(),
            source: Source::new(format!("sink:{sink}"), -1, -1),
            payload: payload_excerpt(&payload),
            payload_bytes: payload.len(),
            time: unix_now(),
        },
    }
}
