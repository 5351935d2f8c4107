//! The packet fields AfterImage reads.

use std::net::IpAddr;

use serde::{Deserialize, Serialize};

/// A host address as one integer: IPv4 as its IPv6-mapped form, IPv6 as is, and a
/// MAC (for frames without IP, as Kitsune does) under a prefix no IP uses.
pub type Host = u128;

pub fn host_of_ip(ip: IpAddr) -> Host {
    match ip {
        IpAddr::V4(v4) => u128::from(v4.to_ipv6_mapped()),
        IpAddr::V6(v6) => u128::from(v6),
    }
}

pub fn host_of_mac(mac: u64) -> Host {
    (0xfe_u128 << 120) | u128::from(mac)
}

/// An ARP frame's operation: who-has (a request) or is-at (a reply). A sweep of a LAN
/// asks for many addresses; nothing else in a frame's fields tells ARP from other
/// frames without IP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ArpOp {
    Request,
    Reply,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Packet {
    /// Capture time, seconds since the Unix epoch.
    pub ts: f64,
    pub src_mac: u64,
    pub src: Host,
    pub dst: Host,
    /// 0 when the protocol has no ports.
    pub src_port: u16,
    pub dst_port: u16,
    /// Frame length on the wire, bytes.
    pub len: u32,
    /// IP protocol number (6 TCP, 17 UDP, 1 ICMP, 58 ICMPv6); 0 for a frame without IP
    /// (ARP, …) or a later fragment.
    pub proto: u8,
    /// TCP flags (FIN 0x01, SYN 0x02, RST 0x04, PSH 0x08, ACK 0x10); 0 for other protocols.
    pub tcp_flags: u8,
    /// An ARP frame's operation (its addresses are `src` and `dst`); `None` otherwise.
    pub arp: Option<ArpOp>,
}

impl Packet {
    /// An address as an IP, if it is one (not a MAC stand-in, see [`Host`]).
    pub fn ip_of(host: Host) -> Option<IpAddr> {
        if host >> 120 == 0xfe || host == 0 {
            return None;
        }
        let v6 = std::net::Ipv6Addr::from(host);
        Some(v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4))
    }
}
