//! What the monitor reports (`monitor::telemetry`), logged and counted: each of its
//! events is handed to the one struct here that says it. What it publishes (incident
//! events, priors) comes as the output itself ([`Event::Published`]).

use crate::monitor::output::{Emitted, IncidentEvent};
use crate::monitor::telemetry::{Event, Eviction, FeedbackResult, ShareResult, Telemetry};

use super::{InternalEvent, Metrics};

impl Telemetry for Metrics {
    fn event(&self, event: Event<'_>) {
        match event {
            Event::Batch { records } => self.emit(BatchRun(records)),
            Event::Evicted { reason, count } => self.emit(DevicesEvicted { reason, count }),
            Event::Redelivered(n) => self.emit(RecordsRedelivered(n)),
            Event::Unbatched(n) => self.emit(RecordsUnbatched(n)),
            Event::Adapted(n) => self.emit(DevicesAdapted(n)),
            Event::Deferred(n) => self.emit(RecordsDeferred(n)),
            Event::LabelsIgnored(n) => self.emit(LabelsIgnored(n)),
            Event::Refused { kind } => self.emit(RecordRefused(kind)),
            Event::Unknown => self.emit(RecordUnknown),
            Event::Scored { alert } => self.emit(RecordScored { alert }),
            Event::Published(Emitted::Incident(e)) => self.emit(IncidentPublished(e)),
            Event::Published(Emitted::Prior(update)) => self.emit(PriorEstimated(update.prior)),
            // Delivered scores, alerts, shares and dead letters are counted by the sinks;
            // refusals by kind as they are decided (`Refused`, `Feedback`, `KindShare`).
            Event::Published(_) => {}
            Event::IncidentsOpen(n) => self.emit(IncidentsOpen(n)),
            Event::Feedback { device, result } => self.emit(FeedbackApplied { device, result }),
            Event::KindShare { result } => self.emit(KindShareRead(result)),
            Event::Kinds(counts) => self.emit(KindsKnown(counts)),
            Event::Tracked(n) => self.emit(DevicesTracked(n)),
            Event::AdaptationFinished { devices, seconds_per_batch } => {
                self.emit(AdaptationFinished { devices, seconds_per_batch })
            }
            Event::Restored { devices, adapted } => self.emit(StateRestored { devices, adapted }),
            Event::Parked(n) => self.emit(SnapshotsParked(n)),
            Event::Unmonitored(total) => self.emit(DevicesUnmonitored(total)),
            Event::StreamIdle(n) => self.emit(StreamsIdle(n)),
            Event::AdaptationWaits(n) => self.emit(AdaptationWaited(n)),
        }
    }
}

/// A micro-batch run: its records.
struct BatchRun(usize);

impl InternalEvent for BatchRun {
    fn emit(self, m: &Metrics) {
        m.batch_records.observe(self.0 as f64);
    }
}

/// Devices dropped from memory, by reason.
struct DevicesEvicted {
    reason: Eviction,
    count: usize,
}

impl InternalEvent for DevicesEvicted {
    fn emit(self, m: &Metrics) {
        let reason: &str = self.reason.into();
        m.devices_evicted.with_label_values(&[reason]).inc_by(self.count as u64);
        if self.count > 0 && self.reason != Eviction::Capacity {
            tracing::debug!(reason, count = self.count, "devices evicted");
        }
    }
}

/// Redelivered records scored again but kept out of the windows.
struct RecordsRedelivered(usize);

impl InternalEvent for RecordsRedelivered {
    fn emit(self, m: &Metrics) {
        m.records_redelivered.inc_by(self.0 as u64);
    }
}

/// Records a batch message held beyond its first: the consumed count becomes one of
/// records.
struct RecordsUnbatched(usize);

impl InternalEvent for RecordsUnbatched {
    fn emit(self, m: &Metrics) {
        m.records_consumed.inc_by(self.0 as u64);
    }
}

/// Devices adapted before their records were scored.
struct DevicesAdapted(usize);

impl InternalEvent for DevicesAdapted {
    fn emit(self, m: &Metrics) {
        m.adaptations.inc_by(self.0 as u64);
    }
}

