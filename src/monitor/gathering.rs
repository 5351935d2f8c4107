//! Messages gathered into the next micro-batch, as `[scoring]` says: `max_batch`
//! records (a batch message counts its records), or `max_wait_ms` after the first.
//! The Monitor (`api.rs`) decides when a gathered batch runs.

/// Messages gathered into the next micro-batch (times on the caller's clock, ms), full
/// at `max` records.
#[derive(Debug)]
pub(super) struct Gathering<T> {
    items: Vec<T>,
    records: usize,
    first_ms: Option<u64>,
    max: usize,
    max_wait_ms: u64,
}

impl<T> Gathering<T> {
    pub fn new(max: usize, max_wait_ms: u64) -> Self {
        Self {
            items: Vec::new(),
            records: 0,
            first_ms: None,
            max: max.max(1),
            max_wait_ms: max_wait_ms.max(1),
        }
    }

    /// Gather an item of `records` records that arrived at `now_ms`.
    pub fn push(&mut self, item: T, records: usize, now_ms: u64) {
        self.first_ms.get_or_insert(now_ms);
        self.items.push(item);
        self.records += records;
    }

    pub fn full(&self) -> bool {
        self.records >= self.max
    }

    /// When the started batch must be run: `max_wait_ms` after its first item.
    pub fn deadline_ms(&self) -> Option<u64> {
        self.first_ms.map(|first| first + self.max_wait_ms)
    }

    pub fn take(&mut self) -> Vec<T> {
        (self.first_ms, self.records) = (None, 0);
        std::mem::take(&mut self.items)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_is_due_when_full_or_its_wait_is_over() {
        let mut b = Gathering::new(3, 20);
        assert_eq!(b.deadline_ms(), None, "nothing gathered, nothing due");
        b.push('a', 1, 100);
        b.push('b', 1, 115);
        assert_eq!(b.deadline_ms(), Some(120), "from the first item");
        assert!(!b.full());
        b.push('c', 1, 130);
        assert!(b.full());
        assert_eq!(b.take(), vec!['a', 'b', 'c']);
        assert_eq!(b.deadline_ms(), None);
        b.push('d', 1, 500);
        assert_eq!(b.deadline_ms(), Some(520), "a new batch waits from its own first item");
        // Full by records: a batch message of two and one more record.
        b.take();
        b.push('e', 2, 600);
        assert!(!b.full());
        b.push('f', 1, 601);
        assert!(b.full());
    }
}
