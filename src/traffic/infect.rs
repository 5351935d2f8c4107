//! Ground truth from real packets: make a device look infected by rewriting a real
//! attack capture's attacking host into the device (its MAC in Ethernet and ARP, its
//! IPv4 address in IPv4 and ARP, with the IPv4 header checksum recomputed and TCP/UDP
//! checksums adjusted for the new pseudo-header), shifting the attack into the
//! device's timeline and merging by time. Every packet's origin is then known.
//! Pure functions on Ethernet frames; reading and writing captures is the caller's.

use std::collections::HashMap;
use std::net::Ipv4Addr;

use super::frame::{skip_vlan_tags, u16_at};

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum InfectError {
    #[error("the benign captures hold no packets")]
    NoBenign,
    #[error("attack capture {0} holds no packets")]
    EmptyAttack(usize),
    #[error("the attack start share {0} is not within 0..1")]
    Share(f64),
}

/// A packet record to rewrite and write back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnedFrame {
    /// Capture time, nanoseconds since the Unix epoch.
    pub ts_ns: u64,
    /// Length on the wire.
    pub orig_len: u32,
    pub data: Vec<u8>,
}

/// A host as the link and network layers name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Identity {
    pub mac: [u8; 6],
    pub ip: Ipv4Addr,
}

pub fn mac_bytes(mac: u64) -> [u8; 6] {
    mac.to_be_bytes()[2..].try_into().expect("6 bytes")
}

/// An Ethernet frame's ethertype after any VLAN tags and where its payload starts.
fn ethertype(f: &[u8]) -> Option<(u16, usize)> {
    skip_vlan_tags(f, u16_at(f, 12)?, 14)
}

fn ones_add(a: u16, b: u16) -> u16 {
    let s = u32::from(a) + u32::from(b);
    ((s & 0xffff) + (s >> 16)) as u16
}

fn word(b: &[u8]) -> u16 {
    u16::from_be_bytes([b[0], b.get(1).copied().unwrap_or(0)])
}

/// The Internet checksum (RFC 1071) of `bytes`.
pub fn internet_checksum(bytes: &[u8]) -> u16 {
    !bytes.chunks(2).map(word).fold(0, ones_add)
}

/// A checksum after the covered bytes `old` became `new` (RFC 1624, eqn. 3): the
/// payload need not be in the capture for this.
fn adjusted_checksum(sum: u16, old: &[u8], new: &[u8]) -> u16 {
    let hc =
        old.chunks(2).zip(new.chunks(2)).fold(!sum, |hc, (o, n)| ones_add(ones_add(hc, !word(o)), word(n)));
    !hc
}

fn replace(field: &mut [u8], from: &[u8], to: &[u8]) -> bool {
    if field == from {
        field.copy_from_slice(to);
        true
    } else {
        false
    }
}

/// Rewrites `from` into `to` wherever it stands in an Ethernet frame; whether
/// anything changed. Frames too short for a header are left as they are.
pub fn rewrite(f: &mut [u8], from: &Identity, to: &Identity) -> bool {
    let mut changed = false;
    for at in [0, 6] {
        if let Some(field) = f.get_mut(at..at + 6) {
            changed |= replace(field, &from.mac, &to.mac);
        }
    }
    let Some((kind, at)) = ethertype(f) else { return changed };
    match kind {
        0x0800 => changed |= rewrite_ipv4(&mut f[at..], from.ip, to.ip),
        0x0806 => {
            // Ethernet/IPv4 ARP: sender MAC, sender IP, target MAC, target IP.
            if let Some(arp) = f.get_mut(at..at + 28) {
                if arp[..6] == [0, 1, 8, 0, 6, 4] {
                    let (old_ip, new_ip) = (from.ip.octets(), to.ip.octets());
                    changed |= replace(&mut arp[8..14], &from.mac, &to.mac);
                    changed |= replace(&mut arp[14..18], &old_ip, &new_ip);
                    changed |= replace(&mut arp[18..24], &from.mac, &to.mac);
                    changed |= replace(&mut arp[24..28], &old_ip, &new_ip);
                }
            }
        }
        _ => {}
    }
    changed
}

