//! What an incident's anomalous records say about the traffic behind them, from the
//! records' packet context ([`Context`]): the device's address, its peers and ports
//! with counts, protocols, packets and bytes, first and last time; the sentence an
//! analyst reads first; and the incident's severity. Bounded: at most
//! [`MAX_DISTINCT`] peers and ports are counted one by one.

use std::collections::BTreeMap;
use std::net::IpAddr;

use serde::{Deserialize, Serialize};

use crate::traffic::context::{transport_name, Context, Direction, Mac};

/// Distinct peers (and ports) counted one by one per incident; beyond, the rest are
/// counted together and the distinct count is a lower bound.
pub const MAX_DISTINCT: usize = 1024;

/// Counts by key, at most [`MAX_DISTINCT`] keys.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Counts {
    pub by_key: BTreeMap<String, u64>,
    /// Records whose key found no room.
    #[serde(default)]
    pub overflow: u64,
}

impl Counts {
    pub(crate) fn add(&mut self, key: String) {
        if let Some(n) = self.by_key.get_mut(&key) {
            *n += 1;
        } else if self.by_key.len() < MAX_DISTINCT {
            self.by_key.insert(key, 1);
        } else {
            self.overflow += 1;
        }
    }

    /// The `n` most frequent, most frequent first (ties by key).
    pub fn top(&self, n: usize) -> Vec<Counted> {
        let mut all: Vec<(&String, &u64)> = self.by_key.iter().collect();
        all.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        all.into_iter().take(n).map(|(k, c)| Counted { value: k.clone(), records: *c, name: None }).collect()
    }

    pub fn distinct(&self) -> usize {
        self.by_key.len()
    }

    fn share_of_top(&self) -> f64 {
        let total: u64 = self.by_key.values().sum::<u64>() + self.overflow;
        self.by_key.values().max().map_or(0.0, |&m| m as f64 / total.max(1) as f64)
    }
}

/// An incident's traffic so far (part of the incident and of its snapshot).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Traffic {
    /// Anomalous records that carried a context (one packet each), and their bytes.
    pub packets: u64,
    pub bytes: u64,
    /// Of them: sent by the device, and TCP connection attempts (SYN without ACK).
    pub outbound: u64,
    pub syn: u64,
    /// The device's addresses in the newest of them.
    pub device_ip: Option<IpAddr>,
    #[serde(default)]
    pub device_mac: Option<Mac>,
    pub peers: Counts,
    /// `port/transport` of the service side (the destination port).
    pub ports: Counts,
    pub transports: Counts,
    /// `port/transport` of the service side (the lower port: a reply's destination is
    /// an ephemeral port), and packets sent to the device: what a dismissed behaviour
    /// is remembered by (`behaviours.rs`).
    #[serde(default)]
    pub services: Counts,
    #[serde(default)]
    pub inbound: u64,
    pub first_ts: f64,
    pub last_ts: f64,
    /// Connection attempts among them ([`Context::attempt`]): the hosts the device
    /// attempted, how many services of each peer were attempted, and the attempts per
    /// peer and service ([`Traffic::attempt_key`]): what a scan or a guesser leaves
    /// (`footprint.rs`).
    #[serde(default)]
    pub attempted_hosts: Counts,
    #[serde(default)]
    pub attempted_services: Counts,
    #[serde(default)]
    pub attempts: Counts,
    /// ARP frames among them.
    #[serde(default)]
    pub arp: u64,
    /// The names the device looked its peers up by (`Context::peer_name`), counted, and
    /// each counted peer's name.
    #[serde(default)]
    pub names: Counts,
    #[serde(default)]
    pub peer_names: BTreeMap<String, String>,
}

