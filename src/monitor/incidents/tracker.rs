//! A device's incident state machine: its last decisions, its open incident, what it
//! dismissed, and the looks over its packets.

use super::fanout::Standing;
use super::remote_peers::Teach;
use super::*;

// Its verdicts, analysts' and fleets', in a file of their own (they reach its private
// parts, so child modules, as is the next).
#[path = "tracker_verdicts.rs"]
mod verdicts;
// When a suppressed incident becomes news.
#[path = "tracker_news.rs"]
mod news;

/// A device's incident state: its last decisions and its open incident.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct IncidentTracker {
    /// The last decisions, newest in bit 0 (1 = anomalous).
    pub(super) recent: u64,
    pub(super) open: Option<Incident>,
    /// The newest record seen (partition, offset): a redelivered one is not counted twice.
    pub(super) last_seen: Option<(i32, i64)>,
    /// Its place in its batch message ([`Source::index`]).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub(super) last_seen_index: u32,
    /// The last closed incident, for feedback that comes after it closed.
    #[serde(default)]
    pub(super) last_closed: Option<Incident>,
    /// The last closed incident closed quietly (not dismissed or evicted): it may reopen.
    #[serde(default)]
    pub(super) closed_quietly: bool,
    /// Behaviours analysts dismissed on this device.
    #[serde(default)]
    pub(super) memory: Memory,
    /// The fan-out look's window (in memory only).
    #[serde(skip)]
    pub(super) fan_out: FanOut,
    /// What the device's normal traffic had (local peers, served ports): what an
    /// incident's footprint is judged against.
    #[serde(default)]
    pub(super) history: History,
    /// Unix seconds (device time) at which the device's learning period ends
    /// (`MemoryRules::learning_ms`); `None` until the model judges its first record. A
    /// snapshot from before learning periods reads as long over.
    #[serde(default = "learning_long_over")]
    pub(super) learning_until: Option<f64>,
    /// The ids of the newest verdicts it took (at most [`VERDICT_IDS_KEPT`]): the same id
    /// again is a replay and is refused, after any restart.
    #[serde(default, skip_serializing_if = "std::collections::VecDeque::is_empty")]
    pub(super) verdict_ids: std::collections::VecDeque<String>,
}

/// Verdict ids a device remembers: far more verdicts than a device's incidents draw in
/// `incidents.feedback_max_age_s`, and bounded so a flood of verdicts cannot grow its state.
pub const VERDICT_IDS_KEPT: usize = 64;

fn learning_long_over() -> Option<f64> {
    Some(0.0)
}

/// The note of what a device's learning period holds and learns.
pub const LEARNING_NOTE: &str = "the device's learning period";

pub fn incident_id(device: &str, source: &Source) -> String {
    let text = format!("{device}\u{0}{}", source.id_text());
    Sha256::digest(text)[..16].iter().map(|b| format!("{b:02x}")).collect()
}

/// What a record is judged with beside its decision: its device, the rules, the
/// behaviours dismissed on its kind, the incidents its siblings raised, and the time.
#[derive(Clone, Copy)]
struct Judging<'a> {
    device: &'a str,
    rules: &'a IncidentRules,
    kind: Option<&'a Memory>,
    siblings: &'a [Raised],
    now_ms: u64,
    now_unix: f64,
}

impl IncidentTracker {
    /// Its open incident.
    pub fn open(&self) -> Option<&Incident> {
        self.open.as_ref()
    }

    /// Its last closed incident (verdicts still reach it for a while).
    pub fn last_closed(&self) -> Option<&Incident> {
        self.last_closed.as_ref()
    }

    /// What analysts dismissed on it, and what it learned.
    pub fn memory(&self) -> &Memory {
        &self.memory
    }

