//! The model: its math, its file format, meta-training and the paper's protocol and
//! methods. One binary: it links libtorch once.

#[path = "../support/mod.rs"]
mod support;

mod eval_methods;
mod file;
mod math;
mod protocol;
mod train_synthetic;
