//! The login-guessing look: many connections to one login service within the fan-out
//! look's window, from the device to one host (a bot guessing passwords elsewhere) or
//! from one host to the device (someone guessing its own). A guesser opens a connection,
//! tries two or three passwords and closes, so each is short and they come one after
//! another; the model sees a handful of small records to a known kind of peer.
//!
//! Thresholds of the anchors' order: Suricata's ET "Potential SSH Scan" counts 5 flows
//! in 60 s, Zeek's `password_guesses_limit` 30 failed logins in 30 minutes. Here:
//! `logins` connections within the window (5 minutes by default: 10), half that on a
//! login service the device never used in its normal traffic. In memory, as the rest of
//! the fan-out look's window.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;

use crate::traffic::context::{Context, Direction};

/// The login services watched, as the anchors name them.
pub const LOGIN_SERVICES: [(u16, &str); 8] = [
    (21, "ftp"),
    (22, "ssh"),
    (23, "telnet"),
    (445, "smb"),
    (2222, "ssh"),
    (2323, "telnet"),
    (3389, "rdp"),
    (5900, "vnc"),
];

/// Login packets kept per device at most (a window's worth; the oldest go first).
const MAX_PACKETS: usize = 8192;

pub fn login_name(port: u16) -> Option<&'static str> {
    LOGIN_SERVICES.iter().find(|(p, _)| *p == port).map(|(_, n)| *n)
}

/// One direction of guessing: the peer, the login port, and whether the peer connects
/// to the device (inbound) or the device to the peer.
type Key = (IpAddr, u16, bool);

#[derive(Debug, Clone, Default, PartialEq)]
struct Tally {
    /// When each connection in the window was opened, oldest first.
    opened: VecDeque<f64>,
    /// The key's packets in the window, and their bytes: a tally goes with its last
    /// packet, so a connection's late packets never count against the next tally.
    packets: u32,
    bytes: u64,
}

/// What crossed the threshold, for the finding's words.
#[derive(Debug, Clone, PartialEq)]
pub struct Guessing {
    pub peer: IpAddr,
    pub port: u16,
    pub inbound: bool,
    pub connections: u32,
    /// Bytes of both directions on those connections so far, per connection.
    pub bytes_each: u64,
    /// From the first counted connection to this one (seconds).
    pub span_s: f64,
}

#[derive(Debug, Default)]
pub struct Logins {
    /// (time, key, a connection opened, bytes) of each login packet in the window.
    packets: VecDeque<(f64, Key, bool, u32)>,
    tallies: HashMap<Key, Tally>,
}

/// The login connection a packet belongs to: its login port, whether the peer
/// connects in, and whether the packet opens it (the initiator's SYN).
fn login_packet(c: &Context) -> Option<(u16, bool, bool)> {
    if c.proto != 6 {
        return None;
    }
    let outbound = c.direction == Some(Direction::Outbound);
    // The login port is the peer's when the device connects out, the device's when the
    // peer connects in; a SYN opens, the rest of the conversation counts its bytes.
    let (port, inbound) = match (login_name(c.dst_port), login_name(c.src_port)) {
        (Some(_), _) if outbound => (c.dst_port, false),
        (_, Some(_)) if !outbound => (c.src_port, false),
        (Some(_), _) => (c.dst_port, true),
        (_, Some(_)) => (c.src_port, true),
        _ => return None,
    };
    let opens = c.is_syn() && (outbound != inbound);
    Some((port, inbound, opens))
}

impl Logins {
    /// Take one packet with `peer` at device time `ts`; the tally it crossed
    /// `threshold(port)` with, when a connection it opened did.
    pub fn observe(
        &mut self,
        c: &Context,
        peer: IpAddr,
        ts: f64,
        window_s: f64,
        threshold: impl Fn(u16) -> u32,
    ) -> Option<Guessing> {
        self.expire(ts - window_s);
        let (port, inbound, opens) = login_packet(c)?;
        let key = (peer, port, inbound);
        if !opens && !self.tallies.contains_key(&key) {
            return None;
        }
        if self.packets.len() >= MAX_PACKETS {
            self.drop_oldest();
        }
        self.packets.push_back((ts, key, opens, c.bytes));
        let t = self.tallies.entry(key).or_default();
        t.packets += 1;
        t.bytes += u64::from(c.bytes);
        if !opens {
            return None;
        }
        t.opened.push_back(ts);
        let connections = t.opened.len() as u32;
        (connections >= threshold(port).max(1)).then(|| Guessing {
            peer,
            port,
            inbound,
            connections,
            bytes_each: t.bytes / u64::from(connections),
            span_s: ts - t.opened.front().copied().unwrap_or(ts),
        })
    }

    fn expire(&mut self, before: f64) {
        while self.packets.front().is_some_and(|p| p.0 < before) {
            self.drop_oldest();
        }
    }

    fn drop_oldest(&mut self) {
        let Some((_, key, opened, bytes)) = self.packets.pop_front() else { return };
        let Some(t) = self.tallies.get_mut(&key) else { return };
        t.packets -= 1;
        t.bytes -= u64::from(bytes);
        if opened {
            t.opened.pop_front();
        }
        if t.packets == 0 {
            self.tallies.remove(&key);
        }
    }
}

/// "1.2 KiB", "340 bytes".
pub fn bytes_words(n: u64) -> String {
    if n < 1024 {
        format!("{n} bytes")
    } else if n >= 1 << 20 {
        format!("{:.1} MiB", n as f64 / f64::from(1 << 20))
    } else {
        format!("{:.1} KiB", n as f64 / 1024.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn packet(outbound: bool, flags: u8, bytes: u32) -> Context {
        let syn = Context::outbound("203.0.113.7", 22, 6, flags, bytes);
        if outbound {
            return syn;
        }
        Context {
            src_ip: syn.dst_ip,
            dst_ip: syn.src_ip,
            src_port: syn.dst_port,
            dst_port: syn.src_port,
            direction: Some(Direction::Inbound),
            ..syn
        }
    }

    /// A connection's late packets stay in the window after its SYN left it: they are
    /// its bytes, and leave without taking any from the connections after it.
    #[test]
    fn bytes_per_connection_are_those_of_the_window() {
        let peer: IpAddr = "203.0.113.7".parse().unwrap();
        let mut l = Logins::default();
        let mut take = |c: Context, ts: f64| l.observe(&c, peer, ts, 10.0, |_| 1);
        assert_eq!(take(packet(true, 0x02, 60), 0.0).map(|g| g.bytes_each), Some(60));
        assert!(take(packet(false, 0x18, 400), 9.0).is_none(), "the server's answer");
        let g = take(packet(true, 0x02, 60), 11.0).expect("a connection");
        assert_eq!((g.connections, g.bytes_each), (1, 460), "the first SYN left, its answer not");
        let g = take(packet(true, 0x02, 60), 19.5).expect("a connection");
        assert_eq!((g.connections, g.bytes_each, g.span_s), (2, 60, 8.5));
    }
}
