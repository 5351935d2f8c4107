//! The simulator's attack phases: Mirai's and Gafgyt's scans and floods as N-BaIoT
//! labels them, the extra attacks (telnet guessing, C&C beacons, DNS amplification,
//! exfiltration), and those written as the wire has them (ARP sweeps, SSH guessing).

use super::*;

impl Generator {
    pub(super) fn attack(&mut self, attack: Attack, from: f64) {
        use Attack::*;
        if matches!(attack, ArpSweep | SshBruteforce | Upload | BeaconSlow) {
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
                TelnetBruteforce | CncBeacon | DnsAmplification | Exfiltration | ArpSweep | SshBruteforce
                | Upload | BeaconSlow => unreachable!("handled above"),
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
                    | SshBruteforce | Upload | BeaconSlow => unreachable!("handled above"),
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
            // One TLS connection that uploads `upload.bytes` in full frames at about 2 MB/s,
            // acknowledged every second frame: to `upload.to` (a peer of the device's
            // own, by its address), or to a public host it never used.
            Attack::Upload => {
                let peer = self.upload.to.map_or_else(|| self.public_ip(), host_of_ip);
                let port = self.ephemeral_port();
                t = self.handshake(t, peer, port, 443);
                let mut sent = 0u64;
                let mut n = 0u32;
                while sent < self.upload.bytes && t < self.end {
                    self.tcp(t, true, peer, port, 443, 1514, 0x10);
                    sent += 1514;
                    n += 1;
                    if n % 2 == 0 {
                        let ack = t + self.uniform(0.01, 0.05);
                        self.tcp(ack, false, peer, port, 443, 66, 0x10);
                    }
                    t += self.exponential(1.0 / 1_400.0);
                }
                self.tcp(t, true, peer, port, 443, 66, 0x11);
                self.tcp(t + 0.03, false, peer, port, 443, 66, 0x11);
                self.tcp(t + 0.031, true, peer, port, 443, 66, 0x10);
            }
            // A bot checking in with its controller every minute over TLS: a new
            // connection, the handshake's few packets, a small request and answer, the
            // close.
            Attack::BeaconSlow => {
                let peer = self.upload.to.map_or_else(|| self.public_ip(), host_of_ip);
                while t < self.end {
                    let port = self.ephemeral_port();
                    let mut at = self.handshake(t, peer, port, 443);
                    let rtt = self.uniform(0.02, 0.08);
                    for (out, len) in
                        [(true, 300), (false, 1_400), (false, 900), (true, 150), (true, 220), (false, 320)]
                    {
                        self.tcp(at, out, peer, port, 443, len, 0x18);
                        at += if out { rtt } else { 0.002 };
                    }
                    self.tcp(at, true, peer, port, 443, 66, 0x11);
                    self.tcp(at + rtt, false, peer, port, 443, 66, 0x11);
                    self.tcp(at + rtt + 0.001, true, peer, port, 443, 66, 0x10);
                    t += 60.0 + self.uniform(-1.0, 1.0);
                }
            }
            _ => unreachable!("{attack} is not written as the wire has it"),
        }
    }
}
