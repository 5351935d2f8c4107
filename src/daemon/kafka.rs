//! Kafka plumbing: client configuration, the consumer context (rebalance, errors,
//! statistics), topic creation and reading the state changelog.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, ResourceSpecifier, TopicReplication};
use rdkafka::client::{ClientContext, DefaultClientContext};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance, StreamConsumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Message;
use rdkafka::statistics::Statistics;
use rdkafka::{Offset, TopicPartitionList};

use tokio::sync::mpsc;

use super::config::KafkaConfig;
use super::health::Health;
use crate::monitor::devices::snapshot::StateTopic;

/// How long librdkafka waits before fetching again for a partition whose prefetch
/// queue is full. Its default, 1 s, idled a daemon working off a backlog: the service
/// drains a full queue in well under a second and then waited for the next fetch.
/// Restarted on a backlog at 1,000 devices, JSON went from 64-65k to 92-128k records/s
/// (`cargo bench --bench e2e`, 10 / 100 / 1,000 ms side by side, docs/benchmarks.md).
/// The back-off applies only while the queue is full, so an idle daemon costs no more.
const FETCH_QUEUE_BACKOFF_MS: &str = "10";

/// A consumer's properties: [`base_config`]'s with a short fetch back-off among the
/// defaults that `[kafka.options]` overrides, then `[kafka.consumer_options]`.
pub fn consumer_config(cfg: &KafkaConfig) -> ClientConfig {
    let defaults = [("fetch.queue.backoff.ms", FETCH_QUEUE_BACKOFF_MS)];
    with_options(client_config(cfg, &defaults), &cfg.consumer_options)
}

/// A producer's properties: [`base_config`] and `[kafka.producer_options]`.
pub fn producer_config(cfg: &KafkaConfig) -> ClientConfig {
    with_options(base_config(cfg), &cfg.producer_options)
}

fn with_options(mut c: ClientConfig, options: &std::collections::BTreeMap<String, String>) -> ClientConfig {
    for (k, v) in options {
        c.set(k, v);
    }
    c
}

/// Client properties shared by every client (consumers, producers, the admin client):
/// brokers plus `[kafka.options]`.
pub fn base_config(cfg: &KafkaConfig) -> ClientConfig {
    client_config(cfg, &[])
}

/// Brokers, our defaults (these and the given ones), then `[kafka.options]`, which
/// override any default.
fn client_config(cfg: &KafkaConfig, defaults: &[(&str, &str)]) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", &cfg.brokers);
    // Find topics created after start-up (ours included) within seconds, not librdkafka's
    // default 5 minutes.
    c.set("topic.metadata.refresh.interval.ms", "5000");
    for (k, v) in defaults {
        c.set(*k, *v);
    }
    with_options(c, &cfg.options)
}

/// Assignment changes seen by the consumer, sent to the service loop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum AssignmentEvent {
    Assigned(Vec<(String, i32)>),
    Revoked(Vec<(String, i32)>),
}

/// The input partitions assigned to this member now; updated in the rebalance
/// callbacks, read when storing offsets (never for a partition that moved away).
#[derive(Default)]
pub(crate) struct Assignment(Mutex<Vec<(String, i32)>>);

/// A lock poisoned by a thread that panicked while holding it: the daemon's state can
/// no longer be trusted, so it stops rather than carrying on without it.
pub(crate) const POISONED: &str = "a daemon thread panicked while holding a lock";

impl Assignment {
    pub(crate) fn contains(&self, topic: &str, partition: i32) -> bool {
        self.0.lock().expect(POISONED).iter().any(|(t, p)| t == topic && *p == partition)
    }

    pub(crate) fn current(&self) -> Vec<(String, i32)> {
        self.0.lock().expect(POISONED).clone()
    }

    pub(crate) fn partitions(&self) -> Vec<i32> {
        self.0.lock().expect(POISONED).iter().map(|(_, p)| *p).collect()
    }

    fn add(&self, parts: &[(String, i32)]) {
        let mut current = self.0.lock().expect(POISONED);
        for p in parts {
            if !current.contains(p) {
                current.push(p.clone());
            }
        }
    }

    fn remove(&self, parts: &[(String, i32)]) {
        self.0.lock().expect(POISONED).retain(|p| !parts.contains(p));
    }
}

