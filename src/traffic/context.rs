//! A record's packet context, beside its features (optional): the addresses, ports,
//! protocol and size of the packet the record was computed on, and its direction as
//! seen from the device. The model never reads it; incidents aggregate it so that an
//! analyst sees whom a device talked to and how.
//!
//! JSON: `"context": {"src_ip": "10.0.0.5", "dst_ip": "10.0.0.9", "src_port": 40000,
//! "dst_port": 23, "proto": 6, "tcp_flags": 2, "bytes": 60, "direction": "outbound",
//! "device_mac": "00:11:22:33:44:55", "arp": "request", "peer_name": "cloud.example.com"}`,
//! every field optional (`arp`: the frame was ARP, `request` or `reply`; its addresses
//! are the sender's and the target's; `peer_name`: the name the device looked its peer
//! up by, `peer_names.rs`). Binary: flag bit 1, and [`Context::encode_binary`]'s layout
//! after the features.

use std::net::IpAddr;

use serde::{Deserialize, Serialize};

use super::devices::{format_mac, parse_mac};
use super::packet::{ArpOp, Packet};
use super::peer_name::PeerName;

/// A MAC address, written `00:11:22:33:44:55`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Mac(pub u64);

impl Serialize for Mac {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format_mac(self.0))
    }
}

impl<'de> Deserialize<'de> for Mac {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        parse_mac(&text).map(Mac).map_err(serde::de::Error::custom)
    }
}

impl std::fmt::Display for Mac {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&format_mac(self.0))
    }
}

/// Which way the packet went, from the device's side.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    /// Sent by the device.
    Outbound,
    /// Sent to it.
    Inbound,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Context {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub src_ip: Option<IpAddr>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dst_ip: Option<IpAddr>,
    /// 0: none (a protocol without ports).
    #[serde(default)]
    pub src_port: u16,
    #[serde(default)]
    pub dst_port: u16,
    /// IP protocol number (6 TCP, 17 UDP, 1 ICMP, 58 ICMPv6); 0: none or unknown.
    #[serde(default)]
    pub proto: u8,
    /// TCP flags (SYN 0x02, ACK 0x10, …).
    #[serde(default)]
    pub tcp_flags: u8,
    /// Frame length on the wire.
    #[serde(default)]
    pub bytes: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub direction: Option<Direction>,
    /// The device's own MAC (the frame's source when outbound, its destination when
    /// inbound).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_mac: Option<Mac>,
    /// An ARP frame (`proto` 0): who-has or is-at, the sender's and the target's
    /// addresses in `src_ip` and `dst_ip`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arp: Option<ArpOp>,
    /// The name the device looked its peer up by (the answer to its own DNS query).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer_name: Option<PeerName>,
}

/// A context's binary form ends inside it, or says something impossible.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct BadContext(pub String);

impl Context {
    /// The context of a packet the device (of MAC `device_mac`, if known) sent
    /// (`outbound`) or received.
    pub fn of_packet(p: &Packet, outbound: bool, device_mac: Option<u64>) -> Self {
        Self {
            src_ip: Packet::ip_of(p.src),
            dst_ip: Packet::ip_of(p.dst),
            src_port: p.src_port,
            dst_port: p.dst_port,
            proto: p.proto,
            tcp_flags: p.tcp_flags,
            bytes: p.len,
            direction: Some(if outbound { Direction::Outbound } else { Direction::Inbound }),
            device_mac: device_mac.map(Mac),
            arp: p.arp,
            peer_name: None,
        }
    }

    /// The device's address and its peer's, when the direction is known.
    pub fn device_and_peer(&self) -> Option<(Option<IpAddr>, Option<IpAddr>)> {
        match self.direction? {
            Direction::Outbound => Some((self.src_ip, self.dst_ip)),
            Direction::Inbound => Some((self.dst_ip, self.src_ip)),
        }
    }

    /// An ARP who-has for another address than the sender's own (a gratuitous ARP
    /// announces itself and asks nobody).
    pub fn is_arp_request(&self) -> bool {
        self.arp == Some(ArpOp::Request) && self.src_ip != self.dst_ip
    }

