//! A second look beside the model, on the records' packet context: fan-out per device,
//! as Zeek's scan policy counts it. Within a sliding window of the device's time:
//! - an **address scan**: unanswered connection attempts (a TCP SYN, a UDP datagram, an
//!   ICMP packet) to `hosts` distinct hosts on one service;
//! - a **port scan**: unanswered attempts to `ports` distinct ports of one host;
//! - a **flood**: `flood` packets to one host and port that never answered, a host the
//!   device had not talked to before the window (a one-way stream to a peer it has
//!   always streamed to is its history, not an attack);
//! - a **stealth scan**: `probes` TCP packets with flags no connection uses (no SYN, ACK
//!   or RST: Nmap's FIN, NULL and Xmas probes; or SYN with FIN);
//! - an **ARP sweep**: ARP who-has requests for `hosts` distinct addresses (arp-scan,
//!   nmap -sn on a LAN), answered or not;
//! - **login guessing**: `logins` connections to one login service of one host, or from
//!   one host to the device's (`logins.rs`);
//! - **spoofed sources**: packets sent from `sources` distinct source addresses
//!   (`spoofing.rs`).
//!
//! Once a device has a day of history, the host and port counts are its own: a multiple
//! of what it usually attempts, with the configured counts as the ceiling
//! (`fanout_usual.rs`).
//!
//! Multicast and broadcast destinations are no attempts (mDNS, SSDP: nobody answers them
//! by name).
//! An attempt is answered by a packet back from that host and port (a TCP reset is a
//! refusal, not an answer); a flood's host, by any packet back (RTP's receiver reports
//! come from another port). A short scan or flood is a handful of records to the model
//! and can pass under its `open_k` of `open_n`; here it is counted whole. Pure: times come
//! in; state in memory only (a restart empties the window, and the flood look waits one
//! window before it trusts the device's history again).

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;

use serde::{Deserialize, Serialize};

use super::fanout_usual::{FanOutUsual, Note};
use super::logins::{bytes_words, login_name, Guessing, Logins};
use super::record::Source;
use super::spoofing::Sources;
use crate::traffic::context::{is_group, transport_name, Context, Direction};

/// Attempts kept per device at most (a window's worth of a flood is counted, not kept
/// beyond this: the oldest go first).
const MAX_ATTEMPTS: usize = 8192;
/// Peers remembered as the device's history at most.
const MAX_KNOWN_PEERS: usize = 4096;

/// The look's thresholds (`[incidents]`). Zeek's scan policy uses 25 hosts and 15 ports
/// in 5 minutes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FanOutRules {
    /// 0 = the look is off.
    pub window_ms: u64,
    pub hosts: u32,
    pub ports: u32,
    pub flood: u32,
    pub probes: u32,
    /// Connections to one login service (half on one the device never used).
    pub logins: u32,
    /// Source addresses the device sends from.
    pub sources: u32,
}

impl FanOutRules {
    pub const OFF: Self =
        Self { window_ms: 0, hosts: 0, ports: 0, flood: 0, probes: 0, logins: 0, sources: 0 };
}

/// What raised an incident: the model's decisions, or one of the looks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RaisedBy {
    #[default]
    Model,
    AddressScan,
    PortScan,
    Flood,
    StealthScan,
    ArpSweep,
    LoginGuessing,
    SpoofedSources,
}

/// What the look found: which look, why in words, and the record that crossed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    /// Never `model`.
    pub look: RaisedBy,
    pub why: String,
    pub by: Source,
}

use super::fanout_usual::Service;

/// The service an ARP who-has attempts (no port, no IP protocol).
const ARP: Service = (0, 0);

