//! Reading a device's run: its events by the record each belongs to, and the walk
//! over its records that counts decisions, incidents and what the attack raised.

use super::*;

impl DeviceRun<'_> {
    /// The run's events, by the record each belongs to: the decisions, and the
    /// incidents opened, reopened, told as news and closed (false incidents and the
    /// attack's noted for the analyst).
    pub(super) fn read_events(
        &mut self,
        emitted: &[Emitted],
        start: usize,
        end: usize,
        attack_begins: Option<usize>,
    ) -> RunEvents {
        let (d, cfg) = (self.d, self.cfg);
        let task = &d.task;
        let out = &mut self.out;
        let attack_before = out.attack;
        let mut verdicts: Vec<Option<bool>> = vec![None; end - start];
        let mut opened_at = Vec::new();
        let mut reopened_at = Vec::new();
        let mut news_at = Vec::new();
        // A quiet close is found at the device's next record (its time moves with its
        // records), before that record's decision: the pipeline emits it after that
        // record's score. Closed there, for what the attack finds open.
        let mut closed_at = Vec::new();
        let mut last_scored = start;
        // Incidents raised (opened, news, reopened) and the record that raised each.
        let mut attack_raised: Vec<(usize, String)> = Vec::new();
        for e in emitted {
            match e {
                Emitted::Score(s) => {
                    let i = s.source.offset as usize;
                    last_scored = i;
                    if let Some(posterior) = s.score {
                        out.scores[i] = 1.0 - posterior;
                        out.anomalous += usize::from(s.decision == "anomalous");
                        verdicts[i - start] = Some(s.decision == "anomalous");
                    }
                }
                Emitted::Incident(IncidentEvent::Suppressed(r) | IncidentEvent::Reopened(r))
                    if r.is_suppressed() =>
                {
                    out.suppressed_ts.push(r.figures.last_ts);
                    let by = r.reopened_by.as_deref().unwrap_or(&r.opened_by);
                    out.raised.push((by.offset as usize, HowRaised::Suppressed));
                }
                Emitted::Incident(IncidentEvent::Joined(r)) => {
                    out.joined_ts.push(r.figures.first_ts);
                    out.raised.push((r.opened_by.offset as usize, HowRaised::Joined));
                }
                Emitted::Incident(IncidentEvent::Closed(r)) if !r.is_quiet() => closed_at.push(last_scored),
                Emitted::Incident(IncidentEvent::Updated(r)) if !r.is_quiet() => {
                    if let Some(n) = r.news.as_ref().filter(|n| self.news_seen.insert(n.by.offset)) {
                        let at = n.by.offset as usize;
                        news_at.push(at);
                        out.news.push(n.why.clone());
                        out.raised.push((at, HowRaised::News));
                        attack_raised.push((at, r.incident_id.clone()));
                    }
                }
                Emitted::Incident(IncidentEvent::Opened(r)) => {
                    // One that was suppressed opens for the analyst at the record that
                    // went beyond the dismissed behaviour.
                    let by = r.news.as_ref().map_or(&r.opened_by, |n| &n.by);
                    out.news.extend(
                        r.news.as_ref().filter(|n| self.news_seen.insert(n.by.offset)).map(|n| n.why.clone()),
                    );
                    out.looks.extend(r.look.as_ref().map(|l| (r.figures.first_ts, l.why.clone())));
                    let at = by.offset as usize;
                    if cfg.analyst && attack_before == 0 && attack_begins.is_none_or(|a| at < a) {
                        self.false_incidents.insert(r.incident_id.clone());
                    }
                    let kind = match (&r.news, &r.look) {
                        (Some(_), _) => HowRaised::News,
                        (None, Some(_)) => HowRaised::Look,
                        (None, None) => HowRaised::Opened,
                    };
                    out.raised.push((at, kind));
                    attack_raised.push((at, r.incident_id.clone()));
                    opened_at.push(at);
                    out.opened.push(r.incident_id.clone());
                    out.opened_ts.push(if r.news.is_some() { r.figures.last_ts } else { r.figures.first_ts });
                }
                // Published after the run's scores, at the service's time: dated by the
                // device's newest record scored.
                Emitted::Prior(p) if p.device == task.id => out.priors.push((d.ts[last_scored], p.prior)),
                Emitted::Incident(IncidentEvent::Reopened(r)) => {
                    if let Some(by) = &r.reopened_by {
                        let at = by.offset as usize;
                        reopened_at.push(at);
                        out.reopened_ts.push(r.figures.last_ts);
                        out.raised.push((at, HowRaised::Reopened));
                        attack_raised.push((at, r.incident_id.clone()));
                    }
                }
                _ => {}
            }
        }
        if cfg.confirm_attacks {
            // Raised at an attack record: the analyst confirms it once it has closed.
            self.attack_incidents.extend(
                attack_raised
                    .into_iter()
                    .filter(|(at, _)| task.labels[*at] == Label::Negative)
                    .map(|(_, id)| id),
            );
        }
        RunEvents { verdicts, opened_at, reopened_at, news_at, closed_at }
    }

    /// The run's records in order, with the incidents as the analyst saw them at each:
    /// the outcome's counts (benign and attack alerts, open at each record, the first
    /// alert and incident of the attack).
    pub(super) fn walk(&mut self, start: usize, end: usize, attack_begins: Option<usize>, events: RunEvents) {
        let task = &self.d.task;
        let out = &mut self.out;
        let RunEvents { verdicts, opened_at, reopened_at, news_at, closed_at } = events;
        let mut opened = opened_at.into_iter().peekable();
        let mut reopened = reopened_at.into_iter().peekable();
        let mut open_now = self.open;
        let mut news = news_at.into_iter().peekable();
        let mut closed = closed_at.into_iter().peekable();
        for i in start..end {
            let mut ended_here = false;
            while closed.peek() == Some(&i) {
                closed.next();
                open_now = false;
                ended_here = true;
            }
            if news.peek() == Some(&i) {
                news.next();
                if out.open_at_attack && out.attack_news.is_none() && task.labels[i] == Label::Negative {
                    out.attack_news = Some(out.attack + 1);
                }
            }
            if attack_begins == Some(i) && out.attack == 0 && open_now {
                out.attack_covered = true;
                out.open_at_attack = true;
                out.first_incident = Some(1);
            }
            if reopened.peek() == Some(&i) {
                reopened.next();
                open_now = true;
                out.incident_events += 1;
                if out.first_incident.is_none() && (out.attack > 0 || task.labels[i] == Label::Negative) {
                    out.attack_reopened = true;
                    out.attack_covered = true;
                }
            }
            if opened.peek() == Some(&i) {
                opened.next();
                open_now = true;
                out.incident_events += 1;
                if out.attack > 0 || task.labels[i] == Label::Negative {
                    out.incidents_in_attack += 1;
                    out.attack_covered = true;
                    if ended_here && out.open_at_attack && out.attack_news.is_none() {
                        // The incident open when the attack began ended at this record
                        // and the attack's own opened (a new behaviour: `tracker.rs`).
                        out.open_at_attack = false;
                        out.first_incident =
                            Some(out.attack + usize::from(task.labels[i] == Label::Negative));
                    }
                } else {
                    out.incidents_before_attack += 1;
                }
            }
            let alerted = verdicts[i - start];
            out.decisions[i] = alerted;
            out.open[i] = open_now;
            match (task.labels[i], out.known[i]) {
                (_, true) | (Label::Unlabeled, _) => {}
                (Label::Positive, false) => {
                    out.benign += 1;
                    out.benign_alerts += usize::from(alerted == Some(true));
                    out.benign_unscored += usize::from(alerted.is_none());
                }
                (Label::Negative, _) => {
                    out.attack += 1;
                    out.attack_alerts += usize::from(alerted == Some(true));
                    out.attack_unscored += usize::from(alerted.is_none());
                    if alerted == Some(true) && out.first_alert.is_none() {
                        out.first_alert = Some(out.attack);
                    }
                    if out.first_incident.is_none() && open_now {
                        out.first_incident = Some(out.attack);
                    }
                }
            }
        }
    }
}
