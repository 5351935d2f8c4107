//! Hosts on the wire that no device list names. A SPAN port shows them all; dropping
//! their packets silently would hide a device nobody onboarded, so each new sender is
//! logged once and counted, and with discovery it becomes a device named by its MAC.

use std::collections::HashSet;

use crate::traffic::devices::{format_mac, Device};

/// Distinct unlisted MACs remembered (for "logged once"); beyond it a new MAC is
/// counted but not remembered, so a flood of spoofed sources cannot grow memory.
const REMEMBERED: usize = 65_536;

/// What to do with an unlisted sender.
#[derive(Debug, PartialEq, Eq)]
pub enum Unlisted {
    /// Seen for the first time: log it.
    New(String),
    /// Already seen (or not a host: multicast, broadcast, no MAC).
    Known,
    /// List it as a device (discovery) under this name.
    Discover(Device),
}

pub struct UnknownMacs {
    seen: HashSet<u64>,
    discover: bool,
    max_discovered: usize,
    discovered: usize,
}

/// Group bit of the first octet: multicast and broadcast addresses name no host.
fn is_host(mac: u64) -> bool {
    mac >> 40 & 1 == 0 && mac != 0
}

impl UnknownMacs {
    pub fn new(discover: bool, max_discovered: usize) -> Self {
        Self { seen: HashSet::new(), discover, max_discovered, discovered: 0 }
    }

    /// A frame's sender that no list names.
    pub fn observe(&mut self, src: Option<u64>) -> Unlisted {
        let Some(mac) = src.filter(|m| is_host(*m)) else { return Unlisted::Known };
        if self.seen.contains(&mac) || self.seen.len() >= REMEMBERED {
            return Unlisted::Known;
        }
        self.seen.insert(mac);
        if self.discover && self.discovered < self.max_discovered {
            self.discovered += 1;
            return Unlisted::Discover(Device { name: format_mac(mac), mac });
        }
        Unlisted::New(format_mac(mac))
    }

    /// Unlisted senders seen (discovered ones included).
    pub fn seen(&self) -> usize {
        self.seen.len()
    }

    pub fn discovered(&self) -> usize {
        self.discovered
    }

    /// After a device list is re-read: MACs it now names are no longer unknown, and one
    /// it dropped is news again.
    pub fn forget(&mut self, macs: impl IntoIterator<Item = u64>) {
        for mac in macs {
            self.seen.remove(&mac);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_unlisted_host_is_news_once_and_group_addresses_never() {
        let mut u = UnknownMacs::new(false, 0);
        assert_eq!(u.observe(Some(0x0200_0000_0001)), Unlisted::New("02:00:00:00:00:01".into()));
        assert_eq!(u.observe(Some(0x0200_0000_0001)), Unlisted::Known);
        assert_eq!(u.observe(Some(0xffff_ffff_ffff)), Unlisted::Known);
        assert_eq!(u.observe(Some(0x0100_5e00_0001)), Unlisted::Known);
        assert_eq!(u.observe(None), Unlisted::Known);
        assert_eq!(u.seen(), 1);
    }

    #[test]
    fn discovery_lists_hosts_up_to_its_bound() {
        let mut u = UnknownMacs::new(true, 1);
        let first = u.observe(Some(0x0200_0000_0001));
        assert_eq!(
            first,
            Unlisted::Discover(Device { name: "02:00:00:00:00:01".into(), mac: 0x0200_0000_0001 })
        );
        assert_eq!(u.observe(Some(0x0200_0000_0002)), Unlisted::New("02:00:00:00:00:02".into()));
        assert_eq!(u.discovered(), 1);
    }
}