/// One device's window of attempts.
#[derive(Debug, Default)]
pub struct FanOut {
    /// (time, peer, port, protocol) of each outbound attempt in the window, oldest first.
    attempts: VecDeque<(f64, IpAddr, u16, u8)>,
    hosts_by_service: HashMap<Service, HashMap<IpAddr, u32>>,
    ports_by_host: HashMap<IpAddr, HashMap<Service, u32>>,
    /// Answers seen: (peer, its port, protocol) → time of the newest.
    answered: HashMap<(IpAddr, u16, u8), f64>,
    /// Hosts that sent anything back (not a reset): → time of the newest.
    answering: HashMap<IpAddr, f64>,
    /// Peers the device talked to, and when it was first seen by this look.
    known_peers: HashMap<IpAddr, f64>,
    first_ts: Option<f64>,
    /// Times of the stealth probes in the window.
    probes: VecDeque<f64>,
    /// When the answer maps were last rid of entries older than the window. Their
    /// look-ups check the time themselves, so a sweep once a window bounds their size
    /// without walking them at every record.
    swept: f64,
    /// Attempts after a finding count towards its incident until then (device time).
    pub hot_until: f64,
    /// Connections to login services in the window.
    logins: Logins,
    /// The source addresses the device sent from in the window.
    sources: Sources,
    /// What the last record counted, for the device's usual (`fanout_usual.rs`).
    counted: Option<Note>,
}

/// The window is not part of a device's state (not snapshotted, not compared): a copy,
/// as a snapshot takes one of the device's incident state, starts empty.
impl Clone for FanOut {
    fn clone(&self) -> Self {
        Self::default()
    }
}

