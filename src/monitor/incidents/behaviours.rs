//! What analysts dismissed, remembered by what it was: each false-positive verdict
//! leaves the incident's behaviour with the device — the peers it talked to (by address
//! and by the name the device looked them up by), the service ports, the transports, the
//! directions, how many bytes — and a later incident of the same behaviour is recorded
//! as suppressed instead of reaching the analyst as new (Zeek's notice suppression and
//! Suricata's `suppress` by address, with the rule learned from one verdict instead of
//! written by hand). Bounded: it expires, and a record outside the behaviour (a new peer,
//! port, transport or direction) or far more bytes than it had is news again. Where
//! records carry no packet context, the incident's feature rows stand in (a box around
//! them in log space). Pure: times come in.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use super::incident_traffic::Traffic;
use crate::traffic::context::{transport_name, Context, Direction};

/// Behaviours remembered per device at most; the oldest goes first.
pub const MAX_REMEMBERED: usize = 32;
/// Peers, and service ports, remembered per behaviour at most (the most frequent).
pub const MAX_PEERS: usize = 256;
/// How far a behaviour's volume grows with its returns: each return suppressed as it
/// (never news) raises its bytes, and its anomalous records, to the return's own, up to
/// this many times those of the incident it was remembered from. With `volume_factor`
/// 3 a return is news past 30× the first incident's bytes at most.
pub const MAX_GROWTH: u64 = 10;

/// How long a dismissal holds and how far a behaviour may grow (`[incidents]`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MemoryRules {
    /// A dismissed behaviour is remembered this long (device time); 0 = not at all.
    pub remember_ms: u64,
    /// An incident of a remembered behaviour with more than this many times its bytes
    /// (or, without packet context, its anomalous records) is news.
    pub volume_factor: f64,
    /// An incident that closed quietly, without a verdict, and left no attack's
    /// footprint (`footprint.rs`) is remembered as if dismissed (by the daemon,
    /// `Dismissal::learned`): its returns are suppressed.
    pub learn_quiet: bool,
    /// What the daemon learned holds this long after it was last seen (device time): a
    /// return it suppresses renews it; a behaviour that stops coming back lapses.
    pub learned_ms: u64,
    /// A new device's learning period (device time from its first record the model
    /// judged): an incident the model raises in it is held and, if it closes quietly,
    /// learned, unless it shows an attack's footprint (`footprint.rs`), which raises it.
    /// The fan-out look raises as ever. 0 = none.
    pub learning_ms: u64,
}

impl MemoryRules {
    /// Nothing remembered (tests of other parts).
    pub const OFF: Self =
        Self { remember_ms: 0, volume_factor: 3.0, learn_quiet: false, learned_ms: 0, learning_ms: 0 };

    /// How long a dismissal holds, seconds: a verdict's `remember_ms` after it was
    /// given; what the daemon learned `learned_ms` after it was last seen, never longer.
    fn hold_s(&self, learned: bool) -> f64 {
        let ms = if learned { self.learned_ms.min(self.remember_ms) } else { self.remember_ms };
        ms as f64 / 1000.0
    }
}

/// Who a behaviour the daemon learned by itself was dismissed by.
pub const LEARNED_BY: &str = "metapu";

/// Who dismissed a behaviour, when and why: carried by the incidents it suppresses.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Dismissal {
    /// The dismissed incident.
    pub incident_id: String,
    pub by: String,
    #[serde(default)]
    pub note: String,
    /// Unix seconds (the device's time) of the verdict.
    pub at: f64,
    /// The device it was dismissed on, when that is a sibling of its kind (`kinds.rs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on: Option<String>,
    /// Nobody dismissed it: the incident closed quietly without a verdict and the daemon
    /// remembered it (`incidents.learn_quiet`); a `confirmed` verdict undoes it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub learned: bool,
    /// Unix seconds (device time) at which what the daemon learned lapses unless seen
    /// again (`MemoryRules::learned_ms` after its last return); absent on a verdict's,
    /// which holds `remember_ms` after it was given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<f64>,
}