/// Records held for the next batch (over their device's share).
struct RecordsDeferred(usize);

impl InternalEvent for RecordsDeferred {
    fn emit(self, m: &Metrics) {
        m.records_deferred.inc_by(self.0 as u64);
    }
}

/// Input labels dropped (the operator does not trust them).
struct LabelsIgnored(u64);

impl InternalEvent for LabelsIgnored {
    fn emit(self, m: &Metrics) {
        m.records_label_ignored.inc_by(self.0);
    }
}

/// A record refused on decode, by kind: it goes to the dead-letter topic (not logged
/// one by one: a bad producer would flood the log).
struct RecordRefused<'a>(&'a str);

impl InternalEvent for RecordRefused<'_> {
    fn emit(self, m: &Metrics) {
        m.records_invalid.with_label_values(&[self.0]).inc();
    }
}

/// A valid record of a device with no classifier yet.
struct RecordUnknown;

impl InternalEvent for RecordUnknown {
    fn emit(self, m: &Metrics) {
        m.records_unknown.inc();
    }
}

/// A record scored, and whether an alert was published for it.
struct RecordScored {
    alert: bool,
}

impl InternalEvent for RecordScored {
    fn emit(self, m: &Metrics) {
        m.records_scored.inc();
        if self.alert {
            m.alerts.inc();
        }
    }
}

/// A device's prior estimate after an adaptation.
struct PriorEstimated(f32);

impl InternalEvent for PriorEstimated {
    fn emit(self, m: &Metrics) {
        m.priors.observe(f64::from(self.0));
    }
}

/// An event published on the incidents topic: counted by its name (the transitions of
/// an incident, and the device's own: onboarding, forgotten, unmonitored...), and logged.
struct IncidentPublished<'a>(&'a IncidentEvent);

impl InternalEvent for IncidentPublished<'_> {
    fn emit(self, m: &Metrics) {
        let device = self.0.device();
        m.incidents.with_label_values(&[self.0.name()]).inc();
        match self.0 {
            IncidentEvent::Opened(r) => match &r.news {
                Some(news) => {
                    tracing::info!(device, incident = %r.incident_id, news = %news.why, "suppressed incident opened: news")
                }
                None => tracing::info!(device, incident = %r.incident_id, "incident opened"),
            },
            IncidentEvent::Updated(_) | IncidentEvent::Reviewed(_) => {}
            IncidentEvent::Reopened(r) => {
                tracing::info!(device, incident = %r.incident_id, reopened = r.reopened, "incident reopened");
            }
            IncidentEvent::Suppressed(r) => {
                let dismissed = r.suppressed.as_ref().map_or("", |d| d.incident_id.as_str());
                let on = r.suppressed.as_ref().and_then(|d| d.on.as_deref()).unwrap_or(device);
                tracing::info!(device, incident = %r.incident_id, dismissed, on, "incident suppressed: a dismissed behaviour");
            }
            IncidentEvent::Joined(r) => {
                let fleet = r.fleet.as_ref().map_or("", |f| f.incident_id.as_str());
                let on = r.fleet.as_ref().map_or("", |f| f.device.as_str());
                tracing::info!(device, incident = %r.incident_id, fleet, on, "incident joined a sibling's fleet incident");
            }
            IncidentEvent::Closed(r) => {
                let resolution = r.resolution.as_deref().unwrap_or_default();
                m.incidents_closed.with_label_values(&[resolution]).inc();
                tracing::info!(device, incident = %r.incident_id, resolution, records = r.figures.records, "incident closed");
            }
            IncidentEvent::Unlearned { incident_id, by, .. } => {
                tracing::info!(device, incident = %incident_id, by = %by, "remembered behaviour forgotten on a confirmed verdict");
            }
            IncidentEvent::Forgotten { known_normal, by, .. } => {
                tracing::info!(device, known_normal, by = %by, "device forgotten");
            }
            IncidentEvent::Onboarding { from, until, by, .. } => {
                tracing::info!(device, from, until, by = %by, "onboarding");
            }
            IncidentEvent::Onboarded { records, known_normal, .. } => {
                tracing::info!(device, records, known_normal, "onboarded");
            }
            IncidentEvent::Unmonitored { records, since_s, .. } => {
                let since_s = *since_s as u64;
                tracing::warn!(device, records, since_s, "device unmonitored: no known-normal record");
            }
        }
    }
}

