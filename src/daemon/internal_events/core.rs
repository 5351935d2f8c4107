//! What the monitor reports (`monitor::telemetry`), logged and counted: the monitor's
//! [`Event`] is the one list of what it tells, and each is emitted here, in its one arm,
//! where its log line and its metric sit together. What it publishes (incident events,
//! priors) comes as the output itself ([`Event::Published`]).

use crate::monitor::output::{Emitted, IncidentEvent};
use crate::monitor::telemetry::{Event, Eviction, ShareResult, Telemetry};

use super::{InternalEvent, Metrics};

impl Telemetry for Metrics {
    fn event(&self, event: Event<'_>) {
        self.emit(event)
    }
}

impl InternalEvent for Event<'_> {
    fn emit(self, m: &Metrics) {
        match self {
            Event::Batch { records } => m.batch_records.observe(records as f64),
            Event::Evicted { reason, count } => {
                let label: &str = reason.into();
                m.devices_evicted.with_label_values(&[label]).inc_by(count as u64);
                if count > 0 && reason != Eviction::Capacity {
                    tracing::debug!(reason = label, count, "devices evicted");
                }
            }
            Event::Redelivered(n) => m.records_redelivered.inc_by(n as u64),
            // Records a batch message held beyond its first: the consumed count becomes
            // one of records.
            Event::Unbatched(n) => m.records_consumed.inc_by(n as u64),
            Event::Adapted(n) => m.adaptations.inc_by(n as u64),
            Event::Deferred(n) => m.records_deferred.inc_by(n as u64),
            Event::LabelsIgnored(n) => m.records_label_ignored.inc_by(n),
            // Not logged one by one: a bad producer would flood the log.
            Event::Refused { kind } => m.records_invalid.with_label_values(&[kind]).inc(),
            Event::Unknown => m.records_unknown.inc(),
            Event::Scored { alert } => {
                m.records_scored.inc();
                if alert {
                    m.alerts.inc();
                }
            }
            Event::Published(Emitted::Incident(e)) => incident_published(m, e),
            Event::Published(Emitted::Prior(update)) => m.priors.observe(f64::from(update.prior)),
            // Delivered scores, alerts, shares and dead letters are counted by the sinks;
            // refusals by kind as they are decided (`Refused`, `Feedback`, `KindShare`).
            Event::Published(_) => {}
            Event::IncidentsOpen(n) => m.incidents_open.set(n as i64),
            Event::Feedback { device, result } => {
                let result: &str = result.into();
                m.feedback.with_label_values(&[result]).inc();
                tracing::info!(device, result, "analyst feedback");
            }
            Event::KindShare { result } => {
                let label: &str = result.into();
                m.kind_shares.with_label_values(&[label]).inc();
                if result != ShareResult::Applied {
                    tracing::warn!(result = label, "kind share refused");
                }
            }
            Event::Kinds(counts) => {
                m.kinds.set(counts.len() as i64);
                m.kind_members.set(counts.iter().map(|(_, n)| *n as i64).sum());
            }
            Event::Tracked(n) => m.devices_tracked.set(n as i64),
            Event::AdaptationFinished { devices, seconds_per_batch } => {
                m.adaptation_seconds.observe(seconds_per_batch);
                m.adaptations.inc_by(devices as u64);
            }
            Event::Restored { devices, adapted } => {
                m.state_restored_devices.inc_by(devices as u64);
                m.adaptations.inc_by(adapted as u64);
                tracing::info!(restored = devices, adapted, "device windows restored from the state topic");
            }
            Event::Parked(n) => m.state_parked.set(n as i64),
            // Each one found is published, and logged, as an `unmonitored` incident event.
            Event::Unmonitored(total) => m.devices_unmonitored.set(total as i64),
            Event::StreamIdle(n) => {
                if n > 0 {
                    m.stream_idle.inc_by(n as u64);
                    tracing::debug!(
                        partitions = n,
                        "input partitions idle: their stream time follows the wall clock"
                    );
                }
            }
            Event::AdaptationWaits(n) => m.adaptation_waits.inc_by(n as u64),
        }
    }
}

/// An event published on the incidents topic: counted by its name (the transitions of
/// an incident, and the device's own: onboarding, forgotten, unmonitored...), and logged.
fn incident_published(m: &Metrics, e: &IncidentEvent) {
    let device = e.device();
    m.incidents.with_label_values(&[e.name()]).inc();
    match e {
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
        IncidentEvent::KindJoined { kind, by, .. } => {
            tracing::info!(device, kind = %kind, by = %by, "device joined a kind");
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
