//! Onboarding by time (`metapu onboard --device D --for 1h`): for a span the operator
//! names, the device's traffic is its known-normal traffic. The positive window holds
//! a fixed number of rows while a span holds as many records as the device sends, so
//! the window keeps a uniform sample of the span's records (reservoir sampling): at the
//! end it covers the whole span, its quiet and its busy moments, not its first seconds.
//!
//! Re-onboarding replaces the known-normal window rather than adding to it: the span's
//! first records push the old rows out oldest first, and once the window is full every
//! row is one of the span's. After a firmware update the old normal is what must go; a
//! window half old and half new would keep calling the new behaviour unusual. (An
//! analyst's false-positive verdict is the way to *add* a behaviour.)

use serde::{Deserialize, Serialize};

use super::windows::RowWindow;

/// Longest span accepted: a month.
pub const MAX_SPAN_S: f64 = 31.0 * 86_400.0;

/// An onboarding in progress, or the last one finished (kept in the snapshot).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Onboarding {
    /// Unix seconds (the daemon's clock when it took the request).
    pub from: f64,
    pub until: f64,
    /// Records the span has seen so far (all of them were candidates for the window).
    pub records: u64,
    pub by: String,
    pub note: String,
}

impl Onboarding {
    pub fn new(from: f64, span_s: f64, by: String, note: String) -> Self {
        Self { from, until: from + span_s, records: 0, by, note }
    }

    /// Still taking records at `now` (Unix seconds).
    pub fn active(&self, now: f64) -> bool {
        now < self.until
    }

    /// One record of the span: into the positive window while it fills (displacing
    /// the old rows), then in place of a random row with probability capacity/records.
    /// `seed` makes the choice reproducible per device.
    pub fn take(&mut self, positive: &mut RowWindow, row: &[f32], seed: u64) {
        self.records += 1;
        let capacity = positive.capacity() as u64;
        if self.records <= capacity {
            positive.push(row);
            return;
        }
        let slot = splitmix64(seed ^ self.records.wrapping_mul(0x9e37_79b9_7f4a_7c15)) % self.records;
        if slot < capacity {
            positive.replace(slot as usize, row);
        }
    }
}

/// A device name's seed for [`Onboarding::take`] (FNV-1a).
pub fn seed_of(device: &str) -> u64 {
    device.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3))
}

fn splitmix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_window_ends_as_a_sample_of_the_whole_span_and_none_of_the_old_rows() {
        let mut positive = RowWindow::new(1, 50);
        for old in 0..50 {
            positive.push(&[-1.0 - old as f32]);
        }
        let mut o = Onboarding::new(0.0, 3600.0, "ops".into(), String::new());
        for i in 0..10_000 {
            o.take(&mut positive, &[i as f32], seed_of("camera"));
        }
        assert_eq!(o.records, 10_000);
        let rows = positive.rows();
        assert_eq!(rows.len(), 50);
        assert!(rows.iter().all(|v| *v >= 0.0), "the old window is gone: {rows:?}");
        // Spread over the span: every fifth of it is represented, none by most rows.
        let mut fifths = [0usize; 5];
        for v in rows {
            fifths[(*v as usize) / 2000] += 1;
        }
        assert!(fifths.iter().all(|&n| (3..=20).contains(&n)), "{fifths:?}");
        // A span shorter than the window keeps its records and the newest old rows.
        let mut short = Onboarding::new(0.0, 60.0, String::new(), String::new());
        for i in 0..10 {
            short.take(&mut positive, &[1e6 + i as f32], seed_of("camera"));
        }
        assert_eq!(positive.rows().iter().filter(|v| **v >= 1e6).count(), 10);
        assert!(short.active(59.9) && !short.active(60.0));
    }
}
