//! Stream time: each input partition's time is the largest record time seen on it, read
//! in the partition's order (Kafka Streams' stream time per task). A record is stamped
//! with its partition's stream time as it enters the pipeline, before any micro-batch
//! defers it, so its stamp depends on the partition's order alone: a replay at any speed,
//! cut into any batches, stamps every record as live traffic did.
//!
//! A device's time is its partition's (`DeviceTable::now_of`): at a record, the record's
//! stamp; between records, the partition's stream time, never past the earliest record
//! still deferred on it (a device must not see time pass beyond a record of its own that
//! is yet to be decided). Wall-clock time enters at one place only, the punctuation of a
//! partition idle as a whole: once nothing arrived on it for `idle_after_ms` of the
//! service's time, its time moves on by that silence, so that a silent fleet's
//! incidents still close and its onboardings still end. It is counted
//! (`Event::StreamIdle`), and a replay, whose partitions are never idle, never
//! depends on it.

use std::collections::HashMap;

/// One partition's clock.
#[derive(Debug, Clone, Copy)]
struct PartitionClock {
    /// The largest (bounded) record time stamped on it, Unix seconds.
    ts: f64,
    /// When its last records entered the pipeline (service clock, ms).
    arrived_ms: u64,
    /// The earliest stamp of a record of it still deferred.
    held: Option<f64>,
    /// Its idleness was counted (until records arrive again).
    told_idle: bool,
}

/// The input partitions' stream times.
#[derive(Debug, Clone, Default)]
pub struct StreamClocks {
    topics: HashMap<String, HashMap<i32, PartitionClock>>,
    /// A partition with nothing arriving for this long (service clock, ms) is idle: its
    /// time moves on by the silence. 0: at once.
    pub idle_after_ms: u64,
    /// A record stamped further ahead of the wall clock than this counts as the wall
    /// clock plus this (seconds): a device whose clock jumps ahead cannot move its
    /// partition's time on by more.
    pub max_ahead_s: f64,
}

/// How long a partition has been silent, once it is idle: nothing deferred on it and
/// nothing arrived for `idle_after_ms` of the service's time.
fn idle_for_ms(c: &PartitionClock, service_ms: u64, idle_after_ms: u64) -> Option<u64> {
    let silent = service_ms.saturating_sub(c.arrived_ms);
    (c.held.is_none() && silent >= idle_after_ms).then_some(silent)
}

impl StreamClocks {
    pub fn new(idle_after_ms: u64, max_ahead_s: f64) -> Self {
        Self { topics: HashMap::new(), idle_after_ms, max_ahead_s }
    }

    /// Stamp a record of time `ts` from `topic`/`partition`, entering the pipeline at
    /// `arrived_ms` with the wall clock at `wall`: its partition's stream time with it.
    /// Records must be stamped in their partition's order, once each.
    pub fn stamp(&mut self, topic: &str, partition: i32, ts: f64, arrived_ms: u64, wall: f64) -> f64 {
        let ts = ts.min(wall + self.max_ahead_s);
        let clock = self.partition(topic, partition);
        clock.ts = clock.ts.max(ts);
        clock.arrived_ms = clock.arrived_ms.max(arrived_ms);
        clock.told_idle = false;
        clock.ts
    }

    /// A partition known from a restore, at least at `ts` (a restored device's last
    /// time), as if its records had arrived at `arrived_ms`.
    pub fn restored(&mut self, topic: &str, partition: i32, ts: f64, arrived_ms: u64) {
        let clock = self.partition(topic, partition);
        clock.ts = clock.ts.max(ts);
        clock.arrived_ms = clock.arrived_ms.max(arrived_ms);
    }

    fn partition(&mut self, topic: &str, partition: i32) -> &mut PartitionClock {
        if !self.topics.contains_key(topic) {
            self.topics.insert(topic.to_string(), HashMap::new());
        }
        let partitions = self.topics.get_mut(topic).expect("just inserted");
        partitions.entry(partition).or_insert(PartitionClock {
            ts: f64::NEG_INFINITY,
            arrived_ms: 0,
            held: None,
            told_idle: false,
        })
    }

