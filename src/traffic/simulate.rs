//! The fleet simulator: packets of benign device profiles and botnet attack phases,
//! through AfterImage, into labeled feature rows — deterministic by seed, one
//! independent random stream per device, devices generated in parallel.

use std::net::{IpAddr, Ipv4Addr};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::afterimage::{feature_names, AfterImage, FEATURES};
use super::packet::{host_of_ip, ArpOp, Host, Packet};
use super::profiles::{Attack, DeviceType, Profile, Video, ATTACKS, DEVICE_TYPES, EXTRA_ATTACKS};
use crate::data::{Label, Task, TaskSet};

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

struct Generator {
    rng: ChaCha8Rng,
    t0: f64,
    end: f64,
    ip: Host,
    mac: u64,
    gateway: Host,
    gateway_mac: u64,
    diurnal: bool,
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

    fn attack(&mut self, attack: Attack, from: f64) {
        use Attack::*;
        if matches!(attack, ArpSweep | SshBruteforce) {
            // As the wire has them (ARP frames, TCP flags), and without a controller's
            // keep-alives: the footprint of the attack alone.
            return self.wire_attack(attack, from);
        }
        let intensity = self.uniform(0.8, 1.25);
        let victim = self.public_ip();
        let victim_port: u16 = self.rng.gen_range(1..1024);
        let (plain_sport, plain_dport) = (self.ephemeral_port(), self.rng.gen_range(1..65_535));
        // Command-and-control keep-alives for the whole phase.
        let cnc = self.public_ip();
        let cnc_port = if attack.is_mirai() { 23 } else { 6667 };
        let cnc_local = self.ephemeral_port();
        let mut t = from;
        while t < self.end {
            let (up, down) = (self.uniform(70.0, 110.0) as u32, self.uniform(60.0, 100.0) as u32);
            self.exchange(t, cnc, cnc_local, cnc_port, up, down, TCP, true);
            t += self.uniform(30.0, 60.0);
        }
        if EXTRA_ATTACKS.contains(&attack) {
            return self.extra_attack(attack, from, intensity, cnc);
        }
        let pps = intensity
            * match attack {
                MiraiScan => 150.0,
                MiraiSyn => 400.0,
                MiraiAck => 350.0,
                MiraiUdp => 450.0,
                MiraiUdpplain => 600.0,
                GafgytScan => 280.0,
                GafgytJunk => 300.0,
                GafgytTcp => 350.0,
                GafgytUdp => 300.0,
                GafgytCombo => 300.0,
                TelnetBruteforce | CncBeacon | DnsAmplification | Exfiltration | ArpSweep | SshBruteforce => {
                    unreachable!("handled above")
                }
            };
        let mut t = from;
        let mut n = 0u64;
        while t < self.end {
            n += 1;
            let scan_now = match attack {
                GafgytCombo => n % 2 == 0,
                MiraiScan | GafgytScan => true,
                _ => false,
            };
            if scan_now {
                // Telnet scanning of random addresses: Mirai's raw 60-byte SYNs to
                // 23 (and 2323), BASHLITE's connect() SYNs with options (74 bytes).
                let target = self.public_ip();
                let port = if attack == MiraiScan && self.rng.gen_bool(0.1) { 2323 } else { 23 };
                let len = if attack == MiraiScan { 60 } else { 74 };
                let sport = self.ephemeral_port();
                self.tcp(t, true, target, sport, port, len, SYN);
                if self.rng.gen_bool(0.03) {
                    // An open telnet port answers; BASHLITE then tries a login.
                    let rtt = self.uniform(0.02, 0.2);
                    let answer = if attack == MiraiScan { 60 } else { 74 };
                    self.tcp(t + rtt, false, target, sport, port, answer, SYN_ACK);
                    if attack != MiraiScan {
                        let login = self.uniform(70.0, 100.0) as u32;
                        self.exchange(t + rtt + 0.001, target, sport, port, login, 66, TCP, true);
                    }
                }
            } else {
                // Mirai's SYN and ACK floods set their flag; BASHLITE's TCP flood is sent
                // as SYNs; junk rides an open connection (data flags).
                let flags = match attack {
                    MiraiSyn | GafgytTcp => Some(SYN),
                    MiraiAck => Some(ACK),
                    _ => None,
                };
                let (sport, dport, len, proto, spoofed) = match attack {
                    MiraiSyn => (self.ephemeral_port(), self.rng.gen(), 74, TCP, false),
                    MiraiAck => (self.ephemeral_port(), self.rng.gen(), 566, TCP, false),
                    MiraiUdp => (self.ephemeral_port(), self.rng.gen(), 554, UDP, false),
                    MiraiUdpplain => (plain_sport, plain_dport, 554, UDP, false),
                    GafgytJunk | GafgytCombo => {
                        (plain_sport, victim_port, self.uniform(66.0, 1090.0) as u32, TCP, false)
                    }
                    GafgytTcp => (self.ephemeral_port(), victim_port, 60, TCP, false),
                    GafgytUdp => (self.ephemeral_port(), victim_port, 60, UDP, true),
                    MiraiScan | GafgytScan => unreachable!("scans are handled above"),
                    TelnetBruteforce | CncBeacon | DnsAmplification | Exfiltration | ArpSweep
                    | SshBruteforce => {
                        unreachable!("handled above")
                    }
                };
                if spoofed {
                    // BASHLITE's UDP flood forges its source address.
                    let forged = self.public_ip();
                    self.send_forged(forged, t, victim, sport, dport, len, proto);
                } else if let Some(flags) = flags {
                    self.tcp(t, true, victim, sport, dport, len, flags);
                } else {
                    self.send(t, true, victim, sport, dport, len, proto, true);
                }
            }
            t += self.exponential(1.0 / pps);
        }
    }

