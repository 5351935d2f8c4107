//! Every integration test in one binary: it links libtorch and librdkafka once, and
//! the daemon's tests, which mostly wait on a broker, share the cores with the
//! command-line and model tests, which mostly compute.

mod support;

mod cli;
mod console;
mod daemon;
mod model;
mod sensor;
