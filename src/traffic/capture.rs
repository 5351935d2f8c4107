//! Packet captures as they come: classic pcap (either byte order, micro- or
//! nanosecond) and pcapng (any section byte order; per-interface link type, time
//! resolution and offset), told apart by the magic bytes, never by the file name.
//! pcap-file parses the containers; this module streams them through a buffer so
//! that every error names the file and the byte offset of the record at fault, and
//! tolerates a last record cut short (a capture copied while still being written).

use std::io::Read;
use std::path::{Path, PathBuf};

use pcap_file::pcap::PcapParser;
use pcap_file::pcapng::blocks::interface_description::InterfaceDescriptionOption;
use pcap_file::pcapng::{Block, PcapNgParser};
use pcap_file::{Endianness, PcapError, TsResolution};

use super::frame::{packet_of_frame, Link};
use super::packet::Packet;

const PCAPNG_MAGIC: u32 = 0x0a0d_0d0a;
/// A pcapng block longer than this is taken as corrupt rather than waited for.
const MAX_BLOCK: usize = 16 << 20;
/// Classic pcap: a record longer than the larger of the snapshot length and this is corrupt.
const MAX_RECORD: u32 = 262_144;
const CHUNK: usize = 1 << 20;

#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    #[error("{}: {reason}", path.display())]
    Io { path: PathBuf, reason: std::io::Error },
    #[error("{}: not a packet capture: the magic {magic:#010x} at byte 0 is neither classic pcap nor pcapng", path.display())]
    NotACapture { path: PathBuf, magic: u32 },
    #[error("{}: link type {code} at byte {offset} is not supported ({})", path.display(), Link::SUPPORTED)]
    LinkType { path: PathBuf, code: u32, offset: u64 },
    #[error("{}: corrupt capture at byte {offset}: {reason}", path.display())]
    Corrupt { path: PathBuf, offset: u64, reason: String },
}

/// A capture time exactly as the file stores it: whole seconds and a fraction in
/// `units` per second.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Timestamp {
    secs: u64,
    frac: u64,
    units: u64,
}

impl Timestamp {
    fn new(secs: u64, frac: u64, units: u64) -> Self {
        Self { secs: secs.saturating_add(frac / units), frac: frac % units, units }
    }

    fn from_units(raw: u64, units: u64, offset_s: i64) -> Self {
        Self::new((raw / units).saturating_add_signed(offset_s), raw % units, units)
    }

    /// A live capture's time (libpcap's `timeval`): as a microsecond file reads.
    pub fn from_micros(secs: u64, micros: u64) -> Self {
        Self::new(secs, micros, 1_000_000)
    }

    pub fn from_nanos(nanos: u64) -> Self {
        Self::new(nanos / 1_000_000_000, nanos % 1_000_000_000, 1_000_000_000)
    }

    /// Seconds since the Unix epoch (for microsecond files, bit for bit what
    /// `secs + usecs * 1e-6` gives).
    pub fn seconds(&self) -> f64 {
        self.secs as f64 + self.frac as f64 * (1.0 / self.units as f64)
    }

    /// Nanoseconds since the Unix epoch (finer resolutions are truncated).
    pub fn nanos(&self) -> u64 {
        let frac = u128::from(self.frac) * 1_000_000_000 / u128::from(self.units.max(1));
        self.secs.saturating_mul(1_000_000_000).saturating_add(frac as u64)
    }
}

/// One packet record of a capture.
pub struct Frame<'a> {
    /// 0-based position among the capture's packet records, whether or not they parse.
    pub index: u64,
    pub ts: Timestamp,
    pub link: Link,
    /// Length on the wire; `data` may be shorter (the snapshot length).
    pub orig_len: u32,
    pub data: &'a [u8],
}

impl Frame<'_> {
    /// The fields AfterImage reads; `None` for a frame too short to carry them.
    pub fn packet(&self) -> Option<Packet> {
        packet_of_frame(self.link, self.data, self.ts.seconds(), self.orig_len)
    }
}