    /// [`EXTRA_ATTACKS`]: slower or stealthier than N-BaIoT's floods and scans, so that
    /// a model can be shown (or tested on) attacks that do not shout.
    fn extra_attack(&mut self, attack: Attack, from: f64, intensity: f64, cnc: Host) {
        use Attack::*;
        let mut t = from;
        match attack {
            // Password guessing against one telnet server: a connection, two or three
            // logins, the next connection.
            TelnetBruteforce => {
                let target = self.public_ip();
                while t < self.end {
                    let port = self.ephemeral_port();
                    t = self.handshake(t, target, port, 23);
                    for _ in 0..self.rng.gen_range(2..=3) {
                        let (user, reply) =
                            (self.uniform(70.0, 100.0) as u32, self.uniform(70.0, 120.0) as u32);
                        let at = t + self.uniform(0.05, 0.3);
                        t = self.exchange(at, target, port, 23, user, reply, TCP, true);
                    }
                    t += self.exponential(0.3 / intensity);
                }
            }
            // A bot polling its controller over HTTPS on a steady period, now and then
            // downloading a command.
            CncBeacon => {
                let period = self.uniform(2.0, 8.0);
                let port = self.ephemeral_port();
                while t < self.end {
                    let (up, down) = (self.uniform(100.0, 200.0) as u32, self.uniform(60.0, 300.0) as u32);
                    let at = self.exchange(t, cnc, port, 443, up, down, TCP, true);
                    if self.rng.gen_bool(0.05) {
                        for k in 0..self.rng.gen_range(3..12) {
                            self.send(at + 0.002 * f64::from(k), false, cnc, port, 443, 1514, TCP, true);
                        }
                    }
                    t += period * self.uniform(0.95, 1.05);
                }
            }
            // DNS queries from the victim's forged address to many open resolvers; their
            // large answers go to the victim, so the device's capture holds queries only.
            DnsAmplification => {
                let victim = self.public_ip();
                let resolvers: Vec<Host> = (0..50).map(|_| self.public_ip()).collect();
                let pps = 250.0 * intensity;
                while t < self.end {
                    let resolver = resolvers[self.rng.gen_range(0..resolvers.len())];
                    let (port, len) = (self.ephemeral_port(), self.uniform(70.0, 90.0) as u32);
                    self.send_forged(victim, t, resolver, port, 53, len, UDP);
                    t += self.exponential(1.0 / pps);
                }
            }
            // Stolen data leaving in bursts of full frames to one server, acknowledged
            // every second frame, with quiet spells between.
            Exfiltration => {
                let server = self.public_ip();
                let port = self.ephemeral_port();
                while t < self.end {
                    let (until, pps) = (t + self.uniform(0.5, 2.0), self.uniform(400.0, 800.0) * intensity);
                    let mut n = 0u32;
                    while t < until {
                        self.send(t, true, server, port, 443, 1514, TCP, true);
                        n += 1;
                        if n % 2 == 0 {
                            let ack = t + self.uniform(0.01, 0.05);
                            self.send(ack, false, server, port, 443, 66, TCP, true);
                        }
                        t += self.exponential(1.0 / pps);
                    }
                    t += self.uniform(5.0, 20.0);
                }
            }
            _ => unreachable!("{attack} is one of N-BaIoT's"),
        }
    }