/// The consumer's context: librdkafka's callbacks report broker state and lag to
/// [`Health`], keep [`Assignment`] current and send assignment events to the loop.
pub(crate) struct DaemonContext {
    pub(crate) health: Arc<Health>,
    pub(crate) assignment: Arc<Assignment>,
    pub(crate) events: mpsc::UnboundedSender<AssignmentEvent>,
}

fn partitions(list: &TopicPartitionList) -> Vec<(String, i32)> {
    list.elements().iter().map(|e| (e.topic().to_string(), e.partition())).collect()
}

/// Whether one of the brokers librdkafka's statistics list is connected; `None` when
/// they list none (`(source, state)` a broker; its internal pseudo-broker does not count).
fn any_broker_up<'a>(brokers: impl Iterator<Item = (&'a str, &'a str)>) -> Option<bool> {
    let mut listed = false;
    for (source, state) in brokers {
        if source == "internal" {
            continue;
        }
        if state == "UP" || state == "UPDATE" {
            return Some(true);
        }
        listed = true;
    }
    listed.then_some(false)
}

impl ClientContext for DaemonContext {
    fn stats(&self, statistics: Statistics) {
        let lag: i64 = statistics
            .topics
            .values()
            .flat_map(|t| t.partitions.values())
            .filter(|p| p.partition >= 0 && p.consumer_lag >= 0)
            .map(|p| p.consumer_lag)
            .sum();
        self.health.set_lag(lag);
        // librdkafka raises AllBrokersDown only when every broker is down at one
        // moment; with reconnects staggered under load that moment may never come.
        // The statistics say each broker's state every interval: none up is an outage,
        // one up its end.
        if let Some(any_up) =
            any_broker_up(statistics.brokers.values().map(|b| (b.source.as_str(), b.state.as_str())))
        {
            self.health.brokers_seen(any_up);
        }
    }

    fn error(&self, error: KafkaError, reason: &str) {
        if matches!(error.rdkafka_error_code(), Some(RDKafkaErrorCode::AllBrokersDown)) {
            self.health.brokers_down();
        }
        tracing::warn!(%error, reason, "kafka client error");
    }
}

impl ConsumerContext for DaemonContext {
    fn pre_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Revoke(list) = rebalance {
            // Offsets stored so far belong to acknowledged work: commit them before the
            // partitions move, so the next owner starts where we stopped.
            if let Err(e) = consumer.commit_consumer_state(CommitMode::Sync) {
                tracing::debug!(error = %e, "commit on revoke");
            }
            let revoked = partitions(list);
            self.assignment.remove(&revoked);
            self.health.rebalanced("revoked", &self.assignment.current());
            // The loop is gone only while the daemon stops; nothing is left to act then.
            let _ = self.events.send(AssignmentEvent::Revoked(revoked));
        }
    }

    fn post_rebalance(&self, _consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Assign(list) = rebalance {
            let assigned = partitions(list);
            self.assignment.add(&assigned);
            self.health.rebalanced("assigned", &self.assignment.current());
            let _ = self.events.send(AssignmentEvent::Assigned(assigned));
        }
    }
}

/// A topic the daemon creates when the broker lacks it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicSpec<'a> {
    pub name: &'a str,
    pub partitions: i32,
    pub replication: i32,
    /// Topic configs set at creation (e.g. `cleanup.policy=compact`).
    pub configs: Vec<(&'a str, &'a str)>,
}

impl<'a> TopicSpec<'a> {
    /// A topic with the broker's default configs, one replica.
    pub fn plain(name: &'a str, partitions: i32) -> Self {
        Self { name, partitions, replication: 1, configs: Vec::new() }
    }
}