    /// Siblings joined its incidents (`joins`: fleet incident, sibling): each names
    /// them. Whether any changed, and an update if the open one is raised, so that the
    /// analyst hears of its fleet.
    pub fn name_members(&mut self, joins: &[(String, String)]) -> (bool, Option<Transition>) {
        let (mut changed, mut update) = (false, None);
        for incident in [&mut self.open, &mut self.last_closed].into_iter().flatten() {
            let new: Vec<&String> = joins
                .iter()
                .filter(|(fleet, sibling)| *fleet == incident.id && !incident.members.contains(sibling))
                .map(|(_, sibling)| sibling)
                .collect();
            if new.is_empty() {
                continue;
            }
            incident.members.extend(new.into_iter().cloned());
            incident.news_fresh = false;
            changed = true;
            if incident.closed_at.is_none() && !incident.quiet() {
                update = Some(Transition::Updated(incident.clone()));
            }
        }
        (changed, update)
    }

    /// Take one scored record; the incident opened, if it did. `kind`: the behaviours
    /// dismissed on the device's siblings (`kinds.rs`), recognised as its own are;
    /// `siblings`: the incidents they raised, which one of the same behaviour joins.
    /// The rules, in the order they apply: a redelivered record counts once; the model's
    /// first judgement starts the learning period; the fan-out look watches the packets;
    /// normal traffic outside an incident is the device's history; an open incident
    /// takes the record (`observe_open`); else k of the last n anomalous (or a
    /// look's finding) reopen the last incident or open a new one.
    #[allow(clippy::too_many_arguments)]
    pub fn observe(
        &mut self,
        device: &str,
        d: Decision<'_>,
        rules: &IncidentRules,
        kind: Option<&Memory>,
        siblings: &[Raised],
        now_ms: u64,
        now_unix: f64,
    ) -> Vec<Transition> {
        if self.redelivered(d.source) {
            return Vec::new();
        }
        if d.judged && self.learning_until.is_none() {
            self.learning_until = Some(now_unix + rules.memory.learning_ms as f64 / 1000.0);
        }
        let in_incident = self.open.is_some();
        // What the device learned lapses first: a peer looked up below is one it keeps.
        self.history.remote.expire(d.ts, rules.memory.learned_ms as f64 / 1000.0);
        // The packet's public peer, looked up once for the flood look and the peers' looks.
        let looking = rules.fan_out.window_ms > 0;
        let seen = d.context.filter(|_| looking).and_then(|c| self.history.remote.sight(c));
        let finding = d.context.and_then(|c| {
            let usual = &self.history.fan_out;
            let standing = Standing { in_incident, known_peer: seen.is_some_and(|s| s.known()) };
            self.fan_out.observe(c, d.ts, d.source, &rules.fan_out, usual, standing)
        });
        // Attempts after a finding are the look's anomalies, whatever the model said.
        let mut d = d;
        d.anomalous |= d.context.is_some_and(|c| self.fan_out.is_hot(c, d.ts));
        let counted = self.fan_out.take_counted();
        let teach = Teach {
            normal: !d.anomalous && !in_incident,
            learning: self.learning_until.is_none_or(|until| now_unix < until),
            footprint_open: self.open.as_ref().is_some_and(Incident::shows_evidence),
        };
        // The remote peers' looks see every record: volume is the device's, whatever the
        // model said of each.
        let peer_finding = seen
            .zip(d.context)
            .and_then(|(seen, c)| self.history.remote.observe(seen, c, d.ts, teach, &rules.fan_out));
        let finding = finding
            .or_else(|| peer_finding.map(|f| Finding { look: f.look, why: f.why, by: d.source.clone() }));
        if let (false, None, Some(c)) = (d.anomalous, &self.open, d.context) {
            // Normal traffic outside any incident: what the device does.
            self.history.observe(c, d.ts);
            self.history.fan_out.observe(counted, d.ts, rules.fan_out.window_ms as f64 / 1000.0);
        }
        self.push_decision(d.anomalous, rules);
        let j = Judging { device, rules, kind, siblings, now_ms, now_unix };
        if self.open.is_some() {
            return self.observe_open(&d, finding, &j);
        }
        if finding.is_none() && (!d.anomalous || self.recent.count_ones() < rules.open_k.max(1)) {
            return Vec::new();
        }
        if finding.is_none() && self.may_reopen(rules, now_unix) {
            return vec![self.reopen(&d, &j)];
        }
        vec![self.open_new(&d, finding, &j)]
    }

