use super::*;
use crate::traffic::peer_names::PeerName;

const RULES: FanOutRules = FanOutRules::DEFAULTS;
/// [`RemotePeers::observe`] of what [`RemotePeers::sight`] saw.
fn observe(
    p: &mut RemotePeers,
    c: &Context,
    ts: f64,
    teach: Teach,
    rules: &FanOutRules,
) -> Option<PeerFinding> {
    let seen = p.sight(c)?;
    p.observe(seen, c, ts, teach, rules)
}

const LEARNING: Teach = Teach { normal: true, learning: true, footprint_open: false };
const AFTER: Teach = Teach { normal: true, learning: false, footprint_open: false };

fn to(peer: &str, name: Option<&str>, flags: u8, bytes: u32) -> Context {
    Context {
        src_ip: Some("192.168.1.7".parse().unwrap()),
        dst_ip: Some(peer.parse().unwrap()),
        src_port: 50_000,
        dst_port: 443,
        proto: 6,
        tcp_flags: flags,
        bytes,
        direction: Some(Direction::Outbound),
        peer_name: name.map(|n| PeerName::new(n).unwrap()),
        ..Context::default()
    }
}

#[test]
fn a_cloud_learned_by_name_is_known_at_its_next_address() {
    let mut p = RemotePeers::default();
    assert_eq!(
        observe(&mut p, &to("52.0.0.1", Some("cloud.example.com"), 0x18, 1_400), 0.0, LEARNING, &RULES),
        None
    );
    // Another address of the same name, after the learning period: no stranger.
    for i in 0..100 {
        let c = to("3.3.3.3", Some("cloud.example.com"), 0x02, 60);
        assert_eq!(observe(&mut p, &c, 4_000.0 + f64::from(i) * 60.0, AFTER, &RULES), None);
    }
    assert!(p.strangers().is_empty());
    assert!(p.peer("cloud.example.com").unwrap().services.contains(&(443, 6)));
}

#[test]
fn a_beacon_and_an_upload_to_a_stranger_are_raised_once_and_never_learned() {
    let mut p = RemotePeers::default();
    let beacon = to("198.51.100.9", Some("c2.example.net"), 0x02, 200);
    let found: Vec<_> =
        (0..12).map(|i| observe(&mut p, &beacon, 4_000.0 + f64::from(i) * 60.0, AFTER, &RULES)).collect();
    assert!(found[..9].iter().all(Option::is_none), "{found:?}");
    let f = found[9].as_ref().expect("the tenth exchange");
    assert_eq!(f.look, RaisedBy::DataToStranger);
    assert!(f.why.contains("10 exchanges") && f.why.contains("c2.example.net (198.51.100.9)"), "{}", f.why);
    assert!(found[10..].iter().all(Option::is_none), "raised once");
    // A raised stranger is never learned; back after a silence, it is raised again.
    let back = 4_000.0 + 2.0 * QUARANTINE_S;
    let again: Vec<_> =
        (0..12).filter_map(|i| observe(&mut p, &beacon, back + f64::from(i) * 60.0, AFTER, &RULES)).collect();
    assert_eq!(again.len(), 1, "the second wave, once");
    assert!(p.known_count() == 0 && p.stranger_in(&beacon).is_some());
    // An upload of one connection crosses the byte floor.
    let upload = to("203.0.113.5", None, 0x18, 1_448);
    let n = (1 << 20) / 1_448 + 1;
    let found: Vec<_> =
        (0..n).map(|i| observe(&mut p, &upload, 9_000.0 + f64::from(i) * 0.001, AFTER, &RULES)).collect();
    assert!(found[..(n - 1) as usize].iter().all(Option::is_none));
    assert!(found[(n - 1) as usize].as_ref().is_some_and(|f| f.why.contains("1.0 MiB")), "{found:?}");
}

#[test]
fn a_quiet_new_peer_is_learned_after_its_quarantine() {
    let mut p = RemotePeers::default();
    let ntp = to("192.0.2.44", Some("time.example.org"), 0x18, 90);
    assert_eq!(observe(&mut p, &ntp, 4_000.0, AFTER, &RULES), None);
    assert_eq!(p.known_count(), 0);
    assert_eq!(observe(&mut p, &ntp, 4_000.0 + QUARANTINE_S, AFTER, &RULES), None);
    assert!(p.peer("time.example.org").is_some() && p.strangers().is_empty());
}

