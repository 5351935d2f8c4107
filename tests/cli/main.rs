//! The command-line tools end to end: `metapu-lab eval`, `extract`, `datasets infect`,
//! `simulate`, `replay`, data files and malformed inputs. One binary: it links libtorch
//! and librdkafka once.

#[path = "../support/mod.rs"]
mod support;

mod data_files;
mod eval;
mod fuzz_inputs;
mod traffic;
