//! Tests of `fanout.rs`.
use super::*;

const RULES: FanOutRules = FanOutRules::DEFAULTS;
/// A device with no usual yet: the site's thresholds.
const NEW: FanOutUsual = FanOutUsual::new();

fn src(offset: i64) -> Source {
    Source::new("in", 0, offset)
}

fn out(peer: &str, port: u16, proto: u8, flags: u8) -> Context {
    Context::outbound(peer, port, proto, flags, 60)
}

fn back(c: &Context, flags: u8) -> Context {
    Context {
        src_ip: c.dst_ip,
        dst_ip: c.src_ip,
        src_port: c.dst_port,
        dst_port: c.src_port,
        tcp_flags: flags,
        direction: Some(Direction::Inbound),
        ..c.clone()
    }
}

#[test]
fn a_port_scan_of_one_host_is_found_at_its_fifteenth_refused_port() {
    let mut f = FanOut::default();
    let mut found = Vec::new();
    for (i, port) in (1..=28u16).enumerate() {
        let c = out("192.168.1.9", port, 6, 0x02);
        found.extend(f.observe(
            &c,
            100.0 + i as f64 * 0.01,
            &src(i as i64),
            &RULES,
            &NEW,
            Standing::default(),
        ));
        // The host refuses every port: a reset is no answer.
        assert!(f.observe(&back(&c, 0x14), 100.0, &src(0), &RULES, &NEW, Standing::default()).is_none());
    }
    let [hit] = &found[..] else { panic!("{found:?}") };
    assert_eq!((hit.look, hit.by.offset), (RaisedBy::PortScan, 14));
    assert!(hit.why.contains("15 ports of 192.168.1.9 within 5 min"), "{}", hit.why);
    assert!(f.is_hot(&out("192.168.1.9", 99, 6, 0x02), 150.0));
}

#[test]
fn answered_connections_and_a_few_hosts_are_no_scan() {
    let mut f = FanOut::default();
    for i in 0..40u16 {
        let c = out("52.1.2.3", 8000 + i, 6, 0x02);
        assert!(f.observe(&c, f64::from(i), &src(0), &RULES, &NEW, Standing::default()).is_none());
        assert!(
            f.observe(&back(&c, 0x12), f64::from(i), &src(0), &RULES, &NEW, Standing::default()).is_none(),
            "SYN-ACK"
        );
    }
    for i in 0..24 {
        let c = out(&format!("10.0.1.{i}"), 23, 6, 0x02);
        assert!(
            f.observe(&c, 50.0, &src(0), &RULES, &NEW, Standing::default()).is_none(),
            "24 hosts: under the threshold"
        );
    }
}

#[test]
fn an_address_scan_and_an_icmp_sweep_are_found_and_forgotten_after_the_window() {
    let mut f = FanOut::default();
    let hits: Vec<Finding> = (0..30)
        .filter_map(|i| {
            f.observe(
                &out(&format!("10.0.1.{i}"), 23, 6, 0x02),
                10.0,
                &src(i),
                &RULES,
                &NEW,
                Standing::default(),
            )
        })
        .collect();
    assert_eq!(hits.len(), 1, "{hits:?}");
    assert!(hits[0].why.starts_with("address scan: unanswered 23/tcp to 25 hosts"), "{}", hits[0].why);
    let mut g = FanOut::default();
    for i in 0..20 {
        assert!(g
            .observe(&out(&format!("10.0.2.{i}"), 0, 1, 0), 0.0, &src(i), &RULES, &NEW, Standing::default())
            .is_none());
    }
    // The first 20 leave the window before the next 20 arrive.
    for i in 20..40 {
        assert!(g
            .observe(&out(&format!("10.0.2.{i}"), 0, 1, 0), 301.0, &src(i), &RULES, &NEW, Standing::default())
            .is_none());
    }
    assert_eq!(g.hosts(), 20);
}

