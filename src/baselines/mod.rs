//! The paper's single-task PU baselines, trained on one episode's support alone (each
//! episode its own network, all trained at once): the lab's evaluation scores them
//! beside ours, and `metapu train` fits nnPU on its validation episodes so that a model
//! builder sees whether the model beats it.

pub mod batched;
pub mod packed;
pub mod single;

pub use packed::PackedEpisodes;
