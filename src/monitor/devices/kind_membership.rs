//! A device's kind: joining one, what a member shares of what it was onboarded on and
//! dismissed, and what it is offered of its siblings'.

use super::*;
use crate::monitor::incidents::behaviours::{Behaviour, Dismissal};
use crate::monitor::incidents::footprint::Footprint;
use crate::monitor::incidents::Incident;
use crate::monitor::incidents::Raised;

/// What the kind hears of an incident at hand: one raised to an analyst on its own (not
/// by a look or for an attack's footprint on the device: those are raised on each
/// device and join nothing), or one that joined a sibling's. Suppressed and held
/// incidents were never raised.
pub(super) fn raised(device: &str, i: &Incident, dim: usize) -> Option<Raised> {
    let own = !i.quiet() && i.look.is_none() && !i.footprint.as_ref().is_some_and(Footprint::on_the_device);
    if !own && i.fleet.is_none() {
        return None;
    }
    let itself = Dismissal {
        incident_id: i.id.clone(),
        by: String::new(),
        note: String::new(),
        at: i.figures.opened_at,
        on: Some(device.to_string()),
        learned: false,
        expires_at: None,
    };
    Some(Raised {
        device: device.to_string(),
        incident_id: i.id.clone(),
        at: i.figures.opened_at,
        behaviour: Behaviour::of(&i.traffic, i.figures.anomalous, &i.kept, dim, itself),
        joined: i.fleet.as_ref().map(|f| f.incident_id.clone()),
    })
}

/// What members held here share with their kinds, on its way to the kinds topic: shares
/// made (a withdrawal, say) and members whose share is due, made when the shares are
/// taken (a member that labeled records in a burst shares once per take).
#[derive(Debug, Default)]
pub(super) struct ShareQueue {
    queued: Vec<Share>,
    due: BTreeSet<String>,
}

impl ShareQueue {
    pub(super) fn queue(&mut self, share: Share) {
        self.queued.push(share);
    }

    /// `id`'s accepted rows or dismissals changed: its share is due.
    pub(super) fn due(&mut self, id: &str) {
        self.due.insert(id.to_string());
    }
}

impl DeviceTable {
    /// The tracked device `id` is of `kind` from now (`now`: Unix seconds); it leaves
    /// the kind it was of, withdrawing what it shared there.
    pub(super) fn join_kind(&mut self, id: &str, kind: &str, now: f64) -> Result<(), String> {
        crate::monitor::devices::kinds::check_name(kind).map_err(|e| e.to_string())?;
        let d = self.devices.get_mut(id).ok_or_else(|| format!("unknown device {id}"))?;
        if d.kind.as_deref() == Some(kind) {
            return Ok(());
        }
        d.unsnapshotted = true;
        if d.rows_accepted || !d.incidents.memory().is_empty() {
            self.shares.due(id);
        }
        if let Some(old) = d.kind.replace(kind.to_string()) {
            self.shares.queue(Share::withdrawn(old, id, self.dim, now));
        }
        self.refresh_offered(id);
        Ok(())
    }

    /// Queue what a member accepted for its kind: its known-normal rows if an operator
    /// onboarded it, and the behaviours analysts dismissed on it.
    pub(super) fn share(&mut self, id: &str) {
        let Some(d) = self.devices.get(id) else { return };
        let Some(kind) = d.kind.clone() else { return };
        let normal = if d.rows_accepted { d.positive.rows().to_vec() } else { Vec::new() };
        // What people dismissed, not what the daemon learned by itself.
        let behaviours = d
            .incidents
            .memory()
            .behaviours
            .iter()
            .filter(|b| !b.dismissal.learned)
            .cloned()
            .map(|mut b| {
                b.dismissal.on = Some(id.to_string());
                b
            })
            .collect();
        let raised = [d.incidents.last_closed(), d.incidents.open()]
            .into_iter()
            .flatten()
            .filter_map(|i| raised(id, i, self.dim))
            .collect();
        let at = self.time_of(d);
        self.shares.queue(Share {
            kind,
            device: id.to_string(),
            dim: self.dim,
            normal,
            behaviours,
            raised,
            at,
        });
    }

    /// Now for device `d`, Unix seconds: its own clock on the event clock, the table's
    /// otherwise.
    pub(super) fn time_of(&self, d: &Device) -> f64 {
        if self.clock == Clock::Event {
            d.clock
        } else {
            self.time()
        }
    }

    /// Shares to publish on the kinds topic since the last call (a member labeled
    /// records of shares once per call, however many it labeled).
    pub(super) fn take_shares(&mut self) -> Vec<Share> {
        for id in std::mem::take(&mut self.shares.due) {
            self.share(&id);
        }
        std::mem::take(&mut self.shares.queued)
    }

    /// A share read on the kinds topic (this daemon's own included): the kind's members
    /// held here are offered what it now holds, a fleet incident held here names the
    /// siblings that joined it, and an incident that joined one a sibling's verdict has
    /// answered takes that verdict (`memory`). The incident transitions it made.
    pub(super) fn apply_share(
        &mut self,
        share: Share,
        memory: &MemoryRules,
    ) -> Result<Vec<(String, Transition)>, KindError> {
        let joins: Vec<(String, String)> =
            share.raised.iter().filter_map(|r| Some((r.joined.clone()?, r.device.clone()))).collect();
        let kind = self.kinds.apply(share, self.dim)?;
        let members: Vec<String> = self
            .devices
            .iter()
            .filter(|(_, d)| d.kind.as_deref() == Some(kind.as_str()))
            .map(|(id, _)| id.clone())
            .collect();
        let mut transitions = Vec::new();
        for id in members {
            self.refresh_offered(&id);
            if let Some(t) = self.name_members(&id, &joins) {
                transitions.push((id.clone(), t));
            }
            let now = self.devices.get(&id).map(|d| self.time_of(d));
            if let Some(t) = now.and_then(|now| self.answer_from_fleet(&id, memory, now)) {
                transitions.push((id, t));
            }
        }
        Ok(transitions)
    }

    /// Siblings joined the device's incident (`joins`: fleet incident, sibling): it names
    /// them; an update if it is open and raised, so the analyst hears of its fleet.
    fn name_members(&mut self, id: &str, joins: &[(String, String)]) -> Option<Transition> {
        let d = self.devices.get_mut(id)?;
        let (changed, update) = d.incidents.name_members(joins);
        d.unsnapshotted |= changed;
        update
    }

    /// What the device's kind offers it now; re-adapted if that changed what it is
    /// adapted on.
    pub(super) fn refresh_offered(&mut self, id: &str) {
        let Some(d) = self.devices.get_mut(id) else { return };
        let offered =
            d.kind.as_deref().and_then(|k| self.kinds.offered_rows(k, id, self.dim, self.sizes.positive));
        if offered != d.offered {
            d.offered = offered;
            if d.positive.len() < d.positive.capacity() {
                d.changed = d.changed.max(1);
            }
        }
    }

    /// Kinds and their members that shared something (for the metrics).
    pub(super) fn kind_counts(&self) -> Vec<(String, usize)> {
        self.kinds.counts()
    }
}