/// The file read in chunks, with the byte offset of what is left.
struct Input<R> {
    path: PathBuf,
    input: R,
    buf: Vec<u8>,
    pos: usize,
    /// File offset of `buf[0]`.
    base: u64,
}

impl<R: Read> Input<R> {
    fn avail(&self) -> &[u8] {
        &self.buf[self.pos..]
    }

    fn offset(&self) -> u64 {
        self.base + self.pos as u64
    }

    fn consume(&mut self, n: usize) {
        self.pos += n;
    }

    /// Reads more; false at the end of the file.
    fn fill(&mut self) -> Result<bool, CaptureError> {
        if self.pos > 0 {
            self.buf.drain(..self.pos);
            self.base += self.pos as u64;
            self.pos = 0;
        }
        let have = self.buf.len();
        self.buf.resize(have + CHUNK, 0);
        let got = loop {
            match self.input.read(&mut self.buf[have..]) {
                Ok(n) => break n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(reason) => {
                    self.buf.truncate(have);
                    return Err(CaptureError::Io { path: self.path.clone(), reason });
                }
            }
        };
        self.buf.truncate(have + got);
        Ok(got > 0)
    }

    fn corrupt(&self, offset: u64, reason: impl Into<String>) -> CaptureError {
        CaptureError::Corrupt { path: self.path.clone(), offset, reason: reason.into() }
    }
}

struct Interface {
    link: Link,
    units: u64,
    offset_s: i64,
}

enum Container {
    Pcap { parser: PcapParser, link: Link, units: u64, max_len: u32 },
    PcapNg { parser: PcapNgParser, interfaces: Vec<Interface> },
}

/// What one look at the buffer gave.
enum Step {
    /// The record is not all in the buffer yet.
    Need,
    /// A record that is not a packet (a pcapng section or interface block, statistics…).
    Skip(usize),
    /// A packet record of this many bytes, its frame copied into `CaptureReader::frame`.
    Packet { used: usize, ts: Timestamp, link: Link, orig_len: u32 },
}

enum Fault {
    Corrupt(String),
    LinkType(u32),
}

pub struct CaptureReader<R> {
    input: Input<R>,
    container: Container,
    index: u64,
    last_ts: Timestamp,
    frame: Vec<u8>,
    truncated: bool,
}

impl CaptureReader<std::fs::File> {
    pub fn open(path: &Path) -> Result<Self, CaptureError> {
        let file =
            std::fs::File::open(path).map_err(|reason| CaptureError::Io { path: path.into(), reason })?;
        Self::new(path, file)
    }
}