fn rewrite_ipv4(ip: &mut [u8], from: Ipv4Addr, to: Ipv4Addr) -> bool {
    let ihl = usize::from(ip.first().map_or(0, |b| b & 0x0f)) * 4;
    if ihl < 20 || ip.len() < ihl {
        return false;
    }
    let (old, new) = (from.octets(), to.octets());
    let before: [u8; 8] = ip[12..20].try_into().expect("8 bytes");
    let mut changed = replace(&mut ip[12..16], &old, &new);
    changed |= replace(&mut ip[16..20], &old, &new);
    if !changed {
        return false;
    }
    ip[10..12].fill(0);
    let sum = internet_checksum(&ip[..ihl]);
    ip[10..12].copy_from_slice(&sum.to_be_bytes());
    // TCP and UDP checksum a pseudo-header that holds both addresses; later
    // fragments carry no transport header.
    let first_fragment = word(&ip[6..8]) & 0x1fff == 0;
    let checksum_at = match ip[9] {
        6 => Some(16),
        17 => Some(6),
        _ => None,
    };
    if let (true, Some(at)) = (first_fragment, checksum_at) {
        let after: [u8; 8] = ip[12..20].try_into().expect("8 bytes");
        if let Some(field) = ip.get_mut(ihl + at..ihl + at + 2) {
            let sum = word(field);
            // A UDP checksum of 0 means "none"; a computed 0 is sent as 0xffff.
            if !(ip[9] == 17 && sum == 0) {
                let mut new_sum = adjusted_checksum(sum, &before, &after);
                if ip[9] == 17 && new_sum == 0 {
                    new_sum = 0xffff;
                }
                ip[ihl + at..ihl + at + 2].copy_from_slice(&new_sum.to_be_bytes());
            }
        }
    }
    true
}

/// The IPv4 source address and sending MAC of a frame, if it is IPv4, or the sender's
/// address of an Ethernet/IPv4 ARP frame (an ARP sweep sends nothing else).
fn ipv4_source(f: &[u8]) -> Option<(Ipv4Addr, [u8; 6])> {
    let (kind, at) = ethertype(f)?;
    let src: [u8; 4] = match kind {
        0x0800 => f.get(at + 12..at + 16)?.try_into().ok()?,
        0x0806 if f.get(at..at + 6)? == [0, 1, 8, 0, 6, 4] => f.get(at + 14..at + 18)?.try_into().ok()?,
        _ => return None,
    };
    Some((Ipv4Addr::from(src), f.get(6..12)?.try_into().ok()?))
}

/// The IPv4 address a device sends from most (DHCP's 0.0.0.0 aside).
pub fn device_ip(frames: &[OwnedFrame], mac: [u8; 6]) -> Option<Ipv4Addr> {
    let mut counts: HashMap<Ipv4Addr, usize> = HashMap::new();
    for (ip, from) in frames.iter().filter_map(|f| ipv4_source(&f.data)) {
        if from == mac && !ip.is_unspecified() {
            *counts.entry(ip).or_default() += 1;
        }
    }
    // Ties broken by address, so that the choice does not depend on hashing.
    counts.into_iter().max_by_key(|&(ip, n)| (n, std::cmp::Reverse(ip))).map(|(ip, _)| ip)
}

/// The attacking host of an attack capture: the IPv4 source that sends the most
/// packets (a scanner or flooder out-sends its victims), with the MAC it sends from.
/// `ip` names it instead where that guess would be wrong.
pub fn attacker(frames: &[OwnedFrame], ip: Option<Ipv4Addr>) -> Option<Identity> {
    let mut counts: HashMap<(Ipv4Addr, [u8; 6]), usize> = HashMap::new();
    for key in frames.iter().filter_map(|f| ipv4_source(&f.data)) {
        // An ARP probe's sender is 0.0.0.0: nobody.
        if !key.0.is_unspecified() && ip.is_none_or(|want| want == key.0) {
            *counts.entry(key).or_default() += 1;
        }
    }
    let mut by_ip: HashMap<Ipv4Addr, usize> = HashMap::new();
    for (&(addr, _), &n) in &counts {
        *by_ip.entry(addr).or_default() += n;
    }
    let (addr, _) = by_ip.into_iter().max_by_key(|&(a, n)| (n, std::cmp::Reverse(a)))?;
    let (&(_, mac), _) = counts
        .iter()
        .filter(|((a, _), _)| *a == addr)
        .max_by_key(|&(&(_, m), &n)| (n, std::cmp::Reverse(m)))?;
    Some(Identity { mac, ip: addr })
}

