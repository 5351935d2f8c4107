//! What the simulated devices send: a benign profile per device type and the
//! attack phases of the two botnets N-BaIoT recorded. docs/traffic.md explains
//! where each number comes from and compares the resulting features with real rows.

use std::fmt;
use std::str::FromStr;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DeviceType {
    Doorbell,
    Thermostat,
    Camera,
    BabyMonitor,
    Webcam,
}

pub const DEVICE_TYPES: [DeviceType; 5] = [
    DeviceType::Doorbell,
    DeviceType::Thermostat,
    DeviceType::Camera,
    DeviceType::BabyMonitor,
    DeviceType::Webcam,
];

impl DeviceType {
    pub fn name(self) -> &'static str {
        match self {
            DeviceType::Doorbell => "doorbell",
            DeviceType::Thermostat => "thermostat",
            DeviceType::Camera => "camera",
            DeviceType::BabyMonitor => "baby_monitor",
            DeviceType::Webcam => "webcam",
        }
    }

    pub fn profile(self) -> Profile {
        use DeviceType::*;
        let video = |pps, size, sd| Some(Video { packets_per_s: pps, mean_bytes: size, sd_bytes: sd });
        match self {
            // Cloud keep-alive every ~20 s; a ring or motion event streams ~20 s of video.
            Doorbell => Profile {
                heartbeat_s: 20.0,
                heartbeat_bytes: (120, 90),
                dns_every_s: 120.0,
                ntp_every_s: 600.0,
                ssdp_every_s: None,
                events_per_hour: 3.0,
                event_seconds: 20.0,
                event_video: video(15.0, 900.0, 300.0),
                video: None,
            },
            // Sensor reports and schedule sync; no video.
            Thermostat => Profile {
                heartbeat_s: 45.0,
                heartbeat_bytes: (330, 180),
                dns_every_s: 300.0,
                ntp_every_s: 900.0,
                ssdp_every_s: None,
                events_per_hour: 20.0,
                event_seconds: 2.0,
                event_video: None,
                video: None,
            },
            // Continuous upload to the vendor cloud, UPnP announcements.
            Camera => Profile {
                heartbeat_s: 60.0,
                heartbeat_bytes: (150, 100),
                dns_every_s: 120.0,
                ntp_every_s: 600.0,
                ssdp_every_s: Some(30.0),
                events_per_hour: 4.0,
                event_seconds: 5.0,
                event_video: None,
                video: video(20.0, 1000.0, 350.0),
            },
            // Lower-rate audio/video stream to the parent unit's app.
            BabyMonitor => Profile {
                heartbeat_s: 20.0,
                heartbeat_bytes: (110, 80),
                dns_every_s: 180.0,
                ntp_every_s: 900.0,
                ssdp_every_s: Some(60.0),
                events_per_hour: 2.0,
                event_seconds: 5.0,
                event_video: None,
                video: video(10.0, 700.0, 250.0),
            },
            // Streams only while someone watches: a few sessions an hour.
            Webcam => Profile {
                heartbeat_s: 15.0,
                heartbeat_bytes: (100, 70),
                dns_every_s: 60.0,
                ntp_every_s: 600.0,
                ssdp_every_s: None,
                events_per_hour: 6.0,
                event_seconds: 90.0,
                event_video: video(30.0, 1200.0, 250.0),
                video: None,
            },
        }
    }
}

impl fmt::Display for DeviceType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The entry of `all` whose name is `wanted`, or an error that lists the names.
fn by_name<T: Copy>(
    given: &str,
    wanted: &str,
    all: &[T],
    name: fn(T) -> &'static str,
    what: &str,
) -> Result<T, String> {
    all.iter().copied().find(|&t| name(t) == wanted).ok_or_else(|| {
        let names: Vec<&str> = all.iter().map(|&t| name(t)).collect();
        format!("unknown {what} '{given}' (one of {})", names.join(", "))
    })
}