impl Traffic {
    /// Count one anomalous record's packet.
    pub fn add(&mut self, c: &Context, ts: f64) {
        if self.packets == 0 {
            self.first_ts = ts;
        }
        self.packets += 1;
        self.bytes += u64::from(c.bytes);
        self.last_ts = self.last_ts.max(ts);
        self.syn += u64::from(c.is_syn());
        self.outbound += u64::from(c.direction == Some(Direction::Outbound));
        self.inbound += u64::from(c.direction == Some(Direction::Inbound));
        if let Some(service) = c.service() {
            self.services.add(service);
        }
        let (device, peer) = c.device_and_peer().unwrap_or((None, None));
        if device.is_some() {
            self.device_ip = device;
        }
        if c.device_mac.is_some() {
            self.device_mac = c.device_mac;
        }
        if let Some(peer) = peer {
            let peer = peer.to_string();
            if let Some(name) = &c.peer_name {
                self.names.add(name.to_string());
                if self.peer_names.len() < MAX_DISTINCT || self.peer_names.contains_key(&peer) {
                    self.peer_names.insert(peer.clone(), name.to_string());
                }
            }
            self.peers.add(peer);
        }
        if let Some((peer, service)) = c.attempt() {
            let key = Self::attempt_key(peer, &service);
            if !self.attempts.by_key.contains_key(&key) {
                self.attempted_services.add(peer.to_string());
            }
            self.attempts.add(key);
            if c.direction == Some(Direction::Outbound) {
                self.attempted_hosts.add(peer.to_string());
            }
        }
        self.arp += u64::from(c.arp.is_some());
        let transport = transport_name(c.proto);
        if c.dst_port != 0 {
            self.ports.add(format!("{}/{transport}", c.dst_port));
        }
        self.transports.add(transport);
    }

    /// Connection attempts only, none answered, to one peer the device looked up by
    /// name on one service: a device that cannot reach its cloud (a lock whose MQTT
    /// broker is gone reconnects for hours).
    pub fn cannot_reach_its_cloud(&self) -> bool {
        self.packets > 0
            && self.syn == self.packets
            && self.inbound == 0
            && self.services.distinct() == 1
            && self.one_name().is_some()
    }

    /// The peers it reached, a name the device looked up counting once for all its
    /// addresses (a cloud's rotation is one peer), the rest by address.
    pub fn reached(&self) -> usize {
        let unnamed = self.peers.by_key.keys().filter(|p| !self.peer_names.contains_key(*p)).count();
        self.names.distinct() + unnamed
    }

    /// The key of [`Traffic::attempts`]: a peer and the service attempted.
    pub fn attempt_key(peer: IpAddr, service: &str) -> String {
        format!("{peer} {service}")
    }

    /// What an incident event carries, or `None` when no record had a context.
    pub fn report(&self) -> Option<TrafficReport> {
        (self.packets > 0).then(|| TrafficReport {
            device_ip: self.device_ip,
            device_mac: self.device_mac,
            packets: self.packets,
            bytes: self.bytes,
            outbound: self.outbound,
            distinct_peers: self.peers.distinct(),
            distinct_ports: self.ports.distinct(),
            counts_capped: self.peers.overflow > 0 || self.ports.overflow > 0,
            top_peers: self.top_peers(5),
            top_names: self.names.top(5),
            top_ports: self.ports.top(5),
            transports: self.transports.top(5),
            first_ts: self.first_ts,
            last_ts: self.last_ts,
            summary: self.sentence(),
        })
    }

    /// The `n` peers of most records, each with its name when the device looked it up.
    fn top_peers(&self, n: usize) -> Vec<Counted> {
        let mut top = self.peers.top(n);
        for p in &mut top {
            p.name = self.peer_names.get(&p.value).cloned();
        }
        top
    }

    /// The one name every record with a peer had, if there is one.
    fn one_name(&self) -> Option<String> {
        let with_peer: u64 = self.peers.by_key.values().sum::<u64>() + self.peers.overflow;
        let named: u64 = self.names.by_key.values().sum::<u64>() + self.names.overflow;
        (self.names.distinct() == 1 && named == with_peer).then(|| self.names.top(1).remove(0).value)
    }

