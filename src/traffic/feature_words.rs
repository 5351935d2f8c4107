//! N-BaIoT feature names in words an analyst reads without the paper: the family (whose
//! traffic), the statistic, and the time scale of the damped window.

/// What a feature measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// `MI_dir`, `H`: the host's own traffic, by MAC and IP or by IP.
    HostOutbound,
    /// `HH`: traffic between the host and one peer (a channel).
    Channel,
    /// `HH_jit`: the timing of packets on a channel.
    ChannelTiming,
    /// `HpHp`: traffic of one socket (IP and port pairs).
    Socket,
}

impl Family {
    pub fn as_str(self) -> &'static str {
        match self {
            Family::HostOutbound => "host",
            Family::Channel => "channel",
            Family::ChannelTiming => "channel_timing",
            Family::Socket => "socket",
        }
    }
}

/// A feature name taken apart.
#[derive(Debug, Clone, PartialEq)]
pub struct FeatureMeaning {
    pub family: Family,
    /// The statistic, in words ("packets", "mean packet size", …).
    pub statistic: &'static str,
    /// The damped window's time scale ("100 ms" … "1 min").
    pub window: &'static str,
    /// Whose traffic ("sent by this host", "on its channels to single peers", …).
    pub subject: &'static str,
}

/// `MI_dir_L5_weight` and the like; `None` for a name outside N-BaIoT's 115.
pub fn meaning(name: &str) -> Option<FeatureMeaning> {
    let (family, subject, rest) = if let Some(rest) = name.strip_prefix("MI_dir_L") {
        (Family::HostOutbound, "sent by this host (its MAC and IP)", rest)
    } else if let Some(rest) = name.strip_prefix("HH_jit_L") {
        (Family::ChannelTiming, "on this host's channels to single peers", rest)
    } else if let Some(rest) = name.strip_prefix("HH_L") {
        (Family::Channel, "on this host's channels to single peers", rest)
    } else if let Some(rest) = name.strip_prefix("HpHp_L") {
        (Family::Socket, "on this host's sockets (address and port pairs)", rest)
    } else if let Some(rest) = name.strip_prefix("H_L") {
        (Family::HostOutbound, "sent by this host (its IP)", rest)
    } else {
        return None;
    };
    let (lambda, stat) = rest.split_once('_')?;
    // N-BaIoT's decay rates and the time windows its paper gives them.
    let window = match lambda {
        "5" => "100 ms",
        "3" => "500 ms",
        "1" => "1.5 s",
        "0.1" => "10 s",
        "0.01" => "1 min",
        _ => return None,
    };
    let statistic = match (family, stat) {
        (Family::ChannelTiming, "weight") => "packets (timing statistics)",
        (Family::ChannelTiming, "mean") => "time between packets",
        (Family::ChannelTiming, "variance") => "irregularity of the time between packets",
        (_, "weight") => "packets",
        (_, "mean") => "mean packet size",
        (_, "variance" | "std") => "spread of packet sizes",
        (_, "magnitude") => "packet sizes of both directions together",
        (_, "radius") => "spread of both directions' packet sizes together",
        (_, "covariance") => "co-variation of the two directions' packet sizes",
        (_, "pcc") => "correlation of the two directions' packet sizes",
        _ => return None,
    };
    Some(FeatureMeaning { family, statistic, window, subject })
}

/// A channel's first packet has no previous one: N-BaIoT's timing mean then holds the
/// clock (a Unix timestamp, ~1.5e9 s), not a time between packets, and the timing
/// variance the clock's square.
const CLOCK_TIME_S: f32 = 1e8;
const CLOCK_VARIANCE: f32 = 1e12;

/// Below this share of its normal value a statistic is said to be down to about 0: a
/// ratio such as "1/118405648" tells an analyst nothing more.
const ABOUT_ZERO_SHARE: f32 = 1e-3;

