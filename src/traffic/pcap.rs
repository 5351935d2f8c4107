//! Classic libpcap files (microsecond or nanosecond, either byte order) with
//! Ethernet, raw-IP or Linux-cooked frames → `Packet`s. pcapng is refused with a
//! hint; converting with `editcap -F pcap` is one command away.

use std::io::Read;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::packet::{host_of_ip, host_of_mac, Packet};

#[derive(Debug, thiserror::Error)]
pub enum PcapError {
    #[error("reading the capture: {0}")]
    Io(#[from] std::io::Error),
    #[error("this is pcapng, not classic pcap: convert it with `editcap -F pcap in.pcapng out.pcap`")]
    PcapNg,
    #[error("not a pcap file (magic {0:#010x})")]
    Magic(u32),
    #[error("link type {0} is not supported (Ethernet 1, raw IP 101/228/229, Linux cooked 113 are)")]
    LinkType(u32),
    #[error("record {index}: captured length {len} exceeds the snapshot length {snaplen}")]
    Record { index: u64, len: u32, snaplen: u32 },
}

#[derive(Clone, Copy)]
enum Link {
    Ethernet,
    RawIp,
    LinuxCooked,
}

pub struct PcapReader<R> {
    input: R,
    swapped: bool,
    nanos: bool,
    link: Link,
    snaplen: u32,
    index: u64,
    frame: Vec<u8>,
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

impl<R: Read> PcapReader<R> {
    pub fn new(mut input: R) -> Result<Self, PcapError> {
        let mut header = [0u8; 24];
        input.read_exact(&mut header)?;
        let magic = u32::from_le_bytes([header[0], header[1], header[2], header[3]]);
        let (swapped, nanos) = match magic {
            0xa1b2_c3d4 => (false, false),
            0xa1b2_3c4d => (false, true),
            0xd4c3_b2a1 => (true, false),
            0x4d3c_b2a1 => (true, true),
            0x0a0d_0d0a => return Err(PcapError::PcapNg),
            other => return Err(PcapError::Magic(other)),
        };
        let word = |at: usize| {
            let b = [header[at], header[at + 1], header[at + 2], header[at + 3]];
            if swapped {
                u32::from_be_bytes(b)
            } else {
                u32::from_le_bytes(b)
            }
        };
        let link = match word(20) & 0x0fff_ffff {
            1 => Link::Ethernet,
            101 | 228 | 229 => Link::RawIp,
            113 => Link::LinuxCooked,
            other => return Err(PcapError::LinkType(other)),
        };
        Ok(Self { input, swapped, nanos, link, snaplen: word(16).max(65_535), index: 0, frame: Vec::new() })
    }

    fn word(&self, b: &[u8]) -> u32 {
        let b = [b[0], b[1], b[2], b[3]];
        if self.swapped {
            u32::from_be_bytes(b)
        } else {
            u32::from_le_bytes(b)
        }
    }

    /// The next packet AfterImage can use; frames it cannot parse are skipped.
    pub fn next_packet(&mut self) -> Result<Option<Packet>, PcapError> {
        loop {
            let mut header = [0u8; 16];
            match self.input.read_exact(&mut header) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
                Err(e) => return Err(e.into()),
            }
            let (secs, frac) = (self.word(&header[0..4]), self.word(&header[4..8]));
            let (captured, original) = (self.word(&header[8..12]), self.word(&header[12..16]));
            self.index += 1;
            if captured > self.snaplen.max(262_144) {
                return Err(PcapError::Record { index: self.index, len: captured, snaplen: self.snaplen });
            }
            self.frame.resize(captured as usize, 0);
            self.input.read_exact(&mut self.frame)?;
            let ts = f64::from(secs) + f64::from(frac) * if self.nanos { 1e-9 } else { 1e-6 };
            if let Some(p) = parse_frame(self.link, &self.frame, ts, original) {
                return Ok(Some(p));
            }
        }
    }
}

fn mac(b: &[u8]) -> u64 {
    b.iter().take(6).fold(0u64, |acc, &x| (acc << 8) | u64::from(x))
}

fn parse_frame(link: Link, f: &[u8], ts: f64, len: u32) -> Option<Packet> {
    let (src_mac, dst_mac, mut ethertype, mut at) = match link {
        Link::Ethernet => (mac(f.get(6..12)?), Some(mac(f.get(0..6)?)), u16_at(f, 12)?, 14),
        Link::LinuxCooked => (mac(f.get(6..12)?), None, u16_at(f, 14)?, 16),
        Link::RawIp => {
            let version = f.first()? >> 4;
            (0, None, if version == 6 { 0x86dd } else { 0x0800 }, 0)
        }
    };
    while ethertype == 0x8100 || ethertype == 0x88a8 {
        ethertype = u16_at(f, at + 2)?;
        at += 4;
    }
    let mut p = Packet { ts, src_mac, src: host_of_mac(src_mac), dst: 0, src_port: 0, dst_port: 0, len };
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
            (0, 0)
        }
        _ => (0, 0),
    };
    if proto == 6 || proto == 17 {
        p.src_port = u16_at(f, l4).unwrap_or(0);
        p.dst_port = u16_at(f, l4 + 2).unwrap_or(0);
    }
    Some(p)
}

/// Writes classic little-endian microsecond pcap with Ethernet/IPv4 frames: the
/// simulator's `--pcap` output and the tests' fixtures.
pub struct PcapWriter<W: std::io::Write> {
    out: W,
}

