//! The lab's tests, one binary (it links libtorch and librdkafka once): the paper's
//! experiment command and its methods, the real-traffic streaming, and the check that
//! the lab measures the daemon's own pipeline. Helpers are the product tests' own.

#[path = "../../tests/support/mod.rs"]
mod support;

mod eval_command;
mod eval_methods;
mod real_traffic;
mod same_pipeline;
mod week;
