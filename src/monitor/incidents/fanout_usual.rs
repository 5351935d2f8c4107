//! What a device usually does on the wire, for the fan-out and login looks to judge it
//! against: the most hosts it attempted on one service within one window, the most
//! ports of one host, and the login services it used. IoT devices talk to few, fixed
//! peers (MUD's allow-lists, IoT Sentinel): a camera that reached 2 local hosts all week
//! sweeping 20 is as plain a sign as a sweep of 25, Zeek's site-wide count, which stays
//! the ceiling.
//!
//! Learned only from records decided normal outside any incident, and only after a
//! window with no incident opening: what an attack did before its incident opened is
//! dropped with it, so a first wave never makes its second wave usual. Part of the
//! device's snapshot (its history), bounded, on the device's time.

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};

/// A device's thresholds follow its usual only after this long of its time: before,
/// the site-wide ones (a new device has no usual yet).
pub const LEARN_S: f64 = 86_400.0;
/// A threshold is this many times the device's usual...
pub const USUAL_TIMES: u32 = 3;
/// ...and no lower than these: hosts on one service (the ICMP sweeps of a /24 in the
/// shared data reach 18), and ports of one host (an incident's scan footprint is 8).
pub const HOSTS_FLOOR: u32 = 10;
pub const PORTS_FLOOR: u32 = 8;
/// Services whose usual is kept at most (beyond, a service has no usual: the floor,
/// the safe side), and notes waiting for their window to pass.
const MAX_SERVICES: usize = 32;
const MAX_PENDING: usize = 256;

/// A service: the peer's port (0 for ICMP and ARP) and the IP protocol (0 for ARP).
pub type Service = (u16, u8);

/// One attempt's place in the look's window when it was counted: its service, the
/// distinct hosts attempted on that service, and the distinct services attempted on its
/// host; or a login connection (its port).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Note {
    Fanned { service: Service, hosts: u32, ports: u32 },
    Login { port: u16 },
}

/// The most distinct hosts attempted on one service within one window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServicePeak {
    pub port: u16,
    pub proto: u8,
    pub hosts: u32,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FanOutUsual {
    /// The device time of its first normal record outside an incident.
    #[serde(default)]
    pub since: Option<f64>,
    /// Per service: the most distinct hosts attempted within one window.
    #[serde(default)]
    pub hosts: Vec<ServicePeak>,
    /// The most distinct services of one host attempted within one window.
    #[serde(default)]
    pub ports: u32,
    /// Login ports it opened or accepted connections on, with the time first settled.
    #[serde(default)]
    pub logins: BTreeMap<u16, f64>,
    /// Notes that would raise the usual, with their time: settled once a window has
    /// passed with no incident opening, dropped when one opens.
    #[serde(default)]
    pending: VecDeque<(f64, Note)>,
}

impl FanOutUsual {
    /// A device with no usual yet.
    pub const fn new() -> Self {
        Self { since: None, hosts: Vec::new(), ports: 0, logins: BTreeMap::new(), pending: VecDeque::new() }
    }

    /// A normal record outside any incident at device time `ts`, and what the look
    /// counted of it; `window_s`: the look's window.
    pub fn observe(&mut self, note: Option<Note>, ts: f64, window_s: f64) {
        self.since.get_or_insert(ts);
        self.settle(ts - window_s);
        let Some(note) = note else { return };
        if self.raises(&note) && self.pending.len() < MAX_PENDING {
            self.pending.push_back((ts, note));
        }
    }

    /// An incident opened: what waited may be its attack's beginning.
    pub fn incident_opened(&mut self) {
        self.pending.clear();
    }

    /// Whether the device has been watched long enough for its usual to count.
    pub fn learned(&self, ts: f64) -> bool {
        self.since.is_some_and(|s| ts - s >= LEARN_S)
    }

    /// The hosts on `service` that make an address scan: `site` (the configured
    /// threshold) until the device is learned, then its usual times [`USUAL_TIMES`]
    /// within [[`HOSTS_FLOOR`], `site`].
    pub fn hosts_threshold(&self, service: Service, ts: f64, site: u32) -> u32 {
        if !self.learned(ts) {
            return site;
        }
        self.usual_hosts(service).saturating_mul(USUAL_TIMES).clamp(HOSTS_FLOOR.min(site), site)
    }

    /// The most hosts it attempted on `service` within one window (0: never).
    pub fn usual_hosts(&self, service: Service) -> u32 {
        self.peak(service).map_or(0, |p| p.hosts)
    }

