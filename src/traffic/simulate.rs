//! The fleet simulator: packets of benign device profiles and botnet attack phases,
//! through AfterImage, into labeled feature rows — deterministic by seed, one
//! independent random stream per device, devices generated in parallel.

use std::net::{IpAddr, Ipv4Addr};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::packet::{host_of_ip, ArpOp, Host, Packet};
use super::profiles::{Attack, DeviceType, Profile, Video, ATTACKS, DEVICE_TYPES, EXTRA_ATTACKS};

const TCP: u8 = 6;
const UDP: u8 = 17;
/// 2017-09-17 00:00 UTC: the simulated captures start in N-BaIoT's recording
/// period, so first-seen jitter columns hold timestamps of the same size.
pub const DEFAULT_START_TS: f64 = 1_505_606_400.0;

#[derive(Debug, Clone, PartialEq)]
pub struct FleetConfig {
    pub devices: usize,
    /// Assigned in turn; empty = all five.
    pub types: Vec<DeviceType>,
    /// Drawn from for each attacked device; empty = all ten.
    pub attacks: Vec<Attack>,
    pub duration_s: f64,
    pub seed: u64,
    /// Share of devices that get an attack phase.
    pub attacked_share: f64,
    /// The attack starts at a uniform fraction of the duration in this range and
    /// lasts to the end.
    pub attack_start: (f64, f64),
    /// Keep every k-th packet's row (statistics still see every packet).
    pub keep_every: usize,
    /// At most this many rows of each class per device, evenly spaced in time
    /// (floods send 100× more packets than a device's benign traffic).
    pub max_rows_per_class: Option<usize>,
    pub start_ts: f64,
    /// Days of a household rather than minutes of a stationary profile: events follow
    /// the hour of the day (few at night, most in the evening) and a video device
    /// streams only in sessions, so a device is bursty and quiet in turns as real ones
    /// are over days (the week camera). Off for training fleets and the demo.
    pub diurnal: bool,
    /// The `upload` and `beacon.slow` attacks' peer and size.
    pub upload: UploadPlan,
}

/// Where the `upload` attack sends and how much (`beacon.slow` checks in with `to` too).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct UploadPlan {
    /// A peer of the device's own (its cloud's address), or `None`: a public host it never used.
    pub to: Option<std::net::IpAddr>,
    pub bytes: u64,
}

impl Default for UploadPlan {
    /// 50 MB to a stranger (issue #96).
    fn default() -> Self {
        Self { to: None, bytes: 50 << 20 }
    }
}

impl Default for FleetConfig {
    fn default() -> Self {
        Self {
            devices: 10,
            types: DEVICE_TYPES.to_vec(),
            attacks: ATTACKS.to_vec(),
            duration_s: 600.0,
            seed: 0,
            attacked_share: 0.5,
            attack_start: (0.5, 0.8),
            keep_every: 1,
            max_rows_per_class: None,
            start_ts: DEFAULT_START_TS,
            diurnal: false,
            upload: UploadPlan::default(),
        }
    }
}

/// A household's activity by hour of the day, as a share of its evening peak.
fn household_activity(unix_s: f64) -> f64 {
    match unix_s.rem_euclid(86_400.0) / 3600.0 {
        h if h < 6.0 => 0.03,
        h if h < 9.0 => 0.6,
        h if h < 17.0 => 0.3,
        h if h < 23.0 => 1.0,
        _ => 0.2,
    }
}

/// In a diurnal fleet, events at the evening peak are this share of the profile's rate
/// (a day of a webcam's viewing sessions at the profile's rate is 150,000 packets).
const DIURNAL_EVENT_SHARE: f64 = 0.25;
/// A video session of an always-on video device in a diurnal fleet lasts this many of
/// its profile's events.
const DIURNAL_SESSION_EVENTS: f64 = 12.0;