    /// The service side of a packet: the lower of its two ports (the well-known one by
    /// convention: a reply's destination is an ephemeral port), with its transport, as
    /// `443/tcp`; `None` for a protocol without ports.
    pub fn service(&self) -> Option<String> {
        let (port, proto) = self.service_port()?;
        Some(format!("{port}/{}", transport_name(proto)))
    }

    /// [`Context::service`] as numbers (the port, the IP protocol), without a string.
    pub fn service_port(&self) -> Option<(u16, u8)> {
        let port = match (self.src_port, self.dst_port) {
            (0, 0) => return None,
            (0, p) | (p, 0) => p,
            (a, b) => a.min(b),
        };
        Some((port, self.proto))
    }

    /// What a packet attempts, if it attempts something: the peer and its service
    /// (`port/transport`, `icmp`, `arp`). A TCP SYN either way; UDP, ICMP or an ARP
    /// who-has sent by the device to one host (what scans, sweeps and guessers send).
    pub fn attempt(&self) -> Option<(IpAddr, String)> {
        let (_, Some(peer)) = self.device_and_peer()? else { return None };
        let service = if self.is_syn() {
            format!("{}/tcp", self.dst_port)
        } else if self.direction != Some(Direction::Outbound) || is_group(peer) {
            return None;
        } else if self.is_arp_request() {
            "arp".into()
        } else {
            match self.proto {
                17 => format!("{}/udp", self.dst_port),
                1 | 58 => transport_name(self.proto),
                _ => return None,
            }
        };
        Some((peer, service))
    }

    /// A TCP SYN without ACK: a connection attempt (what scans and SYN floods send).
    pub fn is_syn(&self) -> bool {
        self.proto == 6 && self.tcp_flags & 0x12 == 0x02
    }

    /// Binary layout (little-endian): address family (0: no addresses, 4, 6), the
    /// source and destination addresses of that family, source port (u16), destination
    /// port (u16), protocol (u8), TCP flags (u8), bytes (u32), direction (0 unknown,
    /// 1 outbound, 2 inbound), then a flags byte (bit 0: the device's MAC follows, 6 bytes;
    /// bit 1: an ARP request; bit 2: an ARP reply; bit 3: the peer's name follows the MAC,
    /// its length (u8) then its ASCII; a context without any is 0 or 1, as before ARP and
    /// names were told). An IPv4 source with an IPv6 destination (or one address only)
    /// keeps both as IPv6, the IPv4 one mapped.
    pub fn encode_binary(&self, out: &mut Vec<u8>) {
        match (self.src_ip, self.dst_ip) {
            (Some(IpAddr::V4(s)), Some(IpAddr::V4(d))) => {
                out.push(4);
                out.extend_from_slice(&s.octets());
                out.extend_from_slice(&d.octets());
            }
            (None, None) => out.push(0),
            (s, d) => {
                out.push(6);
                for ip in [s, d] {
                    out.extend_from_slice(&ip.map_or([0; 16], |ip| to_v6(ip).octets()));
                }
            }
        }
        out.extend_from_slice(&self.src_port.to_le_bytes());
        out.extend_from_slice(&self.dst_port.to_le_bytes());
        out.push(self.proto);
        out.push(self.tcp_flags);
        out.extend_from_slice(&self.bytes.to_le_bytes());
        out.push(match self.direction {
            None => 0,
            Some(Direction::Outbound) => 1,
            Some(Direction::Inbound) => 2,
        });
        let arp = match self.arp {
            None => 0,
            Some(ArpOp::Request) => 2,
            Some(ArpOp::Reply) => 4,
        };
        let named = if self.peer_name.is_some() { 8 } else { 0 };
        match self.device_mac {
            None => out.push(arp | named),
            Some(Mac(mac)) => {
                out.push(1 | arp | named);
                out.extend_from_slice(&mac.to_be_bytes()[2..]);
            }
        }
        if let Some(name) = &self.peer_name {
            // A PeerName is at most MAX_NAME_LEN (253) bytes.
            out.push(name.as_str().len() as u8);
            out.extend_from_slice(name.as_str().as_bytes());
        }
    }

