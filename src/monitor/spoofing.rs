//! The spoofed-sources look: one device sending from many source addresses within the
//! fan-out look's window. An IoT device has one IPv4 address and a few IPv6 ones; a bot's
//! flood that forges its source (BASHLITE's UDP flood, Mirai's with random sources)
//! sends from a new one every packet, and a victim's answers never come back to the
//! device, so the model sees small one-way packets to one more peer. The frames still
//! carry the device's MAC, which is how the sensor knows they are its. In memory, as the
//! rest of the fan-out look's window.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;

/// Packets kept per device at most, as the fan-out look keeps its attempts (a window's
/// worth of a flood is counted, not kept beyond this: the oldest go first).
const MAX_PACKETS: usize = 8192;

#[derive(Debug, Default)]
pub struct Sources {
    /// (time, source address) of each packet the device sent in the window.
    sent: VecDeque<(f64, IpAddr)>,
    counts: HashMap<IpAddr, u32>,
}

impl Sources {
    /// One packet the device sent from `source` at device time `ts`: the distinct
    /// source addresses it sent from since `ts - window_s`.
    pub fn observe(&mut self, source: IpAddr, ts: f64, window_s: f64) -> usize {
        while self.sent.front().is_some_and(|s| s.0 < ts - window_s) || self.sent.len() >= MAX_PACKETS {
            let Some((_, old)) = self.sent.pop_front() else { break };
            if let Some(n) = self.counts.get_mut(&old) {
                *n -= 1;
                if *n == 0 {
                    self.counts.remove(&old);
                }
            }
        }
        if !source.is_unspecified() {
            self.sent.push_back((ts, source));
            *self.counts.entry(source).or_default() += 1;
        }
        self.counts.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_are_counted_within_the_window_and_dhcps_none_is_not() {
        let mut s = Sources::default();
        let ip = |i: u8| IpAddr::from([10, 0, 0, i]);
        for i in 0..100 {
            assert_eq!(s.observe(ip(5), f64::from(i), 300.0), 1, "its own address all along");
        }
        assert_eq!(s.observe(IpAddr::from([0, 0, 0, 0]), 100.0, 300.0), 1, "a DHCP discover");
        assert_eq!(s.observe("fe80::1".parse().unwrap(), 100.0, 300.0), 2);
        assert_eq!(s.observe(ip(9), 100.0, 300.0), 3);
        assert_eq!(s.observe(ip(5), 500.0, 300.0), 1, "the others left the window");
    }
}
