//! The device's remote peers: the public hosts it talks to, by the name it looked each
//! up by (MUD, RFC 8520, names a device's cloud by DNS name) and by address, with per
//! peer the services it used and the most it sent it in one window. Two looks judge the
//! device's traffic against them (Defender for IoT's "unauthorized Internet
//! connectivity" and "excessive traffic", Darktrace's rare endpoint with data leaving):
//! - **data to a stranger**: a public peer whose name and address the device never used
//!   receives [`FanOutRules::stranger_bytes`], or [`FanOutRules::stranger_exchanges`]
//!   separate exchanges: TCP connections, or other packets [`EXCHANGE_GAP_S`] apart (an
//!   exfiltration; a C&C beacon);
//! - **far more than usual**: a known peer receives within one window more than
//!   [`FanOutRules::usual_factor`] times the most the device sent it in one window, and
//!   at least `stranger_bytes`.
//!
//! What is learned: every public peer of the device's onboarding and learning period
//! (records decided normal outside an incident); after it, a new peer only once it has
//! stayed below both floors for [`QUARANTINE_S`] (a slow beacon crosses them long
//! before). A stranger a look raised is never learned without an analyst's
//! false-positive verdict; a confirmed verdict forgets the incident's peers. A window's
//! volume is learned only when it raised nothing and no incident with an attack's
//! footprint was open. Volume is the device's own: every record counts, whatever the
//! model said of it. Bounded, expiring, part of the device's snapshot. Pure: times come
//! in.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use serde::{Deserialize, Serialize};

use super::fanout::{FanOutRules, RaisedBy};
use super::footprint::is_local;
use super::incident_traffic::Traffic;
use super::logins::bytes_words;
use crate::traffic::context::{is_group, Context, Direction};

/// A new peer met after the learning period is learned once it stayed below the
/// floors this long (device time): a day, as the library's quarantine.
pub const QUARANTINE_S: f64 = 86_400.0;
/// Outbound packets (other than TCP's) to one peer at least this far apart are separate
/// exchanges (a beacon's check-ins; the packets of one upload are not). A TCP exchange
/// is a connection.
pub const EXCHANGE_GAP_S: f64 = 10.0;
/// A raised stranger silent this long (device time) that comes back is counted, and
/// raised, again.
pub const RETURN_GAP_S: f64 = 3_600.0;
/// Known peers, their addresses, and strangers kept at most: an IoT device has a few
/// clouds (IoT Sentinel, MUD); beyond, the least recently seen goes first.
const MAX_KNOWN: usize = 32;
const MAX_ADDRESSES: usize = 256;
const MAX_STRANGERS: usize = 16;
/// Services kept per known peer at most.
const MAX_SERVICES: usize = 8;

/// A public peer the device used.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KnownPeer {
    /// The name the device looked it up by; `None`: known by its address alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The address it was learned at.
    pub address: IpAddr,
    /// Device time it was learned and last seen.
    pub since: f64,
    pub last: f64,
    /// The services (the server's port, the IP protocol) it reached on it.
    #[serde(default)]
    pub services: BTreeSet<(u16, u8)>,
    /// The most bytes it sent the peer within one window, of windows that raised
    /// nothing and saw no attack's footprint.
    #[serde(default)]
    pub most: u64,
    /// The current window: its start, the bytes sent so far, whether it raised, and
    /// whether an incident with an attack's footprint was open during it.
    #[serde(default)]
    window_start: Option<f64>,
    #[serde(default)]
    window_bytes: u64,
    #[serde(default)]
    window_raised: bool,
    #[serde(default)]
    window_tainted: bool,
    /// The bytes of the last window that raised: what a false-positive verdict makes usual.
    #[serde(default)]
    raised_bytes: u64,
    /// The address of its last packet (saves a look-up a record).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    last_address: Option<IpAddr>,
}

impl KnownPeer {
    /// As an analyst reads it: its name, else its address.
    pub fn identity(&self) -> String {
        self.name.clone().unwrap_or_else(|| self.address.to_string())
    }
}

/// A public peer met after the learning period, not learned yet.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Stranger {
    pub first: f64,
    pub last: f64,
    pub last_out: Option<f64>,
    pub bytes: u64,
    pub exchanges: u32,
    /// A look raised it: never learned without a verdict.
    pub raised: bool,
    /// It was raised in this stretch of its traffic; back after [`RETURN_GAP_S`] of
    /// silence, its tally starts again and it is raised again (a second wave).
    #[serde(default)]
    pub told: bool,
    /// The address it was met at first.
    pub address: IpAddr,
}

/// What may be learned from one record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Teach {
    /// The record was decided normal and no incident is open.
    pub normal: bool,
    /// The device is in its onboarding or learning period.
    pub learning: bool,
    /// An incident with an attack's footprint (or a look's finding) is open.
    pub footprint_open: bool,
}

