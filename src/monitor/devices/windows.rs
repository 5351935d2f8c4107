//! A bounded window of feature rows in one flat buffer: the newest `capacity` rows,
//! oldest overwritten first. The model is permutation-invariant, so the rows are
//! handed out in storage order, not arrival order.
//!
//! The buffer is shared, not copied, when handed to adaptation: a window is copied only
//! if a record arrives while the adapter still holds it (copy on write). Copying every
//! window up front cost a second per 10,000 devices on the service thread.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Window rows shared with adaptation.
pub type SharedRows = Arc<Vec<f32>>;

/// Stamps for [`RowWindow::stamp`] (and the span windows'), unique in the process: a
/// window built anew never shares one with the window it replaces.
static STAMPS: AtomicU64 = AtomicU64::new(1);

pub(super) fn next_stamp() -> u64 {
    STAMPS.fetch_add(1, Ordering::Relaxed)
}

#[derive(Debug, Clone)]
pub struct RowWindow {
    dim: usize,
    capacity: usize,
    data: Arc<Vec<f32>>,
    next: usize,
    len: usize,
    /// Storage slots `0..pinned` are never overwritten (see [`Self::pin`]).
    pinned: usize,
    /// Changes with every change of the rows or the pinning (see [`Self::stamp`]).
    stamp: u64,
}

/// Windows are equal when their rows, order of replacement and pinning are; the stamp
/// only tells one window's versions apart.
impl PartialEq for RowWindow {
    fn eq(&self, other: &Self) -> bool {
        (self.dim, self.capacity, &self.data, self.next, self.len, self.pinned)
            == (other.dim, other.capacity, &other.data, other.next, other.len, other.pinned)
    }
}

impl RowWindow {
    pub fn new(dim: usize, capacity: usize) -> Self {
        Self { dim, capacity, data: Arc::new(Vec::new()), next: 0, len: 0, pinned: 0, stamp: next_stamp() }
    }

    /// Differs after any change to the window (and between any two windows): the state
    /// store writes a window again only when its stamp moved since the last write.
    pub fn stamp(&self) -> u64 {
        self.stamp
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Features per row.
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// Add a row (`dim` values), replacing the oldest when full.
    pub fn push(&mut self, row: &[f32]) {
        debug_assert_eq!(row.len(), self.dim);
        let data = Arc::make_mut(&mut self.data);
        if data.len() < self.capacity * self.dim {
            data.extend_from_slice(row);
        } else {
            data[self.next * self.dim..(self.next + 1) * self.dim].copy_from_slice(row);
        }
        self.next = if self.next + 1 >= self.capacity { self.pinned } else { self.next + 1 };
        self.len = (self.len + 1).min(self.capacity);
        self.stamp = next_stamp();
    }

    /// Keep the rows in the first `n` storage slots (at most half the window, and only
    /// rows it holds) from being overwritten: later rows cycle through the other slots.
    /// 0 unpins. A device's onboarded rows are so kept when verdicts add behaviours.
    pub fn pin(&mut self, n: usize) {
        self.pinned = n.min(self.len).min(self.capacity / 2);
        if self.next < self.pinned {
            self.next = self.pinned;
        }
        self.stamp = next_stamp();
    }

    pub fn pinned(&self) -> usize {
        self.pinned
    }

    /// Overwrite the row in storage slot `slot` (< len), leaving the ring's order of
    /// replacement as it is (onboarding's reservoir sample).
    pub fn replace(&mut self, slot: usize, row: &[f32]) {
        debug_assert_eq!(row.len(), self.dim);
        assert!(slot < self.len, "slot {slot} of a window of {} rows", self.len);
        let data = Arc::make_mut(&mut self.data);
        data[slot * self.dim..(slot + 1) * self.dim].copy_from_slice(row);
        self.stamp = next_stamp();
    }

    /// All rows, row-major, in storage order.
    pub fn rows(&self) -> &[f32] {
        &self.data
    }

    /// The newest `n` rows (fewer if the window holds fewer), newest first.
    pub fn newest(&self, n: usize) -> Vec<f32> {
        let mut out = Vec::with_capacity(n.min(self.len) * self.dim);
        for k in 1..=n.min(self.len) {
            let i = (self.next + self.capacity - k) % self.capacity;
            out.extend_from_slice(&self.data[i * self.dim..(i + 1) * self.dim]);
        }
        out
    }

    /// The rows as they are now, shared with the window until its next push.
    pub fn shared(&self) -> SharedRows {
        Arc::clone(&self.data)
    }

    /// Rebuild from stored rows (state restore); keeps at most `capacity` of them.
    pub fn from_rows(dim: usize, capacity: usize, rows: &[f32]) -> Self {
        let mut w = Self::new(dim, capacity);
        for row in rows.chunks_exact(dim) {
            w.push(row);
        }
        w
    }

    /// Heap bytes held.
    pub fn heap_bytes(&self) -> usize {
        self.data.capacity() * std::mem::size_of::<f32>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pinned_rows_stay_while_the_others_cycle() {
        let mut w = RowWindow::new(1, 4);
        for v in [1.0, 2.0] {
            w.push(&[v]);
        }
        w.pin(2);
        for v in 3..=9 {
            w.push(&[v as f32]);
        }
        assert_eq!(w.rows(), [1.0, 2.0, 9.0, 8.0]);
        w.pin(10);
        assert_eq!(w.pinned(), 2, "at most half the window");
        w.pin(0);
        w.push(&[10.0]);
        assert_eq!(w.len(), 4);
    }

    #[test]
    fn windows_keep_the_newest_rows() {
        let mut w = RowWindow::new(2, 3);
        for i in 0..5 {
            w.push(&[i as f32, 0.0]);
        }
        assert_eq!(w.len(), 3);
        let mut firsts: Vec<f32> = w.rows().chunks(2).map(|r| r[0]).collect();
        firsts.sort_by(f32::total_cmp);
        assert_eq!(firsts, [2.0, 3.0, 4.0]);
    }

    #[test]
    fn rows_handed_to_adaptation_are_not_changed_by_later_records() {
        let mut w = RowWindow::new(2, 2);
        w.push(&[1.0, 1.0]);
        let handed = w.shared();
        w.push(&[2.0, 2.0]);
        w.push(&[3.0, 3.0]);
        assert_eq!(*handed, [1.0, 1.0], "the adapter's copy");
        assert_eq!(w.rows(), [3.0, 3.0, 2.0, 2.0], "the window moved on");
    }

    #[test]
    fn a_window_hands_out_its_newest_rows_newest_first() {
        let mut w = RowWindow::new(1, 3);
        assert!(w.newest(2).is_empty());
        w.push(&[1.0]);
        w.push(&[2.0]);
        assert_eq!(w.newest(5), [2.0, 1.0]);
        w.push(&[3.0]);
        w.push(&[4.0]);
        assert_eq!(w.newest(2), [4.0, 3.0]);
        assert_eq!(w.newest(3), [4.0, 3.0, 2.0]);
    }
}
