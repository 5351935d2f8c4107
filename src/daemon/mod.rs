//! `metapu run`: the streaming daemon. Kafka in; alerts, priors, dead letters and
//! (optionally) scores out; Prometheus metrics; systemd integration.
//!
//! - [`config`] — layered configuration; `secrets` — librdkafka secrets from credentials or the environment
//! - [`record`] — input decoding and validation
//! - [`windows`], [`devices`] — per-device windows and the device table
//! - [`engine`] — scoring and adaptation without Kafka
//! - [`adapter`] — the background adaptation thread
//! - [`kafka`], [`snapshot`] — Kafka plumbing and the state changelog format
//! - [`output`] — what is published; [`delivery`] — outputs in flight, offsets released on acknowledgement
//! - [`metrics`], [`http`], [`notify`] — operations
//! - [`service`] — the main loop

pub mod adapter;
pub mod config;
pub mod delivery;
pub mod devices;
pub mod engine;
pub mod http;
pub mod kafka;
pub mod metrics;
pub mod notify;
pub mod output;
pub mod record;
mod secrets;
pub mod service;
pub mod snapshot;
pub mod windows;