/// Create the topics the broker does not know yet (existing ones are left as they
/// are). Bounded by `limit`: some brokers never answer CreateTopics.
pub async fn ensure_topics(
    cfg: &KafkaConfig,
    topics: &[TopicSpec<'_>],
    limit: Duration,
) -> Result<(), KafkaError> {
    let admin: AdminClient<DefaultClientContext> = base_config(cfg).create()?;
    let known: Vec<String> = admin
        .inner()
        .fetch_metadata(None, limit)?
        .topics()
        .iter()
        .filter(|t| t.error().is_none())
        .map(|t| t.name().to_string())
        .collect();
    let new: Vec<NewTopic<'_>> = topics
        .iter()
        .filter(|t| !known.iter().any(|k| k == t.name))
        .map(|t| {
            let topic = NewTopic::new(t.name, t.partitions, TopicReplication::Fixed(t.replication));
            t.configs.iter().fold(topic, |topic, (k, v)| topic.set(k, v))
        })
        .collect();
    if new.is_empty() {
        return Ok(());
    }
    let opts = AdminOptions::new().operation_timeout(Some(limit)).request_timeout(Some(limit));
    let results = tokio::time::timeout(limit, admin.create_topics(&new, &opts))
        .await
        .map_err(|_| KafkaError::AdminOp(RDKafkaErrorCode::RequestTimedOut))??;
    for result in results {
        match result {
            Ok(_) | Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((topic, code)) => tracing::warn!(topic, %code, "could not create topic"),
        }
    }
    Ok(())
}

/// One config of a topic as the broker describes it (`None`: the broker did not say).
pub async fn topic_config(
    cfg: &KafkaConfig,
    topic: &str,
    key: &str,
    limit: Duration,
) -> Result<Option<String>, KafkaError> {
    let admin: AdminClient<DefaultClientContext> = base_config(cfg).create()?;
    let opts = AdminOptions::new().request_timeout(Some(limit));
    let results =
        tokio::time::timeout(limit, admin.describe_configs([&ResourceSpecifier::Topic(topic)], &opts))
            .await
            .map_err(|_| KafkaError::AdminOp(RDKafkaErrorCode::RequestTimedOut))??;
    let Some(Ok(resource)) = results.into_iter().next() else {
        return Err(KafkaError::AdminOp(RDKafkaErrorCode::UnknownTopicOrPartition));
    };
    Ok(resource.get(key).and_then(|entry| entry.value.clone()))
}

/// What one metadata request tells of a topic and its cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TopicMetadata {
    /// The topic's partition count, if the broker knows the topic.
    pub partitions: Option<i32>,
    /// The cluster's brokers.
    pub brokers: usize,
}

/// [`topic_metadata`] off the runtime (it blocks), with a 5 s timeout.
pub(crate) async fn topic_metadata_off_runtime(cfg: &KafkaConfig, topic: &str) -> Option<TopicMetadata> {
    let (kc, topic) = (cfg.clone(), topic.to_string());
    tokio::task::spawn_blocking(move || topic_metadata(&kc, &topic, Duration::from_secs(5)))
        .await
        .ok()
        .flatten()
}

/// A topic's partition count and the cluster's broker count, if a broker answers.
pub fn topic_metadata(cfg: &KafkaConfig, topic: &str, timeout: Duration) -> Option<TopicMetadata> {
    let consumer: BaseConsumer = consumer_config(cfg).create().ok()?;
    let md = consumer.fetch_metadata(Some(topic), timeout).ok()?;
    let partitions = md
        .topics()
        .iter()
        .find(|t| t.name() == topic)
        .filter(|t| t.error().is_none() && !t.partitions().is_empty())
        .map(|t| t.partitions().len() as i32);
    Some(TopicMetadata { partitions, brokers: md.brokers().len() })
}

/// The feedback topic's writer: verdicts, onboardings and forgets keyed by device (so a
/// message reaches the daemon that holds the device), as `metapu feedback`, `onboard`,
/// `forget` and the console write them.
pub struct FeedbackWriter {
    producer: rdkafka::producer::FutureProducer,
    topic: String,
}

impl FeedbackWriter {
    pub fn new(cfg: &KafkaConfig) -> Result<Self, KafkaError> {
        let producer = producer_config(cfg).set("message.timeout.ms", "15000").create()?;
        Ok(Self { producer, topic: cfg.feedback_topic.clone() })
    }

    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// Send `message`; the broker's error if it was not delivered within 15 s.
    pub async fn send(&self, message: &crate::monitor::feedback::FeedbackMessage) -> Result<(), KafkaError> {
        let value = message.encode();
        let record = rdkafka::producer::FutureRecord::to(&self.topic).key(message.device()).payload(&value);
        self.producer
            .send(record, rdkafka::util::Timeout::After(Duration::from_secs(15)))
            .await
            .map(|_| ())
            .map_err(|(e, _)| e)
    }
}

