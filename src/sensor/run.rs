//! The sensor's loop: a captured frame → the devices it belongs to (by MAC) → each
//! device's AfterImage row, exactly as `metapu extract` computes it → a record on the
//! input topic. It never waits on Kafka; it stops, re-reads its device list and proves
//! it is alive through [`Controls`], which the signal handlers and the watchdog share.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use prometheus::IntCounter;

use crate::monitor::record::Format;
use crate::traffic::capture::Frame;
use crate::traffic::devices::{Device, DeviceListError, DeviceMap};
use crate::traffic::extract::{Devices, Extractor, Routed};
use crate::traffic::frame::frame_macs;
use crate::wall_clock::unix_now;

use super::batch::{Batcher, Batching};
use super::live::{LiveCapture, LiveError};
use super::metrics::SensorMetrics;
use super::producer::{RecordProducer, RecordSink};
use super::unknown::{UnknownMacs, Unlisted};

#[derive(Debug, thiserror::Error)]
pub enum SensorError {
    #[error(transparent)]
    Live(#[from] LiveError),
    #[error("the device list: {0}")]
    Devices(#[from] DeviceListError),
}

/// Shared with the signal handlers and the watchdog.
#[derive(Debug, Default)]
pub struct Controls {
    pub stop: AtomicBool,
    pub reload: AtomicBool,
    /// Unix seconds of the loop's last turn (the watchdog pets systemd only while it moves).
    pub alive: AtomicU64,
}

impl Controls {
    pub fn new() -> Arc<Self> {
        let c = Self::default();
        c.alive.store(unix_now() as u64, Ordering::Relaxed);
        Arc::new(c)
    }
}

#[derive(Debug, Clone)]
pub struct SensorSettings {
    /// `name,mac` lines; `None`: discovery only.
    pub devices_file: Option<PathBuf>,
    pub format: Format,
    pub discover: bool,
    pub max_discovered: usize,
    pub batching: Batching,
}

/// How often the loop reads the kernel's counters and checks the link.
const HOUSEKEEPING: Duration = Duration::from_secs(1);

pub struct Sensor {
    settings: SensorSettings,
    extractor: Extractor,
    /// The extractor's device names, by index (kept beside it so a row and its name can
    /// be borrowed together).
    names: Vec<String>,
    discovered: Vec<Device>,
    unknown: UnknownMacs,
    batcher: Batcher,
    metrics: Arc<SensorMetrics>,
    device_packets: Vec<IntCounter>,
    kernel_drops: u64,
    /// The extractor's ignored DNS answers already counted in the metric.
    dns_ignored_counted: u64,
}

impl Sensor {
    pub fn new(settings: SensorSettings, metrics: Arc<SensorMetrics>) -> Result<Self, SensorError> {
        let map = read_devices(&settings)?;
        let unknown = UnknownMacs::new(settings.discover, settings.max_discovered);
        let mut sensor = Self {
            extractor: Extractor::new(Devices::Split(DeviceMap::empty()), None),
            names: Vec::new(),
            discovered: Vec::new(),
            unknown,
            batcher: Batcher::new(settings.batching),
            metrics,
            device_packets: Vec::new(),
            kernel_drops: 0,
            dns_ignored_counted: 0,
            settings,
        };
        sensor.use_devices(map);
        Ok(sensor)
    }

    pub fn devices(&self) -> &[String] {
        &self.names
    }

    /// Capture until asked to stop; an error of the capture (the link went down or
    /// away) ends it.
    pub fn run(
        &mut self,
        capture: &mut LiveCapture,
        producer: &RecordProducer,
        controls: &Controls,
    ) -> Result<(), SensorError> {
        let mut housekeeping = Instant::now();
        while !controls.stop.load(Ordering::Relaxed) {
            if controls.reload.swap(false, Ordering::Relaxed) {
                self.reload();
            }
            if let Some(frame) = capture.next_frame()? {
                self.take(&frame, producer);
            }
            self.flush_due(Instant::now(), producer);
            if housekeeping.elapsed() >= HOUSEKEEPING {
                housekeeping = Instant::now();
                capture.check_up()?;
                let drops = capture.kernel_drops()?;
                self.metrics.kernel_drops.inc_by(drops.saturating_sub(self.kernel_drops));
                self.kernel_drops = self.kernel_drops.max(drops);
                producer.queued();
                capture.flush_saved()?;
                controls.alive.store(unix_now() as u64, Ordering::Relaxed);
            }
        }
        self.flush(producer);
        capture.flush_saved()?;
        Ok(())
    }

    /// Send the records waiting in batches.
    pub fn flush(&mut self, sink: &impl RecordSink) {
        self.batcher.flush(sink);
    }

    /// Each turn of the loop: send the batches once `sensor.batch_wait_ms` has passed.
    pub fn flush_due(&mut self, now: Instant, sink: &impl RecordSink) {
        self.batcher.flush_due(now, sink);
    }

    /// One frame: its rows to the producer, or counted as unparsed or unlisted.
    pub fn take(&mut self, frame: &Frame, producer: &impl RecordSink) {
        self.metrics.packets.inc();
        let unparsed = self.extractor.counts.unparsed;
        let mut routed = self.route(frame);
        if routed.is_none() && self.extractor.counts.unparsed > unparsed {
            self.metrics.unparsed.inc();
            return;
        }
        // A sender no list names, whether or not it talks to a listed device.
        if routed.as_ref().is_none_or(|r| r.devices[0].is_none()) {
            if routed.is_none() {
                self.metrics.unknown_packets.inc();
            }
            let (src, _) = frame_macs(frame.link, frame.data);
            if self.unlisted(src) {
                // Discovered just now: this frame is the new device's first.
                routed = self.route(frame);
            }
        }
        let Some(routed) = routed else { return };
        let ignored = self.extractor.counts.dns_ignored;
        self.metrics.dns_ignored.inc_by(ignored - self.dns_ignored_counted);
        self.dns_ignored_counted = ignored;
        for (d, context) in routed.per_device() {
            self.device_packets[d].inc();
            let row = self.extractor.features(d, &routed.packet);
            let record =
                self.settings.format.encode(&self.names[d], routed.packet.ts, row, false, Some(context));
            self.batcher.add(&self.names[d], &record, producer);
        }
    }

    fn route(&mut self, frame: &Frame) -> Option<Routed> {
        match self.extractor.route(frame) {
            Ok(r) => r,
            // The capture's link types name MACs (checked when it opened), so a frame that
            // parses has one; were one without to come, it is a malformed frame, not a crash.
            Err(e) => {
                tracing::debug!(error = %e, "frame without MACs");
                self.extractor.counts.unparsed += 1;
                None
            }
        }
    }

    /// A frame's unlisted sender: logged once; true when it was discovered as a device.
    fn unlisted(&mut self, src: Option<u64>) -> bool {
        match self.unknown.observe(src) {
            Unlisted::Known => false,
            Unlisted::New(mac) => {
                self.metrics.unknown_devices.set(self.unknown.seen() as i64);
                tracing::info!(%mac, "traffic of a MAC no device list names (counted, not sent; sensor.discover sends it)");
                false
            }
            Unlisted::Discover(device) => {
                self.metrics.unknown_devices.set(self.unknown.seen() as i64);
                tracing::info!(mac = %device.name, "new device discovered: its records go out under its MAC (onboard it to monitor it)");
                match self.extractor.add_device(device.clone()) {
                    Ok(_) => {
                        self.discovered.push(device);
                        self.metrics.discovered_devices.set(self.discovered.len() as i64);
                        self.sync_names();
                        true
                    }
                    Err(e) => unreachable!("an unlisted MAC is listed: {e}"),
                }
            }
        }
    }

    /// SIGHUP: the device file again. A listed device keeps its statistics; one that
    /// fails to read leaves the old list in place.
    fn reload(&mut self) {
        match read_devices(&self.settings) {
            Ok(map) => {
                self.metrics.device_reloads.with_label_values(&["ok"]).inc();
                tracing::info!(devices = map.devices().len(), "device list re-read");
                self.use_devices(map);
            }
            Err(e) => {
                self.metrics.device_reloads.with_label_values(&["failed"]).inc();
                tracing::error!(error = %e, "re-reading the device list failed; the old list stays");
            }
        }
    }

    /// The listed devices and those discovered that the list does not name.
    fn use_devices(&mut self, mut map: DeviceMap) {
        self.unknown.forget(map.devices().iter().map(|d| d.mac));
        let listed = |m: &DeviceMap, mac| m.route(Some(mac), None)[0].is_some();
        self.discovered.retain(|d| !listed(&map, d.mac));
        for d in &self.discovered {
            if let Err(e) = map.add(d.clone()) {
                unreachable!("a discovered MAC is listed: {e}");
            }
        }
        self.metrics.discovered_devices.set(self.discovered.len() as i64);
        let before: Vec<String> = self.names.clone();
        self.extractor.set_devices(map);
        self.sync_names();
        for gone in before.iter().filter(|n| !self.names.contains(n)) {
            let _ = self.metrics.device_packets.remove_label_values(&[gone]);
        }
    }

    fn sync_names(&mut self) {
        self.names = self.extractor.names().to_vec();
        self.device_packets =
            self.names.iter().map(|n| self.metrics.device_packets.with_label_values(&[n])).collect();
        self.metrics.devices.set(self.names.len() as i64);
    }
}

/// The device file, or an empty list where discovery may fill it.
fn read_devices(s: &SensorSettings) -> Result<DeviceMap, DeviceListError> {
    match &s.devices_file {
        None => Ok(DeviceMap::empty()),
        Some(path) => match DeviceMap::from_file(path) {
            Ok(map) => Ok(map),
            Err(DeviceListError::Empty) if s.discover => Ok(DeviceMap::empty()),
            Err(e) => Err(e),
        },
    }
}
