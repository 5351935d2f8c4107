//! Micro-batches: messages come in with the time they arrived and are gathered as
//! `[scoring]` says (`max_batch` records, a batch message's each, or `max_wait_ms` after
//! the first); a batch
//! runs its records through the pipeline (the per-device cap, deferral, the clock and
//! the adaptation cadence are the engine's and the pipeline's, built from the same
//! [`CoreSettings`]), then the feedback topic's messages. The Monitor (`api.rs`)
//! decides when a batch runs.

use super::clock::Now;
use super::engine::Engine;
use super::pipeline::{highest_offsets, Consumed, Emitted, PartitionOffset, Pipeline, Received};
use super::record;
use super::settings::CoreSettings;
use super::telemetry::Telemetry;

/// Messages gathered into the next micro-batch (times on the caller's clock, ms), full
/// at `max` records.
#[derive(Debug)]
pub(super) struct Batcher<T> {
    items: Vec<T>,
    records: usize,
    first_ms: Option<u64>,
    max: usize,
    max_wait_ms: u64,
}

impl<T> Batcher<T> {
    pub fn new(max: usize, max_wait_ms: u64) -> Self {
        Self {
            items: Vec::new(),
            records: 0,
            first_ms: None,
            max: max.max(1),
            max_wait_ms: max_wait_ms.max(1),
        }
    }

    /// Gather an item of `records` records that arrived at `now_ms`.
    pub fn push(&mut self, item: T, records: usize, now_ms: u64) {
        self.first_ms.get_or_insert(now_ms);
        self.items.push(item);
        self.records += records;
    }

    pub fn full(&self) -> bool {
        self.records >= self.max
    }

    /// When the started batch must be run: `max_wait_ms` after its first item.
    pub fn deadline_ms(&self) -> Option<u64> {
        self.first_ms.map(|first| first + self.max_wait_ms)
    }

    pub fn take(&mut self) -> Vec<T> {
        (self.first_ms, self.records) = (None, 0);
        std::mem::take(&mut self.items)
    }
}

/// What one run of the pipeline gave: its outputs, and the input offsets they release
/// once delivered.
#[derive(Debug, Default)]
pub(super) struct Step {
    pub emitted: Vec<Emitted>,
    pub offsets: Vec<PartitionOffset>,
}

/// The pipeline and the batch being gathered.
pub(super) struct Driver {
    pipeline: Pipeline,
    gathering: Batcher<Received>,
    /// Messages on this topic are the feedback topic's (verdicts, onboardings, forgets).
    feedback_topic: String,
    max_message_bytes: usize,
}

impl Driver {
    pub fn new(settings: &CoreSettings) -> Self {
        Self {
            pipeline: settings.pipeline(),
            gathering: Batcher::new(settings.max_batch, settings.max_wait_ms),
            feedback_topic: settings.feedback_topic.clone(),
            max_message_bytes: settings.max_message_bytes,
        }
    }

    /// Gather a message that arrived at `now_ms`.
    pub fn gather(&mut self, message: Received, now_ms: u64) {
        // A batch message holds up to sensor.batch_records records: counted as messages,
        // one micro-batch would hold that many times max_batch.
        let records = record::records_in(&message.payload);
        self.gathering.push(message, records, now_ms);
    }

    pub fn full(&self) -> bool {
        self.gathering.full()
    }

    /// When the gathered batch is due (ms on the gathering's clock): at once when it is
    /// full or deferred records wait with nothing gathered, else at its deadline; never
    /// when there is nothing to run.
    pub fn due_ms(&self, now_ms: u64) -> Option<u64> {
        if self.gathering.full() {
            return Some(now_ms);
        }
        self.gathering.deadline_ms().or_else(|| self.pipeline.has_deferred().then_some(now_ms))
    }

    /// Take the gathered batch.
    pub fn take(&mut self) -> Vec<Received> {
        self.gathering.take()
    }

    pub fn has_deferred(&self) -> bool {
        self.pipeline.has_deferred()
    }

    pub fn drop_deferred(&mut self, partitions: &[(String, i32)]) {
        self.pipeline.drop_deferred(partitions)
    }

    /// Whether to stop taking messages: as many records wait as a batch holds.
    pub fn backlogged(&self) -> bool {
        self.pipeline.backlogged()
    }

    /// How long what analysts dismissed and the daemon learned is remembered.
    pub fn memory_rules(&self) -> &super::behaviours::MemoryRules {
        &self.pipeline.rules.memory
    }

    pub fn max_message_bytes(&self) -> usize {
        self.max_message_bytes
    }

    /// The feedback topic's messages apart from the records.
    pub fn split_feedback(&self, messages: Vec<Received>) -> (Vec<Received>, Vec<Received>) {
        messages.into_iter().partition(|m| m.source.topic == self.feedback_topic)
    }

    /// Run deferred records and a decoded batch through the pipeline, then the feedback
    /// topic's messages.
    pub fn run(
        &mut self,
        engine: &mut Engine,
        batch: Vec<Consumed>,
        feedback: Vec<Received>,
        now: Now,
        version: &str,
        telemetry: &dyn Telemetry,
    ) -> Step {
        let (mut emitted, mut offsets) = self.pipeline.run(engine, batch, now, version, telemetry);
        if !feedback.is_empty() {
            emitted.extend(self.pipeline.feedback(engine, &feedback, now, version, telemetry));
            offsets.extend(highest_offsets(feedback.iter().map(|m| &m.source)));
        }
        Step { emitted, offsets }
    }

    /// Feedback applied at once.
    pub fn feedback(
        &mut self,
        engine: &mut Engine,
        messages: &[Received],
        now: Now,
        version: &str,
        telemetry: &dyn Telemetry,
    ) -> Vec<Emitted> {
        self.pipeline.feedback(engine, messages, now, version, telemetry)
    }

    /// Whether a message arriving at `arrival_ms` comes after the started batch's wait.
    pub fn expired(&self, arrival_ms: u64) -> bool {
        self.gathering.deadline_ms().is_some_and(|d| arrival_ms > d)
    }

    /// Time passes: incident updates and quiet closes due, onboardings ended.
    pub fn tick(
        &mut self,
        engine: &mut Engine,
        now: Now,
        version: &str,
        telemetry: &dyn Telemetry,
    ) -> Vec<Emitted> {
        self.pipeline.incident_ticks(engine, now, version, telemetry)
    }

    /// The kinds topic's messages.
    pub fn shares(
        &mut self,
        engine: &mut Engine,
        messages: &[Received],
        now: Now,
        version: &str,
        telemetry: &dyn Telemetry,
    ) -> Vec<Emitted> {
        self.pipeline.shares(engine, messages, now, version, telemetry)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_is_due_when_full_or_its_wait_is_over() {
        let mut b = Batcher::new(3, 20);
        assert_eq!(b.deadline_ms(), None, "nothing gathered, nothing due");
        b.push('a', 1, 100);
        b.push('b', 1, 115);
        assert_eq!(b.deadline_ms(), Some(120), "from the first item");
        assert!(!b.full());
        b.push('c', 1, 130);
        assert!(b.full());
        assert_eq!(b.take(), vec!['a', 'b', 'c']);
        assert_eq!(b.deadline_ms(), None);
        b.push('d', 1, 500);
        assert_eq!(b.deadline_ms(), Some(520), "a new batch waits from its own first item");
        // Full by records: a batch message of two and one more record.
        b.take();
        b.push('e', 2, 600);
        assert!(!b.full());
        b.push('f', 1, 601);
        assert!(b.full());
    }
}