    /// What the device did in the window before an incident opened at `ts` may be its
    /// attack's beginning: the looks' history does not keep it.
    fn incident_opened(&mut self, ts: f64, rules: &IncidentRules) {
        self.history.fan_out.incident_opened();
        self.fan_out.incident_opened(ts, &rules.fan_out);
    }

    /// A record at or before the last one seen on its partition: already counted.
    fn redelivered(&mut self, source: &Source) -> bool {
        let seen = self.last_seen.map(|(p, o)| (p, (o, self.last_seen_index)));
        if seen.is_some_and(|(p, at)| p == source.partition && at >= source.position()) {
            return true;
        }
        self.last_seen = Some((source.partition, source.offset));
        self.last_seen_index = source.index;
        false
    }

    /// The k-of-n rule's window: the last `open_n` decisions, newest in the lowest bit.
    fn push_decision(&mut self, anomalous: bool, rules: &IncidentRules) {
        let n = rules.open_n.clamp(1, 64);
        let mask = if n == 64 { u64::MAX } else { (1u64 << n) - 1 };
        self.recent = ((self.recent << 1) | u64::from(anomalous)) & mask;
    }

    /// A record while an incident is open. In order: a look's finding is told at once;
    /// an anomalous record beyond a remembered behaviour raises the incident as news
    /// (joining a sibling's fleet incident of it); one beyond its fleet's behaviour
    /// leaves the fleet; an attack's footprint newly shown in a raised incident is told.
    fn observe_open(
        &mut self,
        d: &Decision<'_>,
        finding: Option<Finding>,
        j: &Judging<'_>,
    ) -> Vec<Transition> {
        let without_evidence = self.open.as_ref().is_some_and(|o| !o.shows_evidence());
        let new_footprint = || {
            let shown = self.open.as_ref().map_or(0, |o| o.shown);
            let alone = d.context.and_then(|c| footprint::of_packet(c, &self.history));
            d.anomalous && alone.is_some_and(|f| shown & (1 << f.weight()) == 0)
        };
        // Another peer than the open incident's (its own stranger's finding is its news).
        let other_peer = || {
            let peer = d.context.and_then(|c| c.device_and_peer()).and_then(|(_, p)| p);
            let open = self.open.as_ref().map(|o| &o.traffic.peers.by_key);
            peer.zip(open).is_none_or(|(p, peers)| !peers.contains_key(&p.to_string()))
        };
        if without_evidence && (finding.is_some() || new_footprint()) && other_peer() {
            // A look's finding, or a footprint of a kind it had not shown, with another
            // peer, inside an incident that showed no evidence on the device (the
            // device's routine, maybe, held or raised): a new behaviour, its own
            // incident. The open one ends here, unlearned, so that an attack never
            // hides in it.
            let mut out: Vec<Transition> = self.split(j.now_unix).into_iter().collect();
            out.push(self.open_new(d, finding, j));
            return out;
        }
        self.observe_open_one(d, finding, j).into_iter().collect()
    }

    /// The open incident ends as a new behaviour begins: closed quietly, never learned,
    /// never reopened.
    fn split(&mut self, now_unix: f64) -> Option<Transition> {
        let t = self.close(Resolution::Quiet, now_unix);
        self.closed_quietly = false;
        t
    }

    fn observe_open_one(
        &mut self,
        d: &Decision<'_>,
        finding: Option<Finding>,
        j: &Judging<'_>,
    ) -> Option<Transition> {
        let Judging { device, rules, kind, siblings, now_ms, now_unix } = *j;
        let open = self.open.as_mut()?;
        open.figures.records += 1;
        open.attack_share = 1.0 - d.prior;
        open.changed = true;
        let shown = if d.anomalous { open.add_anomalous(d, rules, now_ms, &self.history) } else { None };
        if let Some(f) = finding {
            // Something else during an open incident: the analyst is told at once, and
            // the incident is the look's from now on (never learned without a verdict).
            let was_quiet = open.quiet();
            open.suppressed = None;
            open.fleet = None;
            open.look.get_or_insert_with(|| f.clone());
            open.tell(News { why: f.why, by: f.by }, now_ms);
            return Some(if was_quiet {
                Transition::Opened(open.clone())
            } else {
                Transition::Updated(open.clone())
            });
        }
        if d.anomalous && Self::becomes_news(open, &self.memory, kind, d, rules, (now_ms, now_unix)) {
            // News a sibling raised a moment before joins it as a new incident does.
            open.fleet = Self::fleet_to_join(open, device, siblings, d, rules, now_unix);
            return Some(Self::raised(open.clone()));
        }
        if d.anomalous && Self::leaves_fleet(open, siblings, d, now_ms) {
            return Some(Transition::Opened(open.clone()));
        }
        if let Some(f) = shown.filter(|_| !open.quiet()) {
            // An attack inside an incident already raised (a false one, maybe):
            // what it shows of an attack is told at once, not at the next update.
            open.tell(News { why: format!("it now shows {}", f.words()), by: d.source.clone() }, now_ms);
            return Some(Transition::Updated(open.clone()));
        }
        None
    }