/// Incidents open now.
struct IncidentsOpen(usize);

impl InternalEvent for IncidentsOpen {
    fn emit(self, m: &Metrics) {
        m.incidents_open.set(self.0 as i64);
    }
}

/// An analyst's verdict applied, or a feedback message refused (a dead letter says why).
struct FeedbackApplied<'a> {
    device: &'a str,
    result: FeedbackResult,
}

impl InternalEvent for FeedbackApplied<'_> {
    fn emit(self, m: &Metrics) {
        let result: &str = self.result.into();
        m.feedback.with_label_values(&[result]).inc();
        tracing::info!(device = self.device, result, "analyst feedback");
    }
}

/// A share read on the kinds topic, applied or refused (a dead letter says why).
struct KindShareRead(ShareResult);

impl InternalEvent for KindShareRead {
    fn emit(self, m: &Metrics) {
        let result: &str = self.0.into();
        m.kind_shares.with_label_values(&[result]).inc();
        if self.0 != ShareResult::Applied {
            tracing::warn!(result, "kind share refused");
        }
    }
}

/// The kinds known now, and how many members shared something in them.
struct KindsKnown<'a>(&'a [(String, usize)]);

impl InternalEvent for KindsKnown<'_> {
    fn emit(self, m: &Metrics) {
        m.kinds.set(self.0.len() as i64);
        m.kind_members.set(self.0.iter().map(|(_, n)| *n as i64).sum());
    }
}

/// Devices tracked now.
struct DevicesTracked(usize);

impl InternalEvent for DevicesTracked {
    fn emit(self, m: &Metrics) {
        m.devices_tracked.set(self.0 as i64);
    }
}

/// An adaptation job's results installed: its devices, and the adapter's seconds per
/// batched solve.
struct AdaptationFinished {
    devices: usize,
    seconds_per_batch: f64,
}

impl InternalEvent for AdaptationFinished {
    fn emit(self, m: &Metrics) {
        m.adaptation_seconds.observe(self.seconds_per_batch);
        m.adaptations.inc_by(self.devices as u64);
    }
}

/// Device windows restored from the state topic (and adapted before any of their
/// records is scored).
struct StateRestored {
    devices: usize,
    adapted: usize,
}

impl InternalEvent for StateRestored {
    fn emit(self, m: &Metrics) {
        m.state_restored_devices.inc_by(self.devices as u64);
        m.adaptations.inc_by(self.adapted as u64);
        let (restored, adapted) = (self.devices, self.adapted);
        tracing::info!(restored, adapted, "device windows restored from the state topic");
    }
}

/// Snapshots held until their device sends a record here.
struct SnapshotsParked(usize);

impl InternalEvent for SnapshotsParked {
    fn emit(self, m: &Metrics) {
        m.state_parked.set(self.0 as i64);
    }
}

/// Devices sending traffic with no known-normal record now (each one found is
/// published, and logged, as an `unmonitored` incident event).
struct DevicesUnmonitored(usize);

impl InternalEvent for DevicesUnmonitored {
    fn emit(self, m: &Metrics) {
        m.devices_unmonitored.set(self.0 as i64);
    }
}

/// Input partitions idle as a whole: the wall clock moves their time on.
struct StreamsIdle(usize);

impl InternalEvent for StreamsIdle {
    fn emit(self, m: &Metrics) {
        if self.0 > 0 {
            m.stream_idle.inc_by(self.0 as u64);
            tracing::debug!(
                partitions = self.0,
                "input partitions idle: their stream time follows the wall clock"
            );
        }
    }
}

/// Times scoring waited for the event clock's solver.
struct AdaptationWaited(usize);

impl InternalEvent for AdaptationWaited {
    fn emit(self, m: &Metrics) {
        m.adaptation_waits.inc_by(self.0 as u64);
    }
}
