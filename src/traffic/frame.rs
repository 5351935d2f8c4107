//! Link-layer frames → the packet fields AfterImage reads, and the MAC addresses a
//! frame carries (to route a LAN capture's packets to the devices they belong to).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::packet::{host_of_ip, host_of_mac, ArpOp, Packet};

/// The link types a capture may use, by their tcpdump.org codes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Link {
    /// 1: Ethernet II (with 802.1Q / 802.1ad tags).
    Ethernet,
    /// 101, 228, 229: a bare IPv4 or IPv6 packet.
    RawIp,
    /// 113: Linux "cooked" v1 (`tcpdump -i any`).
    LinuxCooked,
    /// 276: Linux "cooked" v2.
    LinuxCookedV2,
}

impl Link {
    pub const SUPPORTED: &'static str = "Ethernet 1, raw IP 101/228/229, Linux cooked 113/276";

    pub fn from_code(code: u32) -> Option<Self> {
        match code {
            1 => Some(Self::Ethernet),
            101 | 228 | 229 => Some(Self::RawIp),
            113 => Some(Self::LinuxCooked),
            276 => Some(Self::LinuxCookedV2),
            _ => None,
        }
    }
}

pub fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

/// A MAC address's bytes as one number, in the low 48 bits.
pub fn mac_of_bytes(bytes: &[u8; 6]) -> u64 {
    bytes.iter().fold(0u64, |acc, &x| (acc << 8) | u64::from(x))
}

/// Six bytes at `at` as a MAC address.
pub fn mac_at(b: &[u8], at: usize) -> Option<u64> {
    Some(mac_of_bytes(b.get(at..at + 6)?.try_into().ok()?))
}

/// Past any 802.1Q / 802.1ad tags: the inner ethertype and where its payload starts,
/// given the outer ethertype and the offset just after it.
pub fn skip_vlan_tags(f: &[u8], mut ethertype: u16, mut at: usize) -> Option<(u16, usize)> {
    while ethertype == 0x8100 || ethertype == 0x88a8 {
        ethertype = u16_at(f, at + 2)?;
        at += 4;
    }
    Some((ethertype, at))
}

/// The sending and (where the link type records it) receiving MAC of a frame.
/// Raw IP has neither; Linux cooked records the sender only.
pub fn frame_macs(link: Link, f: &[u8]) -> (Option<u64>, Option<u64>) {
    match link {
        Link::Ethernet => (mac_at(f, 6), mac_at(f, 0)),
        Link::LinuxCooked => (mac_at(f, 6), None),
        Link::LinuxCookedV2 => (mac_at(f, 12), None),
        Link::RawIp => (None, None),
    }
}

/// The packet fields AfterImage needs, or `None` for a frame too short to carry them.
pub fn packet_of_frame(link: Link, f: &[u8], ts: f64, len: u32) -> Option<Packet> {
    packet_and_transport(link, f, ts, len).map(|(p, _)| p)
}

/// A UDP datagram's payload (as far as the capture kept it), or `None` for a frame that
/// is not UDP or too short to carry its header.
pub fn udp_payload(link: Link, f: &[u8]) -> Option<&[u8]> {
    let (p, l4) = packet_and_transport(link, f, 0.0, 0)?;
    if p.proto != 17 {
        return None;
    }
    f.get(l4 + 8..)
}

