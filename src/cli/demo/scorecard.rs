//! What the demo saw against what it sent: per device its ground truth, the records
//! sent, the incidents the daemon opened and its estimated attack share; at the end the
//! scorecard. Pure: the demo feeds it sends and the daemon's incident events.

/// One incident as the analyst saw it open.
#[derive(Debug, Clone, PartialEq)]
struct Opened {
    id: String,
    /// The device's record that opened it (index in the device's stream).
    record: usize,
    /// Seconds into the demo when its `opened` event arrived.
    seen_s: f64,
    closed_s: Option<f64>,
}

#[derive(Debug, Clone)]
pub struct DeviceLedger {
    pub name: String,
    pub origin: String,
    pub attack: Option<String>,
    /// The first attack record: its index and when it was due.
    attack_start: Option<(usize, f64)>,
    /// When each record is due, seconds into the demo (non-decreasing).
    record_times: Vec<f64>,
    pub sent: usize,
    incidents: Vec<Opened>,
    pub attack_share: Option<f32>,
}

impl DeviceLedger {
    pub fn new(
        name: &str,
        origin: &str,
        attack: Option<&str>,
        record_times: Vec<f64>,
        first_attack: Option<usize>,
    ) -> Self {
        Self {
            name: name.into(),
            origin: origin.into(),
            attack: attack.map(Into::into),
            attack_start: first_attack.map(|i| (i, record_times[i])),
            record_times,
            sent: 0,
            incidents: Vec::new(),
            attack_share: None,
        }
    }

    pub fn attack_start_s(&self) -> Option<f64> {
        self.attack_start.map(|(_, t)| t)
    }

    pub fn incidents(&self) -> usize {
        self.incidents.len()
    }

    pub fn open_incidents(&self) -> usize {
        self.incidents.iter().filter(|i| i.closed_s.is_none()).count()
    }

    /// The record due at `at_s` (the record timestamp the daemon reports, less the
    /// demo's start): the last one due at or before it.
    fn record_at(&self, at_s: f64) -> usize {
        let after = self.record_times.partition_point(|&t| t <= at_s + 1e-6);
        after.saturating_sub(1)
    }

    /// An `opened` event: `first_at_s` is its opening record's time, `seen_s` when it arrived.
    pub fn opened(&mut self, id: &str, first_at_s: f64, seen_s: f64) {
        if self.incidents.iter().any(|i| i.id == id) {
            return;
        }
        let record = self.record_at(first_at_s);
        self.incidents.push(Opened { id: id.into(), record, seen_s, closed_s: None });
    }

    /// A `reopened` event: the incident is open again (not a new one).
    pub fn reopened(&mut self, id: &str) {
        if let Some(i) = self.incidents.iter_mut().find(|i| i.id == id) {
            i.closed_s = None;
        }
    }

    pub fn closed(&mut self, id: &str, seen_s: f64) {
        if let Some(i) = self.incidents.iter_mut().find(|i| i.id == id) {
            i.closed_s.get_or_insert(seen_s);
        }
    }

    /// Incidents opened on a record before the attack began (all of them on a clean device).
    pub fn false_incidents(&self) -> usize {
        match self.attack_start {
            None => self.incidents.len(),
            Some((start, _)) => self.incidents.iter().filter(|i| i.record < start).count(),
        }
    }

    fn detection(&self) -> Option<Detection> {
        let (start, start_s) = self.attack_start?;
        if let Some(i) = self.incidents.iter().find(|i| i.record >= start) {
            return Some(Detection::Opened {
                records: i.record - start + 1,
                seconds: (i.seen_s - start_s).max(0.0),
            });
        }
        let open = self.incidents.iter().any(|i| i.closed_s.is_none_or(|c| c > start_s));
        Some(if open { Detection::AlreadyOpen } else { Detection::Missed })
    }
}

/// What became of an attack.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Detection {
    /// An incident opened on an attack-phase record: that many attack-phase records
    /// (the opening one included) and seconds after the attack began.
    Opened {
        records: usize,
        seconds: f64,
    },
    /// No incident opened during the attack, but one opened on benign traffic before
    /// it was still open: the analyst was looking at the device, for a wrong reason.
    AlreadyOpen,
    Missed,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Scorecard {
    /// Devices whose attack had begun by the end.
    pub attacked: usize,
    /// Attacked devices with an incident opened during the attack.
    pub detected: usize,
    /// Attacked devices without one, whose incident from before the attack was still open.
    pub already_open: Vec<String>,
    pub missed: Vec<String>,
    pub clean: usize,
    /// Incidents on devices never attacked.
    pub false_incidents_clean: usize,
    /// Incidents on attacked devices opened before their attack began.
    pub false_incidents_before_attack: usize,
    pub median_records_to_incident: Option<f64>,
    pub median_seconds_to_incident: Option<f64>,
    pub records_sent: usize,
    pub records_scored: Option<f64>,
    pub elapsed_s: f64,
}

fn median(mut v: Vec<f64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    Some(if v.len() % 2 == 1 { v[m] } else { (v[m - 1] + v[m]) / 2.0 })
}

