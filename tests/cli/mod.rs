//! The command-line tools end to end: `metapu-lab eval`, `extract`, `datasets infect`,
//! `simulate`, `replay`, data files and malformed inputs. Part of tests/integration.rs.

mod data_files;
mod fuzz_inputs;
mod traffic;
mod train;
