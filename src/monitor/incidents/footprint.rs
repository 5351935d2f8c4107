//! What the daemon may never learn by itself: the footprint an attack leaves in an
//! incident's packets. An incident that closes quietly, unanswered, is remembered as the
//! device's own behaviour (`incidents.learn_quiet_closes`) only when it left none of
//! these; a return of a learned behaviour that leaves one is news. Only an analyst's
//! verdict makes such traffic quiet (as Defender for IoT holds back only its
//! baseline-deviation alerts while learning, and Suricata's suppressions are written by
//! a person).
//!
//! - a **scan or sweep**: attempts (TCP SYN, UDP, ICMP, ARP who-has) to [`SCAN_HOSTS`]
//!   hosts, or to [`SCAN_SERVICES`] services of one host;
//! - **repeated attempts** on a login service: [`REPEATED_ATTEMPTS`] TCP connections to
//!   (or from) one peer's ssh, telnet, rdp, vnc, ftp or smb port, as a password guesser
//!   opens them (a cloud's 443/tcp takes many connections a day);
//! - a **new local peer**: a host on the device's LAN that its normal traffic never had;
//! - a **new service**: a TCP connection to a port of the device it never served;
//! - a **stranger**: a public host whose name and address the device never used, after
//!   its learning period (`remote_peers.rs`; its looks raise data to it, and far more
//!   than usual to a known peer).
//!
//! Volume is no footprint: an incident's severity says how big it is, for the analyst to
//! sort by, and never decides what is learned (a camera's daily uploads to its own cloud
//! are its routine; far more than usual to that cloud is the look's to raise).
//!
//! The thresholds are set, not tuned: far below Zeek's scan policy (25 hosts, 15 ports),
//! because the cost of a false footprint is one incident more, and the cost of a missed
//! one a silent second wave. Pure: times come in.

use std::collections::BTreeMap;
use std::net::IpAddr;

use serde::{Deserialize, Serialize};

use super::incident_traffic::Traffic;
use super::logins::login_name;
use super::remote_peers::RemotePeers;
use crate::traffic::context::{is_group, Context, Direction};

/// Hosts attempted within one incident that make it a scan (a sweep).
pub const SCAN_HOSTS: usize = 8;
/// Services of one host attempted within one incident that make it a port scan.
pub const SCAN_SERVICES: u64 = 8;
/// TCP connection attempts to one peer's service within one incident: a guesser's.
pub const REPEATED_ATTEMPTS: u64 = 10;
/// Local peers, and served ports, a device's history keeps at most (a LAN device has a
/// handful; beyond, a peer is new: the safe side).
const MAX_LOCAL_PEERS: usize = 64;
const MAX_SERVED: usize = 32;

/// Why an incident may not be learned without a person.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Footprint {
    /// Attempts to many hosts, or to many services of one host.
    Scan { why: String },
    /// Many TCP connection attempts to one service.
    RepeatedAttempts { peer: IpAddr, service: String, attempts: u64 },
    /// A host of the device's LAN its normal traffic never had.
    NewLocalPeer { peer: IpAddr },
    /// A connection to a port of the device it never served.
    NewService { service: String, from: IpAddr },
    /// Traffic with a public host whose name and address the device never used.
    Stranger { peer: String },
    /// The incident's severity reached high or critical: a footprint in snapshots taken
    /// before volume stopped being one (read, never made).
    Severe { severity: super::incident_traffic::Severity },
}

impl Footprint {
    /// It says something of the device itself (a scan from it, attempts on it, a new
    /// local peer or served port), not only of an incident's size: what a fleet
    /// incident's member is raised on its own for (`tracker.rs`).
    pub fn on_the_device(&self) -> bool {
        !matches!(self, Footprint::Severe { .. } | Footprint::Stranger { .. })
    }

    /// How much it says of an attack: an incident keeps the weightiest it showed.
    pub fn weight(&self) -> u8 {
        match self {
            Footprint::Stranger { .. } => 0,
            Footprint::NewLocalPeer { .. } => 1,
            Footprint::NewService { .. } => 2,
            Footprint::RepeatedAttempts { .. } => 3,
            Footprint::Scan { .. } => 4,
            Footprint::Severe { .. } => 5,
        }
    }

    /// In words, after "it showed".
    pub fn words(&self) -> String {
        match self {
            Footprint::Scan { why } => format!("a scan: {why}"),
            Footprint::RepeatedAttempts { peer, service, attempts } => {
                format!("{attempts} connection attempts to {peer} on {service}, as a password guesser makes")
            }
            Footprint::NewLocalPeer { peer } => {
                format!("traffic with {peer}, a local host its normal traffic never had")
            }
            Footprint::NewService { service, from } => {
                format!("a connection from {from} to {service}, a service the device never served")
            }
            Footprint::Stranger { peer } => {
                format!("traffic with {peer}, a public host whose name and address the device never used")
            }
            Footprint::Severe { severity } => format!("{} severity", severity.as_str()),
        }
    }
}

