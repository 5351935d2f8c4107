//! Kitsune's AfterImage feature extractor with N-BaIoT's 115 columns: for each decay
//! rate λ ∈ {5, 3, 1, 0.1, 0.01}, damped statistics of frame sizes per source MAC+IP
//! (`MI_dir`), per source IP (`H`), per IP channel both ways (`HH`), of inter-arrival
//! times per channel (`HH_jit`), and of frame sizes per socket both ways (`HpHp`).

use std::collections::HashMap;

use super::packet::{Host, Packet};
use super::stats::{Damped, DampedPair, PairStats};

pub const LAMBDAS: [f64; 5] = [5.0, 3.0, 1.0, 0.1, 0.01];
const LAMBDA_NAMES: [&str; 5] = ["5", "3", "1", "0.1", "0.01"];
const ONE_WAY: [&str; 3] = ["weight", "mean", "variance"];
const TWO_WAY: [&str; 7] = ["weight", "mean", "std", "magnitude", "radius", "covariance", "pcc"];
pub const FEATURES: usize = 115;

/// Streams idle this long are dropped: at λ = 0.01 their weight is below 0.1 %.
/// Without it a scan (a new channel per packet) grows the tables without bound.
pub const IDLE_DROP_S: f64 = 1000.0;
const PRUNE_EVERY: u64 = 100_000;

/// N-BaIoT's column names, in its order.
pub fn feature_names() -> Vec<String> {
    let groups: [(&str, &[&str]); 5] =
        [("MI_dir", &ONE_WAY), ("H", &ONE_WAY), ("HH", &TWO_WAY), ("HH_jit", &ONE_WAY), ("HpHp", &TWO_WAY)];
    let mut names = Vec::with_capacity(FEATURES);
    for (stream, stats) in groups {
        for l in LAMBDA_NAMES {
            for s in stats {
                names.push(format!("{stream}_L{l}_{s}"));
            }
        }
    }
    names
}

type OneWay = [Damped; 5];
/// A socket end: host and port.
type Endpoint = (Host, u16);
type TwoWay = [DampedPair; 5];

struct Jitter {
    /// Previous arrival on the channel; 0 before the first, so that the first
    /// "inter-arrival time" is the epoch timestamp itself — as in N-BaIoT's rows,
    /// whose HH_jit_*_mean hold ~1.5e9 on first-seen channels.
    previous: f64,
    stats: OneWay,
}

/// Per-capture extractor state. One per monitored device (N-BaIoT mirrored each
/// device's switch port separately).
#[derive(Default)]
pub struct AfterImage {
    source_mac_ip: HashMap<(u64, Host), OneWay>,
    source_ip: HashMap<Host, OneWay>,
    channel: HashMap<(Host, Host), TwoWay>,
    jitter: HashMap<(Host, Host), Jitter>,
    socket: HashMap<(Endpoint, Endpoint), TwoWay>,
    packets: u64,
}

fn one_way(stats: &mut OneWay, x: f64, now: f64, out: &mut Vec<f32>) {
    for (s, &l) in stats.iter_mut().zip(&LAMBDAS) {
        s.insert(l, x, now);
        out.extend([s.weight as f32, s.mean() as f32, s.variance() as f32]);
    }
}

fn two_way(stats: &mut TwoWay, dir: usize, x: f64, now: f64, out: &mut Vec<f32>) {
    for (s, &l) in stats.iter_mut().zip(&LAMBDAS) {
        let PairStats { weight, mean, std, magnitude, radius, covariance, pcc } = s.insert(l, dir, x, now);
        out.extend([weight, mean, std, magnitude, radius, covariance, pcc].map(|v| v as f32));
    }
}

/// A two-way key in canonical order and the packet's direction along it.
fn ordered<K: Ord + Copy>(from: K, to: K) -> ((K, K), usize) {
    if from <= to {
        ((from, to), 0)
    } else {
        ((to, from), 1)
    }
}

impl AfterImage {
    pub fn new() -> Self {
        Self::default()
    }

    /// Streams currently tracked (all kinds).
    pub fn streams(&self) -> usize {
        self.source_mac_ip.len()
            + self.source_ip.len()
            + self.channel.len()
            + self.jitter.len()
            + self.socket.len()
    }

    /// Update with one packet and append its 115 features to `out`.
    pub fn push(&mut self, p: &Packet, out: &mut Vec<f32>) {
        let (t, x) = (p.ts, f64::from(p.len));
        let fresh = || [Damped::new(t); 5];
        let fresh_pair = || [DampedPair::new(t); 5];
        one_way(self.source_mac_ip.entry((p.src_mac, p.src)).or_insert_with(fresh), x, t, out);
        one_way(self.source_ip.entry(p.src).or_insert_with(fresh), x, t, out);
        let (key, dir) = ordered(p.src, p.dst);
        two_way(self.channel.entry(key).or_insert_with(fresh_pair), dir, x, t, out);
        let jitter =
            self.jitter.entry((p.src, p.dst)).or_insert_with(|| Jitter { previous: 0.0, stats: fresh() });
        let gap = (t - jitter.previous).max(0.0);
        jitter.previous = t;
        one_way(&mut jitter.stats, gap, t, out);
        let (key, dir) = ordered((p.src, p.src_port), (p.dst, p.dst_port));
        two_way(self.socket.entry(key).or_insert_with(fresh_pair), dir, x, t, out);

        self.packets += 1;
        if self.packets % PRUNE_EVERY == 0 {
            self.drop_idle(t - IDLE_DROP_S);
        }
    }