impl PartialEq for FanOut {
    /// The look's window is not state to compare (it is not snapshotted).
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

/// A connection attempt's service (the peer's port and the protocol; [`ARP`] for a
/// who-has), or `None` for a packet that is no attempt (a TCP packet with ACK set: part
/// of a connection).
fn attempt(c: &Context) -> Option<Service> {
    if c.is_arp_request() {
        return Some(ARP);
    }
    match c.proto {
        6 if c.is_syn() => Some((c.dst_port, 6)),
        17 => Some((c.dst_port, 17)),
        1 | 58 => Some((0, c.proto)),
        _ => None,
    }
}

/// A TCP packet no connection sends: none of SYN, ACK, RST (FIN, NULL, Xmas probes), or
/// SYN with FIN.
fn is_probe(c: &Context) -> bool {
    let f = c.tcp_flags;
    c.proto == 6 && (f & 0x16 == 0 || f & 0x03 == 0x03)
}

fn service_name((port, proto): Service) -> String {
    if port == 0 {
        transport_name(proto).to_uppercase()
    } else {
        format!("{port}/{}", transport_name(proto))
    }
}

/// A span as an analyst reads it: "under a second", "12 s", "3 min".
fn seconds_words(s: f64) -> String {
    match s.max(0.0) {
        s if s < 1.0 => "under a second".into(),
        s if s < 120.0 => format!("{s:.0} s"),
        s => format!("{:.0} min", s / 60.0),
    }
}

/// A threshold in words: the site's, or the device's own from its usual.
fn threshold_words(needed: u32, site: u32, usual: u32, within: &str) -> String {
    if needed == site {
        format!("threshold {site} within {within}")
    } else {
        format!("threshold {needed} within {within}, from its usual of {usual} (the site's is {site})")
    }
}

fn login_words(g: &Guessing, needed: u32, never_used: bool, window_ms: u64) -> String {
    let service = format!("{}/tcp ({})", g.port, login_name(g.port).unwrap_or("login"));
    let who = if g.inbound {
        format!("{} opened {} connections to the device's {service}", g.peer, g.connections)
    } else {
        format!("opened {} connections to {} on {service}", g.connections, g.peer)
    };
    let tighter = if never_used { ", a login service it never used" } else { "" };
    format!(
        "login guessing: {who} in {}, {} each on average (threshold {needed} within {}{tighter})",
        seconds_words(g.span_s),
        bytes_words(g.bytes_each),
        window_words(window_ms)
    )
}

fn window_words(ms: u64) -> String {
    match ms / 1000 {
        s if s % 60 == 0 => format!("{} min", s / 60),
        s => format!("{s} s"),
    }
}

impl FanOut {
    /// Take one record's packet at device time `ts`: a finding when it crosses a threshold
    /// (at most one per window: the incident it raised counts the rest).
    /// `usual`: what the device usually attempts, which sets its thresholds;
    /// `in_incident`: an incident is open on the device (its peers are not history).
    pub fn observe(
        &mut self,
        c: &Context,
        ts: f64,
        source: &Source,
        rules: &FanOutRules,
        usual: &FanOutUsual,
        in_incident: bool,
    ) -> Option<Finding> {
        self.counted = None;
        if rules.window_ms == 0 {
            return None;
        }
        let window_s = rules.window_ms as f64 / 1000.0;
        let finding = |look: RaisedBy, why: String| Finding { look, why, by: source.clone() };
        let first = *self.first_ts.get_or_insert(ts);
        self.expire(ts - window_s, window_s);
        let Some((from, Some(peer))) = c.device_and_peer() else { return None };
        if let (Some(from), Some(Direction::Outbound)) = (from, c.direction) {
            let n = self.sources.observe(from, ts, window_s);
            if n >= rules.sources as usize && ts >= self.hot_until {
                let why = format!(
                    "spoofed sources: sent from {n} source addresses within {} (threshold {}), the last from \
                     {from} to {peer}{}",
                    window_words(rules.window_ms),
                    rules.sources,
                    if c.dst_port > 0 { format!(" on {}", service_name((c.dst_port, c.proto))) } else { String::new() },
                );
                return self.found(ts, window_s, finding(RaisedBy::SpoofedSources, why));
            }
        }
        if is_group(peer) {
            return None;
        }
        let established = self.known_peers.get(&peer).is_some_and(|&seen| seen <= ts - window_s);
        let room = self.known_peers.len() < MAX_KNOWN_PEERS || self.known_peers.contains_key(&peer);
        if room && !in_incident {
            self.known_peers.entry(peer).or_insert(ts);
        }
        if c.is_syn() && login_name(c.dst_port).is_some() {
            self.counted = Some(Note::Login { port: c.dst_port });
        }
        let never_used = |port: u16| !usual.used_login(port);
        let needed = |port: u16| if never_used(port) { (rules.logins / 2).max(1) } else { rules.logins };
        if let Some(g) = self.logins.observe(c, peer, ts, window_s, needed) {
            if ts >= self.hot_until {
                let why = login_words(&g, needed(g.port), never_used(g.port), rules.window_ms);
                return self.found(ts, window_s, finding(RaisedBy::LoginGuessing, why));
            }
        }
        if c.direction == Some(Direction::Inbound) {
            let refused = c.proto == 6 && c.tcp_flags & 0x04 != 0;
            if !refused && matches!(c.proto, 6 | 17) {
                self.answered.insert((peer, c.src_port, c.proto), ts);
                self.answering.insert(peer, ts);
            }
            return None;
        }
        if is_probe(c) {
            self.probes.push_back(ts);
            if self.probes.len() >= rules.probes as usize && ts >= self.hot_until {
                let n = self.probes.len();
                let within = window_words(rules.window_ms);
                let why = format!(
                    "stealth scan: {n} TCP packets with flags no connection uses (FIN, NULL or Xmas probes), \
                     the last to {peer} port {}, within {within} (threshold {})",
                    c.dst_port, rules.probes
                );
                return self.found(ts, window_s, finding(RaisedBy::StealthScan, why));
            }
            return None;
        }
        let service = attempt(c)?;
        self.add(ts, peer, service);
        if ts < self.hot_until {
            return None;
        }
        let since = ts - window_s;
        let unanswered = |a: &HashMap<(IpAddr, u16, u8), f64>, host: IpAddr, (port, proto): Service| {
            // ICMP and ARP are counted whoever answers: a sweep of live hosts is still a
            // sweep.
            matches!(proto, 0 | 1 | 58) || a.get(&(host, port, proto)).is_none_or(|&t| t < since)
        };
        let within = window_words(rules.window_ms);
        let hosts_needed = usual.hosts_threshold(service, ts, rules.hosts);
        let hosts_words = || threshold_words(hosts_needed, rules.hosts, usual.usual_hosts(service), &within);
        if let Some(hosts) = self.hosts_by_service.get(&service).filter(|h| h.len() >= hosts_needed as usize)
        {
            let n = hosts.keys().filter(|&&h| unanswered(&self.answered, h, service)).count();
            if n >= hosts_needed as usize && service == ARP {
                // Over the newest `hosts` addresses asked for, not since the device's
                // first who-has for its gateway in the window.
                let mut asked = std::collections::HashSet::new();
                let first = self
                    .attempts
                    .iter()
                    .rev()
                    .filter(|a| (a.2, a.3) == ARP)
                    .find(|a| asked.insert(a.1) && asked.len() >= hosts_needed as usize)
                    .map_or(ts, |a| a.0);
                let why = format!(
                    "ARP sweep: asked for {n} local addresses in {} ({})",
                    seconds_words(ts - first),
                    hosts_words()
                );
                return self.found(ts, window_s, finding(RaisedBy::ArpSweep, why));
            }
            if n >= hosts_needed as usize {
                return self.found(
                    ts,
                    window_s,
                    finding(
                        RaisedBy::AddressScan,
                        format!(
                            "address scan: unanswered {} to {n} hosts within {within} ({})",
                            service_name(service),
                            hosts_words()
                        ),
                    ),
                );
            }
        }
        let ports_needed = usual.ports_threshold(ts, rules.ports);
        if let Some(ports) = self.ports_by_host.get(&peer).filter(|p| p.len() >= ports_needed as usize) {
            let n = ports.keys().filter(|&&s| s.0 != 0 && unanswered(&self.answered, peer, s)).count();
            if n >= ports_needed as usize {
                let ports_words = threshold_words(ports_needed, rules.ports, usual.ports, &within);
                return self.found(
                    ts,
                    window_s,
                    finding(
                        RaisedBy::PortScan,
                        format!("port scan: unanswered attempts on {n} ports of {peer} within {within} ({ports_words})"),
                    ),
                );
            }
        }
        let to_it = self.ports_by_host.get(&peer).and_then(|p| p.get(&service)).copied().unwrap_or(0);
        let warm = ts - first >= window_s;
        let silent = self.answering.get(&peer).is_none_or(|&t| t < since);
        if warm && !established && to_it >= rules.flood && silent && service != ARP {
            return self.found(
                ts,
                window_s,
                finding(
                    RaisedBy::Flood,
                    format!(
                        "flood: {to_it} packets to {peer} on {}, a host it had not talked to before, \
                         unanswered within {within} (threshold {})",
                        service_name(service),
                        rules.flood
                    ),
                ),
            );
        }
        None
    }