    /// The attacks written as the wire has them, each packet's TCP flags and ARP
    /// operation set, and without a controller's keep-alives.
    fn wire_attack(&mut self, attack: Attack, from: f64) {
        let mut t = from;
        match attack {
            // arp-scan or nmap -sn on the LAN: a who-has for every address of the /24 in
            // turn, about 20 a second; the few live hosts answer.
            Attack::ArpSweep => {
                let base = (self.ip as u32) & 0xffff_ff00;
                for host in 1..=254u32 {
                    let target = host_of_ip(IpAddr::V4(Ipv4Addr::from(base | host)));
                    if target == self.ip {
                        continue;
                    }
                    self.arp(t, true, target, ArpOp::Request);
                    if self.rng.gen_bool(0.05) {
                        let rtt = self.uniform(0.001, 0.01);
                        self.arp(t + rtt, false, target, ArpOp::Reply);
                    }
                    t += self.exponential(0.05);
                }
            }
            // Password guessing against one SSH server: a connection a second or so,
            // each a handshake, the banners, two or three failed logins, and a close.
            Attack::SshBruteforce => {
                let target = self.public_ip();
                while t < self.end {
                    let port = self.ephemeral_port();
                    let mut at = t;
                    let rtt = self.uniform(0.01, 0.08);
                    let mut step = |g: &mut Self, out: bool, len: u32, flags: u8, wait: f64| {
                        g.tcp(at, out, target, port, 22, len, flags);
                        at += wait;
                    };
                    step(self, true, 74, 0x02, rtt);
                    step(self, false, 74, 0x12, 0.001);
                    step(self, true, 66, 0x10, 0.001);
                    step(self, true, 107, 0x18, rtt);
                    step(self, false, 107, 0x18, 0.05);
                    for _ in 0..self.rng.gen_range(2..=3) {
                        let (guess, refusal) =
                            (self.uniform(120.0, 200.0) as u32, self.uniform(80.0, 120.0) as u32);
                        let think = self.uniform(0.3, 1.0);
                        step(self, true, guess, 0x18, rtt);
                        step(self, false, refusal, 0x18, think);
                    }
                    step(self, true, 66, 0x11, rtt);
                    step(self, false, 66, 0x11, 0.001);
                    step(self, true, 66, 0x10, 0.0);
                    t = at + self.exponential(0.5);
                }
            }
            _ => unreachable!("{attack} is not written as the wire has it"),
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
    let cfg = FleetConfig {
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
        out: Vec::new(),
    };
    g.benign(&device.kind.profile(), device.kind);
    if let Some((attack, at)) = device.attack {
        g.attack(attack, at);
    }
    g.out.sort_by(|a, b| a.packet.ts.total_cmp(&b.packet.ts));
    g.out
}

/// A device's feature rows: row-major features, their timestamps and labels
/// (positive = benign packet, negative = a packet the botnet sent).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DeviceRows {
    /// Packets generated (rows are kept for some of them).
    pub packets: usize,
    pub features: Vec<f32>,
    pub ts: Vec<f64>,
    pub normal: Vec<bool>,
}

pub fn device_rows(cfg: &FleetConfig, device: &DevicePlan) -> DeviceRows {
    let packets = device_packets(cfg, device);
    let keep = cfg.keep_every.max(1);
    // Per class: keep a packet when it crosses the next evenly spaced mark.
    let total = |attack: bool| packets.iter().filter(|p| p.attack == attack).count() / keep;
    let stride = |attack: bool| match cfg.max_rows_per_class {
        Some(cap) if cap > 0 && total(attack) > cap => total(attack) as f64 / cap as f64,
        _ => 1.0,
    };
    let strides = [stride(false), stride(true)];
    let mut seen = [0usize; 2];
    let mut next_mark = [0.0f64; 2];
    let mut ai = AfterImage::new();
    let mut rows = DeviceRows { packets: packets.len(), ..DeviceRows::default() };
    let mut scratch = Vec::with_capacity(FEATURES);
    for (i, p) in packets.iter().enumerate() {
        scratch.clear();
        ai.push(&p.packet, &mut scratch);
        if i % keep != 0 {
            continue;
        }
        let c = usize::from(p.attack);
        let take = seen[c] as f64 >= next_mark[c];
        seen[c] += 1;
        if take {
            next_mark[c] += strides[c];
            rows.features.extend_from_slice(&scratch);
            rows.ts.push(p.packet.ts);
            rows.normal.push(!p.attack);
        }
    }
    rows
}

/// Rows of every planned device, in plan order, generated on all cores.
pub fn fleet_rows(cfg: &FleetConfig, devices: &[DevicePlan]) -> Vec<DeviceRows> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).min(devices.len().max(1));
    let chunk = devices.len().div_ceil(threads.max(1)).max(1);
    std::thread::scope(|s| {
        let handles: Vec<_> = devices
            .chunks(chunk)
            .map(|part| s.spawn(move || part.iter().map(|d| device_rows(cfg, d)).collect::<Vec<_>>()))
            .collect();
        handles.into_iter().flat_map(|h| h.join().unwrap_or_default()).collect()
    })
}

