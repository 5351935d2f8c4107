//! Outputs of micro-batches in flight. A batch's outputs (alerts, dead letters,
//! scores) are handed to the producer at once and the service goes on consuming and
//! scoring the next batches meanwhile; a batch's input offsets are released only when
//! every one of its outputs is acknowledged, and in consumption order. So at-least-once
//! holds as before, without the service idling through every acknowledgement round trip.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use futures::FutureExt;
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::util::Timeout;

/// Produce one record per item and wait for every acknowledgement (at most 30 s each);
/// the items whose record was not acknowledged. For outputs sent beside the batches:
/// state snapshots, prior updates, reports.
pub(crate) async fn send_all<'a, T>(
    producer: &FutureProducer,
    items: &'a [T],
    record: impl Fn(&'a T) -> FutureRecord<'a, Vec<u8>, Vec<u8>>,
) -> Vec<&'a T> {
    let sends = items.iter().map(|item| producer.send(record(item), Timeout::After(Duration::from_secs(30))));
    let results = futures::future::join_all(sends).await;
    items.iter().zip(&results).filter(|(_, r)| r.is_err()).map(|(item, _)| item).collect()
}

/// One output's delivery: resolves once the sink has it (`Err`: send it again).
pub type Delivery = BoxFuture<'static, Result<(), String>>;

/// Where outputs are delivered with the input's guarantee: sent again with a backoff
/// until acknowledged, the input's offsets stored only after. The Kafka producer is the
/// one such sink. The webhook and syslog (`sinks::Receiver`) are a different contract on
/// purpose: copies of the incidents topic that never hold up scoring or offsets (a
/// receiver down for hours would otherwise stop the fleet's detection), with their own
/// bounded queues and a dead letter when one overflows.
pub trait Sink: Send + Sync {
    /// Take one output; `None` when the sink cannot take it now (a full queue): it
    /// stays unsent and is offered again.
    fn send(&self, output: &Output) -> Option<Delivery>;
}

/// The Kafka producer as a sink: an output is acknowledged when the brokers have it
/// (`acks=all`).
pub struct KafkaSink(pub FutureProducer);

impl Sink for KafkaSink {
    fn send(&self, o: &Output) -> Option<Delivery> {
        let mut record = FutureRecord::<String, Vec<u8>>::to(&o.topic).payload(&o.value);
        if let Some(k) = &o.key {
            record = record.key(k);
        }
        let delivery = self.0.send_result(record).ok()?;
        Some(
            async move {
                match delivery.await {
                    Ok(Ok(_)) => Ok(()),
                    Ok(Err((e, _))) => Err(e.to_string()),
                    Err(_) => Err("the producer dropped the delivery".to_string()),
                }
            }
            .boxed(),
        )
    }
}

/// One record to produce.
#[derive(Debug, Clone)]
pub struct Output {
    pub topic: String,
    pub key: Option<String>,
    pub value: Vec<u8>,
}

impl Output {
    /// `value` as JSON. Our own outputs always serialise; a failure is a bug.
    pub fn json(topic: &str, key: Option<&str>, value: &impl serde::Serialize) -> Self {
        Self {
            topic: topic.to_string(),
            key: key.map(str::to_string),
            value: serde_json::to_vec(value).expect("outputs serialise"),
        }
    }
}

pub use crate::monitor::PartitionOffset;

enum State {
    /// Not handed to the producer yet, or failed: to be sent (again).
    Unsent,
    InFlight(Delivery),
    Acked,
}

struct Sent {
    output: Output,
    state: State,
}

struct Batch {
    offsets: Vec<PartitionOffset>,
    outputs: Vec<Sent>,
    retry_at: Instant,
    backoff: Duration,
}

impl Batch {
    fn unsent(&self) -> usize {
        self.outputs.iter().filter(|s| matches!(s.state, State::Unsent)).count()
    }
}

/// What a poll found.
#[derive(Debug, Default, PartialEq)]
pub struct Settled {
    /// Offsets of batches now wholly acknowledged, oldest first: safe to store.
    pub offsets: Vec<PartitionOffset>,
    /// Deliveries that failed (each is sent again after a backoff).
    pub failed: usize,
}

const FIRST_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(5);

pub struct Deliveries {
    sink: Box<dyn Sink>,
    batches: VecDeque<Batch>,
    /// Batches allowed in flight before the service waits for the oldest.
    pub max_in_flight: usize,
}

impl Deliveries {
    pub fn new(sink: Box<dyn Sink>, max_in_flight: usize) -> Self {
        Self { sink, batches: VecDeque::new(), max_in_flight: max_in_flight.max(1) }
    }

