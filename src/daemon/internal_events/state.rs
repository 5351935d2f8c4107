//! The state topic: device windows restored on an assignment, snapshots written.

use std::time::Duration;

use super::{InternalEvent, Metrics};

/// A restore's read began, or was put in place (`false`).
pub(crate) struct Restoring(pub bool);

impl InternalEvent for Restoring {
    fn emit(self, m: &Metrics) {
        m.state_restoring.set(i64::from(self.0));
    }
}

/// The state topic read to its end on an assignment.
pub(crate) struct StateRead {
    pub bytes: u64,
    pub seconds: f64,
}

impl InternalEvent for StateRead {
    fn emit(self, m: &Metrics) {
        m.state_restored_bytes.inc_by(self.bytes);
        m.state_restore_seconds.set(self.seconds);
        tracing::info!(bytes = self.bytes, seconds = self.seconds, "state topic read");
    }
}

/// A restore could not read the state topic to its end: counted, and tried again
/// (the daemon stays not ready meanwhile).
pub(crate) struct StateRestoreFailed<'a> {
    pub reason: &'a str,
    pub retry_in: Duration,
}

impl InternalEvent for StateRestoreFailed<'_> {
    fn emit(self, m: &Metrics) {
        m.state_restore_failures.inc();
        tracing::warn!(
            reason = self.reason,
            retry_in_s = self.retry_in.as_secs(),
            "state restore incomplete; retrying"
        );
    }
}

/// State snapshots written and failed (the failed ones are written again later).
pub(crate) struct SnapshotsSent {
    pub written: usize,
    pub bytes: u64,
    pub failed: usize,
}

impl InternalEvent for SnapshotsSent {
    fn emit(self, m: &Metrics) {
        m.snapshots.inc_by(self.written as u64);
        m.state_bytes.inc_by(self.bytes);
        if self.failed > 0 {
            m.produce_errors.inc_by(self.failed as u64);
            tracing::warn!(failed = self.failed, "state snapshots failed; will retry");
        }
    }
}