/// A changelog reader's context (the state and kinds topics): end-of-partition is what
/// it waits for, not an error (some brokers report it as a client-level event).
pub struct ChangelogContext;

impl ClientContext for ChangelogContext {
    fn error(&self, error: KafkaError, reason: &str) {
        if matches!(error, KafkaError::PartitionEOF(_))
            || error.rdkafka_error_code() == Some(RDKafkaErrorCode::PartitionEOF)
        {
            tracing::debug!(%error, reason, "changelog");
        } else {
            tracing::warn!(%error, reason, "changelog reader");
        }
    }
}

impl ConsumerContext for ChangelogContext {}

/// The kinds topic's reader: every partition from the beginning, assigned rather than
/// subscribed (every daemon reads all of it, as Kafka Streams reads a global table),
/// never committing.
pub fn kinds_reader(
    cfg: &KafkaConfig,
    partitions: i32,
) -> Result<StreamConsumer<ChangelogContext>, KafkaError> {
    let consumer: StreamConsumer<ChangelogContext> = consumer_config(cfg)
        .set("group.id", format!("{}-kinds", cfg.group_id))
        .set("enable.auto.commit", "false")
        .create_with_context(ChangelogContext)?;
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions.max(1) {
        tpl.add_partition_offset(&cfg.kinds_topic, p, Offset::Beginning)?;
    }
    consumer.assign(&tpl)?;
    Ok(consumer)
}

/// The state topic as a restore read it: the last value per key, grouped by device,
/// and how much was read.
#[derive(Debug, Default)]
pub struct Changelog {
    pub entries: StateTopic,
    pub records: u64,
    pub bytes: u64,
}

/// A restore that could not read the state topic to its end.
#[derive(Debug, thiserror::Error)]
pub enum RestoreError {
    #[error("state topic: {0}")]
    Kafka(#[from] KafkaError),
    #[error(
        "state topic {topic}: partitions {left:?} not read to their end: no progress for {stalled_s} s \
         ({records} records read)"
    )]
    Stalled { topic: String, left: Vec<i32>, records: u64, stalled_s: u64 },
}