    pub fn in_flight(&self) -> usize {
        self.batches.len()
    }

    /// Whether the service must wait for the oldest batch before taking another.
    pub fn full(&self) -> bool {
        self.batches.len() >= self.max_in_flight
    }

    /// Enqueue a batch's outputs; its offsets are released by a later poll or wait.
    pub fn submit(&mut self, outputs: Vec<Output>, offsets: Vec<PartitionOffset>) {
        let mut batch = Batch {
            offsets,
            outputs: outputs.into_iter().map(|output| Sent { output, state: State::Unsent }).collect(),
            retry_at: Instant::now() + FIRST_BACKOFF,
            backoff: FIRST_BACKOFF,
        };
        enqueue(self.sink.as_ref(), &mut batch);
        self.batches.push_back(batch);
    }

    /// Check the oldest batches without waiting: release the offsets of those wholly
    /// acknowledged, and send failed outputs again once their backoff has passed.
    pub fn poll(&mut self) -> Settled {
        let mut settled = Settled::default();
        while let Some(front) = self.batches.front_mut() {
            settled.failed += check(front);
            if front.outputs.iter().any(|s| !matches!(s.state, State::Acked)) {
                break;
            }
            if let Some(batch) = self.batches.pop_front() {
                settled.offsets.extend(batch.offsets);
            }
        }
        let now = Instant::now();
        for batch in self.batches.iter_mut().filter(|b| b.retry_at <= now && b.unsent() > 0) {
            batch.retry_at = now + batch.backoff;
            batch.backoff = (batch.backoff * 2).min(MAX_BACKOFF);
            enqueue(self.sink.as_ref(), batch);
        }
        settled
    }

    /// Wait until the oldest batch is wholly acknowledged (sending failed outputs again
    /// with a growing backoff) and release its offsets. `on_failure` hears of every
    /// failed round, so the caller can count it and report not-ready meanwhile.
    pub async fn wait_oldest(&mut self, mut on_failure: impl FnMut(usize)) -> Vec<PartitionOffset> {
        let Some(batch) = self.batches.front_mut() else { return vec![] };
        loop {
            enqueue(self.sink.as_ref(), batch);
            for sent in &mut batch.outputs {
                if let State::InFlight(delivery) = &mut sent.state {
                    sent.state = match delivery.await {
                        Ok(()) => State::Acked,
                        Err(_) => State::Unsent,
                    };
                }
            }
            let failed = batch.unsent();
            if failed == 0 {
                break;
            }
            on_failure(failed);
            tokio::time::sleep(batch.backoff).await;
            batch.backoff = (batch.backoff * 2).min(MAX_BACKOFF);
        }
        self.batches.pop_front().map(|b| b.offsets).unwrap_or_default()
    }

    /// Wait for every batch in flight; their offsets, oldest first.
    #[cfg(test)]
    pub async fn wait_all(&mut self, mut on_failure: impl FnMut(usize)) -> Vec<PartitionOffset> {
        let mut offsets = Vec::new();
        while !self.batches.is_empty() {
            offsets.extend(self.wait_oldest(&mut on_failure).await);
        }
        offsets
    }
}

/// Hand every unsent output to the sink. One the sink refuses (its queue is full) stays
/// unsent and is tried again later.
fn enqueue(sink: &dyn Sink, batch: &mut Batch) {
    for sent in batch.outputs.iter_mut().filter(|s| matches!(s.state, State::Unsent)) {
        if let Some(delivery) = sink.send(&sent.output) {
            sent.state = State::InFlight(delivery);
        }
    }
}

