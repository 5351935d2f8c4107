//! Which monitored device a packet belongs to, by MAC address: a gateway or SPAN
//! port sees the whole LAN, while each device's detector must see only the packets
//! that device sent or received (as N-BaIoT mirrored each device's own port).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use super::frame::mac_of_bytes;

#[derive(Debug, thiserror::Error)]
pub enum DeviceListError {
    #[error("'{0}' is not a MAC address (six hex pairs: 20:f8:5e:ca:91:52)")]
    Mac(String),
    #[error("{}: {reason}", path.display())]
    Read { path: PathBuf, reason: std::io::Error },
    #[error("{}:{line}: {reason}", path.display())]
    Line { path: PathBuf, line: usize, reason: String },
    #[error("MAC {mac} is listed twice ({first} and {second})")]
    Twice { mac: String, first: String, second: String },
    #[error("no devices listed")]
    Empty,
}

/// `20:f8:5e:ca:91:52` or `20-F8-5E-CA-91-52` → the address in the low 48 bits.
pub fn parse_mac(s: &str) -> Result<u64, DeviceListError> {
    let parts: Vec<&str> = s.trim().split([':', '-']).collect();
    let valid = parts.len() == 6 && parts.iter().all(|p| p.len() == 2);
    let bytes: Option<Vec<u8>> =
        valid.then(|| parts.iter().map(|p| u8::from_str_radix(p, 16).ok()).collect()).flatten();
    let bytes: [u8; 6] =
        bytes.and_then(|b| b.try_into().ok()).ok_or_else(|| DeviceListError::Mac(s.trim().to_string()))?;
    Ok(mac_of_bytes(&bytes))
}

pub fn format_mac(mac: u64) -> String {
    let b = mac.to_be_bytes();
    format!("{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}", b[2], b[3], b[4], b[5], b[6], b[7])
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Device {
    pub name: String,
    pub mac: u64,
}

#[derive(Debug)]
pub struct DeviceMap {
    devices: Vec<Device>,
    by_mac: HashMap<u64, usize>,
}

impl DeviceMap {
    pub fn new(devices: Vec<Device>) -> Result<Self, DeviceListError> {
        if devices.is_empty() {
            return Err(DeviceListError::Empty);
        }
        let mut by_mac = HashMap::new();
        for (i, d) in devices.iter().enumerate() {
            if let Some(first) = by_mac.insert(d.mac, i) {
                return Err(DeviceListError::Twice {
                    mac: format_mac(d.mac),
                    first: devices[first].name.clone(),
                    second: d.name.clone(),
                });
            }
        }
        Ok(Self { devices, by_mac })
    }

    /// Devices named by their MAC addresses.
    pub fn from_macs(macs: &[String]) -> Result<Self, DeviceListError> {
        let devices = macs
            .iter()
            .map(|s| parse_mac(s).map(|mac| Device { name: format_mac(mac), mac }))
            .collect::<Result<_, _>>()?;
        Self::new(devices)
    }

    /// A `name,mac` line per device; blank lines and `#` comments are skipped.
    pub fn from_file(path: &Path) -> Result<Self, DeviceListError> {
        let text = std::fs::read_to_string(path)
            .map_err(|reason| DeviceListError::Read { path: path.into(), reason })?;
        let mut devices = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let bad = |reason: String| DeviceListError::Line { path: path.into(), line: i + 1, reason };
            let (name, mac) =
                line.split_once(',').ok_or_else(|| bad(format!("'{line}' is not `name,mac`")))?;
            let name = name.trim();
            if name.is_empty() {
                return Err(bad("the device name is empty".into()));
            }
            let mac = parse_mac(mac).map_err(|e| bad(e.to_string()))?;
            devices.push(Device { name: name.to_string(), mac });
        }
        Self::new(devices)
    }

    /// A map of no devices yet (a sensor that discovers them).
    pub fn empty() -> Self {
        Self { devices: Vec::new(), by_mac: HashMap::new() }
    }

    /// List one more device; its index.
    pub fn add(&mut self, device: Device) -> Result<usize, DeviceListError> {
        if let Some(&first) = self.by_mac.get(&device.mac) {
            return Err(DeviceListError::Twice {
                mac: format_mac(device.mac),
                first: self.devices[first].name.clone(),
                second: device.name,
            });
        }
        self.by_mac.insert(device.mac, self.devices.len());
        self.devices.push(device);
        Ok(self.devices.len() - 1)
    }

    pub fn devices(&self) -> &[Device] {
        &self.devices
    }

    /// The listed devices that sent or received a frame: none, one, or two (a packet
    /// between two monitored devices belongs to both).
    pub fn route(&self, src: Option<u64>, dst: Option<u64>) -> [Option<usize>; 2] {
        let of = |mac: Option<u64>| mac.and_then(|m| self.by_mac.get(&m).copied());
        let (s, d) = (of(src), of(dst));
        [s, if d == s { None } else { d }]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn macs_parse_in_either_notation_and_bad_ones_are_named() {
        assert_eq!(parse_mac("20:f8:5e:ca:91:52").unwrap(), 0x20f8_5eca_9152);
        assert_eq!(parse_mac("20-F8-5E-CA-91-52").unwrap(), 0x20f8_5eca_9152);
        assert_eq!(format_mac(0x20f8_5eca_9152), "20:f8:5e:ca:91:52");
        for bad in ["20:f8:5e:ca:91", "20:f8:5e:ca:91:5g", "2:f8:5e:ca:91:52:00", ""] {
            assert!(parse_mac(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn packets_go_to_the_devices_that_sent_or_received_them() {
        let map = DeviceMap::from_macs(&["02:00:00:00:00:01".into(), "02:00:00:00:00:02".into()]).unwrap();
        assert_eq!(map.route(Some(0x0200_0000_0001), Some(0xffff_ffff_ffff)), [Some(0), None]);
        assert_eq!(map.route(Some(0x0200_0000_0009), Some(0x0200_0000_0002)), [None, Some(1)]);
        assert_eq!(map.route(Some(0x0200_0000_0001), Some(0x0200_0000_0002)), [Some(0), Some(1)]);
        assert_eq!(map.route(Some(7), None), [None, None]);
        assert!(DeviceMap::from_macs(&["02:00:00:00:00:01".into(), "02-00-00-00-00-01".into()]).is_err());
    }

    #[test]
    fn devices_can_be_added_but_not_twice() {
        let mut map = DeviceMap::empty();
        assert_eq!(map.route(Some(0x0200_0000_0001), None), [None, None]);
        assert_eq!(map.add(Device { name: "a".into(), mac: 0x0200_0000_0001 }).unwrap(), 0);
        assert_eq!(map.route(Some(0x0200_0000_0001), None), [Some(0), None]);
        let err = map.add(Device { name: "b".into(), mac: 0x0200_0000_0001 }).unwrap_err().to_string();
        assert!(err.contains("listed twice (a and b)"), "{err}");
    }

    #[test]
    fn device_files_name_the_bad_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("devices.csv");
        std::fs::write(&path, "# the lab\ncamera, 02:00:00:00:00:01\n\nplug,02:00:00:00:00:02 # kitchen\n")
            .unwrap();
        let map = DeviceMap::from_file(&path).unwrap();
        assert_eq!(map.devices()[1], Device { name: "plug".into(), mac: 0x0200_0000_0002 });
        std::fs::write(&path, "camera,02:00:00:00:00:01\nplug 02:00:00:00:00:02\n").unwrap();
        let err = DeviceMap::from_file(&path).unwrap_err().to_string();
        assert!(err.contains("devices.csv:2"), "{err}");
    }
}
