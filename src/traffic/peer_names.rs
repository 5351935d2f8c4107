//! Peers by name: a device's own DNS lookups, once answered, name the addresses it then
//! talks to. This follows RFC 9726's advice for MUD: resolve forward, through the
//! resolver the device itself asked; never by reverse lookup, and not by TLS SNI, which
//! a client may forge and these captures cut. A cloud answered by addresses in many
//! prefixes is then one peer to whatever reads the name (incidents, behaviours).
//!
//! Only an answer that matches a query the device sent is learned: from the address it
//! asked, to the port it asked from, with the query's id and question. Anything else (a
//! forged or unsolicited answer) is ignored and counted. Bounded per device, and
//! forgotten by last use rather than by TTL: a camera's TTLs are under a minute, but it
//! keeps using the addresses for days.

use std::collections::HashMap;
use std::net::IpAddr;

use simple_dns::rdata::RData;
use simple_dns::{PacketFlag, CLASS, QCLASS, QTYPE, TYPE};

use super::context::{Context, Direction};
pub use super::peer_name::{BadName, PeerName, MAX_NAME_LEN};

/// Addresses named per device at most; the least recently used goes first.
pub const MAX_NAMED: usize = 1024;
/// Queries awaiting their answer per device at most; the oldest goes first.
pub const MAX_PENDING: usize = 64;
/// An answer later than this after its query is not taken (seconds, capture time).
pub const ANSWER_WITHIN_S: f64 = 30.0;
/// A name the device has not used for this long is forgotten (seconds, capture time).
pub const FORGET_AFTER_S: f64 = 7.0 * 86_400.0;
/// A query awaiting its answer: where it went, from which port, and its id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Lookup {
    resolver: IpAddr,
    port: u16,
    id: u16,
}

#[derive(Debug, Clone)]
struct Pending {
    name: PeerName,
    at: f64,
}

#[derive(Debug, Clone)]
struct Named {
    name: PeerName,
    last_used: f64,
}

/// One device's lookups and the names they gave its peers.
#[derive(Debug, Default, Clone)]
pub struct DeviceNames {
    pending: HashMap<Lookup, Pending>,
    named: HashMap<IpAddr, Named>,
    /// Answers that matched no query of the device's (forged, unsolicited or late).
    pub ignored: u64,
}

impl DeviceNames {
    /// One of the device's packets (its context as the device sees it, at `ts`,
    /// seconds) with its UDP payload if it has one: learn from the device's lookups and
    /// their answers; the name of the packet's peer, if the device looked it up.
    pub fn observe(&mut self, c: &Context, ts: f64, udp: Option<&[u8]>) -> Option<PeerName> {
        if let (Some(payload), 17) = (udp, c.proto) {
            match c.direction {
                Some(Direction::Outbound) if c.dst_port == 53 => self.query(c, ts, payload),
                Some(Direction::Inbound) if c.src_port == 53 => self.answer(c, ts, payload),
                _ => {}
            }
        }
        let (_, peer) = c.device_and_peer()?;
        self.name_of(peer?, ts)
    }

    /// How many addresses are named now.
    pub fn len(&self) -> usize {
        self.named.len()
    }

    pub fn is_empty(&self) -> bool {
        self.named.is_empty()
    }

    fn name_of(&mut self, peer: IpAddr, ts: f64) -> Option<PeerName> {
        let named = self.named.get_mut(&peer)?;
        if ts - named.last_used > FORGET_AFTER_S {
            self.named.remove(&peer);
            return None;
        }
        named.last_used = named.last_used.max(ts);
        Some(named.name.clone())
    }