    /// One sentence, e.g. "sent 254 TCP SYN packets (14 KiB) to 254 hosts on 23/tcp in 25 s",
    /// or "sent 80 TCP packets (115 KiB) to cloud.example.com (4 addresses) on 443/tcp in 3 s".
    pub fn sentence(&self) -> String {
        let outbound = self.outbound * 2 >= self.packets;
        let transport = self.transports.top(1).first().map_or("other".to_string(), |t| t.value.clone());
        let what = if self.syn * 2 >= self.packets {
            "TCP SYN".to_string()
        } else if self.arp * 2 >= self.packets {
            "ARP".to_string()
        } else if transport == "other" {
            "non-IP".to_string()
        } else {
            transport.to_uppercase()
        };
        let hosts = self.peers.distinct();
        let more = if self.peers.overflow > 0 { "over " } else { "" };
        let to = if outbound { "to" } else { "from" };
        let address = || self.peers.top(1).first().map_or(String::new(), |p| p.value.clone());
        let peers = match (hosts, self.one_name()) {
            (0, _) => String::new(),
            (1, Some(name)) => format!(" {to} {name} ({})", address()),
            (n, Some(name)) => format!(" {to} {name} ({more}{n} addresses)"),
            (1, None) => format!(" {to} {}", address()),
            (n, None) => format!(" {to} {more}{n} hosts"),
        };
        // The service side (443/tcp of a cloud's replies, not the device's ephemeral port).
        let ports = match self.services.distinct() {
            0 => String::new(),
            _ if self.services.share_of_top() >= 0.5 => {
                format!(" on {}", self.services.top(1).first().map_or(String::new(), |p| p.value.clone()))
            }
            n => format!(" on {more}{n} ports"),
        };
        let unanswered = if self.cannot_reach_its_cloud() { ", unanswered," } else { "" };
        format!(
            "{} {} {what} packet{} ({}){peers}{ports}{unanswered} in {}",
            if outbound { "sent" } else { "received" },
            thousands(self.packets),
            if self.packets == 1 { "" } else { "s" },
            bytes(self.bytes),
            duration(self.last_ts - self.first_ts),
        )
    }
}

/// A value and how many anomalous records had it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Counted {
    pub value: String,
    pub records: u64,
    /// A peer's name, when the device looked it up (`top_peers` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// An incident's traffic as its events carry it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrafficReport {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_ip: Option<IpAddr>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_mac: Option<Mac>,
    /// Anomalous records with a packet context, their bytes, and how many the device sent.
    pub packets: u64,
    pub bytes: u64,
    pub outbound: u64,
    pub distinct_peers: usize,
    pub distinct_ports: usize,
    /// More than [`MAX_DISTINCT`] peers or ports: the distinct counts are lower bounds.
    pub counts_capped: bool,
    pub top_peers: Vec<Counted>,
    /// The names the device looked its peers up by, most records first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub top_names: Vec<Counted>,
    pub top_ports: Vec<Counted>,
    pub transports: Vec<Counted>,
    /// Record times of the first and last of them.
    pub first_ts: f64,
    pub last_ts: f64,
    pub summary: String,
}

/// How bad an incident looks, by a fixed rule on what it saw (docs/analysts.md,
/// "Incidents"): fan-out (what the device reached: peers, by name where it looked them
/// up, or services, the server's side of each connection, so a cloud's replies to the
/// device's ephemeral ports add nothing), the share of its records that were anomalous,
/// how many and for how long. What an analyst reads and a SIEM sorts by; it decides
/// nothing that is learned (`footprint.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[derive(strum::IntoStaticStr, strum::VariantNames, strum::EnumString)]
#[strum(serialize_all = "lowercase")]
pub enum Severity {
    Low,
    Medium,
    High,
    Critical,
}

