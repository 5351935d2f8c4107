//! What the core tells whoever watches it, as values: the door reports each event to a
//! [`Telemetry`], and the shell's implementation logs and counts it
//! (`daemon/internal_events/core.rs`, one arm an event), so the core needs no metrics
//! library. [`Event`] is the one list: each event's name, label and amount are read off
//! it, so the tests' and the lab's [`Tally`] counts any event, a new one included,
//! without being told.
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

/// One thing the core did. Its name is the variant's, in snake case.
#[derive(Debug, Clone, Copy, strum::IntoStaticStr)]
#[strum(serialize_all = "snake_case")]
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

/// How much of an event: a count added up, or a level that replaces the last.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Amount {
    Count(u64),
    Level(u64),
}

impl Event<'_> {
    /// The event's name (`batch`, `evicted`, `stream_idle`…).
    pub fn name(&self) -> &'static str {
        self.into()
    }

    /// Its label's value, where it has one: a reason, a result, a refusal's kind, what
    /// was published (an incident event by its own name: `opened`, `closed`…).
    pub fn label(&self) -> Option<&str> {
        match self {
            Event::Evicted { reason, .. } => Some(reason.into()),
            Event::Refused { kind } => Some(kind),
            Event::Scored { alert } => Some(if *alert { "alert" } else { "no_alert" }),
            Event::Published(Emitted::Incident(e)) => Some(e.name()),
            Event::Published(e) => Some(e.kind()),
            Event::Feedback { result, .. } => Some(result.into()),
            Event::KindShare { result } => Some(result.into()),
            _ => None,
        }
    }

    /// How much happened: records, devices, partitions; or the level now.
    pub fn amount(&self) -> Amount {
        let n = |n: usize| n as u64;
        match *self {
            Event::Batch { records } => Amount::Count(n(records)),
            Event::Evicted { count, .. } => Amount::Count(n(count)),
            Event::Unbatched(c)
            | Event::Redelivered(c)
            | Event::Adapted(c)
            | Event::Deferred(c)
            | Event::AdaptationWaits(c)
            | Event::StreamIdle(c) => Amount::Count(n(c)),
            Event::LabelsIgnored(c) => Amount::Count(c),
            Event::Refused { .. }
            | Event::Unknown
            | Event::Scored { .. }
            | Event::Published(_)
            | Event::Feedback { .. }
            | Event::KindShare { .. } => Amount::Count(1),
            Event::AdaptationFinished { devices, .. } => Amount::Count(n(devices)),
            Event::Restored { devices, .. } => Amount::Count(n(devices)),
            Event::IncidentsOpen(l) | Event::Tracked(l) | Event::Parked(l) | Event::Unmonitored(l) => {
                Amount::Level(n(l))
            }
            Event::Kinds(kinds) => Amount::Level(n(kinds.len())),
        }
    }
}

/// Whoever watches the core.
pub trait Telemetry {
    fn event(&self, event: Event<'_>);
}

/// Every event by name, and by `name/label` where it has a label: counts added up,
/// levels as they were last.
#[derive(Debug, Default)]
pub struct Tally(RefCell<BTreeMap<String, u64>>);

impl Tally {
    /// The figure under `key`: an event's name (`deferred`), or its name and label
    /// (`refused/malformed`, `evicted/capacity`, `published/prior`, `published/opened`).
    pub fn get(&self, key: &str) -> u64 {
        self.0.borrow().get(key).copied().unwrap_or(0)
    }
}

impl Telemetry for Tally {
    fn event(&self, event: Event<'_>) {
        let name = event.name();
        let keys = [Some(name.to_string()), event.label().map(|l| format!("{name}/{l}"))];
        let mut figures = self.0.borrow_mut();
        for key in keys.into_iter().flatten() {
            let figure = figures.entry(key).or_insert(0);
            match event.amount() {
                Amount::Count(n) => *figure += n,
                Amount::Level(n) => *figure = n,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The tally reads each event's name, label and amount off the event itself:
    /// counts add up, levels replace, a label counts under `name/label` too.
    #[test]
    fn the_tally_counts_by_name_and_label_and_keeps_levels() {
        let tally = Tally::default();
        tally.event(Event::Evicted { reason: Eviction::Idle, count: 2 });
        tally.event(Event::Evicted { reason: Eviction::Capacity, count: 3 });
        tally.event(Event::Refused { kind: "malformed" });
        tally.event(Event::StreamIdle(4));
        tally.event(Event::Tracked(7));
        tally.event(Event::Tracked(5));
        tally.event(Event::Feedback { device: "cam", result: FeedbackResult::FalsePositive });
        assert_eq!(
            (tally.get("evicted"), tally.get("evicted/idle"), tally.get("evicted/capacity")),
            (5, 2, 3)
        );
        assert_eq!((tally.get("refused/malformed"), tally.get("stream_idle")), (1, 4));
        assert_eq!(tally.get("tracked"), 5, "a level is what it was last");
        assert_eq!(tally.get("feedback/false_positive"), 1);
        assert_eq!(tally.get("adapted"), 0, "nothing said, nothing counted");
    }
}