    /// The partition's time between records at `service_ms`: its stream time, no later
    /// than its earliest deferred record, plus the silence once it is idle. `None`: no
    /// record or restore made it known.
    pub fn now(&self, topic: &str, partition: i32, service_ms: u64) -> Option<f64> {
        let c = self.topics.get(topic)?.get(&partition)?;
        if !c.ts.is_finite() {
            return None;
        }
        let ts = c.held.map_or(c.ts, |h| h.min(c.ts));
        Some(ts + self.silence_ms(c, service_ms) as f64 / 1000.0)
    }

    /// How long the partition has been idle (0 until `idle_after_ms` passed).
    fn silence_ms(&self, c: &PartitionClock, service_ms: u64) -> u64 {
        idle_for_ms(c, service_ms, self.idle_after_ms).unwrap_or(0)
    }

    /// The earliest stamps of the records deferred now, by partition (every other
    /// partition holds none).
    pub fn hold(&mut self, held: &HashMap<(&str, i32), f64>) {
        for (topic, partitions) in &mut self.topics {
            for (p, c) in partitions.iter_mut() {
                c.held = held.get(&(topic.as_str(), *p)).copied();
            }
        }
    }

    /// Partitions that went idle since the last call (each counted once per silence).
    pub fn newly_idle(&mut self, service_ms: u64) -> usize {
        let idle_after_ms = self.idle_after_ms;
        let mut n = 0;
        for c in self.topics.values_mut().flat_map(|p| p.values_mut()) {
            let idle = idle_for_ms(c, service_ms, idle_after_ms).is_some();
            if !c.told_idle && c.ts.is_finite() && idle {
                c.told_idle = true;
                n += 1;
            }
        }
        n
    }

    /// Forget revoked partitions: a new owner reads them.
    pub fn forget(&mut self, partitions: &[(String, i32)]) {
        for (topic, p) in partitions {
            if let Some(ps) = self.topics.get_mut(topic) {
                ps.remove(p);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_partition_runs_on_its_largest_record_time_and_on_the_wall_clock_only_when_idle() {
        let mut s = StreamClocks::new(10_000, 300.0);
        assert_eq!(s.now("in", 0, 0), None, "nothing seen");
        assert_eq!(s.stamp("in", 0, 100.0, 0, 1_000.0), 100.0);
        assert_eq!(
            s.stamp("in", 0, 90.0, 0, 1_000.0),
            100.0,
            "an older record is stamped at the stream's time"
        );
        assert_eq!(s.stamp("in", 1, 50.0, 0, 1_000.0), 50.0, "each partition its own");
        assert_eq!(
            s.stamp("in", 0, 5_000.0, 0, 1_000.0),
            1_300.0,
            "no further than max_ahead_s past the wall"
        );
        assert_eq!(s.now("in", 0, 9_999), Some(1_300.0), "busy: only records move it");
        assert_eq!(s.newly_idle(9_999), 0);
        assert_eq!(s.now("in", 0, 12_000), Some(1_312.0), "idle: moved on by the whole silence");
        assert_eq!(s.newly_idle(12_000), 2, "both partitions went idle, counted once");
        assert_eq!(s.newly_idle(13_000), 0);
        s.stamp("in", 0, 1_301.0, 12_500, 2_000.0);
        assert_eq!(s.now("in", 0, 13_000), Some(1_301.0), "records again");
        s.hold(&HashMap::from([(("in", 0), 1_290.0)]));
        assert_eq!(
            s.now("in", 0, 60_000),
            Some(1_290.0),
            "not past a deferred record, nor idle while one waits"
        );
        s.hold(&HashMap::new());
        s.forget(&[("in".into(), 0)]);
        assert_eq!(s.now("in", 0, 0), None);
    }
}