impl Dismissal {
    /// Until when it holds (unix seconds, device time).
    pub fn expires(&self, rules: &MemoryRules) -> f64 {
        self.expires_at.unwrap_or(self.at + rules.hold_s(self.learned))
    }
}

/// A suppressed incident went beyond the behaviour it was of: why, and the record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct News {
    pub why: String,
    pub by: crate::monitor::record::Source,
}

/// One dismissed incident's behaviour.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Behaviour {
    pub dismissal: Dismissal,
    /// Peer addresses, `port/transport` of the service side (the lower port), and
    /// transports of its anomalous packets.
    pub peers: BTreeSet<String>,
    /// The names the device looked its peers up by: a record to another address of a
    /// remembered name (a cloud's next address) is of the behaviour. Whole names only.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub names: BTreeSet<String>,
    pub services: BTreeSet<String>,
    pub transports: BTreeSet<String>,
    /// It had packets sent by the device, and sent to it.
    pub outbound: bool,
    pub inbound: bool,
    /// Bytes of its anomalous packets, and its anomalous records: the incident's, grown
    /// by its returns ([`MAX_GROWTH`]).
    pub bytes: u64,
    pub anomalous: u64,
    /// Those of the incident it was remembered from (0 in a snapshot from before
    /// behaviours grew: `bytes` and `anomalous` as they were then).
    #[serde(default)]
    pub first_bytes: u64,
    #[serde(default)]
    pub first_anomalous: u64,
    /// Per feature, the range of its kept rows in signed log1p space (empty: no rows).
    #[serde(default)]
    pub lo: Vec<f32>,
    #[serde(default)]
    pub hi: Vec<f32>,
}

/// Why a record, or an incident so far, is not the remembered behaviour.
#[derive(Debug, Clone, PartialEq)]
pub enum Beyond {
    Peer(String),
    Service(String),
    Transport(String),
    Direction(Direction),
    Bytes { now: u64, remembered: u64 },
    Records { now: u64, remembered: u64 },
    Features { feature: usize },
}

impl Beyond {
    /// In words, for the incident an analyst now sees.
    pub fn words(&self, d: &Dismissal) -> String {
        let what = self.what();
        if d.learned {
            return format!(
                "like the behaviour learned from incident {}, which closed quietly without a verdict, but with {what}",
                d.incident_id
            );
        }
        let on = d.on.as_ref().map(|device| format!(" on {device}")).unwrap_or_default();
        format!(
            "like the behaviour dismissed in incident {}{on} by {:?}, but with {what}",
            d.incident_id, d.by
        )
    }

    /// What it is, in words ("a new peer, 1.2.3.4").
    pub fn what(&self) -> String {
        match self {
            Beyond::Peer(p) => format!("a new peer, {p}"),
            Beyond::Service(s) => format!("a new port, {s}"),
            Beyond::Transport(t) => format!("another transport, {t}"),
            Beyond::Direction(Direction::Outbound) => "traffic sent by the device".into(),
            Beyond::Direction(Direction::Inbound) => "traffic sent to the device".into(),
            Beyond::Bytes { now, remembered } => {
                format!(
                    "{now} bytes, {:.0}× the {remembered} it had",
                    *now as f64 / (*remembered).max(1) as f64
                )
            }
            Beyond::Records { now, remembered } => {
                format!(
                    "{now} anomalous records, {:.0}× the {remembered} it had",
                    *now as f64 / (*remembered).max(1) as f64
                )
            }
            Beyond::Features { feature } => format!("feature {feature} outside its range"),
        }
    }
}

fn slog(x: f32) -> f32 {
    x.signum() * x.abs().ln_1p()
}

