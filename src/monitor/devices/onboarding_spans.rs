//! Onboarding a device by time: the span starts, its records are sampled into the
//! known-normal window, it ends on the device's clock or the table's.

use super::*;

/// The table's onboardings: who is being onboarded, so that a span ends even if the
/// device falls silent, and the onboardings ended since they were last taken.
#[derive(Debug, Default)]
pub(super) struct Onboardings {
    active: BTreeSet<String>,
    /// With the known-normal records each left.
    ended: Vec<(String, Onboarding, usize)>,
}

impl Onboardings {
    pub(super) fn started(&mut self, id: &str) {
        self.active.insert(id.to_string());
    }

    /// End `d`'s onboarding (if it has one): its rows are accepted known-normal.
    pub(super) fn finish(&mut self, id: &str, d: &mut Device) {
        self.active.remove(id);
        if let Some(o) = d.onboarding.take() {
            self.ended.push((id.to_string(), o.clone(), d.positive.len()));
            d.onboarded = Some(o);
            d.rows_accepted = true;
            d.unsnapshotted = true;
            d.changed = d.changed.max(1);
        }
    }
}

impl DeviceTable {
    /// Start onboarding a tracked device for `span_s` seconds from `now` (Unix), as a
    /// member of `kind` if one is named (it leaves the kind it was of, withdrawing what
    /// it shared there).
    pub(super) fn start_onboarding(
        &mut self,
        id: &str,
        span_s: f64,
        kind: Option<&str>,
        by: String,
        note: String,
        now: f64,
    ) -> Result<Onboarding, String> {
        if let Some(k) = kind {
            crate::monitor::devices::kinds::check_name(k).map_err(|e| e.to_string())?;
        }
        if !(span_s.is_finite() && span_s > 0.0 && span_s <= MAX_SPAN_S) {
            return Err(format!(
                "an onboarding span must be more than 0 s and at most {MAX_SPAN_S} s, not {span_s}"
            ));
        }
        let d = self.devices.get_mut(id).ok_or_else(|| {
            format!(
                "unknown device {id}: not tracked by this daemon (onboard a device once it sends traffic)"
            )
        })?;
        if let Some(o) = d.onboarding.as_ref().filter(|o| o.active(now)) {
            return Err(format!(
                "{id} is already being onboarded, until {:.0} (Unix seconds), by {:?}",
                o.until, o.by
            ));
        }
        let o = Onboarding::new(now, span_s, by, note);
        d.positive.pin(0); // onboarding replaces the window, kept rows included
        d.onboarding = Some(o.clone());
        d.unsnapshotted = true;
        self.onboardings.started(id);
        if let Some(k) = kind {
            self.join_kind(id, k, now)?;
        }
        Ok(o)
    }

    /// End the onboardings whose span is over at `service_ms` (devices that fell silent
    /// too), each on its device's time ([`Self::now_of`]).
    pub(super) fn end_onboarding_due(&mut self, service_ms: u64) {
        let due: Vec<String> = self
            .onboardings
            .active
            .iter()
            .filter(|id| {
                let now = self.now_of(id, service_ms).unix;
                self.devices.get(*id).and_then(|d| d.onboarding.as_ref()).is_none_or(|o| !o.active(now))
            })
            .cloned()
            .collect();
        for id in due {
            match self.devices.get_mut(&id) {
                Some(d) => self.onboardings.finish(&id, d),
                None => {
                    self.onboardings.active.remove(&id);
                }
            }
        }
    }

    /// Onboardings ended since the last call: device, the span, known-normal records.
    /// A member's onboarded rows are shared with its kind.
    pub(super) fn take_onboarded(&mut self) -> Vec<(String, Onboarding, usize)> {
        let ended = std::mem::take(&mut self.onboardings.ended);
        for (id, ..) in &ended {
            self.share(id);
        }
        ended
    }
}
