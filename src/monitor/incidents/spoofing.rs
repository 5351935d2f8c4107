//! The spoofed-sources look: one device sending from many source addresses within the
//! fan-out look's window. An IoT device has one IPv4 address and a few IPv6 ones; a bot's
//! flood that forges its source (BASHLITE's UDP flood, Mirai's with random sources)
//! sends from a new one every packet, and a victim's answers never come back to the
//! device, so the model sees small one-way packets to one more peer. The frames still
//! carry the device's MAC, which is how the sensor knows they are its. In memory, as the
//! rest of the fan-out look's window.

use std::net::IpAddr;

/// Source addresses remembered at most: beyond, the oldest is forgotten (a forged
/// flood has a new one every packet; the threshold is far below).
const MAX_SOURCES: usize = 256;

#[derive(Debug, Default)]
pub struct Sources {
    /// Each source address the device sent from within the window, and when last. A
    /// device has one or a few, so a packet costs a scan of a short list.
    last_sent: Vec<(IpAddr, f64)>,
}

impl Sources {
    /// One packet the device sent from `source` at device time `ts`: the distinct
    /// source addresses it sent from since `ts - window_s`.
    pub fn observe(&mut self, source: IpAddr, ts: f64, window_s: f64) -> usize {
        if !source.is_unspecified() {
            match self.last_sent.iter_mut().find(|s| s.0 == source) {
                Some(s) => s.1 = ts,
                None => self.last_sent.push((source, ts)),
            }
        }
        self.last_sent.retain(|s| s.1 >= ts - window_s);
        if self.last_sent.len() > MAX_SOURCES {
            self.last_sent.remove(0);
        }
        self.last_sent.len()
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
