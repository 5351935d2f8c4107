//! What the broker-backed benchmarks share.

#[path = "../../tests/support/produce.rs"]
mod produce;
pub use produce::send_until_queued;

/// A process's resident memory, MiB (0 when /proc cannot say).
pub fn rss_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}
