//! The time the pipeline acts on: the service's own clock, or the records' own.

/// The clock incidents run on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Clock {
    /// The service's own (milliseconds since start, given per batch); events carry
    /// the wall-clock time.
    Service,
    /// Each record's timestamp (`ts`, Unix seconds): a capture replayed at any speed
    /// opens and closes the same incidents.
    Event,
}

/// A moment on the pipeline's clock: milliseconds for the incident rules, Unix
/// seconds for the events.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Now {
    pub ms: u64,
    pub unix: f64,
}

impl Now {
    /// The service's clock at `ms`, with the wall clock's `unix` (read by the caller:
    /// nothing in the monitor reads a clock).
    pub fn at(ms: u64, unix: f64) -> Self {
        Self { ms, unix }
    }

    /// A record's own time.
    pub fn event(ts: f64) -> Self {
        Self { ms: (ts.max(0.0) * 1000.0) as u64, unix: ts }
    }
}