#[test]
fn ten_times_the_most_to_a_known_peer_is_raised_and_not_learned() {
    let mut p = RemotePeers::default();
    let up = |bytes| to("52.0.0.1", Some("cloud.example.com"), 0x18, bytes);
    // The learning period: 2 MiB in one window is its usual.
    for i in 0..2_048 {
        observe(&mut p, &up(1_024), f64::from(i) * 0.01, LEARNING, &RULES);
    }
    observe(&mut p, &up(1), 400.0, LEARNING, &RULES);
    assert_eq!(p.peer("cloud.example.com").unwrap().most, 2 << 20);
    // Twenty times that after it: raised, once.
    let found: Vec<_> = (0..40_960)
        .filter_map(|i| observe(&mut p, &up(1_024), 5_000.0 + f64::from(i) * 0.001, AFTER, &RULES))
        .collect();
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].why.starts_with("far more than usual: sent 20.0 MiB to cloud.example.com"),
        "{}",
        found[0].why
    );
    // The raised window is not usual; five times the usual is, and raises nothing.
    for i in 0..10_240 {
        assert_eq!(observe(&mut p, &up(1_024), 6_000.0 + f64::from(i) * 0.01, AFTER, &RULES), None);
    }
    assert_eq!(p.peer("cloud.example.com").unwrap().most, 2 << 20, "the raised window was not learned");
    observe(&mut p, &up(1), 7_000.0, AFTER, &RULES);
    assert_eq!(p.peer("cloud.example.com").unwrap().most, 10 << 20, "the five-times window was");
    // An analyst's dismissal makes it usual.
    let mut t = Traffic::default();
    t.add(&up(1), 0.0);
    p.dismissed(&t, 7_000.0);
    assert_eq!(p.peer("cloud.example.com").unwrap().most, 20 << 20, "the raised window's bytes");
    p.confirmed(&t, 7_000.0);
    assert_eq!(p.known_count(), 1, "a cloud it had before the confirmed attack stays");
    p.confirmed(&t, 0.0);
    assert_eq!(p.known_count(), 0, "a peer learned since the attack began is forgotten");
}

#[test]
fn the_lan_and_groups_are_no_remote_peers_and_the_maps_are_bounded() {
    let mut p = RemotePeers::default();
    assert_eq!(observe(&mut p, &to("192.168.1.1", None, 0x02, 60), 0.0, LEARNING, &RULES), None);
    assert_eq!(observe(&mut p, &to("239.255.255.250", None, 0x02, 60), 0.0, LEARNING, &RULES), None);
    assert_eq!(p.known_count(), 0);
    for i in 0..1_000u32 {
        let c = to(&std::net::Ipv4Addr::from(0x0900_0000 + i).to_string(), None, 0x18, 60);
        observe(&mut p, &c, f64::from(i), LEARNING, &RULES);
        observe(&mut p, &c, 10_000.0 + f64::from(i), AFTER, &RULES);
    }
    assert_eq!(p.known_count(), MAX_KNOWN);
    assert!(p.addresses.len() <= MAX_ADDRESSES && p.strangers().len() <= MAX_STRANGERS);
    // At its bounds, with the longest names and every service: what it can cost.
    let mut full = RemotePeers::default();
    for i in 0..(MAX_KNOWN + MAX_STRANGERS) as u32 {
        let name = format!("{}{i:08}", "a.".repeat(120)).chars().take(253).collect::<String>();
        for a in 0..(MAX_ADDRESSES as u32 / MAX_KNOWN as u32) {
            let c = Context {
                dst_port: 1 + a as u16,
                ..to(&std::net::Ipv4Addr::from(0x0900_0000 + i * 256 + a).to_string(), Some(&name), 0x18, 60)
            };
            let teach = if (i as usize) < MAX_KNOWN { LEARNING } else { AFTER };
            observe(&mut full, &c, 10.0, teach, &RULES);
        }
    }
    let json = serde_json::to_vec(&full).unwrap();
    let bytes = json.len();
    // Its snapshot reads back as it was (JSON has no infinities: none is kept), also
    // flattened into another struct, as the snapshot's tail holds the incident state.
    let back: RemotePeers = serde_json::from_slice(&json).unwrap();
    assert_eq!(back, full);
    #[derive(Serialize, Deserialize)]
    struct Tail {
        #[serde(flatten)]
        peers: RemotePeers,
        beside: u32,
    }
    let tail = serde_json::to_vec(&Tail { peers: full.clone(), beside: 7 }).unwrap();
    let back: Tail = serde_json::from_slice(&tail).unwrap();
    assert!(back.peers == full && back.beside == 7);
    assert!(full.known_count() == MAX_KNOWN && full.strangers().len() == MAX_STRANGERS);
    assert!(bytes < 40 << 10, "{bytes} bytes at its bounds");
    p.expire(20_000.0 + QUARANTINE_S * 30.0, QUARANTINE_S);
    assert!(p.known_count() == 0 && p.addresses.is_empty() && p.names.is_empty() && p.strangers().is_empty());
}
