//! A live capture on one interface through libpcap (on Linux its TPACKET_V3 ring):
//! frames as `metapu extract` reads them from a file, the kernel's drop count, and
//! optionally every captured frame written to a pcap file (`--save`) for forensics
//! and for checking the sensor against `metapu extract`.

use std::path::PathBuf;

use crate::traffic::capture::{Frame, Timestamp};
use crate::traffic::frame::Link;

#[derive(Debug, thiserror::Error)]
pub enum LiveError {
    #[error("cannot capture on '{interface}': {reason}")]
    Open { interface: String, reason: String },
    #[error("'{interface}' delivers link type {code}, which names no MAC addresses to tell devices apart by (needs Ethernet or Linux cooked)")]
    LinkType { interface: String, code: i32 },
    #[error("filter '{filter}': {reason}")]
    Filter { filter: String, reason: String },
    #[error("{}: {reason}", path.display())]
    Save { path: PathBuf, reason: String },
    #[error("capturing on '{interface}': {reason}")]
    Read { interface: String, reason: String },
    #[error("'{interface}' went down")]
    Down { interface: String },
}

#[derive(Debug, Clone)]
pub struct LiveOptions {
    pub interface: String,
    /// BPF in tcpdump's syntax; empty = every packet.
    pub filter: String,
    pub snaplen: i32,
    pub promiscuous: bool,
    pub buffer_bytes: i32,
    pub save: Option<PathBuf>,
}

/// How long a read waits for a frame before it returns none, so that the loop can
/// look at its controls (stop, reload) on a quiet link.
const POLL_MS: i32 = 100;

pub struct LiveCapture {
    interface: String,
    capture: ::pcap::Capture<::pcap::Active>,
    link: Link,
    save: Option<(::pcap::Savefile, PathBuf)>,
    index: u64,
    /// The last read returned a frame, so more may be waiting in the ring.
    buffered: bool,
}

impl LiveCapture {
    pub fn open(o: &LiveOptions) -> Result<Self, LiveError> {
        let open_error =
            |e: ::pcap::Error| LiveError::Open { interface: o.interface.clone(), reason: e.to_string() };
        let mut capture = ::pcap::Capture::from_device(o.interface.as_str())
            .map_err(open_error)?
            .promisc(o.promiscuous)
            .snaplen(o.snaplen)
            .buffer_size(o.buffer_bytes)
            // Not immediate mode: libpcap would use a TPACKET_V2 ring of snaplen-sized
            // slots (256 of them in 16 MB at 65,535 bytes; a burst of 2,000 small frames
            // lost 347). TPACKET_V3 packs frames into blocks, and the timeout bounds how
            // long a quiet link's frame waits in an unfilled block.
            .timeout(POLL_MS)
            .open()
            .and_then(|c| c.setnonblock())
            .map_err(open_error)?;
        if !o.filter.trim().is_empty() {
            capture
                .filter(&o.filter, true)
                .map_err(|e| LiveError::Filter { filter: o.filter.clone(), reason: e.to_string() })?;
        }
        let code = capture.get_datalink().0;
        let link = u32::try_from(code)
            .ok()
            .and_then(Link::from_code)
            .filter(|l| matches!(l, Link::Ethernet | Link::LinuxCooked | Link::LinuxCookedV2))
            .ok_or_else(|| LiveError::LinkType { interface: o.interface.clone(), code })?;
        let save = match &o.save {
            Some(path) => Some((
                capture
                    .savefile(path)
                    .map_err(|e| LiveError::Save { path: path.clone(), reason: e.to_string() })?,
                path.clone(),
            )),
            None => None,
        };
        Ok(Self { interface: o.interface.clone(), capture, link, save, index: 0, buffered: false })
    }

    /// The next frame, or `None` when none came within the poll interval.
    ///
    /// Non-blocking reads and our own poll: on a TPACKET_V3 ring libpcap's blocking read
    /// ignores its timeout and waits for traffic, so a quiet link would never let the
    /// loop see a stop, a reload or its housekeeping.
    pub fn next_frame(&mut self) -> Result<Option<Frame<'_>>, LiveError> {
        if !self.buffered {
            self.wait_readable()?;
        }
        let packet = match self.capture.next_packet() {
            Ok(p) => p,
            Err(::pcap::Error::TimeoutExpired) => {
                self.buffered = false;
                return Ok(None);
            }
            Err(e) => {
                return Err(LiveError::Read { interface: self.interface.clone(), reason: e.to_string() })
            }
        };
        self.buffered = true;
        if let Some((save, _)) = &mut self.save {
            save.write(&packet);
        }
        let ts = Timestamp::from_micros(
            u64::try_from(packet.header.ts.tv_sec).unwrap_or(0),
            u64::try_from(packet.header.ts.tv_usec).unwrap_or(0),
        );
        let frame =
            Frame { index: self.index, ts, link: self.link, orig_len: packet.header.len, data: packet.data };
        self.index += 1;
        Ok(Some(frame))
    }

    fn wait_readable(&mut self) -> Result<(), LiveError> {
        use std::os::fd::AsRawFd;
        let mut fd = libc::pollfd { fd: self.capture.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        // SAFETY: one valid pollfd for the duration of the call.
        let n = unsafe { libc::poll(&mut fd, 1, POLL_MS) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::Interrupted {
                return Err(LiveError::Read { interface: self.interface.clone(), reason: e.to_string() });
            }
        }
        // Readable or not, the read that follows tells (errors included).
        self.buffered = true;
        Ok(())
    }

    /// Packets the kernel dropped since the capture opened (its ring was full) and
    /// those the interface itself dropped.
    pub fn kernel_drops(&mut self) -> Result<u64, LiveError> {
        let s = self
            .capture
            .stats()
            .map_err(|e| LiveError::Read { interface: self.interface.clone(), reason: e.to_string() })?;
        Ok(u64::from(s.dropped) + u64::from(s.if_dropped))
    }

    /// libpcap reads on from an interface that was taken down (nothing arrives), so the
    /// sensor asks the kernel: a sensor on a dead link must fail where systemd sees it.
    pub fn check_up(&self) -> Result<(), LiveError> {
        let flags = std::fs::read_to_string(format!("/sys/class/net/{}/flags", self.interface));
        let Ok(flags) = flags else {
            // "any", or an interface that is gone (then the next read fails).
            return Ok(());
        };
        let up = u32::from_str_radix(flags.trim().trim_start_matches("0x"), 16).map_or(true, |f| f & 1 == 1);
        if up {
            Ok(())
        } else {
            Err(LiveError::Down { interface: self.interface.clone() })
        }
    }

    /// Write out what `--save` holds so far.
    pub fn flush_saved(&mut self) -> Result<(), LiveError> {
        if let Some((save, path)) = &mut self.save {
            save.flush().map_err(|e| LiveError::Save { path: path.clone(), reason: e.to_string() })?;
        }
        Ok(())
    }
}