impl Behaviour {
    /// The behaviour of an incident an analyst dismissed (its traffic and kept rows).
    pub fn of(traffic: &Traffic, anomalous: u64, kept: &[f32], dim: usize, dismissal: Dismissal) -> Self {
        let top = |c: &super::incident_traffic::Counts| -> BTreeSet<String> {
            c.top(MAX_PEERS).into_iter().map(|c| c.value).collect()
        };
        let (mut lo, mut hi) = (Vec::new(), Vec::new());
        if dim > 0 && kept.len() >= dim {
            lo = vec![f32::INFINITY; dim];
            hi = vec![f32::NEG_INFINITY; dim];
            for row in kept.chunks_exact(dim) {
                for (j, &v) in row.iter().enumerate() {
                    let v = slog(v);
                    lo[j] = lo[j].min(v);
                    hi[j] = hi[j].max(v);
                }
            }
        }
        Self {
            dismissal,
            peers: top(&traffic.peers),
            names: top(&traffic.names),
            services: top(&traffic.services),
            transports: top(&traffic.transports),
            outbound: traffic.outbound > 0,
            inbound: traffic.inbound > 0,
            bytes: traffic.bytes,
            anomalous,
            first_bytes: traffic.bytes,
            first_anomalous: anomalous,
            lo,
            hi,
        }
    }

    /// One anomalous record: `None` if it is of this behaviour.
    pub fn admits(&self, context: Option<&Context>, features: &[f32]) -> Option<Beyond> {
        match context {
            Some(c) => self.admits_packet(c),
            None => self.admits_features(features),
        }
    }

    fn admits_packet(&self, c: &Context) -> Option<Beyond> {
        let transport = transport_name(c.proto);
        if !self.transports.contains(&transport) {
            return Some(Beyond::Transport(transport));
        }
        match c.direction {
            Some(Direction::Outbound) if !self.outbound => {
                return Some(Beyond::Direction(Direction::Outbound))
            }
            Some(Direction::Inbound) if !self.inbound => return Some(Beyond::Direction(Direction::Inbound)),
            _ => {}
        }
        if let Some((_, Some(peer))) = c.device_and_peer() {
            let name = c.peer_name.as_ref().map(|n| n.as_str());
            let known =
                self.peers.contains(&peer.to_string()) || name.is_some_and(|n| self.names.contains(n));
            if !known {
                return Some(Beyond::Peer(match name {
                    Some(name) => format!("{name} ({peer})"),
                    None => peer.to_string(),
                }));
            }
        }
        match c.service() {
            Some(s) if !self.services.contains(&s) => Some(Beyond::Service(s)),
            _ => None,
        }
    }

    /// Without packet context: every feature within the kept rows' range, widened by
    /// that range on each side and by at least 0.1 (about 10 %) in log space.
    fn admits_features(&self, features: &[f32]) -> Option<Beyond> {
        if self.lo.len() != features.len() {
            return Some(Beyond::Features { feature: 0 });
        }
        for (j, &v) in features.iter().enumerate() {
            let margin = (self.hi[j] - self.lo[j]).max(0.1);
            let v = slog(v);
            if !(v >= self.lo[j] - margin && v <= self.hi[j] + margin) {
                return Some(Beyond::Features { feature: j });
            }
        }
        None
    }

    /// A return of this behaviour closed, suppressed as it all along: its volume grows
    /// to the return's, up to [`MAX_GROWTH`] times the first incident's.
    pub fn grow(&mut self, traffic: &Traffic, anomalous: u64) {
        if self.first_bytes == 0 && self.first_anomalous == 0 {
            (self.first_bytes, self.first_anomalous) = (self.bytes, self.anomalous);
        }
        let bytes = traffic.bytes.min(self.first_bytes.saturating_mul(MAX_GROWTH));
        let records = anomalous.min(self.first_anomalous.max(1).saturating_mul(MAX_GROWTH));
        self.bytes = self.bytes.max(bytes);
        self.anomalous = self.anomalous.max(records);
    }

    /// An incident of this behaviour so far: news once it grew past `factor` times the
    /// bytes the dismissed one had (its anomalous records without packet context).
    pub fn admits_volume(&self, traffic: &Traffic, anomalous: u64, factor: f64) -> Option<Beyond> {
        if traffic.packets > 0 && self.bytes > 0 {
            (traffic.bytes as f64 > factor * self.bytes as f64)
                .then_some(Beyond::Bytes { now: traffic.bytes, remembered: self.bytes })
        } else {
            (anomalous as f64 > factor * self.anomalous.max(1) as f64)
                .then_some(Beyond::Records { now: anomalous, remembered: self.anomalous })
        }
    }
}