    /// The features of one packet as a new row.
    pub fn row(&mut self, p: &Packet) -> Vec<f32> {
        let mut out = Vec::with_capacity(FEATURES);
        self.push(p, &mut out);
        out
    }

    fn drop_idle(&mut self, before: f64) {
        self.source_mac_ip.retain(|_, s| s[0].last_update() >= before);
        self.source_ip.retain(|_, s| s[0].last_update() >= before);
        self.channel.retain(|_, s| s[0].last_update() >= before);
        self.jitter.retain(|_, j| j.previous >= before);
        self.socket.retain(|_, s| s[0].last_update() >= before);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::traffic::packet::host_of_mac;

    fn packet(ts: f64, src: u128, dst: u128, sport: u16, dport: u16, len: u32) -> Packet {
        Packet {
            ts,
            src_mac: src as u64,
            src,
            dst,
            src_port: sport,
            dst_port: dport,
            len,
            proto: 17,
            tcp_flags: 0,
            arp: None,
        }
    }

    fn approx(a: f32, b: f64) -> bool {
        (f64::from(a) - b).abs() <= 1e-6 * b.abs().max(1.0)
    }

    fn col(names: &[String], row: &[f32], name: &str) -> f32 {
        row[names.iter().position(|n| n == name).expect("column exists")]
    }

    #[test]
    fn names_match_nbaiot_order() {
        let names = feature_names();
        assert_eq!(names.len(), FEATURES);
        assert_eq!(names[0], "MI_dir_L5_weight");
        assert_eq!(names[30], "HH_L5_weight");
        assert_eq!(names[66], "HH_jit_L5_mean");
        assert_eq!(names[114], "HpHp_L0.01_pcc");
    }

    #[test]
    fn first_packet_is_its_own_statistics() {
        let mut ai = AfterImage::new();
        let (a, b) = (host_of_mac(1), host_of_mac(2));
        let row = ai.row(&packet(1_505_661_693.0, a, b, 1000, 80, 60));
        let names = feature_names();
        for l in LAMBDA_NAMES {
            assert_eq!(col(&names, &row, &format!("MI_dir_L{l}_weight")), 1.0);
            assert_eq!(col(&names, &row, &format!("H_L{l}_mean")), 60.0);
            assert_eq!(col(&names, &row, &format!("HH_L{l}_magnitude")), 60.0);
            assert_eq!(col(&names, &row, &format!("HpHp_L{l}_radius")), 0.0);
            // N-BaIoT's first-seen channel: the jitter is the timestamp.
            assert_eq!(col(&names, &row, &format!("HH_jit_L{l}_mean")), 1_505_661_693.0);
        }
    }

    #[test]
    fn streams_are_keyed_as_nbaiot_keys_them() {
        let mut ai = AfterImage::new();
        let names = feature_names();
        let (dev, cloud, dns) = (10u128, 20u128, 30u128);
        ai.row(&packet(100.0, dev, cloud, 5000, 443, 100));
        // Same source, other destination: H and MI continue, HH and HpHp start afresh.
        let row = ai.row(&packet(101.0, dev, dns, 5001, 53, 300));
        assert_eq!(col(&names, &row, "H_L1_weight"), 1.5);
        assert_eq!(col(&names, &row, "MI_dir_L1_weight"), 1.5);
        assert_eq!(col(&names, &row, "HH_L1_weight"), 1.0);
        assert_eq!(col(&names, &row, "HH_jit_L1_mean"), 101.0);
        // The reply travels the same channel the other way: its magnitude sees both sides.
        let row = ai.row(&packet(101.0, dns, dev, 53, 5001, 200));
        assert_eq!(col(&names, &row, "HH_L1_weight"), 1.0);
        let magnitude = (200.0f64.powi(2) + 300.0f64.powi(2)).sqrt();
        assert!(approx(col(&names, &row, "HH_L1_magnitude"), magnitude));
        assert!(approx(col(&names, &row, "HpHp_L1_magnitude"), magnitude));
        // Second packet on a channel: the jitter is the gap, 2 s.
        let row = ai.row(&packet(103.0, dev, dns, 5001, 53, 300));
        let g = (-0.02f64).exp2();
        assert!(approx(col(&names, &row, "HH_jit_L0.01_weight"), 1.0 + g));
        assert!(approx(col(&names, &row, "HH_jit_L0.01_mean"), (101.0 * g + 2.0) / (1.0 + g)));
        assert_eq!(ai.streams(), 2 + 2 + 2 + 3 + 2);
    }

    #[test]
    fn idle_streams_are_dropped() {
        let mut ai = AfterImage::new();
        ai.row(&packet(0.0, 1, 2, 1, 2, 60));
        ai.drop_idle(10.0);
        assert_eq!(ai.streams(), 0);
    }
}