impl Severity {
    pub fn of(anomalous: u64, records: u64, seconds: f64, traffic: &Traffic) -> Self {
        if traffic.cannot_reach_its_cloud() {
            // Its own cloud not answering is the device's trouble, not an attack.
            return Severity::Low;
        }
        let share = anomalous as f64 / records.max(1) as f64;
        let fan_out = traffic.reached().max(traffic.services.distinct());
        if fan_out >= 100 && share >= 0.5 {
            Severity::Critical
        } else if fan_out >= 20 || (share >= 0.5 && anomalous >= 100) {
            Severity::High
        } else if share >= 0.2 || seconds >= 60.0 {
            Severity::Medium
        } else {
            Severity::Low
        }
    }

    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn bytes(n: u64) -> String {
    match n {
        n if n >= 10 << 20 => format!("{} MiB", n >> 20),
        n if n >= 10 << 10 => format!("{} KiB", n >> 10),
        n => format!("{} bytes", thousands(n)),
    }
}

fn duration(s: f64) -> String {
    match s.max(0.0) {
        s if s < 1.0 => "under a second".into(),
        s if s < 120.0 => format!("{s:.0} s"),
        s if s < 7200.0 => format!("{:.0} min", s / 60.0),
        s => format!("{:.1} h", s / 3600.0),
    }
}

/// A TCP SYN from 192.168.1.7 to 10.0.0.`host` on 23/tcp, and `at`, for tests.
#[cfg(test)]
pub(crate) fn syn_to(host: u8, at: f64) -> (Context, f64) {
    let c = Context {
        src_ip: Some("192.168.1.7".parse().expect("an address")),
        dst_ip: Some(IpAddr::from([10, 0, 0, host])),
        src_port: 40000,
        dst_port: 23,
        proto: 6,
        tcp_flags: 0x02,
        bytes: 60,
        direction: Some(Direction::Outbound),
        device_mac: Some(Mac(0x0011_2233_4455)),
        arp: None,
        peer_name: None,
    };
    (c, at)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_telnet_scan_reads_as_one() {
        let mut t = Traffic::default();
        for h in 1..=254u8 {
            let (c, at) = syn_to(h, 1.5e9 + f64::from(h) * 0.1);
            t.add(&c, at);
        }
        assert_eq!(t.sentence(), "sent 254 TCP SYN packets (14 KiB) to 254 hosts on 23/tcp in 25 s");
        let r = t.report().unwrap();
        assert_eq!((r.distinct_peers, r.distinct_ports, r.counts_capped), (254, 1, false));
        assert_eq!(r.device_ip, Some("192.168.1.7".parse().unwrap()));
        assert_eq!(r.top_ports[0], Counted { value: "23/tcp".into(), records: 254, name: None });
        assert_eq!(Severity::of(254, 300, 25.0, &t), Severity::Critical);
        assert_eq!(Severity::of(254, 2000, 25.0, &t), Severity::High, "fan-out alone");
    }

    #[test]
    fn an_inbound_flood_from_one_host_and_the_bounds() {
        let mut t = Traffic::default();
        for i in 0..50u16 {
            let c = Context {
                src_ip: Some("203.0.113.9".parse().unwrap()),
                dst_ip: Some("192.168.1.7".parse().unwrap()),
                src_port: 1000 + i,
                dst_port: 80,
                proto: 17,
                bytes: 1500,
                direction: Some(Direction::Inbound),
                ..Context::default()
            };
            t.add(&c, f64::from(i));
        }
        assert_eq!(t.sentence(), "received 50 UDP packets (73 KiB) from 203.0.113.9 on 80/udp in 49 s");
        // A cloud's reply names its service, not the device's ephemeral port.
        let mut reply = Traffic::default();
        let from_cloud = Context {
            src_ip: Some("52.70.158.224".parse().unwrap()),
            dst_ip: Some("192.168.1.7".parse().unwrap()),
            src_port: 443,
            dst_port: 62_892,
            proto: 6,
            tcp_flags: 0x10,
            bytes: 60,
            direction: Some(Direction::Inbound),
            ..Context::default()
        };
        reply.add(&from_cloud, 0.0);
        assert_eq!(
            reply.sentence(),
            "received 1 TCP packet (60 bytes) from 52.70.158.224 on 443/tcp in under a second"
        );
        // Looked up by name, a cloud's addresses are one peer to the analyst.
        let mut named = Traffic::default();
        for (i, peer) in ["52.70.158.224", "3.220.1.2", "52.70.158.224"].iter().enumerate() {
            let c = Context {
                src_ip: from_cloud.src_ip.map(|_| peer.parse().unwrap()),
                peer_name: Some(crate::traffic::peer_names::PeerName::new("vs-cam.example.com").unwrap()),
                ..from_cloud.clone()
            };
            named.add(&c, i as f64);
        }
        assert_eq!(
            named.sentence(),
            "received 3 TCP packets (180 bytes) from vs-cam.example.com (2 addresses) on 443/tcp in 2 s"
        );
        let r = named.report().unwrap();
        assert_eq!(r.top_peers[0].name.as_deref(), Some("vs-cam.example.com"));
        assert_eq!(r.top_names[0].value, "vs-cam.example.com");
        named.add(&from_cloud, 3.0);
        assert!(named.sentence().contains("from 2 hosts"), "one peer unnamed: {}", named.sentence());
        assert_eq!(Severity::of(50, 60, 49.0, &t), Severity::Medium);
        assert_eq!(Severity::of(5, 60, 10.0, &Traffic::default()), Severity::Low);
        for h in 0..(MAX_DISTINCT as u32 + 10) {
            let c = Context { dst_ip: Some(IpAddr::from(h.to_be_bytes())), ..syn_to(1, 0.0).0 };
            t.add(&c, 50.0);
        }
        let r = t.report().unwrap();
        assert!(r.counts_capped && r.distinct_peers == MAX_DISTINCT, "{r:?}");
        assert!(t.sentence().contains(&format!("over {MAX_DISTINCT} hosts")), "{}", t.sentence());
        assert!(Traffic::default().report().is_none(), "no context, no report");
    }

    #[test]
    fn a_cloud_s_replies_to_many_ephemeral_ports_are_a_fan_out_of_one() {
        // 40 connections to one cloud by name at two addresses: the replies go to 40 of
        // the device's ephemeral ports; it reached one peer on one service.
        let mut t = Traffic::default();
        for i in 0..40u16 {
            let peer = if i % 2 == 0 { "52.70.158.224" } else { "3.220.152.140" };
            let c = Context {
                src_ip: Some(peer.parse().unwrap()),
                dst_ip: Some("192.168.1.7".parse().unwrap()),
                src_port: 443,
                dst_port: 50_000 + i,
                proto: 6,
                tcp_flags: 0x10,
                bytes: 1_500,
                direction: Some(Direction::Inbound),
                peer_name: Some(crate::traffic::peer_names::PeerName::new("vs-cam.example.com").unwrap()),
                ..Context::default()
            };
            t.add(&c, f64::from(i));
        }
        assert_eq!((t.reached(), t.services.distinct(), t.ports.distinct()), (1, 1, 40));
        assert_eq!(Severity::of(40, 400, 39.0, &t), Severity::Low, "no fan-out of 40");
    }

    #[test]
    fn a_device_that_cannot_reach_its_cloud_says_so_at_low_severity() {
        let mut t = Traffic::default();
        for i in 0..600u16 {
            let c = Context {
                src_ip: Some("192.168.1.7".parse().unwrap()),
                dst_ip: Some("44.237.243.166".parse().unwrap()),
                src_port: 40_000 + i,
                dst_port: 8883,
                proto: 6,
                tcp_flags: 0x02,
                bytes: 74,
                direction: Some(Direction::Outbound),
                peer_name: Some(crate::traffic::peer_names::PeerName::new("broker.example.com").unwrap()),
                ..Context::default()
            };
            t.add(&c, f64::from(i) * 18.0);
        }
        assert_eq!(
            t.sentence(),
            "sent 600 TCP SYN packets (43 KiB) to broker.example.com (44.237.243.166) on 8883/tcp, unanswered, in 3.0 h"
        );
        assert_eq!(Severity::of(600, 600, 10_782.0, &t), Severity::Low);
    }
}
