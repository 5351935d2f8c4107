//! A device's unlabeled window: its newest rows, and a sample of the rows before them
//! spread over its time.
//!
//! The model's solve estimates r ≈ p_P/p_U, so U must cover the span of the device that
//! P does. The newest rows alone are a bursty camera's last second. Here U is two parts
//! of one flat buffer:
//! - the newest `recent` rows (a ring, as before): an attack is scored against the
//!   present;
//! - `spread` rows that left the ring, stratified by time: the device's time is cut
//!   into buckets of `bucket_s` seconds, and every bucket that held records gets an
//!   equal share of the spread rows, down to one row each; then the oldest bucket goes.
//!   So a bursty device's U holds its last bursts and its quiet hours alike, whatever
//!   it sent in each.
//!
//! While the window fills, every row that leaves the ring enters the spread part, so a
//! window's first `recent + spread` rows are exactly the newest rows (the old window's).
//! Deterministic on the records' order and bytes: within a bucket the rows kept are
//! those of the smallest priority, a hash of the row's bits and its place in the
//! device's stream (no random state; repeated rows are drawn as any others).

use std::sync::Arc;

use super::windows::{next_stamp, SharedRows};

/// How a window's rows lie in its buffer, as the state topic keeps it (`MPW2`): enough
/// to rebuild the window exactly.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpanLayout {
    /// Rows of the ring (the newest); the rest are the spread sample.
    pub recent: usize,
    /// The ring's slot the next row overwrites.
    pub next: usize,
    /// Each stored row's time bucket, in storage order.
    pub buckets: Vec<i64>,
    /// Rows pushed so far, and the spread rows' priorities (storage order).
    pub pushes: u64,
    pub priorities: Vec<u64>,
}

/// The sizes of a span window.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SpanSizes {
    /// Rows in all (the newest and the spread sample).
    pub capacity: usize,
    /// Of them, rows spread over the device's earlier time (0: the newest only).
    pub spread: usize,
    /// Seconds of the device's time per stratum of the spread sample.
    pub bucket_s: f64,
}

#[derive(Debug, Clone)]
pub struct SpanWindow {
    dim: usize,
    sizes: SpanSizes,
    /// The ring's rows (slots `0..ring_len`), then the spread sample's.
    data: Arc<Vec<f32>>,
    /// Each stored row's bucket, and the spread rows' priorities (index minus the ring).
    buckets: Vec<i64>,
    priorities: Vec<u64>,
    ring_len: usize,
    next: usize,
    /// Rows pushed so far: each row's place in the stream, in its priority.
    pushes: u64,
    stamp: u64,
}

/// Windows are equal when their rows, buckets and ring position are.
impl PartialEq for SpanWindow {
    fn eq(&self, other: &Self) -> bool {
        (
            self.dim,
            self.sizes,
            &self.data,
            &self.buckets,
            &self.priorities,
            self.ring_len,
            self.next,
            self.pushes,
        ) == (
            other.dim,
            other.sizes,
            &other.data,
            &other.buckets,
            &other.priorities,
            other.ring_len,
            other.next,
            other.pushes,
        )
    }
}