/// A host on the device's own network: private, link-local or unique-local (IPv6), and
/// unicast.
pub fn is_local(ip: IpAddr) -> bool {
    if is_group(ip) {
        return false;
    }
    match ip {
        IpAddr::V4(v4) => v4.is_private() || v4.is_link_local(),
        IpAddr::V6(v6) => {
            let first = v6.segments()[0];
            first & 0xffc0 == 0xfe80 || first & 0xfe00 == 0xfc00
        }
    }
}

/// A scan, or repeated attempts, once `c` is counted in the incident's `traffic`.
fn of_attempts(c: &Context, traffic: &Traffic) -> Option<Footprint> {
    let (peer, service) = c.attempt()?;
    let outbound = c.direction == Some(Direction::Outbound);
    let hosts = traffic.attempted_hosts.distinct();
    if outbound && hosts >= SCAN_HOSTS {
        return Some(Footprint::Scan {
            why: format!("attempts to {hosts} hosts, the last {service} to {peer}"),
        });
    }
    let services = traffic.attempted_services.by_key.get(&peer.to_string()).copied().unwrap_or(0);
    if outbound && services >= SCAN_SERVICES {
        return Some(Footprint::Scan { why: format!("attempts on {services} services of {peer}") });
    }
    let attempts = traffic.attempts.by_key.get(&Traffic::attempt_key(peer, &service)).copied().unwrap_or(0);
    // A SYN's destination port is the service either way (the device's own, inbound).
    let login = login_name(c.dst_port).is_some();
    (c.is_syn() && login && attempts >= REPEATED_ATTEMPTS).then_some(Footprint::RepeatedAttempts {
        peer,
        service,
        attempts,
    })
}

/// The weightiest footprint an incident shows once `c` (one of its anomalous records'
/// packets) is counted in its `traffic`, given what the device's normal traffic had
/// (`history`).
pub fn of_record(c: Option<&Context>, traffic: &Traffic, history: &History) -> Option<Footprint> {
    let c = c?;
    of_attempts(c, traffic).or_else(|| of_packet(c, history))
}

/// The footprint one packet shows by itself, whatever the incident counted before it:
/// a connection to a port the device never served, a local peer or a stranger (a scan
/// and repeated attempts take more than one packet).
pub fn of_packet(c: &Context, history: &History) -> Option<Footprint> {
    let (_, Some(peer)) = c.device_and_peer()? else { return None };
    if c.direction == Some(Direction::Inbound) && c.is_syn() && !history.served.contains_key(&c.dst_port) {
        return Some(Footprint::NewService { service: format!("{}/tcp", c.dst_port), from: peer });
    }
    if is_local(peer) && !history.local_peers.contains_key(&peer) {
        return Some(Footprint::NewLocalPeer { peer });
    }
    history.remote.stranger_in(c).map(|peer| Footprint::Stranger { peer })
}

/// What a device's normal traffic had: its local peers, and the TCP ports it accepted
/// connections on (its SYN-ACKs), each with the device time first seen. Learned only
/// from records decided normal outside any incident. Part of the device's snapshot.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct History {
    #[serde(default)]
    pub local_peers: BTreeMap<IpAddr, f64>,
    #[serde(default)]
    pub served: BTreeMap<u16, f64>,
    /// What it usually attempts on the wire (the fan-out and login looks' thresholds).
    #[serde(default)]
    pub fan_out: super::fanout_usual::FanOutUsual,
    /// Its public peers, by name and address, and what it sends each.
    #[serde(default)]
    pub remote: RemotePeers,
}