    /// Read [`Self::encode_binary`]'s layout from the start of `b`; the context and the
    /// bytes it took.
    pub fn decode_binary(b: &[u8]) -> Result<(Self, usize), BadContext> {
        let short = || BadContext("ends inside the context".into());
        let family = *b.first().ok_or_else(short)?;
        let width = match family {
            0 => 0,
            4 => 4,
            6 => 16,
            other => return Err(BadContext(format!("unknown address family {other} in the context"))),
        };
        let mut at = 1;
        let mut ip = |b: &[u8]| -> Result<Option<IpAddr>, BadContext> {
            let raw = b.get(at..at + width).ok_or_else(short)?;
            at += width;
            Ok(match width {
                4 => Some(IpAddr::from(<[u8; 4]>::try_from(raw).map_err(|_| short())?)),
                16 => {
                    let v6 = std::net::Ipv6Addr::from(<[u8; 16]>::try_from(raw).map_err(|_| short())?);
                    (!v6.is_unspecified()).then(|| v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4))
                }
                _ => None,
            })
        };
        let (src_ip, dst_ip) = (ip(b)?, ip(b)?);
        let rest = b.get(at..at + 12).ok_or_else(short)?;
        let direction = match rest[10] {
            0 => None,
            1 => Some(Direction::Outbound),
            2 => Some(Direction::Inbound),
            other => return Err(BadContext(format!("unknown direction {other} in the context"))),
        };
        let context = Self {
            src_ip,
            dst_ip,
            src_port: u16::from_le_bytes([rest[0], rest[1]]),
            dst_port: u16::from_le_bytes([rest[2], rest[3]]),
            proto: rest[4],
            tcp_flags: rest[5],
            bytes: u32::from_le_bytes([rest[6], rest[7], rest[8], rest[9]]),
            direction,
            device_mac: None,
            arp: match rest[11] & 0x06 {
                0 => None,
                2 => Some(ArpOp::Request),
                4 => Some(ArpOp::Reply),
                _ => return Err(BadContext("an ARP request and reply at once in the context".into())),
            },
            peer_name: None,
        };
        at += 12;
        let flags = rest[11];
        if flags & !0x0f != 0 {
            return Err(BadContext(format!("unknown flags {flags:#04x} in the context")));
        }
        let mut context = context;
        if flags & 1 == 1 {
            let raw = b.get(at..at + 6).ok_or_else(short)?;
            at += 6;
            let mut mac = [0u8; 8];
            mac[2..].copy_from_slice(raw);
            context.device_mac = Some(Mac(u64::from_be_bytes(mac)));
        }
        if flags & 8 == 8 {
            let len = usize::from(*b.get(at).ok_or_else(short)?);
            let raw = b.get(at + 1..at + 1 + len).ok_or_else(short)?;
            at += 1 + len;
            let text = std::str::from_utf8(raw)
                .map_err(|_| BadContext("the peer name in the context is not ASCII".into()))?;
            context.peer_name = Some(PeerName::new(text).map_err(|e| BadContext(e.to_string()))?);
        }
        Ok((context, at))
    }
}

/// Addresses nobody answers by name: multicast and broadcast (mDNS, SSDP, a subnet's
/// broadcast).
pub fn is_group(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_multicast() || v4.is_broadcast() || v4.octets()[3] == 255,
        IpAddr::V6(v6) => v6.is_multicast(),
    }
}

fn to_v6(ip: IpAddr) -> std::net::Ipv6Addr {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        IpAddr::V6(v6) => v6,
    }
}

/// A protocol number's name as analysts (and ECS's `network.transport`) write it.
#[cfg(test)]
impl Context {
    /// A packet the device (10.0.0.5, port 40000) sent to `peer`:`port`, for other
    /// modules' tests.
    pub(crate) fn outbound(peer: &str, port: u16, proto: u8, tcp_flags: u8, bytes: u32) -> Self {
        Self {
            src_ip: Some("10.0.0.5".parse().expect("an address")),
            dst_ip: Some(peer.parse().expect("an address")),
            src_port: 40_000,
            dst_port: port,
            proto,
            tcp_flags,
            bytes,
            direction: Some(Direction::Outbound),
            device_mac: None,
            arp: None,
            peer_name: None,
        }
    }