/// Captures one after the other in the given order, each keeping its own packet
/// timing and starting `gap_ns` after the previous one's last packet: a device's
/// setup sessions, recorded days apart, as one stretch of traffic.
pub fn concatenate(captures: Vec<Vec<OwnedFrame>>, gap_ns: u64) -> Vec<OwnedFrame> {
    let mut out: Vec<OwnedFrame> = Vec::with_capacity(captures.iter().map(Vec::len).sum());
    for mut capture in captures {
        capture.sort_by_key(|f| f.ts_ns);
        let Some(origin) = capture.first().map(|f| f.ts_ns) else { continue };
        let start = out.last().map_or(origin, |f| f.ts_ns + gap_ns);
        out.extend(capture.into_iter().map(|f| OwnedFrame { ts_ns: f.ts_ns - origin + start, ..f }));
    }
    out
}

/// Where the attack begins in the device's timeline.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Start {
    /// This share of the way from the first benign packet to the last.
    Share(f64),
    /// At this time, nanoseconds since the Unix epoch.
    At(u64),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    Benign,
    /// From the attack capture of this index.
    Attack(usize),
}

pub struct Merged {
    /// Every packet in time order, benign before attack at equal times.
    pub frames: Vec<(OwnedFrame, Origin)>,
    pub attack_start_ns: u64,
    /// The end of the last wave.
    pub attack_end_ns: u64,
}

/// The attacks, one after the other in the given order from `start`, each keeping
/// its own packet timing, merged with the benign packets by time; and again, as a
/// second (third, …) wave, `again_after_ns` after `start` each.
pub fn merge(
    mut benign: Vec<OwnedFrame>,
    attacks: Vec<Vec<OwnedFrame>>,
    start: Start,
    again_after_ns: &[u64],
) -> Result<Merged, InfectError> {
    benign.sort_by_key(|f| f.ts_ns);
    let (first, last) = match (benign.first(), benign.last()) {
        (Some(a), Some(b)) => (a.ts_ns, b.ts_ns),
        _ => return Err(InfectError::NoBenign),
    };
    let attack_start_ns = match start {
        Start::Share(s) if (0.0..=1.0).contains(&s) => first + ((last - first) as f64 * s).round() as u64,
        Start::Share(s) => return Err(InfectError::Share(s)),
        Start::At(t) => t,
    };
    let mut frames: Vec<(OwnedFrame, Origin)> = benign.into_iter().map(|f| (f, Origin::Benign)).collect();
    let mut attacks = attacks;
    for (k, attack) in attacks.iter_mut().enumerate() {
        attack.sort_by_key(|f| f.ts_ns);
        if attack.is_empty() {
            return Err(InfectError::EmptyAttack(k));
        }
    }
    let mut end = attack_start_ns;
    for wave_start in
        std::iter::once(attack_start_ns).chain(again_after_ns.iter().map(|a| attack_start_ns + a))
    {
        let mut cursor = wave_start;
        for (k, attack) in attacks.iter().enumerate() {
            let (origin, base) = (attack[0].ts_ns, cursor);
            for f in attack {
                let ts_ns = f.ts_ns - origin + base;
                cursor = cursor.max(ts_ns);
                frames.push((OwnedFrame { ts_ns, ..f.clone() }, Origin::Attack(k)));
            }
        }
        end = end.max(cursor);
    }
    let cursor = end;
    // A stable sort: benign first at equal times, each side in its own order.
    frames.sort_by_key(|(f, origin)| (f.ts_ns, *origin != Origin::Benign));
    Ok(Merged { frames, attack_start_ns, attack_end_ns: cursor })
}

#[cfg(test)]
mod tests {
    use super::*;

    const ATTACKER: Identity = Identity { mac: [0xaa, 0, 0, 0, 0, 1], ip: Ipv4Addr::new(172, 16, 0, 8) };
    const DEVICE: Identity =
        Identity { mac: [0x20, 0xf8, 0x5e, 0xca, 0x91, 0x52], ip: Ipv4Addr::new(10, 10, 10, 7) };
    const VICTIM: Identity = Identity { mac: [0xbb, 0, 0, 0, 0, 2], ip: Ipv4Addr::new(172, 16, 0, 1) };

