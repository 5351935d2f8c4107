//! `metapu sense`: a live capture sensor. Frames from an interface (a SPAN/mirror port
//! or a bridge) → the per-device AfterImage extraction of `metapu extract` → records on
//! the input topic, with its own `/metrics`.
//!
//! - [`live`] — the capture (libpcap), kernel drops, `--save`
//! - [`unknown`] — senders no device list names (logged once, counted, discovered)
//! - [`batch`] — a device's records gathered into one message
//! - [`producer`] — records to Kafka, bounded, never holding up the capture
//! - [`run`] — the loop and its controls (stop, reload, liveness)
//! - [`metrics`] — `metapu_sensor_*`

pub mod batch;
pub mod http;
pub mod live;
pub mod metrics;
pub mod producer;
pub mod run;
pub mod unknown;

pub use batch::Batching;
pub use live::{LiveCapture, LiveError, LiveOptions};
pub use metrics::SensorMetrics;
pub use producer::{RecordProducer, RecordSink};
pub use run::{Controls, Sensor, SensorError, SensorSettings};