/// Read `partitions` of the state topic from the beginning to their end (last value
/// per key wins), however long that takes: a partition is done at its end-of-partition,
/// which librdkafka reports once the read reaches the end offset the broker gives,
/// never before the end it had when the read began. Nothing read and no partition
/// finished for `stall` is an error, never a partial result. Runs on a blocking thread.
pub fn read_changelog(
    cfg: &KafkaConfig,
    partitions: &[i32],
    stall: Duration,
) -> Result<Changelog, RestoreError> {
    let mut out = Changelog::default();
    if partitions.is_empty() {
        return Ok(out);
    }
    let consumer: BaseConsumer<ChangelogContext> = consumer_config(cfg)
        .set("group.id", format!("{}-restore", cfg.group_id))
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "true")
        .create_with_context(ChangelogContext)?;
    let mut tpl = TopicPartitionList::new();
    for &p in partitions {
        tpl.add_partition_offset(&cfg.state_topic, p, Offset::Beginning)?;
    }
    consumer.assign(&tpl)?;
    let mut progress = Instant::now();
    let mut at_end: Vec<i32> = Vec::new();
    while at_end.len() < partitions.len() {
        if progress.elapsed() >= stall {
            let left = partitions.iter().copied().filter(|p| !at_end.contains(p)).collect();
            let (topic, records, stalled_s) = (cfg.state_topic.clone(), out.records, stall.as_secs());
            return Err(RestoreError::Stalled { topic, left, records, stalled_s });
        }
        match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(m)) => {
                progress = Instant::now();
                out.records += 1;
                out.bytes += m.payload_len() as u64;
                if let Some(key) = m.key() {
                    // No (or an empty) value is a tombstone: the record was deleted.
                    out.entries.apply(key, m.partition(), m.payload());
                }
            }
            Some(Err(KafkaError::PartitionEOF(p))) if !at_end.contains(&p) => {
                progress = Instant::now();
                at_end.push(p);
            }
            Some(Err(KafkaError::PartitionEOF(_))) => {}
            Some(Err(e)) => tracing::debug!(error = %e, "reading state topic"),
            None => {}
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use rdkafka::mocking::MockCluster;
    use rdkafka::producer::{BaseProducer, BaseRecord, Producer};

    use super::*;
    use crate::daemon::config::DaemonConfig;
    use crate::monitor::devices::snapshot::Snapshot;

    #[test]
    fn statistics_with_no_broker_up_mean_an_outage() {
        let up = [("internal", "UP"), ("configured", "INIT"), ("learned", "UP")];
        assert_eq!(any_broker_up(up.into_iter()), Some(true));
        let reconnecting = [("internal", "UP"), ("configured", "DOWN"), ("learned", "TRY_CONNECT")];
        assert_eq!(any_broker_up(reconnecting.into_iter()), Some(false), "only the internal broker is up");
        assert_eq!(
            any_broker_up([("internal", "UP")].into_iter()),
            None,
            "no broker listed yet says nothing"
        );
    }

    /// A restore reads every snapshot to the partitions' end, the last value per device
    /// (a tombstone deletes); with the broker gone it fails, naming what it could not
    /// finish, instead of returning what it had as if it were all.
    #[test]
    fn a_restore_reads_to_the_end_or_fails_loudly() {
        let cluster = MockCluster::new(1).expect("mock cluster");
        cluster.create_topic("r.state", 2, 1).expect("topic");
        let mut cfg = DaemonConfig::defaults().kafka;
        cfg.brokers = cluster.bootstrap_servers();
        cfg.state_topic = "r.state".into();
        cfg.group_id = "r".into();
        let producer: BaseProducer =
            ClientConfig::new().set("bootstrap.servers", &cfg.brokers).create().expect("producer");
        for i in 0..300u32 {
            let seen = Snapshot { seen: u64::from(i), ..Snapshot::empty(1) };
            let (key, value) = (format!("d{}", i % 10), seen.encode_main());
            let record = BaseRecord::to("r.state").key(&key).payload(&value).partition((i % 2) as i32);
            producer.send(record).expect("queued");
        }
        let empty: &[u8] = &[];
        let gone = BaseRecord::to("r.state").key("d3").payload(empty).partition(1);
        producer.send(gone).expect("queued");
        producer.flush(Duration::from_secs(10)).expect("flushed");

        let read = read_changelog(&cfg, &[0, 1], Duration::from_secs(10)).expect("read to the end");
        assert_eq!(read.records, 301);
        assert_eq!(read.entries.len(), 9, "ten devices, one deleted");
        let d7 = read.entries.snapshots().find(|(d, _, _)| d == "d7").expect("d7");
        assert_eq!((d7.1, d7.2.expect("a snapshot").seen), (1, 297), "the last value wins");

        cluster.broker_down(1).expect("broker down");
        match read_changelog(&cfg, &[0, 1], Duration::from_secs(1)) {
            Err(RestoreError::Stalled { left, .. }) => assert_eq!(left, [0, 1]),
            other => panic!("a restore without a broker must fail: {other:?}"),
        }
        cluster.broker_up(1).expect("broker up");
        assert_eq!(read_changelog(&cfg, &[0, 1], Duration::from_secs(10)).expect("read").entries.len(), 9);
    }

    #[test]
    fn consumers_fetch_again_soon_unless_the_operator_says_otherwise() {
        let mut cfg = DaemonConfig::defaults().kafka;
        assert_eq!(consumer_config(&cfg).get("fetch.queue.backoff.ms"), Some(FETCH_QUEUE_BACKOFF_MS));
        // Producers have no fetch queue.
        assert_eq!(producer_config(&cfg).get("fetch.queue.backoff.ms"), None);
        cfg.options.insert("fetch.queue.backoff.ms".into(), "250".into());
        assert_eq!(consumer_config(&cfg).get("fetch.queue.backoff.ms"), Some("250"));
        cfg.consumer_options.insert("fetch.queue.backoff.ms".into(), "500".into());
        assert_eq!(consumer_config(&cfg).get("fetch.queue.backoff.ms"), Some("500"));
    }
}
