//! A micro-batch through the devices: stamped with its partitions' stream time, scored
//! (`Devices::process`), and each scored record's decision moving its device's
//! incident, explained where it changes. What it gives back are plain values, in the
//! batch's order, for the door to publish.

use std::collections::HashMap;

use super::*;
use crate::monitor::clock::Clock;
use crate::monitor::devices::prior_update::PriorUpdate;
use crate::monitor::devices::IncidentChange;
use crate::monitor::incidents::Decision;

/// A valid record of a batch, as the door hands it over.
#[derive(Debug, Clone, Copy)]
pub struct BatchRecord<'a> {
    pub record: &'a FeatureRecord,
    pub source: &'a Source,
    /// Its partition's stream time, stamped when it first came (a record deferred from
    /// an earlier batch); `None`: a fresh record, stamped here.
    pub stamp: Option<f64>,
}

/// What a batch did to one record.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordRan {
    pub outcome: RecordOutcome,
    /// Its partition's stream time (kept with a deferred record for the next batch).
    pub stamp: f64,
    /// The incident changes it brought about, in order.
    pub changes: Vec<IncidentChange>,
}

/// What one batch did, in its order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Ran {
    /// One per record given.
    pub records: Vec<RecordRan>,
    /// Incidents of devices evicted meanwhile, closed as evicted.
    pub closes: Vec<IncidentChange>,
    /// The prior updates of devices adapted before scoring.
    pub priors: Vec<PriorUpdate>,
    /// Devices evicted to make room for new ones.
    pub evicted: usize,
    /// Redelivered records scored again but kept out of the windows.
    pub replayed: usize,
    /// Devices adapted in this batch.
    pub adapted: usize,
    /// Times scoring waited for the solver.
    pub waits: usize,
}

impl Devices {
    /// Score a micro-batch (records deferred from the last one first, then the fresh),
    /// and move each scored record's device's incident: on the event clock at the
    /// device's time, after what that time's passing closed or updated. `now` is the
    /// service's clock and the wall clock (the records' own time rules under
    /// [`Clock::Event`]).
    pub fn run(&mut self, records: &[BatchRecord<'_>], now: Now) -> Ran {
        let stamps: Vec<f64> = records
            .iter()
            .map(|b| match b.stamp {
                Some(stamp) => stamp,
                None => {
                    let s = b.source;
                    self.table.streams_mut().stamp(&s.topic, s.partition, b.record.ts, now.ms, now.unix)
                }
            })
            .collect();
        self.follow_service_clock(now);
        let processed = self.process(records, &stamps, now);
        if let (Clock::Event, Some(&latest)) = (
            self.table.clock(),
            processed.clocks.iter().filter(|c| !c.is_nan()).max_by(|a, b| a.total_cmp(b)),
        ) {
            self.table.set_time(latest);
        }
        let mut ran = Ran {
            evicted: processed.evicted,
            replayed: processed.replayed,
            adapted: processed.adapted.len(),
            waits: processed.waits,
            ..Ran::default()
        };
        let mut held: HashMap<(&str, i32), f64> = HashMap::new();
        for ((b, (&outcome, &clock)), &stamp) in
            records.iter().zip(processed.outcomes.iter().zip(&processed.clocks)).zip(&stamps)
        {
            if outcome == RecordOutcome::Deferred {
                let t = held.entry((b.source.topic.as_str(), b.source.partition)).or_insert(stamp);
                *t = t.min(stamp);
            }
            let changes = self.decided(b, outcome, clock, now);
            ran.records.push(RecordRan { outcome, stamp, changes });
        }
        self.table.streams_mut().hold(&held);
        ran.closes = self.eviction_closes(now);
        ran.priors = processed.adapted.iter().filter_map(|id| self.prior_update(id, now)).collect();
        ran
    }

    /// A scored record's decision moves its device's incident: the changes, explained.
    fn decided(
        &mut self,
        b: &BatchRecord<'_>,
        outcome: RecordOutcome,
        clock: f64,
        now: Now,
    ) -> Vec<IncidentChange> {
        let RecordOutcome::Scored { posterior, anomalous, prior, taken_as_normal } = outcome else {
            return Vec::new();
        };
        let device = &b.record.device;
        let mut changes = Vec::new();
        let now = match self.table.clock() {
            Clock::Service => now,
            Clock::Event => {
                // On the records' clock an incident closes (or is updated) as the
                // device's time passes, at its records.
                let now = Now::event(clock);
                for t in self.table.tick_incident(device, &self.rules, now) {
                    changes.push(self.change(device, t, now.unix));
                }
                now
            }
        };
        let decision = Decision::of(b.record, b.source, posterior, anomalous, prior, taken_as_normal);
        for t in self.table.observe_decision(device, decision, &self.rules, now) {
            changes.push(self.change(device, t, now.unix));
        }
        changes
    }

    /// A device's prior update, after its classifier changed.
    pub(super) fn prior_update(&self, id: &str, now: Now) -> Option<PriorUpdate> {
        self.table.get(id)?.prior_update(id, &self.version, now.unix, &self.rules.memory)
    }

    /// On the service clock the device table's time (onboarding spans, kind shares) is
    /// the wall clock of the call that acts on it; on the event clock the records set it.
    pub(super) fn follow_service_clock(&mut self, now: Now) {
        if self.table.clock() == Clock::Service {
            self.table.set_time(now.unix);
        }
    }
}