    /// An incident opened at device time `ts`: the peers first seen within the window
    /// before it may be its attack's (a flood's victim), not the device's history, so
    /// that a second wave to them an hour later is still a flood.
    pub fn incident_opened(&mut self, ts: f64, rules: &FanOutRules) {
        let since = ts - rules.window_ms as f64 / 1000.0;
        self.known_peers.retain(|_, seen| *seen < since);
    }

    /// An outbound attempt counts towards an incident the look raised.
    pub fn is_hot(&self, c: &Context, ts: f64) -> bool {
        ts < self.hot_until
            && c.direction == Some(Direction::Outbound)
            && (attempt(c).is_some() || is_probe(c))
    }

    fn found(&mut self, ts: f64, window_s: f64, f: Finding) -> Option<Finding> {
        self.hot_until = ts + window_s;
        Some(f)
    }

    fn add(&mut self, ts: f64, peer: IpAddr, service: Service) {
        if self.attempts.len() >= MAX_ATTEMPTS {
            self.drop_oldest();
        }
        self.attempts.push_back((ts, peer, service.0, service.1));
        let hosts = self.hosts_by_service.entry(service).or_default();
        *hosts.entry(peer).or_default() += 1;
        let hosts = hosts.len() as u32;
        let ports = self.ports_by_host.entry(peer).or_default();
        *ports.entry(service).or_default() += 1;
        let ports = ports.len() as u32;
        self.counted = Some(Note::Fanned { service, hosts, ports });
    }

    /// What this record counted: an attempt's place in the window, or a login
    /// connection (for the device's usual).
    pub fn take_counted(&mut self) -> Option<Note> {
        self.counted.take()
    }

    fn expire(&mut self, before: f64, window_s: f64) {
        while self.attempts.front().is_some_and(|a| a.0 < before) {
            self.drop_oldest();
        }
        if before - self.swept >= window_s {
            self.answered.retain(|_, t| *t >= before);
            self.answering.retain(|_, t| *t >= before);
            self.swept = before;
        }
        while self.probes.front().is_some_and(|&t| t < before) {
            self.probes.pop_front();
        }
    }

