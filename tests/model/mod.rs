//! The model: its math, its file format, meta-training and the paper's protocol and
//! methods. Part of tests/integration.rs.

mod file;
mod math;
mod protocol;
mod train_synthetic;
