//! The console's Kafka edge: it reads every partition of the incidents, priors and
//! dead-letter topics from the beginning into the desk (no group, nothing committed: a
//! console started anew reads it all again), and writes verdicts with the feedback
//! topic's writer that `metapu feedback` uses.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};

use super::desk::{Desk, Unreadable};
use super::http::VerdictSink;
use super::metrics::ConsoleMetrics;
use crate::daemon::config::KafkaConfig;
use crate::daemon::kafka;
use crate::monitor::feedback::FeedbackMessage;
use crate::monitor::incidents::Feedback;

/// How often topics are looked at again for partitions not yet read (a topic the
/// daemon has not created yet, or one given more partitions).
const REFRESH: Duration = Duration::from_secs(10);

/// The topics the desk reads, and what it does with each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Topic {
    Incidents,
    Priors,
    DeadLetters,
}

impl Topic {
    fn label(self) -> &'static str {
        match self {
            Topic::Incidents => "incidents",
            Topic::Priors => "priors",
            Topic::DeadLetters => "dead_letters",
        }
    }

    fn apply(self, desk: &mut Desk, payload: &[u8]) -> Result<(), Unreadable> {
        match self {
            Topic::Incidents => desk.incident_event(payload),
            Topic::Priors => desk.prior_update(payload),
            Topic::DeadLetters => desk.dead_letter(payload),
        }
    }
}

/// Follow the topics into `desk` until `shutdown` resolves.
pub async fn follow(
    cfg: KafkaConfig,
    desk: Arc<RwLock<Desk>>,
    metrics: Arc<ConsoleMetrics>,
    shutdown: impl Future<Output = ()>,
) -> Result<(), KafkaError> {
    let topics: HashMap<String, Topic> = [
        (cfg.incidents_topic.clone(), Topic::Incidents),
        (cfg.priors_topic.clone(), Topic::Priors),
        (cfg.deadletter_topic.clone(), Topic::DeadLetters),
    ]
    .into_iter()
    .collect();
    let consumer: StreamConsumer = kafka::consumer_config(&cfg)
        .set("group.id", format!("{}-console", cfg.group_id))
        .set("enable.auto.commit", "false")
        .create()?;
    let mut reading: HashMap<String, i32> = HashMap::new();
    let mut refresh = tokio::time::interval(REFRESH);
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => return Ok(()),
            _ = refresh.tick() => read_new_partitions(&cfg, &consumer, &topics, &mut reading).await?,
            m = consumer.recv() => match m {
                Ok(m) => {
                    let Some(&topic) = topics.get(m.topic()) else { continue };
                    let read = topic.apply(&mut desk.write().expect("the desk's lock is never poisoned"), m.payload().unwrap_or_default());
                    let result = match read {
                        Ok(()) => "read",
                        Err(e) => {
                            tracing::warn!(error = %e, partition = m.partition(), offset = m.offset(), "console: message not read");
                            "unreadable"
                        }
                    };
                    metrics.messages.with_label_values(&[topic.label(), result]).inc();
                }
                Err(e) => tracing::debug!(error = %e, "console: reading"),
            },
        }
    }
}

/// Assign, from the beginning, the partitions of each topic not read yet.
async fn read_new_partitions(
    cfg: &KafkaConfig,
    consumer: &StreamConsumer,
    topics: &HashMap<String, Topic>,
    reading: &mut HashMap<String, i32>,
) -> Result<(), KafkaError> {
    let mut added = TopicPartitionList::new();
    for name in topics.keys() {
        let Some(partitions) = kafka::topic_metadata_off_runtime(cfg, name).await.and_then(|m| m.partitions)
        else {
            tracing::debug!(topic = %name, "console: topic not there yet");
            continue;
        };
        let from = reading.get(name).copied().unwrap_or(0);
        for p in from..partitions {
            added.add_partition_offset(name, p, Offset::Beginning)?;
        }
        if partitions > from {
            tracing::info!(topic = %name, partitions, "console: reading");
            reading.insert(name.clone(), partitions);
        }
    }
    if added.count() > 0 {
        consumer.incremental_assign(&added)?;
    }
    Ok(())
}

/// Verdicts go to the feedback topic as `metapu feedback` writes them.
impl VerdictSink for kafka::FeedbackWriter {
    fn send(&self, fb: Feedback) -> Pin<Box<dyn Future<Output = Result<(), String>> + Send + '_>> {
        Box::pin(async move {
            kafka::FeedbackWriter::send(self, &FeedbackMessage::Verdict(fb))
                .await
                .map_err(|e| format!("{}: {e}", self.topic()))
        })
    }
}