/// One simulated device and what happens to it.
#[derive(Debug, Clone, PartialEq)]
pub struct DevicePlan {
    pub index: usize,
    pub name: String,
    pub kind: DeviceType,
    /// The attack and its start, seconds after the capture starts.
    pub attack: Option<(Attack, f64)>,
}

fn device_rng(seed: u64, index: usize) -> ChaCha8Rng {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    rng.set_stream(index as u64 + 1);
    rng
}

/// Which device is which type and which are attacked, by seed.
pub fn plan(cfg: &FleetConfig) -> Vec<DevicePlan> {
    let types = if cfg.types.is_empty() { DEVICE_TYPES.to_vec() } else { cfg.types.clone() };
    let attacks = if cfg.attacks.is_empty() { ATTACKS.to_vec() } else { cfg.attacks.clone() };
    let mut rng = device_rng(cfg.seed, usize::MAX - 1);
    (0..cfg.devices)
        .map(|index| {
            let kind = types[index % types.len()];
            let attack = rng.gen_bool(cfg.attacked_share.clamp(0.0, 1.0)).then(|| {
                let (lo, hi) = cfg.attack_start;
                let at = cfg.duration_s * if hi > lo { rng.gen_range(lo..hi) } else { lo };
                (attacks[rng.gen_range(0..attacks.len())], at)
            });
            DevicePlan { index, name: format!("{}-{:05}", kind.name(), index + 1), kind, attack }
        })
        .collect()
}

/// A generated packet, its protocol (for pcap output) and whether the botnet sent it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SimPacket {
    pub packet: Packet,
    pub proto: u8,
    pub attack: bool,
}

/// A TCP packet's flags inside an established connection: a frame of headers alone
/// (66 bytes with timestamps, or less) acknowledges, a larger one carries data. The
/// packets that open or refuse connections (SYN, SYN-ACK) set theirs where they are sent.
fn data_flags(len: u32) -> u8 {
    if len <= 66 {
        ACK
    } else {
        PSH_ACK
    }
}

const SYN: u8 = 0x02;
const SYN_ACK: u8 = 0x12;
const ACK: u8 = 0x10;
const PSH_ACK: u8 = 0x18;

fn v4(a: u8, b: u8, c: u8, d: u8) -> Host {
    host_of_ip(IpAddr::V4(Ipv4Addr::new(a, b, c, d)))
}

#[path = "simulate_attacks.rs"]
mod attacks;
#[path = "simulate_rows.rs"]
mod rows;
pub use rows::{device_rows, fleet_rows, fleet_tasks, DeviceRows, Fleet};

struct Generator {
    rng: ChaCha8Rng,
    t0: f64,
    end: f64,
    ip: Host,
    mac: u64,
    gateway: Host,
    gateway_mac: u64,
    diurnal: bool,
    upload: UploadPlan,
    out: Vec<SimPacket>,
}