/// A simulated fleet as labeled tasks (device = task) with N-BaIoT's column names.
pub struct Fleet {
    pub plans: Vec<DevicePlan>,
    pub tasks: TaskSet,
    /// Row timestamps per device (same order as the tasks).
    pub timestamps: Vec<Vec<f64>>,
    pub packets: usize,
}

pub fn fleet_tasks(cfg: &FleetConfig) -> Fleet {
    let devices = plan(cfg);
    let rows = fleet_rows(cfg, &devices);
    let packets = rows.iter().map(|r| r.packets).sum();
    let timestamps = rows.iter().map(|r| r.ts.clone()).collect();
    let tasks = devices
        .iter()
        .zip(rows)
        .map(|(d, r)| Task {
            id: d.name.clone(),
            labels: r.normal.iter().map(|&n| if n { Label::Positive } else { Label::Negative }).collect(),
            x: r.features,
        })
        .collect();
    Fleet {
        plans: devices,
        tasks: TaskSet { feature_names: feature_names(), tasks, skipped_rows: 0 },
        timestamps,
        packets,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small(seed: u64) -> FleetConfig {
        FleetConfig { devices: 5, duration_s: 120.0, seed, attacked_share: 1.0, ..FleetConfig::default() }
    }

    #[test]
    fn an_attack_capture_holds_the_attack_alone_from_its_start() {
        let (device, packets) = attack_packets(Attack::MiraiUdp, 5.0, 7);
        assert!(packets.len() > 1000, "a flood: {}", packets.len());
        assert!(packets.iter().all(|p| p.attack));
        let (first, last) = (packets[0].packet.ts, packets[packets.len() - 1].packet.ts);
        assert!(last - first <= 5.0 && last - first > 4.0, "{first}..{last}");
        let (mac, _) = device_macs(&device);
        let sent = packets.iter().filter(|p| p.packet.src_mac == mac).count();
        assert!(sent * 10 > packets.len() * 9, "the bot sends it: {sent} of {}", packets.len());
        assert_eq!(attack_packets(Attack::MiraiUdp, 5.0, 7).1, packets, "deterministic by seed");
    }

    #[test]
    fn the_extra_attacks_are_drawn_only_when_named_and_look_as_described() {
        let drawn: Vec<Attack> = plan(&FleetConfig { devices: 200, ..small(9) })
            .iter()
            .filter_map(|d| d.attack)
            .map(|a| a.0)
            .collect();
        assert!(drawn.iter().all(|a| ATTACKS.contains(a)), "the default fleet draws N-BaIoT's kinds only");
        for attack in EXTRA_ATTACKS {
            assert_eq!(attack.name().parse::<Attack>(), Ok(attack));
            let (device, packets) = attack_packets(attack, 60.0, 3);
            assert_eq!(attack_packets(attack, 60.0, 3).1, packets, "{attack}: deterministic by seed");
            let (mac, _) = device_macs(&device);
            let sent: Vec<&Packet> = packets.iter().map(|p| &p.packet).filter(|p| p.src_mac == mac).collect();
            let rate = packets.len() as f64 / 60.0;
            let share =
                |f: &dyn Fn(&Packet) -> bool| sent.iter().filter(|p| f(p)).count() as f64 / sent.len() as f64;
            match attack {
                Attack::TelnetBruteforce => {
                    assert!(share(&|p| p.dst_port == 23) > 0.9 && rate < 100.0, "{attack}: {rate} packets/s");
                }
                Attack::CncBeacon => assert!(rate < 3.0 && packets.len() > 10, "{attack}: {rate} packets/s"),
                Attack::DnsAmplification => {
                    let own = packets.iter().find(|p| p.packet.dst_port == 23 || p.packet.dst_port == 6667);
                    let device_ip = own.map(|p| p.packet.src);
                    assert!(
                        share(&|p| p.dst_port == 53 && Some(p.src) != device_ip) > 0.95,
                        "{attack}: forged queries"
                    );
                    assert!(rate > 150.0, "{attack}: {rate} packets/s");
                }
                Attack::Exfiltration => assert!(share(&|p| p.len == 1514) > 0.9, "{attack}: full frames out"),
                Attack::ArpSweep => {
                    let asked: std::collections::HashSet<Host> =
                        sent.iter().filter(|p| p.arp == Some(ArpOp::Request)).map(|p| p.dst).collect();
                    assert_eq!(
                        (asked.len(), sent.len()),
                        (253, 253),
                        "{attack}: the /24 but itself, asked once"
                    );
                    let span = packets.last().unwrap().packet.ts - packets[0].packet.ts;
                    assert!((8.0..20.0).contains(&span), "{attack}: {span} s");
                }
                Attack::SshBruteforce => {
                    assert!(share(&|p| p.dst_port == 22) == 1.0, "{attack}: to one SSH server");
                    let syn = sent.iter().filter(|p| p.tcp_flags == 0x02).count();
                    assert!((20..80).contains(&syn), "{attack}: {syn} connections in a minute");
                    assert!(sent.iter().all(|p| p.tcp_flags != 0), "{attack}: no flagless TCP");
                }
                _ => unreachable!(),
            }
        }
    }

    #[test]
    fn every_tcp_packet_carries_the_flags_its_kind_sends() {
        // A probe to the stealth-scan look: no SYN, ACK or RST, or SYN with FIN.
        let probe = |f: u8| f & 0x16 == 0 || f & 0x03 == 0x03;
        let cfg =
            FleetConfig { devices: 5, duration_s: 120.0, attacked_share: 0.0, ..FleetConfig::default() };
        for d in plan(&cfg) {
            let benign = device_packets(&cfg, &d);
            assert!(
                benign.iter().filter(|p| p.proto == TCP).all(|p| !probe(p.packet.tcp_flags)),
                "{}",
                d.name
            );
        }
        for attack in ATTACKS.iter().chain(&EXTRA_ATTACKS).copied() {
            let (device, packets) = attack_packets(attack, 5.0, 3);
            let tcp: Vec<u8> =
                packets.iter().filter(|p| p.proto == TCP).map(|p| p.packet.tcp_flags).collect();
            assert!(tcp.iter().all(|&f| !probe(f)), "{attack}: a packet no connection sends");
            let (mac, _) = device_macs(&device);
            let syns =
                packets.iter().filter(|p| p.packet.src_mac == mac && p.packet.tcp_flags == SYN).count();
            let own = packets.iter().filter(|p| p.packet.src_mac == mac && p.proto == TCP).count();
            match attack {
                Attack::MiraiSyn | Attack::GafgytTcp | Attack::MiraiScan | Attack::GafgytScan => {
                    assert!(syns * 10 > own * 9, "{attack}: {syns} SYNs of {own}")
                }
                Attack::MiraiAck => {
                    assert!(packets.iter().filter(|p| p.packet.tcp_flags == ACK).count() * 10 > own * 9)
                }
                _ => {}
            }
        }
    }

    #[test]
    fn a_diurnal_device_streams_in_evening_sessions_and_is_quiet_at_night() {
        // Two days from midnight UTC: a camera (always-on video in a stationary fleet).
        let cfg = FleetConfig {
            devices: 1,
            types: vec![DeviceType::Camera],
            duration_s: 2.0 * 86_400.0,
            attacked_share: 0.0,
            start_ts: 1_505_606_400.0,
            diurnal: true,
            ..FleetConfig::default()
        };
        let packets = device_packets(&cfg, &plan(&cfg)[0]);
        let hour = |p: &SimPacket| (p.packet.ts - cfg.start_ts).rem_euclid(86_400.0) / 3600.0;
        // Video frames (keep-alives, DNS, NTP and SSDP go on all night).
        let video = |p: &&SimPacket| p.packet.len > 400 && p.packet.dst_port == 443;
        let night = packets.iter().filter(video).filter(|p| hour(p) < 6.0).count();
        let evening = packets.iter().filter(video).filter(|p| (17.0..23.0).contains(&hour(p))).count();
        assert!(evening > 10 * night.max(1), "evening {evening}, night {night}");
        // Bursts and quiet: most minutes of the evening hold no video at all.
        let mut minutes: Vec<u64> = packets
            .iter()
            .filter(video)
            .filter(|p| (17.0..23.0).contains(&hour(p)))
            .map(|p| ((p.packet.ts - cfg.start_ts) / 60.0) as u64)
            .collect();
        minutes.dedup();
        let stationary = device_packets(&FleetConfig { diurnal: false, ..cfg.clone() }, &plan(&cfg)[0]);
        assert!(stationary.len() > 3 * packets.len(), "{} vs {}", stationary.len(), packets.len());
        assert!(minutes.len() < 2 * 6 * 60, "{} of the evenings' minutes", minutes.len());
    }

    #[test]
    fn same_seed_same_fleet_other_seed_other_fleet() {
        let (a, b, c) = (fleet_tasks(&small(3)), fleet_tasks(&small(3)), fleet_tasks(&small(4)));
        assert_eq!(a.tasks.tasks, b.tasks.tasks);
        assert_ne!(a.tasks.tasks, c.tasks.tasks);
    }

    #[test]
    fn attacked_devices_have_both_classes_and_finite_rows() {
        let fleet = fleet_tasks(&small(1));
        for (p, t) in fleet.plans.iter().zip(&fleet.tasks.tasks) {
            assert!(p.attack.is_some());
            assert!(!t.indices_of(Label::Positive).is_empty(), "{} has benign rows", p.name);
            assert!(!t.indices_of(Label::Negative).is_empty(), "{} has attack rows", p.name);
            assert!(t.x.iter().all(|v| v.is_finite()));
        }
    }

    #[test]
    fn rows_per_class_are_capped_evenly() {
        let cfg = FleetConfig { max_rows_per_class: Some(300), ..small(2) };
        let d = &plan(&cfg)[0];
        let all = device_rows(&FleetConfig { max_rows_per_class: None, ..cfg.clone() }, d);
        let capped = device_rows(&cfg, d);
        for normal in [true, false] {
            let n_all = all.normal.iter().filter(|&&n| n == normal).count();
            let n = capped.normal.iter().filter(|&&n| n == normal).count();
            assert_eq!(n, n_all.min(300), "class normal={normal}");
        }
        // Evenly spaced: the kept attack rows span the attack phase.
        let attack_ts: Vec<f64> =
            capped.ts.iter().zip(&capped.normal).filter(|(_, n)| !**n).map(|(t, _)| *t).collect();
        let all_ts: Vec<f64> =
            all.ts.iter().zip(&all.normal).filter(|(_, n)| !**n).map(|(t, _)| *t).collect();
        assert!(attack_ts[attack_ts.len() - 1] > all_ts[all_ts.len() * 9 / 10]);
    }

    #[test]
    fn floods_outpace_benign_traffic() {
        let cfg = FleetConfig {
            devices: 1,
            duration_s: 100.0,
            types: vec![DeviceType::Thermostat],
            attacks: vec![Attack::MiraiUdp],
            attacked_share: 1.0,
            attack_start: (0.5, 0.5),
            ..FleetConfig::default()
        };
        let d = &plan(&cfg)[0];
        let packets = device_packets(&cfg, d);
        let benign = packets.iter().filter(|p| !p.attack).count();
        let attack = packets.iter().filter(|p| p.attack).count();
        // ~50 s of a 360–560 packet/s flood against a thermostat's few packets a minute.
        assert!(attack > 10_000 && benign < 200, "attack {attack}, benign {benign}");
        let mean = packets.iter().filter(|p| p.attack && p.proto == UDP).map(|p| p.packet.len).max();
        assert_eq!(mean, Some(554));
    }
}