impl<W: std::io::Write> PcapWriter<W> {
    pub fn new(mut out: W) -> std::io::Result<Self> {
        let mut h = Vec::with_capacity(24);
        h.extend(0xa1b2_c3d4u32.to_le_bytes());
        h.extend(2u16.to_le_bytes());
        h.extend(4u16.to_le_bytes());
        h.extend([0u8; 8]);
        h.extend(65_535u32.to_le_bytes());
        h.extend(1u32.to_le_bytes());
        out.write_all(&h)?;
        Ok(Self { out })
    }

    /// One Ethernet/IPv4 frame: TCP (proto 6) or UDP (17) headers with the ports,
    /// zero padding up to `len`. Hosts must be IPv4 (mapped) addresses.
    pub fn write(&mut self, p: &Packet, dst_mac: u64, proto: u8) -> std::io::Result<()> {
        let v4 = |h: u128| (h as u32).to_be_bytes();
        let l4_len = if proto == 6 { 20 } else { 8 };
        let len = (p.len as usize).max(14 + 20 + l4_len);
        let mut f = vec![0u8; len];
        f[0..6].copy_from_slice(&dst_mac.to_be_bytes()[2..]);
        f[6..12].copy_from_slice(&p.src_mac.to_be_bytes()[2..]);
        f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
        f[14] = 0x45;
        f[16..18].copy_from_slice(&((len - 14) as u16).to_be_bytes());
        f[22] = 64;
        f[23] = proto;
        f[26..30].copy_from_slice(&v4(p.src));
        f[30..34].copy_from_slice(&v4(p.dst));
        f[34..36].copy_from_slice(&p.src_port.to_be_bytes());
        f[36..38].copy_from_slice(&p.dst_port.to_be_bytes());
        let secs = p.ts.floor();
        let mut rec = Vec::with_capacity(16 + len);
        rec.extend((secs as u32).to_le_bytes());
        rec.extend((((p.ts - secs) * 1e6).round().min(999_999.0) as u32).to_le_bytes());
        rec.extend((len as u32).to_le_bytes());
        rec.extend((len as u32).to_le_bytes());
        self.out.write_all(&rec)?;
        self.out.write_all(&f)
    }

    pub fn finish(mut self) -> std::io::Result<W> {
        self.out.flush()?;
        Ok(self.out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(a: [u8; 4]) -> u128 {
        host_of_ip(IpAddr::V4(Ipv4Addr::from(a)))
    }

    #[test]
    fn round_trip_through_a_written_capture() {
        let packets = [
            Packet {
                ts: 1.5e9 + 0.25,
                src_mac: 0x0011_2233_4455,
                src: ip([192, 168, 1, 5]),
                dst: ip([8, 8, 8, 8]),
                src_port: 5353,
                dst_port: 53,
                len: 74,
            },
            Packet {
                ts: 1.5e9 + 0.5,
                src_mac: 0x00aa_bbcc_ddee,
                src: ip([8, 8, 8, 8]),
                dst: ip([192, 168, 1, 5]),
                src_port: 53,
                dst_port: 5353,
                len: 1514,
            },
        ];
        let mut w = PcapWriter::new(Vec::new()).unwrap();
        for (p, proto) in packets.iter().zip([17u8, 6]) {
            w.write(p, 0x1, proto).unwrap();
        }
        let bytes = w.finish().unwrap();
        let mut r = PcapReader::new(bytes.as_slice()).unwrap();
        for p in &packets {
            let got = r.next_packet().unwrap().unwrap();
            assert_eq!(
                (got.src, got.dst, got.src_port, got.dst_port, got.len, got.src_mac),
                (p.src, p.dst, p.src_port, p.dst_port, p.len, p.src_mac)
            );
            assert!((got.ts - p.ts).abs() < 1e-6);
        }
        assert!(r.next_packet().unwrap().is_none());
    }

    #[test]
    fn pcapng_and_garbage_are_refused_with_a_reason() {
        let ng = [0x0a, 0x0d, 0x0d, 0x0a, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        let err = PcapReader::new(&ng[..]).err().unwrap().to_string();
        assert!(err.contains("pcapng"), "{err}");
        assert!(PcapReader::new(&[1u8, 2, 3][..]).is_err());
    }

    #[test]
    fn truncated_frames_are_skipped_not_fatal() {
        let mut w = PcapWriter::new(Vec::new()).unwrap();
        let p = Packet {
            ts: 10.0,
            src_mac: 1,
            src: ip([10, 0, 0, 1]),
            dst: ip([10, 0, 0, 2]),
            src_port: 1,
            dst_port: 2,
            len: 60,
        };
        w.write(&p, 2, 17).unwrap();
        let mut bytes = w.finish().unwrap();
        // A second record whose frame is 3 bytes: not even an Ethernet header.
        bytes.extend(11u32.to_le_bytes());
        bytes.extend(0u32.to_le_bytes());
        bytes.extend(3u32.to_le_bytes());
        bytes.extend(3u32.to_le_bytes());
        bytes.extend([1, 2, 3]);
        let mut r = PcapReader::new(bytes.as_slice()).unwrap();
        assert!(r.next_packet().unwrap().is_some());
        assert!(r.next_packet().unwrap().is_none());
    }
}