    /// A forward lookup (A or AAAA, class IN, one question) the device sent.
    fn query(&mut self, c: &Context, ts: f64, payload: &[u8]) {
        let (Some(resolver), Ok(dns)) = (c.dst_ip, simple_dns::Packet::parse(payload)) else { return };
        let [q] = dns.questions.as_slice() else { return };
        let forward = matches!(q.qtype, QTYPE::TYPE(TYPE::A) | QTYPE::TYPE(TYPE::AAAA));
        if dns.has_flags(PacketFlag::RESPONSE) || !forward || q.qclass != QCLASS::CLASS(CLASS::IN) {
            return;
        }
        let Ok(name) = PeerName::new(&q.qname.to_string()) else { return };
        self.pending.retain(|_, p| ts - p.at <= ANSWER_WITHIN_S);
        if self.pending.len() >= MAX_PENDING {
            let oldest = self.pending.iter().min_by(|a, b| a.1.at.total_cmp(&b.1.at)).map(|(k, _)| *k);
            if let Some(oldest) = oldest {
                self.pending.remove(&oldest);
            }
        }
        self.pending.insert(Lookup { resolver, port: c.src_port, id: dns.id() }, Pending { name, at: ts });
    }

    /// An answer to the device: learned only as the answer to its own query.
    fn answer(&mut self, c: &Context, ts: f64, payload: &[u8]) {
        let learned = c.src_ip.zip(simple_dns::Packet::parse(payload).ok()).and_then(|(resolver, dns)| {
            let lookup = Lookup { resolver, port: c.dst_port, id: dns.id() };
            let asked = self.pending.get(&lookup).filter(|p| ts - p.at <= ANSWER_WITHIN_S)?.name.clone();
            let [q] = dns.questions.as_slice() else { return None };
            let same_question = PeerName::new(&q.qname.to_string()).is_ok_and(|n| n == asked);
            if !dns.has_flags(PacketFlag::RESPONSE) || !same_question {
                return None;
            }
            self.pending.remove(&lookup);
            Some((asked, addresses_of(&dns, q.qname.to_string())))
        });
        let Some((name, addresses)) = learned else {
            self.ignored += 1;
            return;
        };
        for address in addresses {
            self.remember(address, name.clone(), ts);
        }
    }

    fn remember(&mut self, address: IpAddr, name: PeerName, ts: f64) {
        if self.named.len() >= MAX_NAMED && !self.named.contains_key(&address) {
            let least =
                self.named.iter().min_by(|a, b| a.1.last_used.total_cmp(&b.1.last_used)).map(|(k, _)| *k);
            if let Some(least) = least {
                self.named.remove(&least);
            }
        }
        self.named.insert(address, Named { name, last_used: ts });
    }
}