impl FromStr for DeviceType {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let wanted = s.trim().replace('-', "_").to_ascii_lowercase();
        by_name(s, &wanted, &DEVICE_TYPES, DeviceType::name, "device type")
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Video {
    pub packets_per_s: f64,
    pub mean_bytes: f64,
    pub sd_bytes: f64,
}

/// A device type's benign traffic; each device scales every rate and size by its
/// own factor so no two devices of a type look the same.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Profile {
    pub heartbeat_s: f64,
    /// Request and response frame sizes of a keep-alive.
    pub heartbeat_bytes: (u32, u32),
    pub dns_every_s: f64,
    pub ntp_every_s: f64,
    pub ssdp_every_s: Option<f64>,
    /// Rings, motion, reports, viewing sessions.
    pub events_per_hour: f64,
    pub event_seconds: f64,
    /// Video while an event lasts (doorbell, webcam).
    pub event_video: Option<Video>,
    /// Video all the time (camera, baby monitor).
    pub video: Option<Video>,
}

/// The attacks in N-BaIoT's files (named as its files are, `<family>.<attack>`), then
/// [`EXTRA_ATTACKS`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Attack {
    MiraiScan,
    MiraiSyn,
    MiraiAck,
    MiraiUdp,
    MiraiUdpplain,
    GafgytScan,
    GafgytJunk,
    GafgytTcp,
    GafgytUdp,
    GafgytCombo,
    // Beyond N-BaIoT's files (issue #37: attacks of kinds no training set had).
    TelnetBruteforce,
    CncBeacon,
    DnsAmplification,
    Exfiltration,
    // Issue #75: what a first wave may leave for a second one to hide in.
    ArpSweep,
    SshBruteforce,
    // Issue #96: what learning must never take: data to a stranger, a slow beacon, far
    // more than usual to a known peer (`datasets attack --kind upload --to --bytes`).
    Upload,
    BeaconSlow,
}

pub const ATTACKS: [Attack; 10] = [
    Attack::MiraiScan,
    Attack::MiraiSyn,
    Attack::MiraiAck,
    Attack::MiraiUdp,
    Attack::MiraiUdpplain,
    Attack::GafgytScan,
    Attack::GafgytJunk,
    Attack::GafgytTcp,
    Attack::GafgytUdp,
    Attack::GafgytCombo,
];

/// Attacks beyond N-BaIoT's, drawn only when named (`simulate --attacks`, `datasets
/// attack --kind`): the default fleet, and the shipped model's training data, are
/// [`ATTACKS`] alone.
pub const EXTRA_ATTACKS: [Attack; 8] = [
    Attack::TelnetBruteforce,
    Attack::CncBeacon,
    Attack::DnsAmplification,
    Attack::Exfiltration,
    Attack::ArpSweep,
    Attack::SshBruteforce,
    Attack::Upload,
    Attack::BeaconSlow,
];

impl Attack {
    pub fn name(self) -> &'static str {
        use Attack::*;
        match self {
            MiraiScan => "mirai.scan",
            MiraiSyn => "mirai.syn",
            MiraiAck => "mirai.ack",
            MiraiUdp => "mirai.udp",
            MiraiUdpplain => "mirai.udpplain",
            GafgytScan => "gafgyt.scan",
            GafgytJunk => "gafgyt.junk",
            GafgytTcp => "gafgyt.tcp",
            GafgytUdp => "gafgyt.udp",
            GafgytCombo => "gafgyt.combo",
            TelnetBruteforce => "telnet.bruteforce",
            CncBeacon => "cnc.beacon",
            DnsAmplification => "dns.amplification",
            Exfiltration => "exfiltration.burst",
            ArpSweep => "arp.sweep",
            SshBruteforce => "ssh.bruteforce",
            Upload => "upload",
            BeaconSlow => "beacon.slow",
        }
    }

    pub fn is_mirai(self) -> bool {
        self.name().starts_with("mirai")
    }
}

impl fmt::Display for Attack {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Attack {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let all: Vec<Attack> = ATTACKS.iter().chain(&EXTRA_ATTACKS).copied().collect();
        by_name(s, &s.trim().to_ascii_lowercase(), &all, Attack::name, "attack")
    }
}