    fn ethernet(dst: [u8; 6], src: [u8; 6], vlan: bool, kind: u16) -> Vec<u8> {
        let mut f = Vec::new();
        f.extend(dst);
        f.extend(src);
        if vlan {
            f.extend(0x8100u16.to_be_bytes());
            f.extend(42u16.to_be_bytes());
        }
        f.extend(kind.to_be_bytes());
        f
    }

    /// A valid IPv4 packet (checksums right) of protocol `proto` with `l4` as its payload.
    fn ipv4(from: &Identity, to: &Identity, proto: u8, mut l4: Vec<u8>, vlan: bool) -> Vec<u8> {
        let mut f = ethernet(to.mac, from.mac, vlan, 0x0800);
        let mut ip = vec![0x45, 0, 0, 0, 0x12, 0x34, 0x40, 0, 64, proto, 0, 0];
        ip[2..4].copy_from_slice(&((20 + l4.len()) as u16).to_be_bytes());
        ip.extend(from.ip.octets());
        ip.extend(to.ip.octets());
        let sum = internet_checksum(&ip);
        ip[10..12].copy_from_slice(&sum.to_be_bytes());
        if let Some(at) = match proto {
            6 => Some(16),
            17 => Some(6),
            _ => None,
        } {
            let sum = transport_checksum(from.ip, to.ip, proto, &l4);
            l4[at..at + 2].copy_from_slice(&sum.to_be_bytes());
        }
        if proto == 1 {
            let sum = internet_checksum(&l4);
            l4[2..4].copy_from_slice(&sum.to_be_bytes());
        }
        f.extend(ip);
        f.extend(l4);
        f
    }

    fn transport_checksum(src: Ipv4Addr, dst: Ipv4Addr, proto: u8, segment: &[u8]) -> u16 {
        let mut pseudo = Vec::new();
        pseudo.extend(src.octets());
        pseudo.extend(dst.octets());
        pseudo.extend([0, proto]);
        pseudo.extend((segment.len() as u16).to_be_bytes());
        pseudo.extend(segment);
        internet_checksum(&pseudo)
    }

    fn tcp_syn(dst_port: u16) -> Vec<u8> {
        let mut t = vec![0u8; 20];
        t[0..2].copy_from_slice(&40000u16.to_be_bytes());
        t[2..4].copy_from_slice(&dst_port.to_be_bytes());
        t[12] = 0x50;
        t[13] = 0x02;
        t
    }

    fn udp(payload: &[u8]) -> Vec<u8> {
        let mut u = vec![0u8; 8];
        u[0..2].copy_from_slice(&5353u16.to_be_bytes());
        u[2..4].copy_from_slice(&53u16.to_be_bytes());
        u[4..6].copy_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
        u.extend(payload);
        u
    }

    fn arp_request(from: &Identity, target: Ipv4Addr) -> Vec<u8> {
        let mut f = ethernet([0xff; 6], from.mac, false, 0x0806);
        f.extend([0, 1, 8, 0, 6, 4, 0, 1]);
        f.extend(from.mac);
        f.extend(from.ip.octets());
        f.extend([0; 6]);
        f.extend(target.octets());
        f
    }

    /// The frame's IPv4 header and transport checksums verify (sum to zero).
    fn checksums_hold(f: &[u8]) -> bool {
        let (_, at) = ethertype(f).unwrap();
        let ip = &f[at..];
        let ihl = usize::from(ip[0] & 0x0f) * 4;
        let len = usize::from(word(&ip[2..4]));
        let header_ok = internet_checksum(&ip[..ihl]) == 0;
        let (src, dst) = (
            Ipv4Addr::from(<[u8; 4]>::try_from(&ip[12..16]).unwrap()),
            Ipv4Addr::from(<[u8; 4]>::try_from(&ip[16..20]).unwrap()),
        );
        let segment = &ip[ihl..len];
        let l4_ok = match ip[9] {
            6 => transport_checksum(src, dst, 6, segment) == 0,
            17 if word(&segment[6..8]) == 0 => true,
            17 => transport_checksum(src, dst, 17, segment) == 0,
            _ => internet_checksum(segment) == 0,
        };
        header_ok && l4_ok
    }

    fn ip_pair(f: &[u8]) -> (Ipv4Addr, Ipv4Addr) {
        let (_, at) = ethertype(f).unwrap();
        let b = &f[at + 12..at + 20];
        (Ipv4Addr::new(b[0], b[1], b[2], b[3]), Ipv4Addr::new(b[4], b[5], b[6], b[7]))
    }