#[test]
fn a_flood_to_a_new_host_is_found_and_a_stream_to_an_old_peer_is_not() {
    let mut f = FanOut::default();
    // A one-way stream to a peer it has always had.
    for i in 0..2_000 {
        let t = f64::from(i) * 0.5;
        assert!(
            f.observe(&out("192.168.1.20", 5004, 17, 0), t, &src(0), &RULES, &NEW, Standing::default())
                .is_none(),
            "at {t}"
        );
    }
    let hits: Vec<Finding> = (0..300)
        .filter_map(|i| {
            f.observe(&out("198.51.100.7", 80, 17, 0), 1_000.0, &src(i), &RULES, &NEW, Standing::default())
        })
        .collect();
    let [hit] = &hits[..] else { panic!("{hits:?}") };
    assert_eq!((hit.look, hit.by.offset), (RaisedBy::Flood, 99));
    assert!(hit.why.contains("100 packets to 198.51.100.7 on 80/udp"), "{}", hit.why);
    // Its incident opened: an hour later, a second wave to the same victim is a
    // flood again (its packets were the attack's, not the device's history).
    f.incident_opened(1_000.0, &RULES);
    let again = (0..300)
        .filter_map(|i| {
            f.observe(&out("198.51.100.7", 80, 17, 0), 4_600.0, &src(i), &RULES, &NEW, Standing::default())
        })
        .count();
    assert_eq!(again, 1);
    // A cloud the device reached before, by name, that stops answering its reconnects
    // (a lock's MQTT broker at a new address): no flood's victim.
    let known = Standing { known_peer: true, ..Standing::default() };
    let reconnects = (0..300)
        .filter_map(|i| f.observe(&out("198.51.100.8", 8883, 6, 0x02), 9_000.0, &src(i), &RULES, &NEW, known))
        .count();
    assert_eq!(reconnects, 0);
    // Not before the device has a window of history.
    let mut cold = FanOut::default();
    assert!((0..300).all(|i| cold
        .observe(&out("198.51.100.7", 80, 17, 0), 1.0, &src(i), &RULES, &NEW, Standing::default())
        .is_none()));
}

/// A who-has for every address of the /24 at 20 a second: found at the 25th, in its
/// own words; the few that answer still count; a gratuitous ARP and a device asking
/// for its gateway and a neighbour all day are nothing.
#[test]
fn an_arp_sweep_of_the_lan_is_found_and_a_device_asking_for_its_gateway_is_not() {
    let mut f = FanOut::default();
    let mut hits = Vec::new();
    for h in 1..=254u8 {
        let ask = Context::arp_request(&format!("10.0.0.{h}"));
        let at = 100.0 + f64::from(h) * 0.05;
        hits.extend(f.observe(&ask, at, &src(i64::from(h)), &RULES, &NEW, Standing::default()));
        if h % 20 == 0 {
            let reply = Context { arp: Some(crate::traffic::packet::ArpOp::Reply), ..back(&ask, 0) };
            assert!(f.observe(&reply, at, &src(0), &RULES, &NEW, Standing::default()).is_none());
        }
    }
    let [hit] = &hits[..] else { panic!("{hits:?}") };
    assert_eq!(
        (hit.look, hit.by.offset),
        (RaisedBy::ArpSweep, 26),
        "10.0.0.5 is the device: its 25th is .26"
    );
    assert_eq!(hit.why, "ARP sweep: asked for 25 local addresses in 1 s (threshold 25 within 5 min)");
    assert!(f.is_hot(&Context::arp_request("10.0.0.200"), 120.0));
    let mut g = FanOut::default();
    for i in 0..5_000 {
        let t = f64::from(i) * 2.0;
        let who = if i % 7 == 0 { "10.0.0.9" } else { "10.0.0.1" };
        assert!(g
            .observe(&Context::arp_request(who), t, &src(0), &RULES, &NEW, Standing::default())
            .is_none());
    }
    let gratuitous = Context::arp_request("10.0.0.5");
    assert!((0..100).all(|i| g
        .observe(&gratuitous, 20_000.0 + f64::from(i), &src(0), &RULES, &NEW, Standing::default())
        .is_none()));
}