impl History {
    /// One normal record's packet at device time `ts`.
    pub fn observe(&mut self, c: &Context, ts: f64) {
        let Some((_, Some(peer))) = c.device_and_peer() else { return };
        if is_local(peer)
            && (self.local_peers.len() < MAX_LOCAL_PEERS || self.local_peers.contains_key(&peer))
        {
            self.local_peers.entry(peer).or_insert(ts);
        }
        let accepted = c.proto == 6 && c.direction == Some(Direction::Outbound) && c.tcp_flags & 0x12 == 0x12;
        if accepted && (self.served.len() < MAX_SERVED || self.served.contains_key(&c.src_port)) {
            self.served.entry(c.src_port).or_insert(ts);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn count(traffic: &mut Traffic, c: &Context) -> Option<Footprint> {
        traffic.add(c, 0.0);
        of_record(Some(c), traffic, &History::default())
    }

    #[test]
    fn a_sweep_of_eight_hosts_and_eight_ports_of_one_are_scans() {
        let mut t = Traffic::default();
        let found: Vec<Option<Footprint>> = (1..=8)
            .map(|h| count(&mut t, &Context::outbound(&format!("52.0.0.{h}"), 23, 6, 0x02, 60)))
            .collect();
        assert!(found[..7].iter().all(Option::is_none), "{found:?}");
        assert!(matches!(&found[7], Some(Footprint::Scan { why }) if why.contains("8 hosts")), "{found:?}");
        let mut t = Traffic::default();
        let found: Vec<Option<Footprint>> =
            (1..=8).map(|p| count(&mut t, &Context::outbound("52.0.0.1", 8000 + p, 17, 0, 60))).collect();
        assert!(matches!(&found[7], Some(Footprint::Scan { why }) if why.contains("8 services of 52.0.0.1")));
        // ARP who-has for eight addresses: a sweep of the LAN.
        let mut t = Traffic::default();
        let history = History {
            local_peers: (101..=109).map(|h| (format!("10.0.0.{h}").parse().unwrap(), 0.0)).collect(),
            ..History::default()
        };
        let found: Vec<Option<Footprint>> = (101..=108)
            .map(|h| {
                let c = Context::arp_request(&format!("10.0.0.{h}"));
                t.add(&c, 0.0);
                of_record(Some(&c), &t, &history)
            })
            .collect();
        assert!(matches!(&found[7], Some(Footprint::Scan { why }) if why.contains("arp")), "{found:?}");
    }

    #[test]
    fn ten_connections_to_a_login_service_are_a_guesser_s_and_an_upload_is_nothing() {
        let mut t = Traffic::default();
        let ssh = Context::outbound("52.0.0.9", 22, 6, 0x02, 74);
        let found: Vec<Option<Footprint>> = (0..10).map(|_| count(&mut t, &ssh)).collect();
        assert!(found[..9].iter().all(Option::is_none));
        assert_eq!(
            found[9],
            Some(Footprint::RepeatedAttempts {
                peer: "52.0.0.9".parse().unwrap(),
                service: "22/tcp".into(),
                attempts: 10
            })
        );
        let mut t = Traffic::default();
        let upload = Context::outbound("52.0.0.9", 443, 6, 0x18, 1_400);
        assert!((0..1_000).all(|_| count(&mut t, &upload).is_none()), "data of one connection");
        let mut t = Traffic::default();
        let dns = Context::outbound("10.0.0.1", 53, 17, 0, 80);
        let known =
            History { local_peers: [("10.0.0.1".parse().unwrap(), 0.0)].into(), ..History::default() };
        t.add(&dns, 0.0);
        assert_eq!(of_record(Some(&dns), &t, &known), None, "its resolver, known");
        // Ten connections to a cloud's 443/tcp are its routine, not a guesser's.
        let mut t = Traffic::default();
        let tls = Context::outbound("52.0.0.9", 443, 6, 0x02, 74);
        assert!((0..50).all(|_| count(&mut t, &tls).is_none()));
    }

    #[test]
    fn a_local_peer_or_a_service_the_normal_traffic_never_had_is_new() {
        let mut history = History::default();
        let gateway = Context::outbound("192.168.1.1", 53, 17, 0, 80);
        let t = Traffic::default();
        assert_eq!(
            of_record(Some(&gateway), &t, &history),
            Some(Footprint::NewLocalPeer { peer: "192.168.1.1".parse().unwrap() })
        );
        history.observe(&gateway, 10.0);
        assert_eq!(of_record(Some(&gateway), &t, &history), None);
        assert_eq!(
            of_record(Some(&Context::outbound("52.1.2.3", 443, 6, 0x18, 80)), &t, &history),
            None,
            "the cloud is no local peer"
        );
        // Someone connects to the device's 22/tcp; it had served 80/tcp only.
        let into = |port: u16, flags: u8| Context {
            src_ip: Some("192.168.1.1".parse().unwrap()),
            dst_ip: Some("192.168.1.7".parse().unwrap()),
            src_port: 50_000,
            dst_port: port,
            proto: 6,
            tcp_flags: flags,
            direction: Some(Direction::Inbound),
            ..Context::default()
        };
        let served = Context {
            src_ip: Some("192.168.1.7".parse().unwrap()),
            dst_ip: Some("192.168.1.1".parse().unwrap()),
            src_port: 80,
            dst_port: 50_000,
            proto: 6,
            tcp_flags: 0x12,
            direction: Some(Direction::Outbound),
            ..Context::default()
        };
        history.observe(&served, 20.0);
        assert_eq!(of_record(Some(&into(80, 0x02)), &t, &history), None);
        assert_eq!(
            of_record(Some(&into(22, 0x02)), &t, &history),
            Some(Footprint::NewService { service: "22/tcp".into(), from: "192.168.1.1".parse().unwrap() })
        );
        assert!(is_local("fe80::1".parse().unwrap()) && !is_local("224.0.0.251".parse().unwrap()));
    }
}
