//! The wall clock, read at the edges only: the daemon's shell, the sensor and the tools
//! give the monitor the time as a value (`monitor::clock::Now`), so the monitor never
//! reads a clock itself.

/// Wall-clock time, Unix seconds.
pub fn unix_now() -> f64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64())
}