/// Timing statistics that hold the clock speak of new channels, not of times.
fn channel_timing_words(m: &FeatureMeaning, normal: f32, now: f32) -> Option<String> {
    let clock = match m.statistic {
        "time between packets" => CLOCK_TIME_S,
        "irregularity of the time between packets" => CLOCK_VARIANCE,
        _ => return None,
    };
    match (normal >= clock, now >= clock) {
        (false, true) if m.statistic == "time between packets" => Some(format!(
            "first packets on new channels to single peers (~{} window): no earlier packet between \
             the two addresses, where normally one came every {} s",
            m.window,
            short(normal)
        )),
        (false, true) => Some(format!(
            "first packets on new channels to single peers (~{} window): their timing holds the \
             clock, where normally the {} was {}",
            m.window,
            m.statistic,
            short(normal)
        )),
        (true, false) => Some(format!(
            "fewer new channels to single peers than normal (~{} window): its normal traffic opens \
             new ones, whose timing holds the clock; now the {} is {}",
            m.window,
            m.statistic,
            short(now)
        )),
        _ => None,
    }
}

/// "packets sent by this host (its IP), ~100 ms window: 40× its normal (2.1 → 84)".
pub fn describe(name: &str, normal: f32, now: f32) -> String {
    let m = meaning(name);
    if let Some(words) = m
        .as_ref()
        .filter(|m| m.family == Family::ChannelTiming)
        .and_then(|m| channel_timing_words(m, normal, now))
    {
        return words;
    }
    let change = if normal.abs() <= 1e-6 {
        "normally about 0".to_string()
    } else if now.abs() <= 1e-6 || now / normal <= ABOUT_ZERO_SHARE {
        "down to about 0".to_string()
    } else {
        let ratio = now / normal;
        if ratio >= 1.0 {
            format!("{}× its normal", round_ratio(ratio))
        } else {
            format!("1/{} of its normal", round_ratio(1.0 / ratio))
        }
    };
    let values = format!("{} → {}", short(normal), short(now));
    match m {
        Some(m) => format!("{} {}, ~{} window: {change} ({values})", m.statistic, m.subject, m.window),
        None => format!("{name}: {change} ({values})"),
    }
}

fn round_ratio(r: f32) -> String {
    if r >= 10.0 {
        format!("{:.0}", r)
    } else {
        format!("{:.1}", r)
    }
}

fn short(v: f32) -> String {
    if v.abs() >= 1e5 || (v != 0.0 && v.abs() < 1e-2) {
        format!("{v:.2e}")
    } else {
        format!("{}", (v * 100.0).round() / 100.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_nbaiot_name_has_a_meaning() {
        for name in super::super::feature_names() {
            assert!(meaning(&name).is_some(), "{name}");
        }
        let m = meaning("HH_jit_L0.01_mean").unwrap();
        assert_eq!(
            (m.family, m.statistic, m.window),
            (Family::ChannelTiming, "time between packets", "1 min")
        );
        assert_eq!(meaning("H_L5_weight").unwrap().family, Family::HostOutbound);
        assert_eq!(meaning("HpHp_L1_pcc").unwrap().family, Family::Socket);
        assert!(meaning("colour").is_none());
    }

    #[test]
    fn words_say_how_far_from_normal() {
        assert_eq!(
            describe("MI_dir_L5_weight", 2.0, 80.0),
            "packets sent by this host (its MAC and IP), ~100 ms window: 40× its normal (2 → 80)"
        );
        assert!(describe("HH_L1_mean", 300.0, 60.0).contains("1/5.0 of its normal"));
        assert!(describe("HH_L1_std", 0.0, 3.0).contains("normally about 0"));
        assert!(describe("MI_dir_L1_variance", 931.0, 0.0).contains("down to about 0"));
        assert!(describe("HH_jit_L5_mean", 16.8, 1.5e9).starts_with("first packets on new channels"));
        // What the demo's incidents said before: a variance holding the clock, and a
        // ratio of eight digits.
        let variance = describe("HH_jit_L5_variance", 0.0, 2.84e15);
        assert!(
            variance.starts_with("first packets on new channels") && variance.contains("holds the clock"),
            "{variance}"
        );
        let fewer = describe("HH_jit_L1_variance", 1.1e17, 0.0);
        assert!(fewer.starts_with("fewer new channels"), "{fewer}");
        assert!(describe("HpHp_L0.1_std", 187.26, 1.58e-6).contains("down to about 0"));
        assert!(describe("HpHp_L0.1_std", 187.26, 18.7).contains("1/10 of its normal"));
    }
}
