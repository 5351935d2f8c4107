//! Classifiers: which devices are due, their windows handed over, classifiers installed
//! unless stale, all dropped on a model reload; a device's state restored from a snapshot.

use super::*;

/// What a restored device kept of its classifiers (on the event clock, adapted on the
/// running model).
#[derive(Debug, PartialEq)]
pub enum Kept {
    /// None: it is to be adapted now.
    Nothing,
    /// The one scoring, and no job was waiting for its next point.
    Scoring,
    /// The one scoring, and the one its next point installs under `handover`.
    Next { handover: u64, state: TaskState },
}

impl DeviceTable {
    /// Devices to re-adapt: windows changed (at least `min_changed` records, counted as
    /// a share of a full unlabeled window: [`records_needed`]) and a
    /// positive.
    pub(super) fn due_for_adaptation(&self, min_changed: usize) -> Vec<String> {
        let capacity = self.sizes.unlabeled;
        self.devices
            .iter()
            .filter(|(_, d)| {
                d.changed >= records_needed(min_changed, d.unlabeled.len(), capacity) && d.adaptable()
            })
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// A device's windows for adaptation (shared, copy on write), marked handed over.
    pub(super) fn take_windows(&mut self, id: &str) -> Option<AdaptJob> {
        let d = self.devices.get_mut(id)?;
        d.changed = 0;
        self.handovers += 1;
        Some(AdaptJob {
            device: id.to_string(),
            positive: d.known_normal_rows(),
            unlabeled: if self.sizes.drawn {
                SharedRows::new(d.unlabeled.newest(drawn_supports::NEWEST_UNLABELED))
            } else {
                d.unlabeled.shared()
            },
            handover: self.handovers,
            seen: d.seen,
            drawn: self.sizes.drawn,
        })
    }

    /// Install the classifier adapted on `handover`'s windows, unless the device is no
    /// longer tracked or already has one adapted on newer windows. Returns whether it
    /// was installed.
    pub(super) fn install(&mut self, id: &str, handover: u64, state: TaskState) -> bool {
        match self.devices.get_mut(id) {
            Some(d) if handover > d.installed_handover => {
                d.classifier = Some(state);
                d.installed_handover = handover;
                true
            }
            _ => false,
        }
    }

    /// Install restored windows (state topic: read from state partition `home`);
    /// counts as seen now. Returns what it kept of its classifiers.
    pub(super) fn restore(
        &mut self,
        id: &str,
        snapshot: &Snapshot,
        partition: i32,
        home: i32,
        now_ms: u64,
        model: &str,
    ) -> Kept {
        let mut d = Device::new(self.dim, &self.sizes, partition, self.handovers);
        d.home = Some(home);
        d.positive = RowWindow::from_rows(self.dim, self.sizes.positive, &snapshot.positive);
        let restored_ts = snapshot.points.as_ref().map_or(0.0, |p| p.clock);
        d.unlabeled = SpanWindow::from_rows(
            self.dim,
            self.sizes.span(),
            &snapshot.unlabeled,
            snapshot.unlabeled_layout.as_ref(),
            restored_ts,
        );
        d.seen = snapshot.seen;
        d.last_source = snapshot.last_source.clone();
        d.changed = usize::from(d.adaptable());
        d.idle = d.unlabeled.is_empty() && !d.positive.is_empty();
        d.first_seen_ms = now_ms;
        d.incidents = snapshot.incidents.clone();
        // An open incident's quiet period runs on from its last anomalous record on the
        // event clock (a restart changes no incident), from now on the service's.
        let last_ts = d.incidents.open().map(|i| i.figures.last_ts).filter(|_| self.clock == Clock::Event);
        d.incidents = match last_ts {
            Some(ts) => {
                d.clock = ts;
                d.incidents.restored(Now::event(ts).ms)
            }
            None => d.incidents.restored(now_ms),
        };
        let mut kept = Kept::Nothing;
        if let Some(p) = snapshot.points.as_ref().filter(|_| self.clock == Clock::Event) {
            // The same points as before the restart, on the device's time as it was.
            d.clock = d.clock.max(p.clock);
            (d.next_adapt_ts, d.records_since_adaptation) = (p.next, p.since);
            // And the same classifiers, if adapted on this model.
            if let Some(c) = p.classifiers.as_ref().filter(|c| c.model == model) {
                d.classifier = Some(c.scoring.clone());
                d.changed = p.since;
                kept = match &c.next {
                    // A handover no job had, installed at the device's next point as a
                    // job's result would be.
                    Some(state) => {
                        self.handovers += 1;
                        Kept::Next { handover: self.handovers, state: state.clone() }
                    }
                    None => Kept::Scoring,
                };
            }
        }
        if let Some(s) = d.last_source.as_ref().filter(|_| self.clock == Clock::Event) {
            // Its partition's time starts no earlier than its own (restored) time.
            self.streams.restored(&s.topic, partition, d.clock, now_ms);
        }
        d.onboarding = snapshot.onboarding.clone();
        d.onboarded = snapshot.onboarded.clone();
        d.kind = snapshot.kind.clone();
        d.rows_accepted = snapshot.rows_accepted;
        d.positive.pin(snapshot.pinned);
        if snapshot.rows_apart {
            // On the state topic as they are. (A whole snapshot's rows are written again,
            // apart, with the device's next main record, which would otherwise lack them.)
            (d.positive_written, d.unlabeled_written) = (d.positive.stamp(), d.unlabeled.stamp());
            d.unlabeled_written_ms = now_ms;
        }
        if d.onboarding.is_some() {
            self.onboardings.started(id);
        }
        if let Some(old) = self.devices.insert(id.to_string(), d) {
            self.recency.remove(old.lru_key);
        }
        self.refresh_offered(id);
        self.touch(id, now_ms);
        while self.recency.over() {
            if self.evict_oldest().is_none() {
                break;
            }
        }
        kept
    }

    /// Forget every adapted state (after a model reload), keeping windows.
    pub(super) fn invalidate_states(&mut self) {
        for d in self.devices.values_mut() {
            d.classifier = None;
            d.changed = d.changed.max(1);
        }
    }
}

/// The records a device must have sent since its last adaptation for `n` to count,
/// with `rows` of `capacity` in its unlabeled window: `n` for a full window, in
/// proportion for one still filling (the same share of change), at least 1. Both clocks
/// count `adaptation.min_records` and `after_records` so.
pub fn records_needed(n: usize, rows: usize, capacity: usize) -> usize {
    (n * rows).div_ceil(capacity.max(1)).max(1)
}
