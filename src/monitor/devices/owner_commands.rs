//! What the feedback topic's commands and the kinds topic's shares do to the devices.
//! Each command (`feedback/`, one file a kind) calls one of these with the time it is
//! applied at, and publishes what it gives back.

use super::*;
use crate::monitor::devices::kinds::Share;
use crate::monitor::devices::onboarding::Onboarding;
use crate::monitor::devices::IncidentChange;
use crate::monitor::incidents::{Applied, Feedback};

/// What an analyst's verdict did.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdicted {
    /// A confirmed attack, recorded on the incident.
    Confirmed(IncidentChange),
    /// A false positive: the incident closes as dismissed (or, closed already, reports
    /// the verdict) and its behaviour is remembered.
    Dismissed(IncidentChange),
    /// A confirmed verdict on an incident no longer at hand: what was remembered of its
    /// behaviour is forgotten. At the device's time (Unix seconds).
    Unlearned { time: f64 },
}

impl Devices {
    /// Now for `device`, Unix seconds, once the table follows the service's clock: the
    /// table's time, or on the event clock the device's own (an analyst's verdict or an
    /// onboarding takes effect at its newest record).
    fn time_of(&self, device: &str) -> f64 {
        self.table.get(device).map_or_else(|| self.table.time(), |d| self.table.time_of(d))
    }

    /// An analyst's verdict, or why it is refused.
    pub fn verdict(&mut self, fb: &Feedback, now: Now) -> Result<Verdicted, String> {
        self.follow_service_clock(now);
        let at = self.time_of(&fb.device);
        let applied = self.table.apply_feedback(fb, at, self.feedback_max_age_s, &self.rules.memory)?;
        Ok(match applied {
            Applied::Confirmed(t) => Verdicted::Confirmed(self.change(&fb.device, t, now.unix)),
            Applied::Dismissed(t) => Verdicted::Dismissed(self.change(&fb.device, t, now.unix)),
            Applied::Unlearned => Verdicted::Unlearned { time: self.time_of(&fb.device) },
        })
    }

    /// An operator's onboarding of `device` for `span_s` seconds from its time now, or
    /// why it is refused.
    pub fn onboard(
        &mut self,
        device: &str,
        span_s: f64,
        kind: Option<&str>,
        (by, note): (String, String),
        now: Now,
    ) -> Result<Onboarding, String> {
        self.follow_service_clock(now);
        let at = self.time_of(device);
        self.table.start_onboarding(device, span_s, kind, by, note, at)
    }

    /// Forget a device: its known-normal records count, and its incident closed as
    /// evicted; `None` for a device not tracked.
    pub fn forget(&mut self, device: &str, now: Now) -> Option<(usize, Vec<IncidentChange>)> {
        self.follow_service_clock(now);
        let known_normal = self.table.forget(device)?;
        Some((known_normal, self.eviction_closes(now)))
    }

    /// Shares to publish on the kinds topic since the last call.
    pub fn take_shares(&mut self, now: Now) -> Vec<Share> {
        self.follow_service_clock(now);
        self.table.take_shares()
    }

    /// The kinds topic's shares, each read or refused: each member's share replaces its
    /// last, and the kind's members held here are offered what the kind now holds;
    /// fleet incidents name the siblings that joined them, and joined incidents take
    /// the verdict given on theirs. One result a share, in order.
    pub fn apply_shares(
        &mut self,
        shares: Vec<Result<Share, String>>,
        now: Now,
    ) -> Vec<Result<Vec<IncidentChange>, String>> {
        self.follow_service_clock(now);
        let mut out = Vec::with_capacity(shares.len());
        for share in shares {
            let applied =
                share.and_then(|s| self.table.apply_share(s, &self.rules.memory).map_err(|e| e.to_string()));
            out.push(applied.map(|transitions| {
                (transitions.into_iter()).map(|(device, t)| self.change(&device, t, now.unix)).collect()
            }));
        }
        out
    }

    /// Each kind's members held here.
    pub fn kind_counts(&self) -> Vec<(String, usize)> {
        self.table.kind_counts()
    }

    /// Place a device in a kind without an onboarding (`metapu kind`), at its time now
    /// (what it withdraws from a kind it leaves is stamped with that time).
    pub fn join_kind(&mut self, device: &str, kind: &str, now: Now) -> Result<(), String> {
        self.follow_service_clock(now);
        let at = self.time_of(device);
        self.table.join_kind(device, kind, at)
    }
}