/// A packet's public peer: its address, the name the device looked it up by, and the
/// known peer it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sighting<'c> {
    pub peer: IpAddr,
    pub name: Option<&'c str>,
    pub id: Option<u32>,
}

impl Sighting<'_> {
    pub fn known(&self) -> bool {
        self.id.is_some()
    }
}

/// What a look found on the device's remote peers.
#[derive(Debug, Clone, PartialEq)]
pub struct PeerFinding {
    pub look: RaisedBy,
    pub why: String,
}

/// A device's remote peers (part of its history). Looked up by name and by address
/// without allocating: a record of a known peer costs two map look-ups.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RemotePeers {
    /// Known peers by number (a list in JSON: the snapshot's tail flattens the incident
    /// state, and a flattened map's keys come back as strings, no numbers).
    #[serde(default, with = "numbered")]
    known: BTreeMap<u32, KnownPeer>,
    /// The names and the addresses it used, and the known peer each belongs to.
    #[serde(default)]
    names: BTreeMap<String, u32>,
    #[serde(default)]
    addresses: BTreeMap<IpAddr, u32>,
    #[serde(default)]
    next_id: u32,
    /// By name, else address.
    #[serde(default)]
    strangers: BTreeMap<String, Stranger>,
    /// Device time of the last expiry sweep (a sweep an hour bounds the work per record).
    #[serde(skip)]
    swept: f64,
}

/// The public peer of a packet, and the name the device looked it up by.
fn public_peer(c: &Context) -> Option<(IpAddr, Option<&str>)> {
    let (_, Some(peer)) = c.device_and_peer()? else { return None };
    if is_local(peer) || is_group(peer) || peer.is_loopback() || peer.is_unspecified() {
        return None;
    }
    Some((peer, c.peer_name.as_ref().map(|n| n.as_str())))
}

/// A peer as an analyst reads it, and as strangers are kept: its name, else its address.
fn identity(peer: IpAddr, name: Option<&str>) -> String {
    name.map_or_else(|| peer.to_string(), str::to_string)
}

impl RemotePeers {
    /// The known peer of this identity (a name, or an address), for tests and tools.
    pub fn peer(&self, identity: &str) -> Option<&KnownPeer> {
        let id = self.names.get(identity).or_else(|| self.addresses.get(&identity.parse().ok()?))?;
        self.known.get(id)
    }

    pub fn known_count(&self) -> usize {
        self.known.len()
    }

    pub fn strangers(&self) -> &BTreeMap<String, Stranger> {
        &self.strangers
    }

    /// The known peer a packet's peer is, by its name or its address.
    fn id_of(&self, peer: IpAddr, name: Option<&str>) -> Option<u32> {
        name.and_then(|n| self.names.get(n)).or_else(|| self.addresses.get(&peer)).copied()
    }