/// A device's remembered behaviours, newest last (part of its snapshot).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Memory {
    pub behaviours: Vec<Behaviour>,
}

impl Memory {
    /// Remember `b` (in place of what its incident left before: a reopened incident
    /// closes again).
    pub fn remember(&mut self, b: Behaviour) {
        self.behaviours.retain(|old| old.dismissal.incident_id != b.dismissal.incident_id);
        if self.behaviours.len() >= MAX_REMEMBERED {
            self.behaviours.remove(0);
        }
        self.behaviours.push(b);
    }

    /// Forget what no longer holds at `now_unix` (`Dismissal::expires`).
    pub fn expire(&mut self, rules: &MemoryRules, now_unix: f64) {
        self.behaviours.retain(|b| now_unix <= b.dismissal.expires(rules));
    }

    /// The newest remembered behaviour the record is of, among those that still hold at
    /// `now_unix` (a memory the device only reads, its kind's, is never expired).
    pub fn recognise(
        &self,
        context: Option<&Context>,
        features: &[f32],
        rules: &MemoryRules,
        now_unix: f64,
    ) -> Option<&Behaviour> {
        self.behaviours
            .iter()
            .rev()
            // From when it was given (a sibling's verdict, read by a member replaying
            // older traffic, is not yet given there) until it expires.
            .filter(|b| b.dismissal.at <= now_unix && now_unix <= b.dismissal.expires(rules))
            .find(|b| b.admits(context, features).is_none())
    }

    /// What the daemon learned of `incident_id` was seen again at `now_unix`: it holds
    /// `learned_ms` from now (a verdict's dismissal holds as it was given). The
    /// dismissal as it now stands.
    pub fn renew(&mut self, incident_id: &str, rules: &MemoryRules, now_unix: f64) -> Option<&Dismissal> {
        let b = self.find_mut(incident_id)?;
        if b.dismissal.learned {
            let until = now_unix + rules.hold_s(true);
            b.dismissal.expires_at = Some(b.dismissal.expires(rules).max(until));
        }
        Some(&b.dismissal)
    }

    /// A return suppressed as what incident `incident_id` left closed: that behaviour
    /// grows to it ([`Behaviour::grow`]).
    pub fn grow(&mut self, incident_id: &str, traffic: &Traffic, anomalous: u64) {
        if let Some(b) = self.find_mut(incident_id) {
            b.grow(traffic, anomalous);
        }
    }

    /// Forget what incident `incident_id` left (an analyst confirmed it was an attack).
    pub fn forget(&mut self, incident_id: &str) -> bool {
        let before = self.behaviours.len();
        self.behaviours.retain(|b| b.dismissal.incident_id != incident_id);
        self.behaviours.len() < before
    }

    pub fn find(&self, incident_id: &str) -> Option<&Behaviour> {
        self.behaviours.iter().find(|b| b.dismissal.incident_id == incident_id)
    }

    fn find_mut(&mut self, incident_id: &str) -> Option<&mut Behaviour> {
        self.behaviours.iter_mut().find(|b| b.dismissal.incident_id == incident_id)
    }

    pub fn len(&self) -> usize {
        self.behaviours.len()
    }

