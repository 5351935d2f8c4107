//! The packet fields AfterImage reads.

use std::net::IpAddr;

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