impl Generator {
    fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        self.rng.gen_range(lo..hi)
    }

    fn exponential(&mut self, mean: f64) -> f64 {
        -mean * (1.0 - self.rng.gen::<f64>()).ln()
    }

    fn normal(&mut self, mean: f64, sd: f64) -> f64 {
        let (u, v): (f64, f64) = (1.0 - self.rng.gen::<f64>(), self.rng.gen());
        mean + sd * (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
    }

    fn frame(&mut self, mean: f64, sd: f64) -> u32 {
        self.normal(mean, sd).clamp(60.0, 1514.0) as u32
    }

    fn ephemeral_port(&mut self) -> u16 {
        self.rng.gen_range(32_768..61_000)
    }

    fn public_ip(&mut self) -> Host {
        let a = self.rng.gen_range(1..=223u8);
        let a = if a == 10 || a == 127 || a == 192 || a == 172 { a + 1 } else { a };
        v4(a, self.rng.gen(), self.rng.gen(), self.rng.gen_range(1..255))
    }

    #[allow(clippy::too_many_arguments)]
    fn send(
        &mut self,
        t: f64,
        outbound: bool,
        peer: Host,
        dev_port: u16,
        peer_port: u16,
        len: u32,
        proto: u8,
        attack: bool,
    ) {
        if t >= self.end {
            return;
        }
        let tcp_flags = if proto == TCP { data_flags(len) } else { 0 };
        let packet = if outbound {
            Packet {
                ts: self.t0 + t,
                src_mac: self.mac,
                src: self.ip,
                dst: peer,
                src_port: dev_port,
                dst_port: peer_port,
                len,
                proto,
                tcp_flags,
                arp: None,
            }
        } else {
            Packet {
                ts: self.t0 + t,
                src_mac: self.gateway_mac,
                src: peer,
                dst: self.ip,
                src_port: peer_port,
                dst_port: dev_port,
                len,
                proto,
                tcp_flags,
                arp: None,
            }
        };
        self.out.push(SimPacket { packet, proto, attack });
    }

    /// An attack packet the device sends from a forged source address `from`.
    #[allow(clippy::too_many_arguments)]
    fn send_forged(
        &mut self,
        from: Host,
        t: f64,
        peer: Host,
        dev_port: u16,
        peer_port: u16,
        len: u32,
        proto: u8,
    ) {
        let ip = std::mem::replace(&mut self.ip, from);
        self.send(t, true, peer, dev_port, peer_port, len, proto, true);
        self.ip = ip;
    }

    /// Request, response after a round trip, and for TCP the device's ACK.
    #[allow(clippy::too_many_arguments)]
    fn exchange(
        &mut self,
        t: f64,
        peer: Host,
        dev_port: u16,
        peer_port: u16,
        up: u32,
        down: u32,
        proto: u8,
        attack: bool,
    ) -> f64 {
        let rtt = self.uniform(0.01, 0.08);
        self.send(t, true, peer, dev_port, peer_port, up, proto, attack);
        self.send(t + rtt, false, peer, dev_port, peer_port, down, proto, attack);
        if proto == TCP {
            self.send(t + rtt + 0.001, true, peer, dev_port, peer_port, 66, TCP, attack);
        }
        t + rtt
    }

    /// An attack's TCP connection opened: SYN, the peer's SYN-ACK after a round trip,
    /// the device's ACK (74, 74 and 66 bytes, timed as [`Self::exchange`] times them).
    fn handshake(&mut self, t: f64, peer: Host, dev_port: u16, peer_port: u16) -> f64 {
        let rtt = self.uniform(0.01, 0.08);
        self.tcp(t, true, peer, dev_port, peer_port, 74, SYN);
        self.tcp(t + rtt, false, peer, dev_port, peer_port, 74, SYN_ACK);
        self.tcp(t + rtt + 0.001, true, peer, dev_port, peer_port, 66, ACK);
        t + rtt
    }

    fn video(&mut self, from: f64, to: f64, v: &Video, size: f64, cloud: Host) {
        let port = self.ephemeral_port();
        let mut t = from;
        let mut n = 0u64;
        while t < to.min(self.end) {
            let len = self.frame(v.mean_bytes * size, v.sd_bytes * size);
            self.send(t, true, cloud, port, 443, len, TCP, false);
            n += 1;
            if n % 2 == 0 {
                let ack_at = t + self.uniform(0.01, 0.05);
                self.send(ack_at, false, cloud, port, 443, 66, TCP, false);
            }
            t += self.exponential(1.0 / v.packets_per_s);
        }
    }

    fn benign(&mut self, p: &Profile, kind: DeviceType) {
        // Per device: rates and sizes vary by up to ±20 % and ±15 %.
        let pace = self.uniform(0.8, 1.25);
        let size = self.uniform(0.85, 1.15);
        let k = kind as u8;
        let cloud = v4(52, 10 + k, self.rng.gen_range(0..4), self.rng.gen_range(1..255));
        let ntp = v4(129, 6, 15, 28 + self.rng.gen_range(0..3));
        let end = self.end;

        let hb_port = self.ephemeral_port();
        let mut t = self.uniform(0.0, p.heartbeat_s);
        while t < end {
            let up = self.frame(f64::from(p.heartbeat_bytes.0) * size, 8.0);
            let down = self.frame(f64::from(p.heartbeat_bytes.1) * size, 8.0);
            self.exchange(t, cloud, hb_port, 443, up, down, TCP, false);
            t += p.heartbeat_s * pace * self.uniform(0.9, 1.1);
        }
        let mut t = self.exponential(p.dns_every_s * pace);
        while t < end {
            let (port, q) = (self.ephemeral_port(), self.uniform(70.0, 90.0) as u32);
            let r = self.uniform(90.0, 250.0) as u32;
            self.exchange(t, self.gateway, port, 53, q, r, UDP, false);
            t += self.exponential(p.dns_every_s * pace);
        }
        let mut t = self.uniform(0.0, p.ntp_every_s);
        while t < end {
            self.exchange(t, ntp, 123, 123, 90, 90, UDP, false);
            t += p.ntp_every_s * pace * self.uniform(0.95, 1.05);
        }
        if let Some(every) = p.ssdp_every_s {
            let mut t = self.uniform(0.0, every);
            while t < end {
                let len = self.frame(350.0 * size, 20.0);
                self.send(t, true, v4(239, 255, 255, 250), 1900, 1900, len, UDP, false);
                t += every * pace * self.uniform(0.9, 1.1);
            }
        }
        if self.diurnal {
            return self.diurnal_events(p, pace, size, cloud);
        }
        if let Some(v) = &p.video {
            self.video(0.0, end, v, size, cloud);
        }
        let mut t = self.exponential(3600.0 / p.events_per_hour * pace);
        while t < end {
            // A TLS-like burst to the cloud, then video while the event lasts.
            let at = self.event_burst(t, cloud);
            let lasts = p.event_seconds * self.uniform(0.7, 1.3);
            if let Some(v) = &p.event_video {
                self.video(at, at + lasts, v, size, cloud);
            }
            t += lasts + self.exponential(3600.0 / p.events_per_hour * pace);
        }
    }

    /// A TLS-like burst to the cloud at `t`; returns when it ended.
    fn event_burst(&mut self, t: f64, cloud: Host) -> f64 {
        let port = self.ephemeral_port();
        let mut at = t;
        for _ in 0..self.rng.gen_range(3..10) {
            let up = self.uniform(66.0, 600.0) as u32;
            let down = self.uniform(66.0, 1514.0) as u32;
            at = self.exchange(at, cloud, port, 443, up, down, TCP, false) + self.uniform(0.005, 0.05);
        }
        at
    }

    /// [`Self::benign`]'s events in a diurnal fleet: drawn at the evening peak's rate and
    /// kept with the hour's activity; an always-on video device streams only in
    /// sessions (motion, someone watching).
    fn diurnal_events(&mut self, p: &Profile, pace: f64, size: f64, cloud: Host) {
        let mean_gap = 3600.0 / (p.events_per_hour * DIURNAL_EVENT_SHARE) * pace;
        let mut t = self.exponential(mean_gap);
        while t < self.end {
            if self.rng.gen::<f64>() >= household_activity(self.t0 + t) {
                t += self.exponential(mean_gap);
                continue;
            }
            let at = self.event_burst(t, cloud);
            let (video, lasts) = match (&p.event_video, &p.video) {
                (Some(v), _) => (Some(*v), p.event_seconds),
                (None, Some(v)) => (Some(*v), p.event_seconds * DIURNAL_SESSION_EVENTS),
                (None, None) => (None, p.event_seconds),
            };
            let lasts = lasts * self.uniform(0.7, 1.3);
            if let Some(v) = video {
                self.video(at, at + lasts, &v, size, cloud);
            }
            t += lasts + self.exponential(mean_gap);
        }
    }

    /// An attack's TCP packet with its flags.
    #[allow(clippy::too_many_arguments)]
    fn tcp(
        &mut self,
        t: f64,
        outbound: bool,
        peer: Host,
        dev_port: u16,
        peer_port: u16,
        len: u32,
        flags: u8,
    ) {
        self.send_marked(t, outbound, peer, (dev_port, peer_port, len, TCP), |p| p.tcp_flags = flags);
    }

    /// An attack's ARP frame: the device's who-has for `peer`, or `peer`'s reply to it.
    fn arp(&mut self, t: f64, outbound: bool, peer: Host, op: ArpOp) {
        self.send_marked(t, outbound, peer, (0, 0, 42, 0), |p| p.arp = Some(op));
    }

    /// An attack packet as [`Self::send`] makes it, then `mark`ed (unless it fell after
    /// the end).
    fn send_marked(
        &mut self,
        t: f64,
        outbound: bool,
        peer: Host,
        (dev_port, peer_port, len, proto): (u16, u16, u32, u8),
        mark: impl FnOnce(&mut Packet),
    ) {
        let before = self.out.len();
        self.send(t, outbound, peer, dev_port, peer_port, len, proto, true);
        if let Some(p) = self.out.get_mut(before) {
            mark(&mut p.packet);
        }
    }
}