    pub fn is_empty(&self) -> bool {
        self.behaviours.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An outbound TCP packet (ACK, PSH) of `bytes` to `peer`:`port`.
    fn packet(peer: &str, port: u16, bytes: u32) -> Context {
        Context::outbound(peer, port, 6, 0x18, bytes)
    }

    fn dismissal() -> Dismissal {
        Dismissal {
            incident_id: "i1".into(),
            by: "ana".into(),
            note: "nightly upload".into(),
            at: 1_000.0,
            on: None,
            learned: false,
            expires_at: None,
        }
    }

    fn upload() -> Behaviour {
        let mut t = Traffic::default();
        for i in 0..100 {
            t.add(&packet("52.1.2.3", 443, 1_000), f64::from(i));
        }
        Behaviour::of(&t, 100, &[1.0, 10.0, 3.0, 30.0], 2, dismissal())
    }

    #[test]
    fn the_same_peer_and_service_is_the_behaviour_and_anything_new_is_not() {
        let b = upload();
        assert_eq!(b.services.iter().collect::<Vec<_>>(), ["443/tcp"], "the service side, not 40000");
        assert_eq!(b.admits(Some(&packet("52.1.2.3", 443, 1_400)), &[]), None);
        assert_eq!(
            b.admits(Some(&packet("52.1.2.4", 443, 1_000)), &[]),
            Some(Beyond::Peer("52.1.2.4".into()))
        );
        assert_eq!(b.admits(Some(&packet("52.1.2.3", 22, 60)), &[]), Some(Beyond::Service("22/tcp".into())));
        let udp = Context { proto: 17, ..packet("52.1.2.3", 443, 100) };
        assert_eq!(b.admits(Some(&udp), &[]), Some(Beyond::Transport("udp".into())));
        let (src, dst) = (udp.dst_ip, udp.src_ip);
        let inbound = Context {
            src_ip: src,
            dst_ip: dst,
            direction: Some(Direction::Inbound),
            ..packet("52.1.2.3", 443, 9)
        };
        assert_eq!(b.admits(Some(&inbound), &[]), Some(Beyond::Direction(Direction::Inbound)));
    }

    /// A cloud's next address, looked up by the same name, is the same peer; an address
    /// of another name, or of none, is new.
    #[test]
    fn a_remembered_name_admits_its_other_addresses_and_only_whole_names() {
        let named = |peer: &str, name: &str| Context {
            peer_name: Some(crate::traffic::peer_names::PeerName::new(name).unwrap()),
            ..packet(peer, 443, 1_000)
        };
        let mut t = Traffic::default();
        for i in 0..10 {
            t.add(&named("52.70.158.224", "vs-cam.u011.immedia-semi.com"), f64::from(i));
        }
        let b = Behaviour::of(&t, 10, &[], 0, dismissal());
        assert_eq!(b.names.iter().collect::<Vec<_>>(), ["vs-cam.u011.immedia-semi.com"]);
        assert_eq!(b.admits(Some(&named("3.220.1.2", "vs-cam.u011.immedia-semi.com")), &[]), None);
        assert_eq!(
            b.admits(Some(&named("3.220.1.2", "evil.immedia-semi.com")), &[]),
            Some(Beyond::Peer("evil.immedia-semi.com (3.220.1.2)".into())),
            "whole names only"
        );
        assert_eq!(
            b.admits(Some(&packet("3.220.1.2", 443, 1_000)), &[]),
            Some(Beyond::Peer("3.220.1.2".into()))
        );
        let old: Behaviour =
            serde_json::from_str(&serde_json::to_string(&upload()).unwrap().replace(r#""names":[],"#, ""))
                .unwrap();
        assert!(old.names.is_empty(), "a snapshot from before names reads");
    }

    #[test]
    fn ten_times_the_bytes_to_the_same_peer_is_news() {
        let b = upload();
        let mut t = Traffic::default();
        for i in 0..250 {
            t.add(&packet("52.1.2.3", 443, 1_000), f64::from(i));
        }
        assert_eq!(b.admits_volume(&t, 250, 3.0), None, "2.5× the bytes");
        for i in 0..1_000 {
            t.add(&packet("52.1.2.3", 443, 1_000), f64::from(i));
        }
        let beyond = b.admits_volume(&t, 1_250, 3.0).expect("12.5× the bytes");
        assert!(beyond.words(&b.dismissal).contains("12× the 100000"), "{}", beyond.words(&b.dismissal));
    }

    /// Ordinary uploads larger than the dismissed one raise the bound, one return at a
    /// time, never past MAX_GROWTH times the first: a tenfold burst beyond that is news.
    #[test]
    fn a_behaviours_volume_grows_with_its_returns_within_a_limit() {
        let mut b = upload();
        let mut m = Memory::default();
        let uploads = |n: u32| {
            let mut t = Traffic::default();
            for i in 0..n {
                t.add(&packet("52.1.2.3", 443, 1_000), f64::from(i));
            }
            t
        };
        assert!(b.admits_volume(&uploads(400), 400, 3.0).is_some(), "4× the 100,000 bytes dismissed");
        b.grow(&uploads(250), 250);
        assert_eq!((b.bytes, b.anomalous, b.first_bytes), (250_000, 250, 100_000));
        assert_eq!(b.admits_volume(&uploads(400), 400, 3.0), None, "1.6× the grown bound");
        m.remember(b);
        for n in [700, 2_000, 5_000] {
            m.grow("i1", &uploads(n), u64::from(n));
        }
        let b = m.find("i1").unwrap();
        assert_eq!((b.bytes, b.anomalous), (1_000_000, 1_000), "at most 10× the first");
        assert!(b.admits_volume(&uploads(3_100), 3_100, 3.0).is_some(), "31× the first is news");
        let mut old: Behaviour = serde_json::from_str(
            &serde_json::to_string(&upload())
                .unwrap()
                .replace(r#""first_bytes":100000,"first_anomalous":100,"#, ""),
        )
        .unwrap();
        old.grow(&uploads(5_000), 5_000);
        assert_eq!(old.bytes, 1_000_000, "a snapshot from before growth grows from what it had");
    }

    #[test]
    fn without_context_the_kept_rows_range_decides() {
        let b = upload();
        assert_eq!(b.admits(None, &[2.0, 20.0]), None, "between the kept rows");
        assert_eq!(b.admits(None, &[2.0, 60.0]), None, "within the widened range");
        assert_eq!(b.admits(None, &[2.0, 10_000.0]), Some(Beyond::Features { feature: 1 }));
        assert_eq!(b.admits(None, &[2.0]), Some(Beyond::Features { feature: 0 }), "another dimension");
        assert_eq!(b.admits(None, &[f32::NAN, 20.0]), Some(Beyond::Features { feature: 0 }));
    }

    #[test]
    fn memory_is_bounded_expires_and_recognises_the_newest_match() {
        let mut m = Memory::default();
        for i in 0..MAX_REMEMBERED + 3 {
            let mut b = upload();
            b.dismissal.incident_id = format!("i{i}");
            b.dismissal.at = i as f64;
            m.remember(b);
        }
        assert_eq!(m.len(), MAX_REMEMBERED);
        assert!(m.find("i0").is_none() && m.find("i3").is_some());
        let rules = MemoryRules {
            remember_ms: 10_000,
            volume_factor: 3.0,
            learn_quiet: false,
            learned_ms: 0,
            learning_ms: 0,
        };
        let upload = packet("52.1.2.3", 443, 10);
        let seen = m.recognise(Some(&upload), &[], &rules, 40.0).map(|b| b.dismissal.incident_id.clone());
        assert_eq!(seen.as_deref(), Some(format!("i{}", MAX_REMEMBERED + 2).as_str()));
        assert!(m.recognise(Some(&upload), &[], &rules, 60.0).is_none(), "none kept at 60");
        m.expire(&rules, 40.0);
        assert_eq!(m.len(), 5, "dismissed at 30..=34, within 10 s of 40");
    }

    /// What the daemon learned holds `learned_ms` after it was last seen, never longer
    /// than a verdict would; seen again, it is renewed.
    #[test]
    fn a_learned_behaviour_lapses_unless_seen_again() {
        let rules = MemoryRules {
            remember_ms: 100_000,
            volume_factor: 3.0,
            learn_quiet: true,
            learned_ms: 10_000,
            learning_ms: 0,
        };
        let mut m = Memory::default();
        let mut b = upload();
        b.dismissal.learned = true;
        m.remember(b);
        let upload = packet("52.1.2.3", 443, 10);
        assert!(m.recognise(Some(&upload), &[], &rules, 1_010.0).is_some(), "10 s after: held");
        m.renew("i1", &rules, 1_008.0);
        assert_eq!(m.find("i1").and_then(|b| b.dismissal.expires_at), Some(1_018.0));
        assert!(m.recognise(Some(&upload), &[], &rules, 1_017.0).is_some(), "renewed at 1,008");
        assert!(m.recognise(Some(&upload), &[], &rules, 1_019.0).is_none(), "lapsed");
        m.expire(&rules, 1_019.0);
        assert!(m.is_empty());
    }
}