#[test]
fn fin_null_and_xmas_probes_are_a_stealth_scan_and_multicast_is_no_attempt() {
    let mut f = FanOut::default();
    assert!(f
        .observe(&out("192.168.1.2", 80, 6, 0x02), 0.0, &src(0), &RULES, &NEW, Standing::default())
        .is_none());
    assert!(
        f.observe(&out("192.168.1.2", 3390, 6, 0x01), 8.0, &src(1), &RULES, &NEW, Standing::default())
            .is_none(),
        "FIN: one"
    );
    let hit = f
        .observe(&out("192.168.1.2", 3391, 6, 0x00), 16.0, &src(2), &RULES, &NEW, Standing::default())
        .expect("NULL: two");
    assert_eq!(hit.look, RaisedBy::StealthScan);
    assert!(hit.why.contains("2 TCP packets with flags no connection uses"), "{}", hit.why);
    assert!(f.is_hot(&out("192.168.1.2", 3392, 6, 0x29), 20.0), "Xmas counts towards it");
    // mDNS to its group for ten minutes: nobody answers, and it is no flood.
    let mut g = FanOut::default();
    for i in 0..1_200 {
        let t = f64::from(i) * 0.5;
        assert!(g
            .observe(&out("224.0.0.251", 5353, 17, 0), t, &src(0), &RULES, &NEW, Standing::default())
            .is_none());
    }
    assert_eq!(g.hosts(), 0);
    // Packets of a connection (ACK set) are no attempts and no probes.
    assert!((0..50).all(|i| g
        .observe(&out("52.1.2.3", 443, 6, 0x18), 700.0, &src(i), &RULES, &NEW, Standing::default())
        .is_none()));
}

/// A device whose usual was learned over its first day: `icmp` to `hosts` hosts in a
/// window, and the login ports `logins` used.
fn learned(hosts: u32, logins: &[u16]) -> (FanOutUsual, f64) {
    let mut u = FanOutUsual::new();
    u.observe(Some(Note::Fanned { service: (0, 1), hosts, ports: 1 }), 0.0, 300.0);
    for &port in logins {
        u.observe(Some(Note::Login { port }), 0.0, 300.0);
    }
    u.observe(None, 90_000.0, 300.0);
    (u, 90_000.0)
}

fn guesses(f: &mut FanOut, usual: &FanOutUsual, t0: f64, n: u16, every_s: f64) -> Vec<(u16, Finding)> {
    (0..n)
        .filter_map(|i| {
            let t = t0 + f64::from(i) * every_s;
            let mut syn = out("203.0.113.7", 22, 6, 0x02);
            syn.src_port = 40_000 + i;
            let hit = f.observe(&syn, t, &src(i64::from(i)), &RULES, usual, Standing::default());
            // The server's banner and refusals: bytes of the same connection.
            let reply = Context { bytes: 400, ..back(&syn, 0x18) };
            assert!(f.observe(&reply, t + 0.1, &src(0), &RULES, usual, Standing::default()).is_none());
            hit.map(|h| (i + 1, h))
        })
        .collect()
}

#[test]
fn login_guessing_is_found_at_half_the_count_on_a_service_the_device_never_used() {
    let mut f = FanOut::default();
    // The fifth connection's reply has not come yet: (5 × 60 + 4 × 400) / 5 bytes.
    let hits = guesses(&mut f, &NEW, 100.0, 27, 2.2);
    let [(at, hit)] = &hits[..] else { panic!("{hits:?}") };
    assert_eq!((*at, hit.look), (5, RaisedBy::LoginGuessing), "{}", hit.why);
    assert_eq!(
        hit.why,
        "login guessing: opened 5 connections to 203.0.113.7 on 22/tcp (ssh) in 9 s, 380 bytes each on \
         average (threshold 5 within 5 min, a login service it never used)"
    );
    let mut g = FanOut::default();
    assert!(guesses(&mut g, &NEW, 100.0, 4, 2.2).is_empty(), "4 connections: under it");
}

#[test]
fn login_guessing_on_a_service_the_device_uses_needs_the_whole_count_within_the_window() {
    let (usual, t0) = learned(1, &[22]);
    let mut f = FanOut::default();
    let hits = guesses(&mut f, &usual, t0, 10, 1.0);
    let [(at, hit)] = &hits[..] else { panic!("{hits:?}") };
    assert_eq!(*at, 10);
    assert!(hit.why.contains("(threshold 10 within 5 min)"), "{}", hit.why);
    let mut g = FanOut::default();
    assert!(guesses(&mut g, &usual, t0, 9, 1.0).is_empty(), "9: under it");
    // One a minute: never 10 within 5 minutes.
    let mut h = FanOut::default();
    assert!(guesses(&mut h, &usual, t0, 60, 60.0).is_empty());
}