pub fn scorecard(devices: &[DeviceLedger], elapsed_s: f64, records_scored: Option<f64>) -> Scorecard {
    let mut card = Scorecard {
        attacked: 0,
        detected: 0,
        already_open: Vec::new(),
        missed: Vec::new(),
        clean: 0,
        false_incidents_clean: 0,
        false_incidents_before_attack: 0,
        median_records_to_incident: None,
        median_seconds_to_incident: None,
        records_sent: devices.iter().map(|d| d.sent).sum(),
        records_scored,
        elapsed_s,
    };
    let (mut records, mut seconds) = (Vec::new(), Vec::new());
    for d in devices {
        if d.attack_start.is_none() {
            card.clean += 1;
            card.false_incidents_clean += d.false_incidents();
            continue;
        }
        card.false_incidents_before_attack += d.false_incidents();
        // An attack that had not begun (its records were never sent) is not counted.
        if d.attack_start.is_none_or(|(start, _)| d.sent <= start) {
            continue;
        }
        card.attacked += 1;
        match d.detection() {
            Some(Detection::Opened { records: r, seconds: s }) => {
                card.detected += 1;
                records.push(r as f64);
                seconds.push(s);
            }
            Some(Detection::AlreadyOpen) => card.already_open.push(d.name.clone()),
            Some(Detection::Missed) | None => card.missed.push(d.name.clone()),
        }
    }
    card.median_records_to_incident = median(records);
    card.median_seconds_to_incident = median(seconds);
    card
}

impl Scorecard {
    /// One line a test can parse: `key=value` pairs.
    pub fn line(&self) -> String {
        let opt = |v: Option<f64>, digits: usize| v.map_or("none".into(), |v| format!("{v:.digits$}"));
        format!(
            "demo-scorecard: detected={}/{} already_open={} missed={} false_incidents_clean={} \
             false_incidents_before_attack={} median_records_to_incident={} median_seconds_to_incident={} \
             records_sent={} records_per_s={}",
            self.detected,
            self.attacked,
            self.already_open.len(),
            self.missed.len(),
            self.false_incidents_clean,
            self.false_incidents_before_attack,
            opt(self.median_records_to_incident, 1),
            opt(self.median_seconds_to_incident, 1),
            self.records_sent,
            opt(self.records_scored.map(|n| n / self.elapsed_s.max(1e-9)), 1),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ten records a second; the attack from record 50 (5 s) when given.
    fn device(name: &str, first_attack: Option<usize>) -> DeviceLedger {
        let times = (0..100).map(|i| i as f64 / 10.0).collect();
        DeviceLedger::new(name, "test", first_attack.map(|_| "scan"), times, first_attack)
    }

    #[test]
    fn an_incident_on_an_attack_record_detects_and_one_before_is_false() {
        let mut hit = device("hit", Some(50));
        hit.sent = 100;
        hit.opened("a", 5.6, 7.0); // record 56: the 7th attack record, 2 s after the start
        hit.opened("a", 5.6, 8.0); // a redelivered event counts once
        let mut early = device("early", Some(50));
        early.sent = 100;
        early.opened("b", 1.0, 1.5);
        early.closed("b", 3.0);
        let mut missed = device("missed", Some(50));
        missed.sent = 100;
        let mut clean = device("clean", None);
        clean.sent = 100;
        clean.opened("c", 2.0, 2.5);
        let mut not_yet = device("not-yet", Some(50));
        not_yet.sent = 40;

        let card = scorecard(&[hit, early, missed, clean, not_yet], 10.0, Some(400.0));
        assert_eq!((card.attacked, card.detected), (3, 1));
        assert!(card.already_open.is_empty());
        assert_eq!(card.missed, vec!["early".to_string(), "missed".to_string()]);
        assert_eq!((card.clean, card.false_incidents_clean, card.false_incidents_before_attack), (1, 1, 1));
        assert_eq!(card.median_records_to_incident, Some(7.0));
        assert_eq!(card.median_seconds_to_incident, Some(2.0));
        assert_eq!(card.records_sent, 440);
        let line = card.line();
        assert!(line.contains("detected=1/3 already_open=0 missed=2 false_incidents_clean=1"), "{line}");
        assert!(line.contains("false_incidents_before_attack=1"), "{line}");
        assert!(
            line.contains("median_records_to_incident=7.0") && line.contains("records_per_s=40.0"),
            "{line}"
        );
    }

    #[test]
    fn an_early_incident_still_open_when_the_attack_begins_is_told_apart() {
        let mut d = device("d", Some(50));
        d.sent = 100;
        d.opened("x", 4.5, 4.6);
        let card = scorecard(&[d], 10.0, None);
        assert_eq!((card.detected, card.false_incidents_before_attack), (0, 1));
        assert_eq!((&card.already_open, card.missed.len()), (&vec!["d".to_string()], 0));
        assert_eq!(card.median_records_to_incident, None);
        assert!(card.line().contains("records_per_s=none"));
    }
}