impl<R: Read> CaptureReader<R> {
    /// Reads the file header; `path` names the capture in errors.
    pub fn new(path: impl Into<PathBuf>, input: R) -> Result<Self, CaptureError> {
        let mut input = Input { path: path.into(), input, buf: Vec::new(), pos: 0, base: 0 };
        while input.avail().len() < 4 {
            if !input.fill()? {
                let mut b = [0u8; 4];
                b[..input.avail().len()].copy_from_slice(input.avail());
                return Err(CaptureError::NotACapture { path: input.path, magic: u32::from_be_bytes(b) });
            }
        }
        let magic = u32::from_le_bytes(input.avail()[..4].try_into().expect("4 bytes"));
        let container = match magic {
            0xa1b2_c3d4 | 0xa1b2_3c4d | 0xd4c3_b2a1 | 0x4d3c_b2a1 => {
                let (used, parser) = loop {
                    let have = input.avail().len();
                    match PcapParser::new(input.avail()).map(|(rem, parser)| (have - rem.len(), parser)) {
                        Ok(parsed) => break parsed,
                        Err(PcapError::IncompleteBuffer) if input.fill()? => {}
                        Err(_) => return Err(input.corrupt(0, "the file header is cut short")),
                    }
                };
                input.consume(used);
                let header = parser.header();
                let code = u32::from(header.datalink);
                let link = Link::from_code(code).ok_or(CaptureError::LinkType {
                    path: input.path.clone(),
                    code,
                    offset: 20,
                })?;
                let units = match header.ts_resolution {
                    TsResolution::MicroSecond => 1_000_000,
                    TsResolution::NanoSecond => 1_000_000_000,
                };
                Container::Pcap { parser, link, units, max_len: header.snaplen.max(MAX_RECORD) }
            }
            PCAPNG_MAGIC => {
                let (used, parser) = loop {
                    let have = input.avail().len();
                    match PcapNgParser::new(input.avail()).map(|(rem, parser)| (have - rem.len(), parser)) {
                        Ok(parsed) => break parsed,
                        Err(PcapError::IncompleteBuffer) if input.fill()? => {}
                        Err(PcapError::IncompleteBuffer) => {
                            return Err(input.corrupt(0, "the section header block is cut short"))
                        }
                        Err(e) => return Err(input.corrupt(0, format!("section header block: {e}"))),
                    }
                };
                input.consume(used);
                Container::PcapNg { parser, interfaces: Vec::new() }
            }
            _ => return Err(CaptureError::NotACapture { path: input.path, magic: magic.swap_bytes() }),
        };
        Ok(Self {
            input,
            container,
            index: 0,
            last_ts: Timestamp::default(),
            frame: Vec::new(),
            truncated: false,
        })
    }

    /// Whether the capture ended inside a record (which was then left out, with a warning).
    pub fn truncated(&self) -> bool {
        self.truncated
    }

    /// The next packet record, or `None` at the end of the capture.
    pub fn next_frame(&mut self) -> Result<Option<Frame<'_>>, CaptureError> {
        loop {
            let offset = self.input.offset();
            let avail = &self.input.buf[self.input.pos..];
            let step = match &mut self.container {
                Container::Pcap { parser, link, units, max_len } => {
                    pcap_step(parser, *link, *units, *max_len, avail, &mut self.frame)
                }
                Container::PcapNg { parser, interfaces } => {
                    pcapng_step(parser, interfaces, self.last_ts, avail, &mut self.frame)
                }
            };
            match step {
                Ok(Step::Need) => {
                    if !self.input.fill()? {
                        let left = self.input.avail().len();
                        if left > 0 {
                            tracing::warn!(
                                "{}: the last record, at byte {offset}, is cut short ({left} bytes); left out",
                                self.input.path.display()
                            );
                            self.truncated = true;
                            self.input.consume(left);
                        }
                        return Ok(None);
                    }
                }
                Ok(Step::Skip(used)) => self.input.consume(used),
                Ok(Step::Packet { used, ts, link, orig_len }) => {
                    self.input.consume(used);
                    self.last_ts = ts;
                    let index = self.index;
                    self.index += 1;
                    return Ok(Some(Frame { index, ts, link, orig_len, data: &self.frame }));
                }
                Err(Fault::Corrupt(reason)) => return Err(self.input.corrupt(offset, reason)),
                Err(Fault::LinkType(code)) => {
                    return Err(CaptureError::LinkType { path: self.input.path.clone(), code, offset })
                }
            }
        }
    }
}

fn word(b: &[u8], endianness: Endianness) -> u32 {
    let b: [u8; 4] = b[..4].try_into().expect("4 bytes");
    match endianness {
        Endianness::Big => u32::from_be_bytes(b),
        Endianness::Little => u32::from_le_bytes(b),
    }
}