/// Poll a batch's deliveries once without waiting; returns how many failed (they
/// become unsent, to be sent again).
fn check(batch: &mut Batch) -> usize {
    let mut failed = 0;
    for sent in &mut batch.outputs {
        if let State::InFlight(delivery) = &mut sent.state {
            match delivery.now_or_never() {
                None => {}
                Some(Ok(())) => sent.state = State::Acked,
                Some(Err(_)) => {
                    sent.state = State::Unsent;
                    failed += 1;
                }
            }
        }
    }
    failed
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use rdkafka::consumer::{BaseConsumer, Consumer};
    use rdkafka::message::Message;
    use rdkafka::mocking::MockCluster;
    use rdkafka::ClientConfig;

    use super::*;

    /// Every value on partition 0 of `topic`, until `n` arrived or 20 s passed.
    fn read_values(bootstrap: &str, topic: &str, n: usize) -> Vec<u8> {
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", bootstrap)
            .set("group.id", "delivery-reader")
            .set("enable.auto.commit", "false")
            .create()
            .expect("consumer");
        let mut tpl = rdkafka::TopicPartitionList::new();
        tpl.add_partition_offset(topic, 0, rdkafka::Offset::Beginning).expect("partition");
        consumer.assign(&tpl).expect("assign");
        let (started, mut out) = (Instant::now(), Vec::new());
        while started.elapsed() < Duration::from_secs(20) && out.len() < n {
            if let Some(Ok(m)) = consumer.poll(Duration::from_millis(100)) {
                out.push(m.payload().unwrap_or_default()[0]);
            }
        }
        out
    }

    /// A sink that records what it took, and fails every delivery while `down`.
    #[derive(Default)]
    struct Recording {
        down: std::sync::atomic::AtomicBool,
        taken: std::sync::Mutex<Vec<u8>>,
    }

    impl Sink for std::sync::Arc<Recording> {
        fn send(&self, o: &Output) -> Option<Delivery> {
            if self.down.load(std::sync::atomic::Ordering::SeqCst) {
                return Some(futures::future::ready(Err("down".to_string())).boxed());
            }
            self.taken.lock().expect("not poisoned").push(o.value[0]);
            Some(futures::future::ready(Ok(())).boxed())
        }
    }

    /// Any sink gets the outbox's guarantee: outputs that failed are sent again until
    /// taken, each taken once, and a batch's offsets are released only after all of its
    /// outputs, oldest batch first.
    #[tokio::test]
    async fn a_sink_takes_every_output_once_and_offsets_wait_for_it() {
        let sink = std::sync::Arc::new(Recording::default());
        let mut deliveries = Deliveries::new(Box::new(std::sync::Arc::clone(&sink)), 4);
        let output = |i: u8| Output { topic: "incidents".into(), key: None, value: vec![i] };
        deliveries.submit(vec![output(0)], vec![("in".into(), 0, 5)]);
        sink.down.store(true, std::sync::atomic::Ordering::SeqCst);
        deliveries.submit((1..3).map(output).collect(), vec![("in".into(), 0, 10)]);
        let settled = deliveries.poll();
        assert_eq!((settled.offsets, settled.failed), (vec![("in".to_string(), 0, 5)], 2));
        assert!(deliveries.poll().offsets.is_empty(), "not before its outputs are taken");
        sink.down.store(false, std::sync::atomic::Ordering::SeqCst);
        assert_eq!(deliveries.wait_all(|_| {}).await, vec![("in".to_string(), 0, 10)]);
        assert_eq!(*sink.taken.lock().expect("not poisoned"), [0, 1, 2]);
    }

    /// A batch's offsets are released only once every one of its outputs is
    /// acknowledged, oldest batch first, and a failed delivery is sent again.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn delivered_batches_release_their_offsets_in_order() {
        let cluster = MockCluster::new(1).expect("mock cluster");
        cluster.create_topic("alerts", 1, 1).expect("topic");
        let boot = cluster.bootstrap_servers();
        let producer: FutureProducer = ClientConfig::new()
            .set("bootstrap.servers", &boot)
            .set("message.timeout.ms", "1500")
            .create()
            .expect("producer");
        let mut deliveries = Deliveries::new(Box::new(KafkaSink(producer)), 4);
        let output = |i: u8| Output { topic: "alerts".into(), key: Some(format!("k{i}")), value: vec![i] };

        cluster.broker_down(1).expect("broker down");
        deliveries.submit((0..3).map(output).collect(), vec![("in".into(), 0, 10)]);
        deliveries.submit((3..5).map(output).collect(), vec![("in".into(), 0, 20)]);
        let mut failed = 0;
        let started = Instant::now();
        while failed == 0 && started.elapsed() < Duration::from_secs(20) {
            let settled = deliveries.poll();
            assert!(settled.offsets.is_empty(), "offsets released before acknowledgement");
            failed += settled.failed;
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(failed > 0, "no delivery failed with the broker down");
        assert_eq!(deliveries.in_flight(), 2);

        cluster.broker_up(1).expect("broker up");
        let offsets = deliveries.wait_all(|_| {}).await;
        assert_eq!(offsets, vec![("in".to_string(), 0, 10), ("in".to_string(), 0, 20)]);
        assert_eq!(deliveries.in_flight(), 0);
        let values: HashSet<u8> = read_values(&boot, "alerts", 5).into_iter().collect();
        assert_eq!(values, (0..5).collect(), "every output delivered at least once");
    }
}