#[test]
fn a_host_guessing_the_devices_own_telnet_is_found() {
    let mut f = FanOut::default();
    let hits: Vec<Finding> = (0..8u16)
        .filter_map(|i| {
            let mut syn = back(&out("198.51.100.4", 23, 6, 0), 0x02);
            (syn.src_port, syn.dst_port) = (50_000 + i, 23);
            f.observe(&syn, 10.0 + f64::from(i), &src(i64::from(i)), &RULES, &NEW, Standing::default())
        })
        .collect();
    let [hit] = &hits[..] else { panic!("{hits:?}") };
    assert!(
        hit.why
            .starts_with("login guessing: 198.51.100.4 opened 5 connections to the device's 23/tcp (telnet)"),
        "{}",
        hit.why
    );
}

#[test]
fn a_learned_device_sweeping_ten_hosts_is_a_scan_and_a_new_one_is_judged_by_the_site() {
    let (usual, t0) = learned(2, &[]);
    let sweep = |f: &mut FanOut, usual: &FanOutUsual, n: u8, t: f64| -> Vec<Finding> {
        (0..n)
            .filter_map(|h| {
                f.observe(
                    &out(&format!("10.0.0.{}", h + 20), 0, 1, 0),
                    t,
                    &src(h.into()),
                    &RULES,
                    usual,
                    Standing::default(),
                )
            })
            .collect()
    };
    assert!(sweep(&mut FanOut::default(), &usual, 9, t0).is_empty(), "9 hosts: under its 10");
    let hits = sweep(&mut FanOut::default(), &usual, 18, t0);
    let [hit] = &hits[..] else { panic!("{hits:?}") };
    assert_eq!(hit.look, RaisedBy::AddressScan);
    assert_eq!(
        hit.why,
        "address scan: unanswered ICMP to 10 hosts within 5 min (threshold 10 within 5 min, from its usual \
         of 2 (the site's is 25))"
    );
    assert!(sweep(&mut FanOut::default(), &NEW, 24, t0).is_empty(), "a new device: the site's 25");
    // A device that usually pings 6 hosts: 18 is its threshold.
    let (busy, t1) = learned(6, &[]);
    assert!(sweep(&mut FanOut::default(), &busy, 17, t1).is_empty());
    assert_eq!(sweep(&mut FanOut::default(), &busy, 18, t1).len(), 1);
}

#[test]
fn a_flood_from_forged_sources_is_found_at_the_eighth_address() {
    let mut f = FanOut::default();
    // Its own address all day, to many peers: one source.
    for i in 0..500u16 {
        let c = out(&format!("52.1.{}.{}", i / 200, i % 200 + 1), 443, 6, 0x18);
        assert!(f.observe(&c, f64::from(i), &src(0), &RULES, &NEW, Standing::default()).is_none());
    }
    let hits: Vec<(i64, Finding)> = (0..50i64)
        .filter_map(|i| {
            let mut c = out("198.51.100.7", 80, 17, 0);
            c.src_ip = Some(format!("203.0.{}.9", i).parse().unwrap());
            f.observe(&c, 600.0, &src(i), &RULES, &NEW, Standing::default()).map(|h| (i, h))
        })
        .collect();
    let [(at, hit)] = &hits[..] else { panic!("{hits:?}") };
    assert_eq!((*at, hit.look), (6, RaisedBy::SpoofedSources), "its own and 7 forged: 8");
    assert_eq!(
        hit.why,
        "spoofed sources: sent from 8 source addresses within 5 min (threshold 8), the last from 203.0.6.9 \
         to 198.51.100.7 on 80/udp"
    );
}

#[test]
fn the_test_defaults_are_the_daemons() {
    let daemon = crate::daemon::config::DaemonConfig::defaults().incident_rules().fan_out;
    assert_eq!(daemon, FanOutRules::DEFAULTS, "config/default.toml's [incidents] looks");
}