    /// The last incident, closed quietly a moment ago, open again under its id: reopened,
    /// or raised as news when the record goes beyond what was remembered of it.
    fn reopen(&mut self, d: &Decision<'_>, j: &Judging<'_>) -> Transition {
        let Judging { device, rules, kind, siblings, now_ms, now_unix } = *j;
        self.incident_opened(d.ts, rules);
        let mut incident = self.last_closed.take().expect("a closed incident");
        incident.closed_at = None;
        incident.news_fresh = false;
        incident.reopened += 1;
        incident.reopened_by = Some(d.source.clone());
        incident.figures.records += 1;
        incident.attack_share = 1.0 - d.prior;
        incident.last_update_ms = now_ms;
        incident.changed = false;
        // Reopened, it is before the analyst again: what it shows is in that event.
        incident.add_anomalous(d, rules, now_ms, &self.history);
        let news = Self::becomes_news(&mut incident, &self.memory, kind, d, rules, (now_ms, now_unix));
        if news {
            incident.fleet = Self::fleet_to_join(&incident, device, siblings, d, rules, now_unix);
        }
        self.open = Some(incident.clone());
        if news {
            Self::raised(incident)
        } else {
            Transition::Reopened(incident)
        }
    }

    /// A new incident: suppressed when it is a behaviour remembered (dismissed here or on
    /// the kind, or learned) or held by the learning period; else raised, or joined to a
    /// sibling's fleet incident of the same behaviour.
    fn open_new(&mut self, d: &Decision<'_>, finding: Option<Finding>, j: &Judging<'_>) -> Transition {
        let Judging { device, rules, kind, siblings, now_ms, now_unix } = *j;
        self.incident_opened(d.ts, rules);
        let mut incident = Incident::opened(device, d, finding, rules, (now_ms, now_unix));
        incident.note_footprint(d.context, &self.history);
        // A look's finding is raised whatever was dismissed: a scan is no behaviour.
        if rules.memory.remember_ms > 0 && incident.look.is_none() {
            incident.suppressed = self.remembered(&incident, d, kind, &rules.memory, now_unix);
        }
        if incident.suppressed.is_none() {
            incident.fleet = Self::fleet_to_join(&incident, device, siblings, d, rules, now_unix);
        }
        self.open = Some(incident.clone());
        match incident.suppressed {
            Some(_) => Transition::Suppressed(incident),
            None => Self::raised(incident),
        }
    }

    /// The dismissal a new incident's behaviour falls under, if any: one remembered here
    /// or on the kind (what the daemon learned never quiets an attack's footprint), or
    /// the learning period's hold on a device still new.
    fn remembered(
        &mut self,
        incident: &Incident,
        d: &Decision<'_>,
        kind: Option<&Memory>,
        m: &MemoryRules,
        now_unix: f64,
    ) -> Option<Dismissal> {
        self.memory.expire(m, now_unix);
        let (c, f) = (d.context, d.features);
        let recognised = self
            .memory
            .recognise(c, f, m, now_unix)
            .or_else(|| kind?.recognise(c, f, m, now_unix))
            .filter(|b| !(b.dismissal.learned && incident.footprint.is_some()))
            .map(|b| b.dismissal.clone());
        let mut suppressed = recognised;
        if let Some(id) = suppressed.as_ref().filter(|d| d.learned).map(|d| d.incident_id.clone()) {
            // Seen again: it holds on, and the suppression says until when.
            suppressed = self.memory.renew(&id, m, now_unix).cloned();
        }
        // Only what carries its packets is held: without them no footprint can show.
        let judgeable = incident.traffic.packets > 0;
        if suppressed.is_none() && incident.footprint.is_none() && judgeable && m.learned_ms > 0 {
            suppressed = self.learning_hold(&incident.id, now_unix);
        }
        suppressed
    }

