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
use super::spoofing::Sources;
use crate::monitor::record::Source;
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
    /// Data to a stranger (`remote_peers.rs`): bytes sent to, or separate exchanges with,
    /// a public peer whose name and address the device never used; also the least a
    /// window to a known peer must carry to be far more than usual.
    pub stranger_bytes: u64,
    pub stranger_exchanges: u32,
    /// Far more than usual: this many times the most the device sent a known peer in one
    /// window.
    pub usual_factor: u32,
}

impl FanOutRules {
    /// The daemon's defaults (`config/default.toml`), for tests.
    #[cfg(test)]
    pub const DEFAULTS: Self = Self {
        window_ms: 300_000,
        hosts: 25,
        ports: 15,
        flood: 100,
        probes: 2,
        logins: 10,
        sources: 8,
        stranger_bytes: 1 << 20,
        stranger_exchanges: 10,
        usual_factor: 10,
    };

    pub const OFF: Self = Self {
        window_ms: 0,
        hosts: 0,
        ports: 0,
        flood: 0,
        probes: 0,
        logins: 0,
        sources: 0,
        stranger_bytes: 0,
        stranger_exchanges: 0,
        usual_factor: 0,
    };
}

/// Where the device stands as a packet comes: an incident is open on it (its peers are
/// not history), and the packet's peer is one of its remote peers, known by name or
/// address (`remote_peers.rs`): a cloud it reached before that does not answer now is
/// no flood's victim, whatever its address today.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Standing {
    pub in_incident: bool,
    pub known_peer: bool,
}

/// What raised an incident: the model's decisions, or one of the looks. Its names
/// (serde's and strum's alike, snake case) are what the console's filter offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[derive(strum::IntoStaticStr, strum::VariantNames, strum::EnumString)]
#[strum(serialize_all = "snake_case")]
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
    /// Data sent to a public peer the device never used (`remote_peers.rs`).
    DataToStranger,
    /// Far more sent to a known peer than the device's most in one window.
    FarAboveUsual,
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
    /// `standing`: whether an incident is open, and whether the peer is one the device
    /// knows.
    pub fn observe(
        &mut self,
        c: &Context,
        ts: f64,
        source: &Source,
        rules: &FanOutRules,
        usual: &FanOutUsual,
        standing: Standing,
    ) -> Option<Finding> {
        let Standing { in_incident, known_peer } = standing;
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
        if warm && !established && !known_peer && to_it >= rules.flood && silent && service != ARP {
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
#[path = "fanout_tests.rs"]
mod tests;