/// A row's priority in its bucket: a hash of its bits and its place in the stream
/// (splitmix64 over FNV-1a).
fn priority(row: &[f32], place: u64) -> u64 {
    let h = row.iter().fold(0xcbf2_9ce4_8422_2325u64 ^ place, |h, v| {
        (h ^ u64::from(v.to_bits())).wrapping_mul(0x100_0000_01b3)
    });
    let mut x = h.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

impl SpanWindow {
    pub fn new(dim: usize, sizes: SpanSizes) -> Self {
        let spread = sizes.spread.min(sizes.capacity.saturating_sub(1));
        let sizes = SpanSizes { spread, bucket_s: sizes.bucket_s.max(1e-3), ..sizes };
        Self {
            dim,
            sizes,
            data: Arc::new(Vec::new()),
            buckets: Vec::new(),
            priorities: Vec::new(),
            ring_len: 0,
            next: 0,
            pushes: 0,
            stamp: next_stamp(),
        }
    }

    fn recent_capacity(&self) -> usize {
        self.sizes.capacity - self.sizes.spread
    }

    fn spread_len(&self) -> usize {
        self.buckets.len() - self.ring_len
    }

    /// Differs after any change to the window (and between any two windows).
    pub fn stamp(&self) -> u64 {
        self.stamp
    }

    pub fn len(&self) -> usize {
        self.buckets.len()
    }

    pub fn is_empty(&self) -> bool {
        self.buckets.is_empty()
    }

    pub fn capacity(&self) -> usize {
        self.sizes.capacity
    }

    /// The bucket of a time (Unix seconds).
    fn bucket_of(&self, ts: f64) -> i64 {
        (ts / self.sizes.bucket_s).floor() as i64
    }

    /// Add a row of the device's time `ts` (Unix seconds); the ring's oldest row, once
    /// it is full, is offered to the spread sample.
    pub fn push(&mut self, row: &[f32], ts: f64) {
        debug_assert_eq!(row.len(), self.dim);
        let bucket = self.bucket_of(ts);
        let (dim, recent) = (self.dim, self.recent_capacity());
        self.stamp = next_stamp();
        self.pushes += 1;
        if self.ring_len < recent {
            // Filling: the spread part is empty, the row goes at the buffer's end.
            Arc::make_mut(&mut self.data).extend_from_slice(row);
            self.buckets.push(bucket);
            self.ring_len += 1;
            self.next = self.ring_len % recent;
            return;
        }
        let slot = self.next;
        self.next = (slot + 1) % recent;
        let data = Arc::make_mut(&mut self.data);
        let span = slot * dim..(slot + 1) * dim;
        let left_bucket = std::mem::replace(&mut self.buckets[slot], bucket);
        if self.sizes.spread == 0 {
            data[span].copy_from_slice(row);
            return;
        }
        // The row leaving the ring is offered to the spread sample (a copy: the sample
        // may write into the same buffer).
        let left = data[span.clone()].to_vec();
        data[span].copy_from_slice(row);
        self.offer(&left, left_bucket);
    }

    /// A row that left the ring: kept while the sample has room, then if its bucket has
    /// less than the fullest bucket's share (that bucket gives up its row of highest
    /// priority), or in place of its own bucket's row of highest priority if it ranks
    /// below it.
    fn offer(&mut self, row: &[f32], bucket: i64) {
        let q = priority(row, self.pushes);
        let (dim, base) = (self.dim, self.ring_len);
        if self.spread_len() < self.sizes.spread {
            Arc::make_mut(&mut self.data).extend_from_slice(row);
            self.buckets.push(bucket);
            self.priorities.push(q);
            return;
        }
        let spread = &self.buckets[base..];
        // Rows per bucket, in bucket order: the fullest bucket, the oldest among equals.
        let mut sorted = spread.to_vec();
        sorted.sort_unstable();
        let mut fullest = (0usize, i64::MAX);
        let mut own = 0;
        for run in sorted.chunk_by(|a, b| a == b) {
            if run.len() > fullest.0 {
                fullest = (run.len(), run[0]);
            }
            if run[0] == bucket {
                own = run.len();
            }
        }
        let victim_bucket = if own < fullest.0 { fullest.1 } else { bucket };
        // The victim bucket's row of highest priority (the first among equals).
        let mut victim = None::<(usize, u64)>;
        for (i, (&b, &p)) in spread.iter().zip(&self.priorities).enumerate() {
            if b == victim_bucket && victim.is_none_or(|(_, vp)| p > vp) {
                victim = Some((i, p));
            }
        }
        let Some((i, vp)) = victim else { return };
        if victim_bucket == bucket && q >= vp {
            return;
        }
        let slot = base + i;
        Arc::make_mut(&mut self.data)[slot * dim..(slot + 1) * dim].copy_from_slice(row);
        self.buckets[slot] = bucket;
        self.priorities[i] = q;
    }

    /// All rows, row-major, in storage order (the model is permutation-invariant).
    pub fn rows(&self) -> &[f32] {
        &self.data
    }

    /// The newest `n` rows (fewer if the ring holds fewer), newest first.
    pub fn newest(&self, n: usize) -> Vec<f32> {
        let (dim, recent) = (self.dim, self.recent_capacity());
        let mut out = Vec::with_capacity(n.min(self.ring_len) * dim);
        for k in 1..=n.min(self.ring_len) {
            let i = (self.next + recent - k) % recent;
            out.extend_from_slice(&self.data[i * dim..(i + 1) * dim]);
        }
        out
    }

    /// The rows as they are now, shared with the window until its next push.
    pub fn shared(&self) -> SharedRows {
        Arc::clone(&self.data)
    }

    /// How the rows lie, for the state topic.
    pub fn layout(&self) -> SpanLayout {
        SpanLayout {
            recent: self.ring_len,
            next: self.next,
            buckets: self.buckets.clone(),
            pushes: self.pushes,
            priorities: self.priorities.clone(),
        }
    }

    /// Rebuild from stored rows. With their layout, exactly as written; without (an
    /// older snapshot), or with one that does not fit these sizes (the configuration
    /// changed), as the newest rows, all of the time `ts`.
    pub fn from_rows(
        dim: usize,
        sizes: SpanSizes,
        rows: &[f32],
        layout: Option<&SpanLayout>,
        ts: f64,
    ) -> Self {
        let mut w = Self::new(dim, sizes);
        let n = rows.len() / dim.max(1);
        let fits = |l: &SpanLayout| {
            l.buckets.len() == n
                && l.recent == w.recent_capacity().min(n)
                && (l.recent == 0 || l.next < l.recent)
                && n - l.recent <= w.sizes.spread
                && l.priorities.len() == n - l.recent
        };
        match layout.filter(|l| fits(l)) {
            Some(l) => {
                w.data = Arc::new(rows[..n * dim].to_vec());
                w.buckets = l.buckets.clone();
                w.priorities = l.priorities.clone();
                w.pushes = l.pushes;
                w.ring_len = l.recent;
                w.next = if l.recent < w.recent_capacity() { l.recent } else { l.next };
            }
            None => {
                for row in rows.chunks_exact(dim) {
                    w.push(row, ts);
                }
            }
        }
        w
    }

    /// Heap bytes held.
    pub fn heap_bytes(&self) -> usize {
        self.data.capacity() * std::mem::size_of::<f32>()
            + self.buckets.capacity() * std::mem::size_of::<i64>()
            + self.priorities.capacity() * std::mem::size_of::<u64>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sizes(capacity: usize, spread: usize) -> SpanSizes {
        SpanSizes { capacity, spread, bucket_s: 10.0 }
    }

    fn firsts(w: &SpanWindow) -> Vec<f32> {
        let mut v: Vec<f32> = w.rows().to_vec();
        v.sort_by(f32::total_cmp);
        v
    }

    #[test]
    fn while_filling_the_window_holds_the_newest_rows() {
        let mut w = SpanWindow::new(1, sizes(6, 3));
        for i in 0..6 {
            w.push(&[i as f32], i as f64 * 100.0);
        }
        assert_eq!(firsts(&w), [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
        assert_eq!(w.newest(2), [5.0, 4.0]);
    }

    #[test]
    fn a_burst_does_not_push_the_earlier_time_out() {
        // Three quiet buckets of one row each, then a burst of 100 rows in one bucket.
        let mut w = SpanWindow::new(1, sizes(8, 4));
        for (i, ts) in [0.0, 100.0, 200.0, 300.0, 305.0].iter().enumerate() {
            w.push(&[i as f32], *ts);
        }
        for k in 0..100 {
            w.push(&[1000.0 + k as f32], 400.0 + k as f64 * 0.01);
        }
        let rows = firsts(&w);
        // The ring holds the burst's newest four; the spread sample's four slots hold a
        // row of each of the three buckets before the burst, and one of the burst's
        // (the oldest bucket gave its row up to it).
        assert_eq!(&rows[rows.len() - 4..], [1096.0, 1097.0, 1098.0, 1099.0]);
        let earlier: Vec<f32> = rows.iter().copied().filter(|v| *v < 1000.0).collect();
        assert_eq!(earlier.len(), 3, "a row per earlier bucket: {rows:?}");
        assert!(earlier.contains(&1.0) && earlier.contains(&2.0), "the buckets before the burst: {rows:?}");
        assert_eq!(w.len(), 8);
    }

    #[test]
    fn buckets_share_the_sample_equally_and_the_oldest_goes_last() {
        let mut w = SpanWindow::new(1, sizes(5, 4));
        // Ten rows in each of six buckets.
        for b in 0..6 {
            for k in 0..10 {
                w.push(&[(b * 100 + k) as f32], b as f64 * 10.0 + k as f64 * 0.5);
            }
        }
        let spread = &w.layout().buckets[w.layout().recent..];
        let mut seen: Vec<i64> = spread.to_vec();
        seen.sort();
        // Four slots, six buckets: the four newest, one row each (the oldest went).
        assert_eq!(seen, [2, 3, 4, 5], "{:?}", w.layout());
    }

    #[test]
    fn the_same_rows_and_times_give_the_same_window() {
        let run = || {
            let mut w = SpanWindow::new(2, sizes(20, 10));
            for i in 0..500u32 {
                let v = (i.wrapping_mul(2_654_435_761) % 1000) as f32;
                w.push(&[v, i as f32], f64::from(i) * 0.7);
            }
            w
        };
        assert_eq!(run(), run());
    }

    #[test]
    fn a_window_rebuilt_from_its_layout_goes_on_as_the_original() {
        let mut w = SpanWindow::new(1, sizes(10, 5));
        for i in 0..37 {
            w.push(&[i as f32], i as f64 * 3.0);
        }
        let mut back = SpanWindow::from_rows(1, sizes(10, 5), w.rows(), Some(&w.layout()), 0.0);
        assert_eq!(back, w);
        for i in 37..80 {
            w.push(&[i as f32], i as f64 * 3.0);
            back.push(&[i as f32], i as f64 * 3.0);
        }
        assert_eq!(back, w);
        // Without a layout (an older snapshot): the rows, as the newest.
        let old = SpanWindow::from_rows(1, sizes(10, 5), &[1.0, 2.0], None, 5.0);
        assert_eq!(old.rows(), [1.0, 2.0]);
        // A layout that does not fit the sizes is not trusted.
        let other = SpanWindow::from_rows(1, sizes(10, 2), w.rows(), Some(&w.layout()), 0.0);
        assert_eq!(other.len(), 10);
    }

    #[test]
    fn no_spread_is_the_newest_rows_only() {
        let mut w = SpanWindow::new(1, sizes(3, 0));
        for i in 0..10 {
            w.push(&[i as f32], i as f64 * 1000.0);
        }
        assert_eq!(firsts(&w), [7.0, 8.0, 9.0]);
    }

    #[test]
    fn rows_handed_to_adaptation_are_not_changed_by_later_records() {
        let mut w = SpanWindow::new(1, sizes(2, 1));
        w.push(&[1.0], 0.0);
        let handed = w.shared();
        w.push(&[2.0], 1.0);
        w.push(&[3.0], 2.0);
        assert_eq!(*handed, [1.0]);
    }
}