/// The addresses an answer gives the name asked, through its CNAME chain (in any order
/// the answer lists it).
fn addresses_of(dns: &simple_dns::Packet<'_>, asked: String) -> Vec<IpAddr> {
    let key = |n: String| n.to_ascii_lowercase();
    let mut chain = vec![key(asked)];
    // Each pass adds at least one alias or stops; a chain is no longer than the answers.
    for _ in 0..dns.answers.len() {
        let before = chain.len();
        for rr in &dns.answers {
            if let RData::CNAME(target) = &rr.rdata {
                let (owner, target) = (key(rr.name.to_string()), key(target.0.to_string()));
                if chain.contains(&owner) && !chain.contains(&target) {
                    chain.push(target);
                }
            }
        }
        if chain.len() == before {
            break;
        }
    }
    dns.answers
        .iter()
        .filter(|rr| rr.class == CLASS::IN && chain.contains(&key(rr.name.to_string())))
        .filter_map(|rr| match &rr.rdata {
            RData::A(a) => Some(IpAddr::from(std::net::Ipv4Addr::from(a.address))),
            RData::AAAA(a) => Some(IpAddr::from(std::net::Ipv6Addr::from(a.address))),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use simple_dns::rdata::{A, CNAME};
    use simple_dns::{Name, Packet, Question, ResourceRecord};

    use super::*;

    const CAMERA: &str = "10.0.0.5";
    const RESOLVER: &str = "10.0.0.1";

    /// An A question for `name`.
    fn a_question(name: &str) -> Question<'_> {
        Question::new(Name::new_unchecked(name), QTYPE::TYPE(TYPE::A), QCLASS::CLASS(CLASS::IN), false)
    }

    fn query(id: u16, name: &str) -> Vec<u8> {
        let mut p = Packet::new_query(id);
        p.questions.push(a_question(name));
        p.build_bytes_vec().unwrap()
    }

    /// An answer to `asked`: `alias` as its CNAME when given, then `addresses` of the last
    /// name.
    fn answer(id: u16, asked: &str, alias: Option<&str>, addresses: &[&str]) -> Vec<u8> {
        let mut p = Packet::new_reply(id);
        p.questions.push(a_question(asked));
        let owner = alias.unwrap_or(asked);
        for a in addresses {
            let ip: std::net::Ipv4Addr = a.parse().unwrap();
            p.answers.push(ResourceRecord::new(
                Name::new_unchecked(owner),
                CLASS::IN,
                30,
                RData::A(A { address: ip.into() }),
            ));
        }
        if let Some(alias) = alias {
            // Listed after the addresses: the chain is followed in any order.
            p.answers.push(ResourceRecord::new(
                Name::new_unchecked(asked),
                CLASS::IN,
                30,
                RData::CNAME(CNAME(Name::new_unchecked(alias))),
            ));
        }
        p.build_bytes_vec().unwrap()
    }

    fn udp(src: &str, sport: u16, dst: &str, dport: u16, direction: Direction) -> Context {
        Context {
            src_ip: Some(src.parse().unwrap()),
            dst_ip: Some(dst.parse().unwrap()),
            src_port: sport,
            dst_port: dport,
            proto: 17,
            bytes: 80,
            direction: Some(direction),
            ..Context::default()
        }
    }

    fn ask(names: &mut DeviceNames, id: u16, name: &str, ts: f64) {
        let q = udp(CAMERA, 5_000, RESOLVER, 53, Direction::Outbound);
        assert_eq!(names.observe(&q, ts, Some(&query(id, name))), None);
    }

    fn to(peer: &str) -> Context {
        Context::outbound(peer, 443, 6, 0x18, 200)
    }

    #[test]
    fn the_answer_to_the_devices_own_query_names_its_peers_through_cnames() {
        let mut names = DeviceNames::default();
        ask(&mut names, 7, "VS-cam.u011.immedia-semi.com", 100.0);
        let reply = udp(RESOLVER, 53, CAMERA, 5_000, Direction::Inbound);
        let a = answer(
            7,
            "VS-cam.u011.immedia-semi.com",
            Some("elb-1.amazonaws.com"),
            &["52.70.158.224", "3.2.1.4"],
        );
        names.observe(&reply, 100.05, Some(&a));
        assert_eq!(names.ignored, 0);
        for peer in ["52.70.158.224", "3.2.1.4"] {
            let name = names.observe(&to(peer), 200.0, None).expect("named");
            assert_eq!(name.as_str(), "vs-cam.u011.immedia-semi.com", "the name the device asked, lowercase");
        }
        assert_eq!(names.observe(&to("9.9.9.9"), 200.0, None), None);
        // Used for days past its TTL, it stays; unused for longer than FORGET_AFTER_S, it goes.
        assert!(names.observe(&to("3.2.1.4"), 200.0 + 5.0 * 86_400.0, None).is_some());
        assert!(names.observe(&to("52.70.158.224"), 200.0 + 7.5 * 86_400.0, None).is_none());
        assert!(names.observe(&to("3.2.1.4"), 200.0 + 7.5 * 86_400.0, None).is_some(), "used at day 5");
    }

    #[test]
    fn forged_unsolicited_and_reverse_answers_are_ignored() {
        let mut names = DeviceNames::default();
        ask(&mut names, 7, "cloud.example.com", 100.0);
        let evil = "6.6.6.6";
        let cases = [
            // From another host than the resolver asked.
            (
                udp("10.0.0.66", 53, CAMERA, 5_000, Direction::Inbound),
                answer(7, "cloud.example.com", None, &[evil]),
            ),
            // To another port than the query came from.
            (
                udp(RESOLVER, 53, CAMERA, 5_001, Direction::Inbound),
                answer(7, "cloud.example.com", None, &[evil]),
            ),
            // Another id.
            (
                udp(RESOLVER, 53, CAMERA, 5_000, Direction::Inbound),
                answer(8, "cloud.example.com", None, &[evil]),
            ),
            // Another question.
            (
                udp(RESOLVER, 53, CAMERA, 5_000, Direction::Inbound),
                answer(7, "bank.example.com", None, &[evil]),
            ),
            // A query, not an answer, sent to the device.
            (udp(RESOLVER, 53, CAMERA, 5_000, Direction::Inbound), query(7, "cloud.example.com")),
            // Not DNS at all.
            (udp(RESOLVER, 53, CAMERA, 5_000, Direction::Inbound), vec![1, 2, 3]),
        ];
        for (c, payload) in &cases {
            names.observe(c, 100.1, Some(payload));
        }
        assert_eq!(names.ignored, cases.len() as u64);
        assert_eq!(names.observe(&to(evil), 101.0, None), None);
        // The real answer still comes in, once; a replay of it is unsolicited.
        let reply = udp(RESOLVER, 53, CAMERA, 5_000, Direction::Inbound);
        names.observe(&reply, 100.2, Some(&answer(7, "cloud.example.com", None, &["1.2.3.4"])));
        assert!(names.observe(&to("1.2.3.4"), 101.0, None).is_some());
        names.observe(&reply, 100.3, Some(&answer(7, "cloud.example.com", None, &[evil])));
        assert_eq!(names.observe(&to(evil), 101.0, None), None);
        // An answer later than ANSWER_WITHIN_S after its query is not taken.
        ask(&mut names, 9, "late.example.com", 200.0);
        names.observe(
            &reply,
            200.0 + ANSWER_WITHIN_S + 1.0,
            Some(&answer(9, "late.example.com", None, &["5.5.5.5"])),
        );
        assert_eq!(names.observe(&to("5.5.5.5"), 300.0, None), None);
        // A reverse lookup (PTR) is never a query the device's peers are named by.
        let mut ptr = Packet::new_query(11);
        ptr.questions.push(Question::new(
            Name::new_unchecked("4.3.2.1.in-addr.arpa"),
            QTYPE::TYPE(TYPE::PTR),
            QCLASS::CLASS(CLASS::IN),
            false,
        ));
        names.observe(
            &udp(CAMERA, 5_000, RESOLVER, 53, Direction::Outbound),
            300.0,
            Some(&ptr.build_bytes_vec().unwrap()),
        );
        assert!(names.pending.values().all(|p| p.name.as_str() != "4.3.2.1.in-addr.arpa"));
    }

    #[test]
    fn names_and_queries_are_bounded() {
        let mut names = DeviceNames::default();
        for i in 0..MAX_PENDING as u16 + 10 {
            ask(&mut names, i, &format!("q{i}.example.com"), 1.0 + f64::from(i) * 0.01);
        }
        assert_eq!(names.pending.len(), MAX_PENDING);
        for i in 0..MAX_NAMED as u32 + 5 {
            let ip = IpAddr::from(std::net::Ipv4Addr::from(0x0a00_0000 + i));
            names.remember(ip, PeerName::new("many.example.com").unwrap(), f64::from(i));
        }
        assert_eq!(names.len(), MAX_NAMED);
        assert!(!names.named.contains_key(&IpAddr::from([10, 0, 0, 0])), "the least recently used went");
    }

    #[test]
    fn a_peer_name_is_a_dns_name() {
        assert_eq!(PeerName::new("Cloud.Example.com.").unwrap().as_str(), "cloud.example.com");
        assert!(PeerName::new("_dns.resolver.arpa").is_ok());
        for bad in
            ["", ".", "a..b", "a b.com", "ünï.com", &"a".repeat(64), &format!("{}.com", "a.".repeat(130))]
        {
            let e = PeerName::new(bad).unwrap_err();
            assert!(e.to_string().contains("is not a DNS name"), "{bad:?}: {e}");
        }
        let e = serde_json::from_str::<PeerName>("\"a b\"").unwrap_err().to_string();
        assert!(e.contains("is not a DNS name"), "{e}");
    }
}
