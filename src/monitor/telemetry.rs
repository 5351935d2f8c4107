//! What the core tells whoever watches it, as values: the pipeline reports each
//! event to a [`Telemetry`], and the shell's implementation logs and counts it
//! (`daemon/internal_events/`), so the core needs no metrics library and a test can count
//! what happened ([`Tally`]).
//!
//! A fact the monitor publishes (an incident event, a prior) is said once, as its
//! [`Emitted`] output: the monitor reports each output it returns as
//! [`Event::Published`], and the watcher counts and logs it from there. The other events
//! are what no topic carries: the work done, and gauges.

use std::cell::RefCell;
use std::collections::BTreeMap;

use super::output::Emitted;

/// Why devices left memory. A label's values are its variants, named once here: the
/// metrics register them from this list (`strum`'s `VARIANTS`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::IntoStaticStr, strum::VariantNames, strum::Display)]
#[strum(serialize_all = "snake_case")]
pub enum Eviction {
    /// Over `devices.max_tracked`: the least recently seen went.
    Capacity,
    /// Quiet past `devices.idle_timeout_s`.
    Idle,
    /// Its partition moved to another daemon.
    Revoked,
}

/// What became of a feedback message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::IntoStaticStr, strum::VariantNames, strum::Display)]
#[strum(serialize_all = "snake_case")]
pub enum FeedbackResult {
    /// An analyst's false positive, applied.
    FalsePositive,
    /// An analyst's confirmed attack, applied.
    Confirmed,
    /// Refused (a dead letter says why).
    Refused,
}

/// What became of a share read on the kinds topic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::IntoStaticStr, strum::VariantNames, strum::Display)]
#[strum(serialize_all = "snake_case")]
pub enum ShareResult {
    Applied,
    /// Refused (a dead letter says why).
    Refused,
}

/// One thing the core did.
#[derive(Debug, Clone, Copy)]
pub enum Event<'a> {
    /// A micro-batch processed: its records.
    Batch { records: usize },
    /// Devices dropped from memory, by reason.
    Evicted { reason: Eviction, count: usize },
    /// Records a batch message held beyond its first (the shell counts messages as they
    /// arrive; these make its count one of records).
    Unbatched(usize),
    /// Redelivered records scored again but kept out of the windows.
    Redelivered(usize),
    /// Devices adapted.
    Adapted(usize),
    /// Records held for the next batch (over their device's share).
    Deferred(usize),
    /// Input labels dropped (the operator does not trust them).
    LabelsIgnored(u64),
    /// A record refused on decode, by kind (it goes to the dead-letter topic).
    Refused { kind: &'a str },
    /// A record with no classifier for its device yet.
    Unknown,
    /// A record scored, and whether an alert was published for it.
    Scored { alert: bool },
    /// An output of the monitor, reported once as it is returned: incident events
    /// (transitions, onboardings, forgotten and unmonitored devices), priors, scores,
    /// alerts, shares, dead letters.
    Published(&'a Emitted),
    /// Incidents open now.
    IncidentsOpen(usize),
    /// Analyst feedback applied or refused.
    Feedback { device: &'a str, result: FeedbackResult },
    /// A share read on the kinds topic, applied or refused.
    KindShare { result: ShareResult },
    /// The kinds known now, with the members that shared something in each.
    Kinds(&'a [(String, usize)]),
    /// Devices tracked now.
    Tracked(usize),
    /// An adaptation job's results installed: its devices, and the adapter's seconds per
    /// batched solve.
    AdaptationFinished { devices: usize, seconds_per_batch: f64 },
    /// Devices restored from the state topic, and adapted at once.
    Restored { devices: usize, adapted: usize },
    /// Snapshots parked until their device sends a record here.
    Parked(usize),
    /// Times scoring waited for the event clock's solver (it was a whole adaptation
    /// point behind).
    AdaptationWaits(usize),
    /// Input partitions newly idle as a whole: the wall clock moves their stream time
    /// on (`stream_time.rs`).
    StreamIdle(usize),
    /// Devices sending traffic with no known-normal record now (each is published once
    /// as an `unmonitored` incident event).
    Unmonitored(usize),
}

/// Whoever watches the core.
pub trait Telemetry {
    fn event(&self, event: Event<'_>);
}

/// Counts by event name (and reason or result), for tests and the lab.
#[derive(Debug, Default)]
pub struct Tally(RefCell<BTreeMap<String, u64>>);

impl Tally {
    /// The count under `key`: an event's name in snake case, with its reason or result
    /// after a slash where it has one (`refused/malformed`, `evicted/capacity`).
    pub fn get(&self, key: &str) -> u64 {
        self.0.borrow().get(key).copied().unwrap_or(0)
    }

    fn add(&self, key: String, n: u64) {
        *self.0.borrow_mut().entry(key).or_insert(0) += n;
    }
}

impl Telemetry for Tally {
    fn event(&self, event: Event<'_>) {
        match event {
            Event::Batch { records } => self.add("batch_records".into(), records as u64),
            Event::Evicted { reason, count } => self.add(format!("evicted/{reason}"), count as u64),
            Event::Redelivered(n) => self.add("redelivered".into(), n as u64),
            Event::Unbatched(n) => self.add("unbatched".into(), n as u64),
            Event::Adapted(n) => self.add("adapted".into(), n as u64),
            Event::Deferred(n) => self.add("deferred".into(), n as u64),
            Event::LabelsIgnored(n) => self.add("labels_ignored".into(), n),
            Event::Refused { kind } => self.add(format!("refused/{kind}"), 1),
            Event::Unknown => self.add("unknown".into(), 1),
            Event::Scored { alert } => {
                self.add("scored".into(), 1);
                self.add("alerts".into(), u64::from(alert));
            }
            Event::Published(Emitted::Prior(_)) => self.add("priors".into(), 1),
            Event::Published(Emitted::Incident(e)) => self.add(format!("incident/{}", e.name()), 1),
            Event::Published(_) => {}
            Event::IncidentsOpen(_) => {}
            Event::Feedback { result, .. } => self.add(format!("feedback/{result}"), 1),
            Event::KindShare { result } => self.add(format!("kind_share/{result}"), 1),
            Event::Kinds(_) | Event::Tracked(_) | Event::Parked(_) => {}
            Event::AdaptationFinished { devices, .. } => self.add("adapted".into(), devices as u64),
            Event::Restored { devices, adapted } => {
                self.add("restored".into(), devices as u64);
                self.add("adapted".into(), adapted as u64);
            }
            Event::Unmonitored(_) => {}
            Event::StreamIdle(n) => self.add("stream_idle".into(), n as u64),
            Event::AdaptationWaits(n) => self.add("adaptation_waits".into(), n as u64),
        }
    }
}