    fn raised(incident: Incident) -> Transition {
        match incident.fleet {
            Some(_) => Transition::Joined(incident),
            None => Transition::Opened(incident),
        }
    }

    /// The sibling's incident a new one joins: the newest raised (not itself joined)
    /// at most `fleet_ms` before, whose behaviour its opening record is of. What a look
    /// raised, or what shows an attack's footprint on the device (a scan, repeated
    /// attempts, a new local peer or served port), joins nothing: it is raised on its
    /// own device.
    fn fleet_to_join(
        incident: &Incident,
        device: &str,
        siblings: &[Raised],
        d: &Decision<'_>,
        rules: &IncidentRules,
        now_unix: f64,
    ) -> Option<Fleet> {
        let on_the_device = incident.footprint.as_ref().is_some_and(Footprint::on_the_device);
        if rules.fleet_ms == 0 || incident.look.is_some() || on_the_device {
            return None;
        }
        let within = rules.fleet_ms as f64 / 1000.0;
        siblings
            .iter()
            .rev()
            .filter(|r| r.device != device && r.joined.is_none())
            // Heard of before now on the member's own clock, and recently.
            .filter(|r| r.at <= now_unix && now_unix - r.at <= within)
            .find(|r| r.behaviour.admits(d.context, d.features).is_none())
            .map(|r| Fleet { incident_id: r.incident_id.clone(), device: r.device.clone() })
    }

    /// A joined incident's newest anomalous record (`d`) went to a peer, port or
    /// transport the fleet incident's behaviour never had, or it shows an attack's
    /// footprint on the device: it is raised on its own, as news, and leaves the fleet.
    /// Its severity alone does not: that is the size of the behaviour its fleet
    /// incident, raised, shows.
    fn leaves_fleet(open: &mut Incident, siblings: &[Raised], d: &Decision<'_>, now_ms: u64) -> bool {
        let Some(fleet) = &open.fleet else { return false };
        let head = siblings.iter().find(|r| r.incident_id == fleet.incident_id);
        let beyond = match (open.footprint.as_ref().filter(|f| f.on_the_device()), head) {
            (Some(f), _) => Some(format!("it shows what is never learned: {}", f.words())),
            // The fleet incident's conversation answered (its peer, on its port) is
            // still it: only a new peer, port or transport is something else.
            (None, Some(head)) => head
                .behaviour
                .admits(d.context, d.features)
                .filter(|b| !matches!(b, Beyond::Direction(_)))
                .map(|b| format!("with {}", b.what())),
            // The fleet incident is no longer heard of: the member stays with it.
            (None, None) => None,
        };
        let Some(beyond) = beyond else { return false };
        let why =
            format!("joined fleet incident {} raised on {}, but {beyond}", fleet.incident_id, fleet.device);
        open.fleet = None;
        open.tell(News { why, by: d.source.clone() }, now_ms);
        true
    }

    /// In the device's learning period at `now_unix`: the hold for an incident it opens
    /// (a dismissal by the daemon of the incident itself, until the period ends).
    fn learning_hold(&self, incident_id: &str, now_unix: f64) -> Option<Dismissal> {
        let until = self.learning_until.filter(|&until| now_unix < until)?;
        Some(Dismissal {
            incident_id: incident_id.to_string(),
            by: LEARNED_BY.into(),
            note: LEARNING_NOTE.into(),
            at: now_unix,
            on: None,
            learned: true,
            expires_at: Some(until),
        })
    }