    fn peak(&self, (port, proto): Service) -> Option<&ServicePeak> {
        self.hosts.iter().find(|p| p.port == port && p.proto == proto)
    }

    /// The ports of one host that make a port scan, as [`Self::hosts_threshold`].
    pub fn ports_threshold(&self, ts: f64, site: u32) -> u32 {
        if !self.learned(ts) {
            return site;
        }
        self.ports.saturating_mul(USUAL_TIMES).clamp(PORTS_FLOOR.min(site), site)
    }

    /// Whether the device used login `port` in its normal traffic.
    pub fn used_login(&self, port: u16) -> bool {
        self.logins.contains_key(&port)
    }

    fn raises(&self, note: &Note) -> bool {
        match note {
            Note::Fanned { service, hosts, ports } => {
                *ports > self.ports || self.peak(*service).is_none_or(|p| *hosts > p.hosts)
            }
            Note::Login { port } => !self.logins.contains_key(port),
        }
    }

    fn settle(&mut self, before: f64) {
        while self.pending.front().is_some_and(|(t, _)| *t < before) {
            let Some((t, note)) = self.pending.pop_front() else { break };
            match note {
                Note::Fanned { service: (port, proto), hosts, ports } => {
                    self.ports = self.ports.max(ports);
                    if let Some(p) = self.hosts.iter_mut().find(|p| p.port == port && p.proto == proto) {
                        p.hosts = p.hosts.max(hosts);
                    } else if self.hosts.len() < MAX_SERVICES {
                        self.hosts.push(ServicePeak { port, proto, hosts });
                    }
                }
                Note::Login { port } => {
                    if self.logins.len() < MAX_SERVICES {
                        self.logins.entry(port).or_insert(t);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ICMP: Service = (0, 1);
    const DNS: Service = (53, 17);

    fn fanned(service: Service, hosts: u32) -> Option<Note> {
        Some(Note::Fanned { service, hosts, ports: 1 })
    }

    #[test]
    fn a_new_device_has_the_site_thresholds_and_a_learned_one_its_own() {
        let mut u = FanOutUsual::default();
        u.observe(fanned(ICMP, 2), 0.0, 300.0);
        assert_eq!(u.hosts_threshold(ICMP, 1_000.0, 25), 25, "not learned yet");
        u.observe(None, 400.0, 300.0);
        assert_eq!(u.usual_hosts(ICMP), 2, "settled after a window");
        assert_eq!(u.hosts_threshold(ICMP, LEARN_S, 25), 10, "3 × 2 is under the floor");
        u.observe(fanned(DNS, 7), LEARN_S, 300.0);
        u.observe(None, LEARN_S + 301.0, 300.0);
        assert_eq!(u.hosts_threshold(DNS, LEARN_S + 301.0, 25), 21);
        u.observe(fanned(DNS, 20), LEARN_S + 400.0, 300.0);
        u.observe(None, LEARN_S + 800.0, 300.0);
        assert_eq!(u.hosts_threshold(DNS, LEARN_S + 800.0, 25), 25, "the site's is the ceiling");
        assert_eq!(u.hosts_threshold((23, 6), LEARN_S, 25), 10, "a service it never used");
        assert_eq!(u.ports_threshold(LEARN_S, 15), 8);
        assert_eq!(u.hosts_threshold(ICMP, LEARN_S, 5), 5, "a site's threshold under the floor stands");
    }

    #[test]
    fn what_waited_when_an_incident_opened_is_never_usual() {
        let mut u = FanOutUsual::default();
        u.observe(fanned(ICMP, 9), 100.0, 300.0);
        u.observe(Some(Note::Login { port: 22 }), 100.0, 300.0);
        u.incident_opened();
        u.observe(None, 1_000.0, 300.0);
        assert!(u.hosts.is_empty() && !u.used_login(22), "{u:?}");
        u.observe(Some(Note::Login { port: 22 }), 2_000.0, 300.0);
        u.observe(None, 2_301.0, 300.0);
        assert!(u.used_login(22));
    }

    #[test]
    fn it_is_bounded() {
        let mut u = FanOutUsual::default();
        for i in 0..1_000u32 {
            u.observe(fanned((i as u16, 17), 1), f64::from(i), 0.5);
            u.observe(Some(Note::Login { port: i as u16 }), f64::from(i), 0.5);
        }
        u.observe(None, 5_000.0, 0.5);
        assert!(u.hosts.len() <= MAX_SERVICES && u.logins.len() <= MAX_SERVICES);
        assert!(u.pending.len() <= MAX_PENDING);
    }
}