    #[test]
    fn tcp_udp_and_icmp_from_and_to_the_attacker_become_the_device_with_valid_checksums() {
        let cases = [
            ("tcp syn out", ipv4(&ATTACKER, &VICTIM, 6, tcp_syn(23), false)),
            ("tcp reply in", ipv4(&VICTIM, &ATTACKER, 6, tcp_syn(40000), false)),
            ("udp out", ipv4(&ATTACKER, &VICTIM, 17, udp(b"flood!!"), false)),
            ("udp in", ipv4(&VICTIM, &ATTACKER, 17, udp(b"odd"), false)),
            ("icmp echo", ipv4(&ATTACKER, &VICTIM, 1, vec![8, 0, 0, 0, 0, 1, 0, 1], false)),
            ("tcp on a vlan", ipv4(&ATTACKER, &VICTIM, 6, tcp_syn(2323), true)),
        ];
        for (what, mut f) in cases {
            assert!(checksums_hold(&f), "{what}: the handmade frame is valid");
            let before = f.clone();
            assert!(rewrite(&mut f, &ATTACKER, &DEVICE), "{what}");
            assert!(checksums_hold(&f), "{what}: checksums after the rewrite");
            let (src, dst) = ip_pair(&f);
            let (src0, dst0) = ip_pair(&before);
            let swap = |a: Ipv4Addr| if a == ATTACKER.ip { DEVICE.ip } else { a };
            assert_eq!((src, dst), (swap(src0), swap(dst0)), "{what}");
            let macs =
                |f: &[u8]| (<[u8; 6]>::try_from(&f[0..6]).unwrap(), <[u8; 6]>::try_from(&f[6..12]).unwrap());
            let swap_mac = |m: [u8; 6]| if m == ATTACKER.mac { DEVICE.mac } else { m };
            let (d0, s0) = macs(&before);
            assert_eq!(macs(&f), (swap_mac(d0), swap_mac(s0)), "{what}");
            assert!(!f.windows(4).any(|w| w == ATTACKER.ip.octets()), "{what}: no trace of the attacker");
        }
    }

    #[test]
    fn a_udp_checksum_of_none_stays_none() {
        let mut f = ipv4(&ATTACKER, &VICTIM, 17, udp(b"x"), false);
        let (_, at) = ethertype(&f).unwrap();
        f[at + 20 + 6..at + 20 + 8].fill(0);
        assert!(rewrite(&mut f, &ATTACKER, &DEVICE));
        assert_eq!(word(&f[at + 26..at + 28]), 0);
        assert!(checksums_hold(&f));
    }

    #[test]
    fn arp_names_the_device_and_other_frames_are_untouched() {
        let mut f = arp_request(&ATTACKER, VICTIM.ip);
        assert!(rewrite(&mut f, &ATTACKER, &DEVICE));
        assert_eq!(f, arp_request(&DEVICE, VICTIM.ip));

        let other = Identity { mac: [0xcc, 0, 0, 0, 0, 3], ip: Ipv4Addr::new(172, 16, 0, 9) };
        for mut f in
            [ipv4(&other, &VICTIM, 6, tcp_syn(80), false), arp_request(&other, VICTIM.ip), vec![1, 2, 3]]
        {
            let before = f.clone();
            assert!(!rewrite(&mut f, &ATTACKER, &DEVICE));
            assert_eq!(f, before);
        }
    }

    fn frame(ts_ns: u64, tag: u8) -> OwnedFrame {
        OwnedFrame { ts_ns, orig_len: 60, data: vec![tag] }
    }