    /// The packet's public peer, and the known peer it is, if it is one: looked up once
    /// a record ([`Sighting::known`] for the flood look, then [`Self::observe`]).
    pub fn sight<'c>(&self, c: &'c Context) -> Option<Sighting<'c>> {
        let (peer, name) = public_peer(c)?;
        Some(Sighting { peer, name, id: self.id_of(peer, name) })
    }

    /// The packet's peer is public and neither its name nor its address was ever used
    /// by the device's known traffic: what an incident with its records shows.
    pub fn stranger_in(&self, c: &Context) -> Option<String> {
        let (peer, name) = public_peer(c)?;
        if self.id_of(peer, name).is_some() {
            return None;
        }
        let identity = identity(peer, name);
        self.strangers.contains_key(&identity).then_some(identity)
    }

    /// One record's packet at device time `ts`, as [`Self::sight`] saw it: a finding
    /// when it crosses a floor.
    pub fn observe(
        &mut self,
        seen: Sighting<'_>,
        c: &Context,
        ts: f64,
        teach: Teach,
        rules: &FanOutRules,
    ) -> Option<PeerFinding> {
        if rules.window_ms == 0 {
            return None;
        }
        let Sighting { peer, name, id } = seen;
        let id = match id {
            Some(id) => id,
            // Learned in the learning period, and its first packet counts towards its usual.
            None if teach.learning && teach.normal => self.learn(peer, name, ts),
            None if teach.learning => return None,
            None => return self.count_stranger(peer, name, c, ts, teach, rules),
        };
        // A name's new address is its own (a cloud's rotation); the address it was seen
        // at last is, already.
        let new_address = teach.normal && self.known.get(&id).is_some_and(|k| k.last_address != Some(peer));
        if new_address {
            self.remember_address(peer, id);
        }
        let known = self.known.get_mut(&id).expect("a known peer's number");
        known.last = ts;
        known.last_address = Some(peer);
        // A service is known by its first packets: a SYN, or any packet of another transport.
        if teach.normal && (c.proto != 6 || c.is_syn()) && known.services.len() < MAX_SERVICES {
            if let Some(s) = c.service_port() {
                known.services.insert(s);
            }
        }
        if c.direction == Some(Direction::Outbound) {
            Self::count_volume(known, c, ts, teach, rules)
        } else {
            None
        }
    }

    /// Outbound bytes to a known peer, in its window.
    fn count_volume(
        known: &mut KnownPeer,
        c: &Context,
        ts: f64,
        teach: Teach,
        rules: &FanOutRules,
    ) -> Option<PeerFinding> {
        let window_s = rules.window_ms as f64 / 1000.0;
        if known.window_start.is_none_or(|start| ts >= start + window_s) {
            if !known.window_raised && !known.window_tainted {
                known.most = known.most.max(known.window_bytes);
            }
            known.window_start = Some(ts);
            known.window_bytes = 0;
            known.window_raised = false;
            known.window_tainted = false;
        }
        known.window_bytes += u64::from(c.bytes);
        known.window_tainted |= teach.footprint_open;
        let needed = known.most.saturating_mul(u64::from(rules.usual_factor)).max(rules.stranger_bytes);
        if known.window_raised || teach.learning || known.window_bytes < needed {
            return None;
        }
        known.window_raised = true;
        known.raised_bytes = known.window_bytes;
        let why = format!(
            "far more than usual: sent {} to {} within {}, {} its most in one window ({}; threshold {}× \
             that, at least {})",
            bytes_words(known.window_bytes),
            known.identity(),
            window_words(window_s),
            times_words(known.window_bytes, known.most),
            bytes_words(known.most),
            rules.usual_factor,
            bytes_words(rules.stranger_bytes),
        );
        Some(PeerFinding { look: RaisedBy::FarAboveUsual, why })
    }

    /// A public peer the device never used, after its learning period.
    fn count_stranger(
        &mut self,
        peer: IpAddr,
        name: Option<&str>,
        c: &Context,
        ts: f64,
        teach: Teach,
        rules: &FanOutRules,
    ) -> Option<PeerFinding> {
        let key = identity(peer, name);
        if !self.strangers.contains_key(&key) && self.strangers.len() >= MAX_STRANGERS {
            let oldest =
                self.strangers.iter().min_by(|a, b| a.1.last.total_cmp(&b.1.last)).map(|(k, _)| k.clone());
            self.strangers.remove(&oldest.expect("a full map has an oldest"));
        }
        let s = self.strangers.entry(key.clone()).or_insert(Stranger {
            first: ts,
            last: ts,
            last_out: None,
            bytes: 0,
            exchanges: 0,
            raised: false,
            told: false,
            address: peer,
        });
        if s.told && ts - s.last >= RETURN_GAP_S {
            (s.first, s.bytes, s.exchanges, s.told) = (ts, 0, 0, false);
        }
        s.last = ts;
        if c.direction == Some(Direction::Outbound) {
            s.bytes += u64::from(c.bytes);
            // A TCP exchange is a connection (a long-lived one's keep-alives are one);
            // other transports', packets apart.
            let new_exchange =
                if c.proto == 6 { c.is_syn() } else { s.last_out.is_none_or(|t| ts - t >= EXCHANGE_GAP_S) };
            s.exchanges += u32::from(new_exchange);
            s.last_out = Some(ts);
        }
        if !s.told && (s.bytes >= rules.stranger_bytes || s.exchanges >= rules.stranger_exchanges) {
            (s.raised, s.told) = (true, true);
            let named = if name.is_some() { format!("{key} ({peer})") } else { key };
            let why = format!(
                "data to a stranger: sent {} in {} exchange{} over {} to {named}, a public host whose name and \
                 address the device never used (thresholds {} or {} exchanges)",
                bytes_words(s.bytes),
                s.exchanges,
                if s.exchanges == 1 { "" } else { "s" },
                window_words(ts - s.first),
                bytes_words(rules.stranger_bytes),
                rules.stranger_exchanges,
            );
            return Some(PeerFinding { look: RaisedBy::DataToStranger, why });
        }
        if !s.raised && teach.normal && ts - s.first >= QUARANTINE_S {
            self.strangers.remove(&key);
            self.learn(peer, name, ts);
        }
        None
    }

    /// A new known peer; its number.
    fn learn(&mut self, peer: IpAddr, name: Option<&str>, ts: f64) -> u32 {
        if self.known.len() >= MAX_KNOWN {
            let oldest = self.known.iter().min_by(|a, b| a.1.last.total_cmp(&b.1.last)).map(|(id, _)| *id);
            self.forget(oldest.expect("a full map has an oldest"));
        }
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1);
        let known = KnownPeer {
            name: name.map(str::to_string),
            address: peer,
            since: ts,
            last: ts,
            services: BTreeSet::new(),
            most: 0,
            window_start: None,
            window_bytes: 0,
            window_raised: false,
            window_tainted: false,
            raised_bytes: 0,
            last_address: None,
        };
        self.known.insert(id, known);
        if let Some(name) = name {
            self.names.insert(name.to_string(), id);
        }
        self.remember_address(peer, id);
        id
    }

    /// A known peer goes, with its name and addresses.
    fn forget(&mut self, id: u32) {
        self.known.remove(&id);
        self.names.retain(|_, i| *i != id);
        self.addresses.retain(|_, i| *i != id);
    }

    fn remember_address(&mut self, peer: IpAddr, id: u32) {
        if self.addresses.get(&peer) == Some(&id) {
            return;
        }
        if !self.addresses.contains_key(&peer) && self.addresses.len() >= MAX_ADDRESSES {
            // The address of the least recently seen peer goes first.
            let last = |id: &u32| self.known.get(id).map_or(f64::NEG_INFINITY, |k| k.last);
            let oldest =
                self.addresses.iter().min_by(|a, b| last(a.1).total_cmp(&last(b.1))).map(|(a, _)| *a);
            self.addresses.remove(&oldest.expect("a full map has an oldest"));
        }
        self.addresses.insert(peer, id);
    }

    /// What was learned lapses `forget_s` after it was last seen (device time `now`),
    /// swept at most once an hour.
    pub fn expire(&mut self, now: f64, forget_s: f64) {
        if forget_s <= 0.0 || now - self.swept < 3_600.0 {
            return;
        }
        self.swept = now;
        let lapsed: Vec<u32> =
            self.known.iter().filter(|(_, k)| now - k.last > forget_s).map(|(id, _)| *id).collect();
        for id in lapsed {
            self.forget(id);
        }
        self.strangers.retain(|_, s| now - s.last <= forget_s);
    }

    /// An analyst called an incident with this traffic a false positive: its strangers
    /// are the device's peers now, and what a known peer's raised window sent is usual.
    pub fn dismissed(&mut self, traffic: &Traffic, ts: f64) {
        for (peer, name) in Self::peers_of(traffic) {
            if let Some(id) = self.id_of(peer, name.as_deref()) {
                let k = self.known.get_mut(&id).expect("a known peer's number");
                k.most = k.most.max(k.raised_bytes);
            } else if self.strangers.remove(&identity(peer, name.as_deref())).is_some() {
                self.learn(peer, name.as_deref(), ts);
            }
        }
    }

    /// An analyst confirmed an incident with this traffic, which began at `since`
    /// (device time): the peers learned since are forgotten (what was learned of it; a
    /// cloud the device had before stays its own).
    pub fn confirmed(&mut self, traffic: &Traffic, since: f64) {
        for (peer, name) in Self::peers_of(traffic) {
            let id = self.id_of(peer, name.as_deref());
            if let Some(id) = id.filter(|id| self.known.get(id).is_some_and(|k| k.since >= since)) {
                self.forget(id);
            }
        }
    }

    /// An incident's public peers, each with the name the device looked it up by.
    fn peers_of(traffic: &Traffic) -> Vec<(IpAddr, Option<String>)> {
        traffic
            .peers
            .by_key
            .keys()
            .filter_map(|p| p.parse::<IpAddr>().ok())
            .filter(|&p| !is_local(p) && !is_group(p))
            .map(|p| (p, traffic.peer_names.get(&p.to_string()).cloned()))
            .collect()
    }
}

/// A map by number as a list of `[number, value]` pairs.
mod numbered {
    use std::collections::BTreeMap;

    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<V: Serialize, S: Serializer>(map: &BTreeMap<u32, V>, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(map.iter())
    }

    pub fn deserialize<'de, V: Deserialize<'de>, D: Deserializer<'de>>(
        d: D,
    ) -> Result<BTreeMap<u32, V>, D::Error> {
        Ok(Vec::<(u32, V)>::deserialize(d)?.into_iter().collect())
    }
}

fn window_words(s: f64) -> String {
    match s.max(0.0) {
        s if s < 120.0 => format!("{s:.0} s"),
        s if s < 7_200.0 => format!("{:.0} min", s / 60.0),
        s => format!("{:.1} h", s / 3_600.0),
    }
}

fn times_words(now: u64, most: u64) -> String {
    if most == 0 {
        "with nothing sent before in a window".into()
    } else {
        format!("{:.0}×", now as f64 / most as f64)
    }
}

#[cfg(test)]
#[path = "remote_peers_tests.rs"]
mod tests;