fn pcap_step(
    parser: &PcapParser,
    link: Link,
    units: u64,
    max_len: u32,
    avail: &[u8],
    frame: &mut Vec<u8>,
) -> Result<Step, Fault> {
    if avail.len() < 16 {
        return Ok(Step::Need);
    }
    let captured = word(&avail[8..], parser.header().endianness);
    if captured > max_len {
        return Err(Fault::Corrupt(format!(
            "a record of {captured} bytes, over the snapshot length {max_len}"
        )));
    }
    match parser.next_raw_packet(avail) {
        Ok((rem, raw)) => {
            frame.clear();
            frame.extend_from_slice(&raw.data);
            let ts = Timestamp::new(u64::from(raw.ts_sec), u64::from(raw.ts_frac), units);
            Ok(Step::Packet { used: avail.len() - rem.len(), ts, link, orig_len: raw.orig_len })
        }
        Err(PcapError::IncompleteBuffer) => Ok(Step::Need),
        Err(e) => Err(Fault::Corrupt(e.to_string())),
    }
}

/// pcapng's `if_tsresol`: 10^-v seconds, or 2^-v with the top bit set; microseconds
/// when absent.
fn units_per_second(resolution: Option<u8>) -> Result<u64, Fault> {
    let units = match resolution {
        None => Some(1_000_000),
        Some(v) if v & 0x80 != 0 => 1u64.checked_shl(u32::from(v & 0x7f)),
        Some(v) => 10u64.checked_pow(u32::from(v)),
    };
    units.ok_or(Fault::Corrupt(format!("interface time resolution {resolution:?} is out of range")))
}