    #[test]
    fn attacks_start_where_asked_keep_their_timing_and_follow_each_other() {
        let benign = vec![frame(1_000, 0), frame(3_000, 0), frame(2_000, 0), frame(11_000, 0)];
        let first = vec![frame(500_000, 1), frame(500_100, 1), frame(500_300, 1)];
        let second = vec![frame(9, 2), frame(10, 2)];
        let m = merge(benign.clone(), vec![first, second], Start::Share(0.5), &[]).unwrap();
        let got: Vec<(u64, Origin)> = m.frames.iter().map(|(f, o)| (f.ts_ns, *o)).collect();
        assert_eq!(
            got,
            vec![
                (1_000, Origin::Benign),
                (2_000, Origin::Benign),
                (3_000, Origin::Benign),
                (6_000, Origin::Attack(0)),
                (6_100, Origin::Attack(0)),
                (6_300, Origin::Attack(0)),
                (6_300, Origin::Attack(1)),
                (6_301, Origin::Attack(1)),
                (11_000, Origin::Benign),
            ]
        );
        assert_eq!((m.attack_start_ns, m.attack_end_ns), (6_000, 6_301));
        let at = merge(benign.clone(), vec![vec![frame(5, 1)]], Start::At(3_000), &[]).unwrap();
        assert_eq!(
            at.frames[2..4].iter().map(|(_, o)| *o).collect::<Vec<_>>(),
            [Origin::Benign, Origin::Attack(0)]
        );
        assert_eq!(
            merge(benign.clone(), vec![], Start::Share(1.5), &[]).err(),
            Some(InfectError::Share(1.5))
        );
        assert_eq!(merge(vec![], vec![], Start::Share(0.5), &[]).err(), Some(InfectError::NoBenign));
        assert_eq!(
            merge(benign.clone(), vec![vec![]], Start::Share(0.5), &[]).err(),
            Some(InfectError::EmptyAttack(0))
        );
        // A second wave of both, 4,000 ns after the first began.
        let waves = merge(
            benign,
            vec![vec![frame(7, 1)], vec![frame(9, 2), frame(10, 2)]],
            Start::At(3_000),
            &[4_000],
        )
        .unwrap();
        let attack: Vec<(u64, Origin)> =
            waves.frames.iter().filter(|(_, o)| *o != Origin::Benign).map(|(f, o)| (f.ts_ns, *o)).collect();
        assert_eq!(
            attack,
            [
                (3_000, Origin::Attack(0)),
                (3_000, Origin::Attack(1)),
                (3_001, Origin::Attack(1)),
                (7_000, Origin::Attack(0)),
                (7_000, Origin::Attack(1)),
                (7_001, Origin::Attack(1))
            ]
        );
        assert_eq!((waves.attack_start_ns, waves.attack_end_ns), (3_000, 7_001));
    }

    #[test]
    fn concatenated_captures_follow_each_other_with_their_own_timing() {
        let days_later = vec![frame(900_000_000, 2), frame(900_000_500, 2)];
        let first = vec![frame(1_000, 1), frame(1_400, 1)];
        let got: Vec<(u64, u8)> =
            concatenate(vec![first, vec![], days_later], 100).iter().map(|f| (f.ts_ns, f.data[0])).collect();
        assert_eq!(got, [(1_000, 1), (1_400, 1), (1_500, 2), (2_000, 2)]);
    }

    #[test]
    fn the_attacker_sends_most_and_the_device_ip_is_its_usual_source() {
        let frames: Vec<OwnedFrame> = [
            ipv4(&ATTACKER, &VICTIM, 6, tcp_syn(22), false),
            ipv4(&ATTACKER, &VICTIM, 6, tcp_syn(23), false),
            ipv4(&VICTIM, &ATTACKER, 6, tcp_syn(40000), false),
        ]
        .into_iter()
        .map(|data| OwnedFrame { ts_ns: 0, orig_len: 60, data })
        .collect();
        assert_eq!(attacker(&frames, None), Some(ATTACKER));
        assert_eq!(attacker(&frames, Some(VICTIM.ip)), Some(VICTIM));
        assert_eq!(attacker(&frames, Some(Ipv4Addr::new(1, 2, 3, 4))), None);
        assert_eq!(device_ip(&frames, VICTIM.mac), Some(VICTIM.ip));
        assert_eq!(device_ip(&frames, DEVICE.mac), None);
        // An ARP sweep sends nothing but who-has requests: its sender is the attacker.
        let sweep: Vec<OwnedFrame> = (1..=3u8)
            .map(|h| arp_request(&ATTACKER, Ipv4Addr::new(172, 16, 0, h)))
            .chain([ipv4(&VICTIM, &ATTACKER, 6, tcp_syn(40000), false)])
            .map(|data| OwnedFrame { ts_ns: 0, orig_len: 60, data })
            .collect();
        assert_eq!(attacker(&sweep, None), Some(ATTACKER));
    }
}
