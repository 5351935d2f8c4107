//! The event clock's adaptation points: which devices of a round reach one, their jobs
//! handed to the solver, and the classifiers solved for them taken back.

use super::*;

impl Devices {
    /// Every device with records in a later round reached its adaptation point just
    /// before them: the classifier of the job handed over at its last point is installed
    /// (waited for if the solver is behind), and its windows as they are now go to the
    /// solver, unless they did not change since its last job (a device's first
    /// classifier, adapted a round before, as in a batch of its own). So the classifier
    /// of point k scores from point k+1 on, however fast the solver is. A device whose
    /// unlabeled window is still filling (just onboarded, back from idleness) is adapted
    /// here and now instead, as before the solver: its early classifiers, adapted on a
    /// few rows, must not score for two points. Returns the devices whose classifier
    /// changed.
    pub(super) fn adapt_at_points(
        &mut self,
        records: &[BatchRecord<'_>],
        kept: &[usize],
        here: &[usize],
        out: &mut Processed,
    ) -> Vec<String> {
        let mut at_point: Vec<&str> = here.iter().map(|&k| records[kept[k]].record.device.as_str()).collect();
        at_point.sort_unstable();
        at_point.dedup();
        let (settled, filling): (Vec<&str>, Vec<&str>) =
            at_point.into_iter().partition(|id| self.table.get(id).is_none_or(|d| d.window_full()));
        let filling: Vec<&str> = filling
            .into_iter()
            .filter(|id| self.table.get(id).is_some_and(|d| d.changed_since_adaptation()))
            .collect();
        for id in &filling {
            self.pending.remove(*id);
        }
        let mut installed = self.adapt_now(filling);
        out.waits += self.collect_pending(&settled);
        let solved: Vec<Adapted> = settled
            .iter()
            .filter_map(|id| match self.pending.remove(*id)? {
                Pending { handover, state: Some(state) } => {
                    Some(Adapted { device: id.to_string(), handover, state })
                }
                Pending { state: None, .. } => None,
            })
            .collect();
        installed.extend(self.install(solved));
        let changed: Vec<&str> = settled
            .into_iter()
            .filter(|id| self.table.get(id).is_some_and(|d| d.changed_since_adaptation() && d.adaptable()))
            .collect();
        let jobs: Vec<AdaptJob> = changed.into_iter().filter_map(|id| self.table.take_windows(id)).collect();
        for j in &jobs {
            self.pending.insert(j.device.clone(), Pending { handover: j.handover, state: None });
        }
        if !jobs.is_empty() {
            self.solver.submit(self.generation, jobs);
        }
        installed
    }

    /// Take the solver's results until every device of `ids` with a job in flight has
    /// its classifier; how many times that meant waiting.
    pub(super) fn collect_pending(&mut self, ids: &[&str]) -> usize {
        let mut waits = 0;
        while let Some(solved) = self.solver.next(&self.model, false) {
            self.keep_solved(solved);
        }
        while ids.iter().any(|id| self.pending.get(*id).is_some_and(|p| p.state.is_none())) {
            waits += 1;
            match self.solver.next(&self.model, true) {
                Some(solved) => self.keep_solved(solved),
                None => break,
            }
        }
        if self.pending.len() > 2 * self.table.len() + 1024 {
            // Devices evicted with a job in flight.
            let table = &self.table;
            self.pending.retain(|id, _| table.get(id).is_some());
        }
        waits
    }
}