fn pcapng_step(
    parser: &mut PcapNgParser,
    interfaces: &mut Vec<Interface>,
    last_ts: Timestamp,
    avail: &[u8],
    frame: &mut Vec<u8>,
) -> Result<Step, Fault> {
    if avail.len() < 12 {
        return Ok(Step::Need);
    }
    // The block's length in its section's byte order; a new section says its own.
    let endianness = if word(avail, Endianness::Little) == PCAPNG_MAGIC {
        match word(&avail[8..], Endianness::Big) {
            0x1a2b_3c4d => Endianness::Big,
            0x4d3c_2b1a => Endianness::Little,
            other => return Err(Fault::Corrupt(format!("section header byte-order magic {other:#010x}"))),
        }
    } else {
        parser.section().endianness
    };
    let len = word(&avail[4..], endianness) as usize;
    if len < 12 || len % 4 != 0 || len > MAX_BLOCK {
        return Err(Fault::Corrupt(format!("a block length of {len} bytes")));
    }
    if avail.len() < len {
        return Ok(Step::Need);
    }
    // The whole block is there: anything the parser still misses is corruption.
    let block = &avail[..len];
    let corrupt = |e: PcapError| Fault::Corrupt(e.to_string());
    // Blocks that hold neither packets nor what reading them needs (statistics, name
    // resolution, journal entries, custom blocks) are checked for framing only.
    if !matches!(word(block, endianness), PCAPNG_MAGIC | 1 | 2 | 3 | 6) {
        parser.next_raw_block(block).map_err(corrupt)?;
        return Ok(Step::Skip(len));
    }
    let (_, block) = parser.next_block(block).map_err(corrupt)?;
    let packet = |interface: u32, raw: Option<u64>, orig_len: u32, data: &[u8], frame: &mut Vec<u8>| {
        let iface = interfaces.get(interface as usize).ok_or_else(|| {
            Fault::Corrupt(format!("a packet on interface {interface}, which no interface block describes"))
        })?;
        frame.clear();
        frame.extend_from_slice(data);
        let ts = raw.map_or(last_ts, |raw| Timestamp::from_units(raw, iface.units, iface.offset_s));
        Ok(Step::Packet { used: len, ts, link: iface.link, orig_len })
    };
    match block {
        Block::SectionHeader(_) => {
            interfaces.clear();
            Ok(Step::Skip(len))
        }
        Block::InterfaceDescription(idb) => {
            let code = u32::from(idb.linktype);
            let link = Link::from_code(code).ok_or(Fault::LinkType(code))?;
            let (mut resolution, mut offset_s) = (None, 0i64);
            for option in &idb.options {
                match option {
                    InterfaceDescriptionOption::IfTsResol(v) => resolution = Some(*v),
                    InterfaceDescriptionOption::IfTsOffset(s) => offset_s = *s as i64,
                    _ => {}
                }
            }
            interfaces.push(Interface { link, units: units_per_second(resolution)?, offset_s });
            Ok(Step::Skip(len))
        }
        // pcap-file 2.0 keeps an enhanced packet's raw time count in a Duration's
        // nanoseconds, whatever the interface's resolution: scale it here.
        Block::EnhancedPacket(epb) => {
            let raw = u64::try_from(epb.timestamp.as_nanos()).unwrap_or(u64::MAX);
            packet(epb.interface_id, Some(raw), epb.original_len, &epb.data, frame)
        }
        Block::Packet(pb) => {
            packet(u32::from(pb.interface_id), Some(pb.timestamp), pb.original_len, &pb.data, frame)
        }
        // A simple packet carries no time: it keeps the previous packet's.
        Block::SimplePacket(spb) => packet(0, None, spb.original_len, &spb.data, frame),
        _ => Ok(Step::Skip(len)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pcapng block in little-endian byte order, padded to 32 bits.
    fn block(kind: u32, body: &[u8]) -> Vec<u8> {
        let padded = body.len().div_ceil(4) * 4;
        let len = (12 + padded) as u32;
        let mut b = Vec::new();
        b.extend(kind.to_le_bytes());
        b.extend(len.to_le_bytes());
        b.extend(body);
        b.resize(8 + padded, 0);
        b.extend(len.to_le_bytes());
        b
    }

    fn section() -> Vec<u8> {
        let mut body = Vec::new();
        body.extend(0x1a2b_3c4du32.to_le_bytes());
        body.extend(1u16.to_le_bytes());
        body.extend(0u16.to_le_bytes());
        body.extend((-1i64).to_le_bytes());
        block(PCAPNG_MAGIC, &body)
    }

    fn interface(link: u16, tsresol: Option<u8>) -> Vec<u8> {
        let mut body = Vec::new();
        body.extend(link.to_le_bytes());
        body.extend(0u16.to_le_bytes());
        body.extend(0u32.to_le_bytes());
        if let Some(v) = tsresol {
            body.extend(9u16.to_le_bytes());
            body.extend(1u16.to_le_bytes());
            body.extend([v, 0, 0, 0]);
            body.extend([0u8; 4]);
        }
        block(1, &body)
    }

    fn enhanced(interface: u32, raw_time: u64, frame: &[u8]) -> Vec<u8> {
        let mut body = Vec::new();
        body.extend(interface.to_le_bytes());
        body.extend(((raw_time >> 32) as u32).to_le_bytes());
        body.extend((raw_time as u32).to_le_bytes());
        body.extend((frame.len() as u32).to_le_bytes());
        body.extend((frame.len() as u32).to_le_bytes());
        body.extend(frame);
        block(6, &body)
    }

    /// An Ethernet/IPv4/UDP frame from 10.0.0.2 to 10.0.0.1.
    fn udp_frame() -> Vec<u8> {
        let mut f = vec![0u8; 42];
        f[0..6].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
        f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 2]);
        f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
        f[14] = 0x45;
        f[23] = 17;
        f[26..30].copy_from_slice(&[10, 0, 0, 2]);
        f[30..34].copy_from_slice(&[10, 0, 0, 1]);
        f[34..36].copy_from_slice(&1234u16.to_be_bytes());
        f[36..38].copy_from_slice(&53u16.to_be_bytes());
        f
    }

    fn read_all(bytes: &[u8]) -> Result<Vec<(u64, f64, u16)>, CaptureError> {
        let mut r = CaptureReader::new("test.pcapng", bytes)?;
        let mut out = Vec::new();
        while let Some(f) = r.next_frame()? {
            let p = f.packet().expect("a parsable frame");
            out.push((f.index, f.ts.seconds(), p.dst_port));
        }
        Ok(out)
    }

    #[test]
    fn pcapng_packets_keep_their_interface_resolution() {
        let t = 1_500_000_000u64;
        let mut bytes = section();
        bytes.extend(interface(1, None)); // microseconds
        bytes.extend(interface(1, Some(9))); // nanoseconds
        bytes.extend(enhanced(0, t * 1_000_000 + 250_000, &udp_frame()));
        bytes.extend(block(5, &[0u8; 4])); // interface statistics, too short to parse: framing is enough
        bytes.extend(enhanced(1, t * 1_000_000_000 + 500_000_000, &udp_frame()));
        let got = read_all(&bytes).unwrap();
        assert_eq!(got.len(), 2);
        assert_eq!((got[0].0, got[1].0), (0, 1));
        assert_eq!(got[0].1, 1.5e9 + 0.25);
        assert_eq!(got[1].1, 1.5e9 + 0.5);
        assert_eq!(got[0].2, 53);
    }

    #[test]
    fn a_last_record_cut_short_is_left_out_and_the_rest_read() {
        let mut bytes = section();
        bytes.extend(interface(1, None));
        bytes.extend(enhanced(0, 1_000_000, &udp_frame()));
        let whole = bytes.len();
        bytes.extend(enhanced(0, 2_000_000, &udp_frame()));
        bytes.truncate(whole + 30);
        let mut r = CaptureReader::new("cut.pcapng", bytes.as_slice()).unwrap();
        assert!(r.next_frame().unwrap().is_some());
        assert!(r.next_frame().unwrap().is_none());
        assert!(r.truncated());
    }

    #[test]
    fn corrupt_blocks_and_unknown_links_name_the_file_and_offset() {
        let mut bytes = section();
        bytes.extend(interface(1, None));
        let at = bytes.len();
        let mut bad = enhanced(0, 1, &udp_frame());
        let n = bad.len();
        bad[n - 4..].copy_from_slice(&7u32.to_le_bytes()); // trailer ≠ header length
        bytes.extend(bad);
        let err = read_all(&bytes).unwrap_err().to_string();
        assert!(err.contains("test.pcapng") && err.contains(&format!("byte {at}")), "{err}");

        let mut bytes = section();
        let at = bytes.len();
        bytes.extend(interface(147, None)); // a user-defined link type
        let err = read_all(&bytes).unwrap_err().to_string();
        assert!(err.contains("link type 147") && err.contains(&format!("byte {at}")), "{err}");

        let mut bytes = section();
        bytes.extend(interface(1, None));
        let at = bytes.len();
        bytes.extend(enhanced(3, 1, &udp_frame()));
        let err = read_all(&bytes).unwrap_err().to_string();
        assert!(err.contains("interface 3") && err.contains(&format!("byte {at}")), "{err}");

        let err = CaptureReader::new("notes.txt", &b"hello, world"[..]).err().unwrap().to_string();
        assert!(err.contains("notes.txt") && err.contains("not a packet capture"), "{err}");
    }

    #[test]
    fn timestamps_scale_by_resolution() {
        assert_eq!(units_per_second(None).ok(), Some(1_000_000));
        assert_eq!(units_per_second(Some(3)).ok(), Some(1_000));
        assert_eq!(units_per_second(Some(0x80 | 10)).ok(), Some(1024));
        assert!(units_per_second(Some(40)).is_err());
        let ts = Timestamp::from_units(1_500_000_000_123, 1_000, 0);
        assert_eq!(ts.nanos(), 1_500_000_000_123_000_000);
        assert_eq!(
            Timestamp::from_nanos(ts.nanos()),
            Timestamp::new(1_500_000_000, 123_000_000, 1_000_000_000)
        );
    }
}