    /// The last incident closed quietly within `reopen_ms` of `now_unix` and nobody
    /// called it a false positive (a dismissed behaviour that comes back is news).
    fn may_reopen(&self, rules: &IncidentRules, now_unix: f64) -> bool {
        let Some(closed) = &self.last_closed else { return false };
        self.closed_quietly
            && rules.reopen_ms > 0
            && closed.closed_at.is_some_and(|t| (now_unix - t) * 1000.0 <= rules.reopen_ms as f64)
            && !closed.feedback.iter().any(|f| f.verdict == Verdict::FalsePositive)
    }

    /// Restored from a snapshot at `now_ms` of this process's clock: the open incident's
    /// quiet period and update interval start again.
    pub fn restored(mut self, now_ms: u64) -> Self {
        if let Some(open) = &mut self.open {
            open.last_anomalous_ms = now_ms;
            open.last_update_ms = now_ms;
        }
        self
    }

    /// The device leaves this daemon's memory with its open incident, if any.
    pub fn close_evicted(&mut self, now_unix: f64) -> Option<Transition> {
        self.close(Resolution::Evicted, now_unix)
    }

    /// Close the open incident (kept for late feedback).
    fn close(&mut self, resolution: Resolution, now_unix: f64) -> Option<Transition> {
        let mut closed = self.open.take()?;
        closed.closed_at = Some(now_unix);
        closed.news_fresh = false;
        // What the learning period held is learned as it closes; its return is judged
        // against that (a new incident), never reopened unseen.
        let held = closed.held();
        if let Some(d) = &closed.suppressed {
            // Suppressed to its end, never news: the behaviour it was grows to it.
            self.memory.grow(&d.incident_id, &closed.traffic, closed.figures.anomalous);
        }
        self.recent = 0;
        // Nor does one that joined a fleet incident: its return joins again or is raised.
        self.closed_quietly = resolution == Resolution::Quiet && !held && closed.fleet.is_none();
        self.last_closed = Some(closed.clone());
        Some(Transition::Closed(closed, resolution))
    }

    /// Time passes: an update is due, or the incident has been quiet long enough (rows
    /// of `dim` features: what a quiet close leaves in the memory).
    pub fn tick(
        &mut self,
        rules: &IncidentRules,
        dim: usize,
        now_ms: u64,
        now_unix: f64,
    ) -> Option<Transition> {
        let open = self.open.as_mut()?;
        let quiet_for = now_ms.saturating_sub(open.last_anomalous_ms);
        if quiet_for >= rules.quiet_ms {
            // It closed when the quiet ran out. On the event clock a device's time moves
            // with its records only until the service ticks it, so a replay can see a
            // silent device's close late; its time is the same either way.
            let closed_at = now_unix - (quiet_for - rules.quiet_ms) as f64 / 1000.0;
            let m = &rules.memory;
            // Nobody said anything and it went away: what the device does now and then,
            // unless it left an attack's footprint. A look's finding is never a
            // behaviour; a suppressed one is remembered already, unless the learning
            // period held it.
            let held = open.held();
            if (held || (m.learn_quiet && open.suppressed.is_none()))
                && m.remember_ms > 0
                && m.learned_ms > 0
                && open.look.is_none()
                && open.footprint.is_none()
                && open.feedback.is_empty()
            {
                let mut dismissal = Dismissal {
                    incident_id: open.id.clone(),
                    by: LEARNED_BY.into(),
                    note: if held { LEARNING_NOTE } else { "closed quietly without a verdict" }.into(),
                    at: closed_at,
                    on: None,
                    learned: true,
                    expires_at: None,
                };
                dismissal.expires_at = Some(dismissal.expires(m));
                open.learned = true;
                let behaviour =
                    Behaviour::of(&open.traffic, open.figures.anomalous, &open.kept, dim, dismissal);
                self.memory.expire(m, closed_at);
                self.memory.remember(behaviour);
            }
            return self.close(Resolution::Quiet, closed_at);
        }
        // A suppressed or joined incident is recorded, not followed: its updates are not sent.
        if !open.quiet()
            && open.changed
            && now_ms.saturating_sub(open.last_update_ms) >= rules.update_interval_ms
        {
            open.changed = false;
            open.last_update_ms = now_ms;
            open.news_fresh = false;
            return Some(Transition::Updated(open.clone()));
        }
        None
    }
}
