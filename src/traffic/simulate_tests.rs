//! Tests of `simulate.rs`.
use super::*;
use crate::data::Label;

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
                assert_eq!((asked.len(), sent.len()), (253, 253), "{attack}: the /24 but itself, asked once");
                let span = packets.last().unwrap().packet.ts - packets[0].packet.ts;
                assert!((8.0..20.0).contains(&span), "{attack}: {span} s");
            }
            Attack::SshBruteforce => {
                assert!(share(&|p| p.dst_port == 22) == 1.0, "{attack}: to one SSH server");
                let syn = sent.iter().filter(|p| p.tcp_flags == 0x02).count();
                assert!((20..80).contains(&syn), "{attack}: {syn} connections in a minute");
                assert!(sent.iter().all(|p| p.tcp_flags != 0), "{attack}: no flagless TCP");
            }
            // 60 s cut the upload short: about 2 MB/s in full frames to one host.
            Attack::Upload => {
                let bytes: u64 = sent.iter().map(|p| u64::from(p.len)).sum();
                let peers: std::collections::HashSet<Host> = sent.iter().map(|p| p.dst).collect();
                assert!(
                    peers.len() == 1 && (50 << 20..200 << 20).contains(&bytes),
                    "{attack}: {bytes} bytes"
                );
            }
            Attack::BeaconSlow => {
                let syn = sent.iter().filter(|p| p.tcp_flags == 0x02).count();
                assert!((1..=2).contains(&syn), "{attack}: {syn} check-ins in a minute");
            }
            _ => unreachable!(),
        }
    }
}

#[test]
fn every_tcp_packet_carries_the_flags_its_kind_sends() {
    // A probe to the stealth-scan look: no SYN, ACK or RST, or SYN with FIN.
    let probe = |f: u8| f & 0x16 == 0 || f & 0x03 == 0x03;
    let cfg = FleetConfig { devices: 5, duration_s: 120.0, attacked_share: 0.0, ..FleetConfig::default() };
    for d in plan(&cfg) {
        let benign = device_packets(&cfg, &d);
        assert!(benign.iter().filter(|p| p.proto == TCP).all(|p| !probe(p.packet.tcp_flags)), "{}", d.name);
    }
    for attack in ATTACKS.iter().chain(&EXTRA_ATTACKS).copied() {
        let (device, packets) = attack_packets(attack, 5.0, 3);
        let tcp: Vec<u8> = packets.iter().filter(|p| p.proto == TCP).map(|p| p.packet.tcp_flags).collect();
        assert!(tcp.iter().all(|&f| !probe(f)), "{attack}: a packet no connection sends");
        let (mac, _) = device_macs(&device);
        let syns = packets.iter().filter(|p| p.packet.src_mac == mac && p.packet.tcp_flags == SYN).count();
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
    let all_ts: Vec<f64> = all.ts.iter().zip(&all.normal).filter(|(_, n)| !**n).map(|(t, _)| *t).collect();
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
