//! The daemon's integration tests: the engine and its parts, the real broker and MockCluster,
//! the `metapu run` process, faults, crashes, real N-BaIoT rows and the soak. Part of
//! tests/integration.rs.

mod bad_input;
mod broker_outage;
mod core;
mod crash;
mod dismissed;
mod e2e;
mod event_time;
mod faults;
mod fleet_restart;
mod idle;
mod kinds;
mod looks;
mod mock;
mod onboard;
mod packaged_units;
mod partitions_added;
mod process;
mod replay_real_rows;
mod restore;
mod sinks;
mod soak;
mod state_topic;
mod units;
