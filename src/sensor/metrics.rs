//! The sensor's Prometheus metrics (`metapu_sensor_` prefix). Per-device packet
//! counts are labelled by device: the listed devices and at most
//! `sensor.max_discovered` discovered ones, so the cardinality is the operator's.

use prometheus::{IntCounter, IntCounterVec, IntGauge, Opts, Registry};

use crate::endpoints::{register, render};

pub struct SensorMetrics {
    registry: Registry,
    pub packets: IntCounter,
    pub kernel_drops: IntCounter,
    pub unparsed: IntCounter,
    pub unknown_packets: IntCounter,
    pub dns_ignored: IntCounter,
    pub unknown_devices: IntGauge,
    pub discovered_devices: IntGauge,
    pub device_packets: IntCounterVec,
    pub records_produced: IntCounter,
    pub records_dropped: IntCounterVec,
    pub records_queued: IntGauge,
    pub producer_errors: IntCounter,
    pub device_reloads: IntCounterVec,
    pub devices: IntGauge,
}

impl SensorMetrics {
    pub fn new() -> Self {
        let r = Registry::new();
        let counter =
            |name: &str, help: &str| register(&r, IntCounter::new(name, help).expect("valid metric"));
        let gauge = |name: &str, help: &str| register(&r, IntGauge::new(name, help).expect("valid metric"));
        let counters = |name: &str, help: &str, label: &str| {
            register(&r, IntCounterVec::new(Opts::new(name, help), &[label]).expect("valid metric"))
        };
        Self {
            packets: counter("metapu_sensor_packets_total", "Packets captured on the interface."),
            kernel_drops: counter(
                "metapu_sensor_kernel_drops_total",
                "Packets the kernel or the interface dropped before the sensor read them (ring full).",
            ),
            unparsed: counter(
                "metapu_sensor_unparsed_packets_total",
                "Captured frames too short or malformed to parse (skipped).",
            ),
            unknown_packets: counter(
                "metapu_sensor_unknown_device_packets_total",
                "Packets of no listed device (not sent unless sensor.discover).",
            ),
            dns_ignored: counter(
                "metapu_sensor_dns_answers_ignored_total",
                "DNS answers to a device that matched no query of its own (forged, unsolicited or late): never used to name its peers.",
            ),
            unknown_devices: gauge(
                "metapu_sensor_unknown_devices",
                "Distinct unlisted MAC addresses seen sending (each logged once).",
            ),
            discovered_devices: gauge(
                "metapu_sensor_discovered_devices",
                "Unlisted MACs the sensor sends as devices named by their address (sensor.discover).",
            ),
            device_packets: counters(
                "metapu_sensor_device_packets_total",
                "Packets per monitored device (a packet between two devices counts for both).",
                "device",
            ),
            records_produced: counter(
                "metapu_sensor_records_produced_total",
                "Records the brokers acknowledged.",
            ),
            records_dropped: counters(
                "metapu_sensor_records_dropped_total",
                "Records that never reached the brokers: queue_full (the brokers were too slow or down \
                 with sensor.max_queued_records waiting) or undelivered (failed or timed out).",
                "reason",
            ),
            records_queued: gauge("metapu_sensor_records_queued", "Records waiting for the brokers."),
            producer_errors: counter(
                "metapu_sensor_producer_errors_total",
                "Errors of the Kafka client (brokers unreachable, authentication).",
            ),
            device_reloads: counters(
                "metapu_sensor_device_list_reloads_total",
                "Device list re-reads on SIGHUP, by outcome (ok, failed: the old list stays).",
                "outcome",
            ),
            devices: gauge("metapu_sensor_devices", "Devices the sensor sends records for."),
            registry: r,
        }
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        render(&self.registry)
    }
}

impl Default for SensorMetrics {
    fn default() -> Self {
        Self::new()
    }
}
