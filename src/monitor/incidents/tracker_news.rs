//! When a suppressed incident becomes news: its record went beyond the behaviour it was
//! suppressed as, and beyond all the device and its kind remember.

use super::*;

impl IncidentTracker {
    /// A suppressed incident's newest anomalous record (`d`) went beyond the behaviour
    /// it was suppressed as, and beyond everything else the device and its kind remember
    /// (or that behaviour was forgotten): it is news, and no longer suppressed. Only a
    /// verdict's behaviour admits a record of an incident that shows an attack's
    /// footprint.
    pub(super) fn becomes_news(
        open: &mut Incident,
        memory: &Memory,
        kind: Option<&Memory>,
        d: &Decision<'_>,
        rules: &IncidentRules,
        now: (u64, f64),
    ) -> bool {
        let (now_ms, now_unix) = now;
        let held = open.held();
        let Some(dismissal) = &open.suppressed else { return false };
        let id = &dismissal.incident_id;
        let beyond = match memory.find(id).or_else(|| kind?.find(id)) {
            // Held by the learning period: raised once it shows what is never learned.
            None if held => open.footprint.as_ref().map(|f| {
                format!("in the device's learning period, but it shows what is never learned: {}", f.words())
            }),
            // Only a verdict quiets what an attack leaves.
            Some(_) if dismissal.learned && open.footprint.is_some() => open.footprint.as_ref().map(|f| {
                format!(
                    "like the behaviour learned from incident {id}, which closed quietly without a verdict, \
                     but it shows what is never learned: {}",
                    f.words()
                )
            }),
            Some(b) => {
                let (c, f, m) = (d.context, d.features, &rules.memory);
                let footprint = open.footprint.is_some();
                let elsewhere = || {
                    memory
                        .recognise(c, f, m, now_unix)
                        .or_else(|| kind?.recognise(c, f, m, now_unix))
                        .is_some_and(|other| !(footprint && other.dismissal.learned))
                };
                // Volume alone is news against an analyst's dismissal; against what the
                // daemon learned, the far-more-than-usual look judges it per peer, on
                // every record the device sent (`remote_peers.rs`).
                let by_volume = !dismissal.learned || open.traffic.packets == 0;
                b.admits(c, f)
                    .filter(|_| !elsewhere())
                    .or_else(|| {
                        b.admits_volume(&open.traffic, open.figures.anomalous, m.volume_factor)
                            .filter(|_| by_volume)
                    })
                    .map(|why| why.words(dismissal))
            }
            None => Some(format!(
                "the behaviour dismissed in incident {} is no longer remembered",
                dismissal.incident_id
            )),
        };
        let Some(why) = beyond else { return false };
        open.suppressed = None;
        open.tell(News { why, by: d.source.clone() }, now_ms);
        true
    }
}