    fn drop_oldest(&mut self) {
        let Some((_, peer, port, proto)) = self.attempts.pop_front() else { return };
        let service = (port, proto);
        if let Some(hosts) = self.hosts_by_service.get_mut(&service) {
            decrement(hosts, &peer);
            if hosts.is_empty() {
                self.hosts_by_service.remove(&service);
            }
        }
        if let Some(ports) = self.ports_by_host.get_mut(&peer) {
            decrement(ports, &service);
            if ports.is_empty() {
                self.ports_by_host.remove(&peer);
            }
        }
    }

    /// Distinct hosts attempted within the window (for tests and metrics).
    pub fn hosts(&self) -> usize {
        self.ports_by_host.len()
    }
}

fn decrement<K: std::hash::Hash + Eq>(m: &mut HashMap<K, u32>, k: &K) {
    if let Some(n) = m.get_mut(k) {
        *n -= 1;
        if *n == 0 {
            m.remove(k);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RULES: FanOutRules = FanOutRules {
        window_ms: 300_000,
        hosts: 25,
        ports: 15,
        flood: 100,
        probes: 2,
        logins: 10,
        sources: 8,
    };
    /// A device with no usual yet: the site's thresholds.
    const NEW: FanOutUsual = FanOutUsual::new();

    fn src(offset: i64) -> Source {
        Source::new("in", 0, offset)
    }

    fn out(peer: &str, port: u16, proto: u8, flags: u8) -> Context {
        Context::outbound(peer, port, proto, flags, 60)
    }

    fn back(c: &Context, flags: u8) -> Context {
        Context {
            src_ip: c.dst_ip,
            dst_ip: c.src_ip,
            src_port: c.dst_port,
            dst_port: c.src_port,
            tcp_flags: flags,
            direction: Some(Direction::Inbound),
            ..c.clone()
        }
    }

    #[test]
    fn a_port_scan_of_one_host_is_found_at_its_fifteenth_refused_port() {
        let mut f = FanOut::default();
        let mut found = Vec::new();
        for (i, port) in (1..=28u16).enumerate() {
            let c = out("192.168.1.9", port, 6, 0x02);
            found.extend(f.observe(&c, 100.0 + i as f64 * 0.01, &src(i as i64), &RULES, &NEW, false));
            // The host refuses every port: a reset is no answer.
            assert!(f.observe(&back(&c, 0x14), 100.0, &src(0), &RULES, &NEW, false).is_none());
        }
        let [hit] = &found[..] else { panic!("{found:?}") };
        assert_eq!((hit.look, hit.by.offset), (RaisedBy::PortScan, 14));
        assert!(hit.why.contains("15 ports of 192.168.1.9 within 5 min"), "{}", hit.why);
        assert!(f.is_hot(&out("192.168.1.9", 99, 6, 0x02), 150.0));
    }

    #[test]
    fn answered_connections_and_a_few_hosts_are_no_scan() {
        let mut f = FanOut::default();
        for i in 0..40u16 {
            let c = out("52.1.2.3", 8000 + i, 6, 0x02);
            assert!(f.observe(&c, f64::from(i), &src(0), &RULES, &NEW, false).is_none());
            assert!(
                f.observe(&back(&c, 0x12), f64::from(i), &src(0), &RULES, &NEW, false).is_none(),
                "SYN-ACK"
            );
        }
        for i in 0..24 {
            let c = out(&format!("10.0.1.{i}"), 23, 6, 0x02);
            assert!(
                f.observe(&c, 50.0, &src(0), &RULES, &NEW, false).is_none(),
                "24 hosts: under the threshold"
            );
        }
    }

    #[test]
    fn an_address_scan_and_an_icmp_sweep_are_found_and_forgotten_after_the_window() {
        let mut f = FanOut::default();
        let hits: Vec<Finding> = (0..30)
            .filter_map(|i| {
                f.observe(&out(&format!("10.0.1.{i}"), 23, 6, 0x02), 10.0, &src(i), &RULES, &NEW, false)
            })
            .collect();
        assert_eq!(hits.len(), 1, "{hits:?}");
        assert!(hits[0].why.starts_with("address scan: unanswered 23/tcp to 25 hosts"), "{}", hits[0].why);
        let mut g = FanOut::default();
        for i in 0..20 {
            assert!(g
                .observe(&out(&format!("10.0.2.{i}"), 0, 1, 0), 0.0, &src(i), &RULES, &NEW, false)
                .is_none());
        }
        // The first 20 leave the window before the next 20 arrive.
        for i in 20..40 {
            assert!(g
                .observe(&out(&format!("10.0.2.{i}"), 0, 1, 0), 301.0, &src(i), &RULES, &NEW, false)
                .is_none());
        }
        assert_eq!(g.hosts(), 20);
    }

    #[test]
    fn a_flood_to_a_new_host_is_found_and_a_stream_to_an_old_peer_is_not() {
        let mut f = FanOut::default();
        // A one-way stream to a peer it has always had.
        for i in 0..2_000 {
            let t = f64::from(i) * 0.5;
            assert!(
                f.observe(&out("192.168.1.20", 5004, 17, 0), t, &src(0), &RULES, &NEW, false).is_none(),
                "at {t}"
            );
        }
        let hits: Vec<Finding> = (0..300)
            .filter_map(|i| f.observe(&out("198.51.100.7", 80, 17, 0), 1_000.0, &src(i), &RULES, &NEW, false))
            .collect();
        let [hit] = &hits[..] else { panic!("{hits:?}") };
        assert_eq!((hit.look, hit.by.offset), (RaisedBy::Flood, 99));
        assert!(hit.why.contains("100 packets to 198.51.100.7 on 80/udp"), "{}", hit.why);
        // Its incident opened: an hour later, a second wave to the same victim is a
        // flood again (its packets were the attack's, not the device's history).
        f.incident_opened(1_000.0, &RULES);
        let again = (0..300)
            .filter_map(|i| f.observe(&out("198.51.100.7", 80, 17, 0), 4_600.0, &src(i), &RULES, &NEW, false))
            .count();
        assert_eq!(again, 1);
        // Not before the device has a window of history.
        let mut cold = FanOut::default();
        assert!((0..300).all(|i| cold
            .observe(&out("198.51.100.7", 80, 17, 0), 1.0, &src(i), &RULES, &NEW, false)
            .is_none()));
    }

    /// A who-has for every address of the /24 at 20 a second: found at the 25th, in its
    /// own words; the few that answer still count; a gratuitous ARP and a device asking
    /// for its gateway and a neighbour all day are nothing.
    #[test]
    fn an_arp_sweep_of_the_lan_is_found_and_a_device_asking_for_its_gateway_is_not() {
        let mut f = FanOut::default();
        let mut hits = Vec::new();
        for h in 1..=254u8 {
            let ask = Context::arp_request(&format!("10.0.0.{h}"));
            let at = 100.0 + f64::from(h) * 0.05;
            hits.extend(f.observe(&ask, at, &src(i64::from(h)), &RULES, &NEW, false));
            if h % 20 == 0 {
                let reply = Context { arp: Some(crate::traffic::packet::ArpOp::Reply), ..back(&ask, 0) };
                assert!(f.observe(&reply, at, &src(0), &RULES, &NEW, false).is_none());
            }
        }
        let [hit] = &hits[..] else { panic!("{hits:?}") };
        assert_eq!(
            (hit.look, hit.by.offset),
            (RaisedBy::ArpSweep, 26),
            "10.0.0.5 is the device: its 25th is .26"
        );
        assert_eq!(hit.why, "ARP sweep: asked for 25 local addresses in 1 s (threshold 25 within 5 min)");
        assert!(f.is_hot(&Context::arp_request("10.0.0.200"), 120.0));
        let mut g = FanOut::default();
        for i in 0..5_000 {
            let t = f64::from(i) * 2.0;
            let who = if i % 7 == 0 { "10.0.0.9" } else { "10.0.0.1" };
            assert!(g.observe(&Context::arp_request(who), t, &src(0), &RULES, &NEW, false).is_none());
        }
        let gratuitous = Context::arp_request("10.0.0.5");
        assert!((0..100).all(|i| g
            .observe(&gratuitous, 20_000.0 + f64::from(i), &src(0), &RULES, &NEW, false)
            .is_none()));
    }

    #[test]
    fn fin_null_and_xmas_probes_are_a_stealth_scan_and_multicast_is_no_attempt() {
        let mut f = FanOut::default();
        assert!(f.observe(&out("192.168.1.2", 80, 6, 0x02), 0.0, &src(0), &RULES, &NEW, false).is_none());
        assert!(
            f.observe(&out("192.168.1.2", 3390, 6, 0x01), 8.0, &src(1), &RULES, &NEW, false).is_none(),
            "FIN: one"
        );
        let hit = f
            .observe(&out("192.168.1.2", 3391, 6, 0x00), 16.0, &src(2), &RULES, &NEW, false)
            .expect("NULL: two");
        assert_eq!(hit.look, RaisedBy::StealthScan);
        assert!(hit.why.contains("2 TCP packets with flags no connection uses"), "{}", hit.why);
        assert!(f.is_hot(&out("192.168.1.2", 3392, 6, 0x29), 20.0), "Xmas counts towards it");
        // mDNS to its group for ten minutes: nobody answers, and it is no flood.
        let mut g = FanOut::default();
        for i in 0..1_200 {
            let t = f64::from(i) * 0.5;
            assert!(g.observe(&out("224.0.0.251", 5353, 17, 0), t, &src(0), &RULES, &NEW, false).is_none());
        }
        assert_eq!(g.hosts(), 0);
        // Packets of a connection (ACK set) are no attempts and no probes.
        assert!((0..50).all(|i| g
            .observe(&out("52.1.2.3", 443, 6, 0x18), 700.0, &src(i), &RULES, &NEW, false)
            .is_none()));
    }

    /// A device whose usual was learned over its first day: `icmp` to `hosts` hosts in a
    /// window, and the login ports `logins` used.
    fn learned(hosts: u32, logins: &[u16]) -> (FanOutUsual, f64) {
        let mut u = FanOutUsual::new();
        u.observe(Some(Note::Fanned { service: (0, 1), hosts, ports: 1 }), 0.0, 300.0);
        for &port in logins {
            u.observe(Some(Note::Login { port }), 0.0, 300.0);
        }
        u.observe(None, 90_000.0, 300.0);
        (u, 90_000.0)
    }

    fn guesses(f: &mut FanOut, usual: &FanOutUsual, t0: f64, n: u16, every_s: f64) -> Vec<(u16, Finding)> {
        (0..n)
            .filter_map(|i| {
                let t = t0 + f64::from(i) * every_s;
                let mut syn = out("203.0.113.7", 22, 6, 0x02);
                syn.src_port = 40_000 + i;
                let hit = f.observe(&syn, t, &src(i64::from(i)), &RULES, usual, false);
                // The server's banner and refusals: bytes of the same connection.
                let reply = Context { bytes: 400, ..back(&syn, 0x18) };
                assert!(f.observe(&reply, t + 0.1, &src(0), &RULES, usual, false).is_none());
                hit.map(|h| (i + 1, h))
            })
            .collect()
    }

    #[test]
    fn login_guessing_is_found_at_half_the_count_on_a_service_the_device_never_used() {
        let mut f = FanOut::default();
        // The fifth connection's reply has not come yet: (5 × 60 + 4 × 400) / 5 bytes.
        let hits = guesses(&mut f, &NEW, 100.0, 27, 2.2);
        let [(at, hit)] = &hits[..] else { panic!("{hits:?}") };
        assert_eq!((*at, hit.look), (5, RaisedBy::LoginGuessing), "{}", hit.why);
        assert_eq!(
            hit.why,
            "login guessing: opened 5 connections to 203.0.113.7 on 22/tcp (ssh) in 9 s, 380 bytes each on \
             average (threshold 5 within 5 min, a login service it never used)"
        );
        let mut g = FanOut::default();
        assert!(guesses(&mut g, &NEW, 100.0, 4, 2.2).is_empty(), "4 connections: under it");
    }

    #[test]
    fn login_guessing_on_a_service_the_device_uses_needs_the_whole_count_within_the_window() {
        let (usual, t0) = learned(1, &[22]);
        let mut f = FanOut::default();
        let hits = guesses(&mut f, &usual, t0, 10, 1.0);
        let [(at, hit)] = &hits[..] else { panic!("{hits:?}") };
        assert_eq!(*at, 10);
        assert!(hit.why.contains("(threshold 10 within 5 min)"), "{}", hit.why);
        let mut g = FanOut::default();
        assert!(guesses(&mut g, &usual, t0, 9, 1.0).is_empty(), "9: under it");
        // One a minute: never 10 within 5 minutes.
        let mut h = FanOut::default();
        assert!(guesses(&mut h, &usual, t0, 60, 60.0).is_empty());
    }

    #[test]
    fn a_host_guessing_the_devices_own_telnet_is_found() {
        let mut f = FanOut::default();
        let hits: Vec<Finding> = (0..8u16)
            .filter_map(|i| {
                let mut syn = back(&out("198.51.100.4", 23, 6, 0), 0x02);
                (syn.src_port, syn.dst_port) = (50_000 + i, 23);
                f.observe(&syn, 10.0 + f64::from(i), &src(i64::from(i)), &RULES, &NEW, false)
            })
            .collect();
        let [hit] = &hits[..] else { panic!("{hits:?}") };
        assert!(
            hit.why.starts_with(
                "login guessing: 198.51.100.4 opened 5 connections to the device's 23/tcp (telnet)"
            ),
            "{}",
            hit.why
        );
    }

    #[test]
    fn a_learned_device_sweeping_ten_hosts_is_a_scan_and_a_new_one_is_judged_by_the_site() {
        let (usual, t0) = learned(2, &[]);
        let sweep = |f: &mut FanOut, usual: &FanOutUsual, n: u8, t: f64| -> Vec<Finding> {
            (0..n)
                .filter_map(|h| {
                    f.observe(
                        &out(&format!("10.0.0.{}", h + 20), 0, 1, 0),
                        t,
                        &src(h.into()),
                        &RULES,
                        usual,
                        false,
                    )
                })
                .collect()
        };
        assert!(sweep(&mut FanOut::default(), &usual, 9, t0).is_empty(), "9 hosts: under its 10");
        let hits = sweep(&mut FanOut::default(), &usual, 18, t0);
        let [hit] = &hits[..] else { panic!("{hits:?}") };
        assert_eq!(hit.look, RaisedBy::AddressScan);
        assert_eq!(
            hit.why,
            "address scan: unanswered ICMP to 10 hosts within 5 min (threshold 10 within 5 min, from its usual \
             of 2 (the site's is 25))"
        );
        assert!(sweep(&mut FanOut::default(), &NEW, 24, t0).is_empty(), "a new device: the site's 25");
        // A device that usually pings 6 hosts: 18 is its threshold.
        let (busy, t1) = learned(6, &[]);
        assert!(sweep(&mut FanOut::default(), &busy, 17, t1).is_empty());
        assert_eq!(sweep(&mut FanOut::default(), &busy, 18, t1).len(), 1);
    }

    #[test]
    fn a_flood_from_forged_sources_is_found_at_the_eighth_address() {
        let mut f = FanOut::default();
        // Its own address all day, to many peers: one source.
        for i in 0..500u16 {
            let c = out(&format!("52.1.{}.{}", i / 200, i % 200 + 1), 443, 6, 0x18);
            assert!(f.observe(&c, f64::from(i), &src(0), &RULES, &NEW, false).is_none());
        }
        let hits: Vec<(i64, Finding)> = (0..50i64)
            .filter_map(|i| {
                let mut c = out("198.51.100.7", 80, 17, 0);
                c.src_ip = Some(format!("203.0.{}.9", i).parse().unwrap());
                f.observe(&c, 600.0, &src(i), &RULES, &NEW, false).map(|h| (i, h))
            })
            .collect();
        let [(at, hit)] = &hits[..] else { panic!("{hits:?}") };
        assert_eq!((*at, hit.look), (6, RaisedBy::SpoofedSources), "its own and 7 forged: 8");
        assert_eq!(
            hit.why,
            "spoofed sources: sent from 8 source addresses within 5 min (threshold 8), the last from 203.0.6.9 \
             to 198.51.100.7 on 80/udp"
        );
    }
}