/// The packet and where its transport header starts.
fn packet_and_transport(link: Link, f: &[u8], ts: f64, len: u32) -> Option<(Packet, usize)> {
    let (src_mac, dst_mac, ethertype, at) = match link {
        Link::Ethernet => (mac_at(f, 6)?, Some(mac_at(f, 0)?), u16_at(f, 12)?, 14),
        Link::LinuxCooked => (mac_at(f, 6)?, None, u16_at(f, 14)?, 16),
        Link::LinuxCookedV2 => (mac_at(f, 12)?, None, u16_at(f, 0)?, 20),
        Link::RawIp => {
            let version = f.first()? >> 4;
            (0, None, if version == 6 { 0x86dd } else { 0x0800 }, 0)
        }
    };
    let (ethertype, at) = skip_vlan_tags(f, ethertype, at)?;
    let mut p = Packet {
        ts,
        src_mac,
        src: host_of_mac(src_mac),
        dst: 0,
        src_port: 0,
        dst_port: 0,
        len,
        proto: 0,
        tcp_flags: 0,
        arp: None,
    };
    p.dst = host_of_mac(dst_mac.unwrap_or(0));
    let (proto, l4) = match ethertype {
        0x0800 => {
            let ip = f.get(at..)?;
            let ihl = usize::from(ip.first()? & 0x0f) * 4;
            let src: [u8; 4] = ip.get(12..16)?.try_into().ok()?;
            let dst: [u8; 4] = ip.get(16..20)?.try_into().ok()?;
            p.src = host_of_ip(IpAddr::V4(Ipv4Addr::from(src)));
            p.dst = host_of_ip(IpAddr::V4(Ipv4Addr::from(dst)));
            // Later fragments carry no ports.
            let first_fragment = u16_at(ip, 6)? & 0x1fff == 0;
            (if first_fragment { *ip.get(9)? } else { 0 }, at + ihl)
        }
        0x86dd => {
            let ip = f.get(at..)?;
            let src: [u8; 16] = ip.get(8..24)?.try_into().ok()?;
            let dst: [u8; 16] = ip.get(24..40)?.try_into().ok()?;
            p.src = host_of_ip(IpAddr::V6(Ipv6Addr::from(src)));
            p.dst = host_of_ip(IpAddr::V6(Ipv6Addr::from(dst)));
            (*ip.get(6)?, at + 40)
        }
        0x0806 => {
            // ARP: sender and target protocol addresses, as Kitsune keys them.
            let arp = f.get(at..)?;
            let src: [u8; 4] = arp.get(14..18)?.try_into().ok()?;
            let dst: [u8; 4] = arp.get(24..28)?.try_into().ok()?;
            p.src = host_of_ip(IpAddr::V4(Ipv4Addr::from(src)));
            p.dst = host_of_ip(IpAddr::V4(Ipv4Addr::from(dst)));
            p.arp = match u16_at(arp, 6)? {
                1 => Some(ArpOp::Request),
                2 => Some(ArpOp::Reply),
                _ => None,
            };
            (0, 0)
        }
        _ => (0, 0),
    };
    p.proto = proto;
    if proto == 6 || proto == 17 {
        p.src_port = u16_at(f, l4).unwrap_or(0);
        p.dst_port = u16_at(f, l4 + 2).unwrap_or(0);
    }
    if proto == 6 {
        p.tcp_flags = f.get(l4 + 13).copied().unwrap_or(0);
    }
    Some((p, l4))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn linux_cooked_v2_reads_the_sender_and_the_ip_header() {
        let mut f = vec![0u8; 20 + 28];
        f[0..2].copy_from_slice(&0x0800u16.to_be_bytes());
        f[12..18].copy_from_slice(&[2, 0, 0, 0, 0, 9]);
        f[20] = 0x45;
        f[20 + 9] = 17;
        f[20 + 12..20 + 16].copy_from_slice(&[10, 0, 0, 9]);
        f[20 + 16..20 + 20].copy_from_slice(&[10, 0, 0, 1]);
        f[40..42].copy_from_slice(&5353u16.to_be_bytes());
        f[42..44].copy_from_slice(&53u16.to_be_bytes());
        let p = packet_of_frame(Link::LinuxCookedV2, &f, 1.0, 48).unwrap();
        assert_eq!(p.src_mac, 0x0200_0000_0009);
        assert_eq!(p.src, host_of_ip(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 9))));
        assert_eq!((p.src_port, p.dst_port), (5353, 53));
        assert_eq!(frame_macs(Link::LinuxCookedV2, &f), (Some(0x0200_0000_0009), None));
    }
}
