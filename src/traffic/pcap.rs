//! Writes classic little-endian microsecond pcap: the simulator's `--pcap` output and
//! the tests' fixtures. Reading any capture is `capture`'s job.

use super::packet::{ArpOp, Packet};

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
    /// zero padding up to `len`; or, for a packet with an ARP operation, an ARP frame
    /// (a request to the broadcast address whatever `dst_mac` says). Hosts must be IPv4
    /// (mapped) addresses.
    pub fn write(&mut self, p: &Packet, dst_mac: u64, proto: u8) -> std::io::Result<()> {
        let v4 = |h: u128| (h as u32).to_be_bytes();
        if let Some(op) = p.arp {
            return self.write_arp(p, dst_mac, op);
        }
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
        if proto == 6 {
            f[34 + 13] = p.tcp_flags;
        }
        self.record(p.ts, &f)
    }

    fn write_arp(&mut self, p: &Packet, dst_mac: u64, op: ArpOp) -> std::io::Result<()> {
        let v4 = |h: u128| (h as u32).to_be_bytes();
        let mac = |m: u64| m.to_be_bytes()[2..].to_vec();
        let (to, target_mac, code) = match op {
            ArpOp::Request => (0xffff_ffff_ffff, 0, 1u16),
            ArpOp::Reply => (dst_mac, dst_mac, 2),
        };
        let mut f = Vec::with_capacity(42);
        f.extend(mac(to));
        f.extend(mac(p.src_mac));
        f.extend(0x0806u16.to_be_bytes());
        f.extend([0, 1, 8, 0, 6, 4]);
        f.extend(code.to_be_bytes());
        f.extend(mac(p.src_mac));
        f.extend(v4(p.src));
        f.extend(mac(target_mac));
        f.extend(v4(p.dst));
        f.resize((p.len as usize).max(42), 0);
        self.record(p.ts, &f)
    }

    fn record(&mut self, ts: f64, f: &[u8]) -> std::io::Result<()> {
        let len = f.len();
        let secs = ts.floor();
        let mut rec = Vec::with_capacity(16 + len);
        rec.extend((secs as u32).to_le_bytes());
        rec.extend((((ts - secs) * 1e6).round().min(999_999.0) as u32).to_le_bytes());
        rec.extend((len as u32).to_le_bytes());
        rec.extend((len as u32).to_le_bytes());
        self.out.write_all(&rec)?;
        self.out.write_all(f)
    }

    pub fn finish(mut self) -> std::io::Result<W> {
        self.out.flush()?;
        Ok(self.out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::traffic::capture::CaptureReader;
    use crate::traffic::packet::host_of_ip;
    use std::net::{IpAddr, Ipv4Addr};

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
                proto: 17,
                tcp_flags: 0,
                arp: None,
            },
            Packet {
                ts: 1.5e9 + 0.5,
                src_mac: 0x00aa_bbcc_ddee,
                src: ip([8, 8, 8, 8]),
                dst: ip([192, 168, 1, 5]),
                src_port: 53,
                dst_port: 5353,
                len: 1514,
                proto: 6,
                tcp_flags: 0,
                arp: None,
            },
            // A who-has for 192.168.1.77: sender and target addresses, no ports.
            Packet {
                ts: 1.5e9 + 0.75,
                src_mac: 0x0011_2233_4455,
                src: ip([192, 168, 1, 5]),
                dst: ip([192, 168, 1, 77]),
                src_port: 0,
                dst_port: 0,
                len: 42,
                proto: 0,
                tcp_flags: 0,
                arp: Some(ArpOp::Request),
            },
        ];
        let mut w = PcapWriter::new(Vec::new()).unwrap();
        for (p, proto) in packets.iter().zip([17u8, 6, 0]) {
            w.write(p, 0x1, proto).unwrap();
        }
        let bytes = w.finish().unwrap();
        let mut r = CaptureReader::new("written.pcap", bytes.as_slice()).unwrap();
        for p in &packets {
            let got = r.next_frame().unwrap().unwrap().packet().unwrap();
            assert_eq!(
                (got.src, got.dst, got.src_port, got.dst_port, got.len, got.src_mac, got.arp),
                (p.src, p.dst, p.src_port, p.dst_port, p.len, p.src_mac, p.arp)
            );
            assert!((got.ts - p.ts).abs() < 1e-6);
        }
        assert!(r.next_frame().unwrap().is_none());
    }

    #[test]
    fn a_broken_pcapng_header_and_garbage_are_refused_with_a_reason() {
        let ng = [0x0a, 0x0d, 0x0d, 0x0a, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        let err = CaptureReader::new("ng.pcap", &ng[..]).err().unwrap().to_string();
        assert!(err.contains("ng.pcap: corrupt capture at byte 0"), "{err}");
        let err = CaptureReader::new("three.pcap", &[1u8, 2, 3][..]).err().unwrap().to_string();
        assert!(err.contains("not a packet capture"), "{err}");
    }

    #[test]
    fn frames_too_short_to_parse_are_records_without_a_packet() {
        let mut w = PcapWriter::new(Vec::new()).unwrap();
        let p = Packet {
            ts: 10.0,
            src_mac: 1,
            src: ip([10, 0, 0, 1]),
            dst: ip([10, 0, 0, 2]),
            src_port: 1,
            dst_port: 2,
            len: 60,
            proto: 17,
            tcp_flags: 0,
            arp: None,
        };
        w.write(&p, 2, 17).unwrap();
        let mut bytes = w.finish().unwrap();
        // A second record whose frame is 3 bytes: not even an Ethernet header.
        bytes.extend(11u32.to_le_bytes());
        bytes.extend(0u32.to_le_bytes());
        bytes.extend(3u32.to_le_bytes());
        bytes.extend(3u32.to_le_bytes());
        bytes.extend([1, 2, 3]);
        let mut r = CaptureReader::new("short.pcap", bytes.as_slice()).unwrap();
        assert!(r.next_frame().unwrap().unwrap().packet().is_some());
        let short = r.next_frame().unwrap().unwrap();
        assert_eq!((short.index, short.packet()), (1, None));
        assert!(r.next_frame().unwrap().is_none());
        assert!(!r.truncated());
    }
}