    /// An ARP who-has from the device (10.0.0.5) for `target`, for other modules' tests.
    pub(crate) fn arp_request(target: &str) -> Self {
        Self {
            src_ip: Some("10.0.0.5".parse().expect("an address")),
            dst_ip: Some(target.parse().expect("an address")),
            bytes: 42,
            direction: Some(Direction::Outbound),
            arp: Some(ArpOp::Request),
            ..Self::default()
        }
    }
}

pub fn transport_name(proto: u8) -> String {
    match proto {
        1 => "icmp".into(),
        6 => "tcp".into(),
        17 => "udp".into(),
        58 => "ipv6-icmp".into(),
        0 => "other".into(),
        n => format!("ip-proto-{n}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binary_round_trips_v4_v6_mixed_and_none() {
        let v4 = Context {
            src_ip: Some("10.0.0.5".parse().unwrap()),
            dst_ip: Some("10.0.0.9".parse().unwrap()),
            src_port: 40000,
            dst_port: 23,
            proto: 6,
            tcp_flags: 2,
            bytes: 60,
            direction: Some(Direction::Outbound),
            device_mac: Some(Mac(0x0011_2233_4455)),
            arp: None,
            peer_name: None,
        };
        let mixed = Context { dst_ip: Some("fe80::1".parse().unwrap()), ..v4.clone() };
        let one =
            Context { dst_ip: None, direction: Some(Direction::Inbound), device_mac: None, ..v4.clone() };
        let arp = Context {
            proto: 0,
            tcp_flags: 0,
            src_port: 0,
            dst_port: 0,
            arp: Some(ArpOp::Request),
            ..v4.clone()
        };
        let reply = Context { device_mac: None, arp: Some(ArpOp::Reply), ..arp.clone() };
        let named = Context { peer_name: Some(PeerName::new("cloud.example.com").unwrap()), ..v4.clone() };
        let named_without_mac = Context { device_mac: None, ..named.clone() };
        for c in [v4.clone(), mixed, one, arp, reply, named, named_without_mac, Context::default()] {
            let mut b = Vec::new();
            c.encode_binary(&mut b);
            assert_eq!(Context::decode_binary(&b), Ok((c.clone(), b.len())), "{c:?}");
            assert!(Context::decode_binary(&b[..b.len() - 1]).is_err(), "cut short");
        }
        assert!(v4.is_syn() && !Context { tcp_flags: 0x12, ..v4.clone() }.is_syn());
        assert!(Context::decode_binary(&[5]).unwrap_err().0.contains("address family 5"));
        // The flags byte comes before the MAC's six bytes.
        let mut b = Vec::new();
        v4.encode_binary(&mut b);
        let flags = b.len() - 7;
        b[flags] = 0x07;
        assert!(Context::decode_binary(&b).unwrap_err().0.contains("request and reply"));
        b[flags] = 0x11;
        assert!(Context::decode_binary(&b).unwrap_err().0.contains("unknown flags 0x11"));
        // Before ARP and names were told: 0 or 1, the same bytes as today's.
        let mut old = Vec::new();
        Context { arp: None, ..v4.clone() }.encode_binary(&mut old);
        assert_eq!(old[old.len() - 7], 1);
        let json = r#"{"src_ip":"10.0.0.5","dst_ip":"10.0.0.9","direction":"outbound","arp":"request"}"#;
        let c: Context = serde_json::from_str(json).unwrap();
        assert!(c.is_arp_request() && serde_json::to_string(&c).unwrap().contains(r#""arp":"request""#));
        let gratuitous = Context { dst_ip: c.src_ip, ..c };
        assert!(!gratuitous.is_arp_request(), "a gratuitous ARP asks nobody");
        // A name that is not a DNS name is refused, in either format, saying why.
        let json = r#"{"dst_ip":"10.0.0.9","peer_name":"evil name; rm -rf"}"#;
        let e = serde_json::from_str::<Context>(json).unwrap_err().to_string();
        assert!(e.contains("is not a DNS name"), "{e}");
        let mut b = Vec::new();
        Context { peer_name: Some(PeerName::new("ab.cd").unwrap()), ..v4 }.encode_binary(&mut b);
        let at = b.len() - 3;
        b[at] = b' ';
        assert!(Context::decode_binary(&b).unwrap_err().0.contains("is not a DNS name"));
    }
}