/// A simulated device's MAC and its gateway's.
pub fn device_macs(device: &DevicePlan) -> (u64, u64) {
    let host = (device.index % 250) as u8 + 2;
    let subnet = (device.index / 250 % 256) as u8;
    let mac = 0x02_00_00_00_00_00u64 | ((device.index as u64) << 8) | u64::from(host);
    (mac, 0x02_00_00_ff_00_01u64 | (u64::from(subnet) << 16))
}

/// The packets of `attack` alone (the bot's own and its command-and-control
/// replies), from a simulated device attacked for `duration_s`: attack kinds that no
/// real capture covers, to merge into real devices with `metapu datasets infect`.
pub fn attack_packets(attack: Attack, duration_s: f64, seed: u64) -> (DevicePlan, Vec<SimPacket>) {
    attack_packets_with(attack, duration_s, seed, UploadPlan::default())
}

/// [`attack_packets`] with the `upload` attack's peer and size.
pub fn attack_packets_with(
    attack: Attack,
    duration_s: f64,
    seed: u64,
    upload: UploadPlan,
) -> (DevicePlan, Vec<SimPacket>) {
    let cfg = FleetConfig {
        upload,
        devices: 1,
        attacks: vec![attack],
        duration_s,
        seed,
        attacked_share: 1.0,
        attack_start: (0.0, 0.0),
        ..FleetConfig::default()
    };
    let device = plan(&cfg).remove(0);
    let packets = device_packets(&cfg, &device).into_iter().filter(|p| p.attack).collect();
    (device, packets)
}

/// Every packet of one device, in time order.
pub fn device_packets(cfg: &FleetConfig, device: &DevicePlan) -> Vec<SimPacket> {
    let mut rng = device_rng(cfg.seed, device.index);
    let host = (device.index % 250) as u8 + 2;
    let subnet = (device.index / 250 % 256) as u8;
    let (mac, gateway_mac) = device_macs(device);
    // Devices start their capture at different moments of the first minute.
    let t0 = cfg.start_ts + rng.gen_range(0.0..60.0);
    let mut g = Generator {
        rng,
        t0,
        end: cfg.duration_s,
        ip: v4(192, 168, subnet, host),
        mac,
        gateway: v4(192, 168, subnet, 1),
        gateway_mac,
        diurnal: cfg.diurnal,
        upload: cfg.upload,
        out: Vec::new(),
    };
    g.benign(&device.kind.profile(), device.kind);
    if let Some((attack, at)) = device.attack {
        g.attack(attack, at);
    }
    g.out.sort_by(|a, b| a.packet.ts.total_cmp(&b.packet.ts));
    g.out
}

#[cfg(test)]
#[path = "simulate_tests.rs"]
mod tests;
