//! `metapu sense`: the live capture sensor, run until SIGTERM (systemd:
//! `metapu-sense.service`). Its settings are `[sensor]` and `[kafka]` of the daemon's
//! configuration, so one file and one set of secrets serve both.

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use clap::Args;
use tokio::signal::unix::{signal, SignalKind};

use metapu::daemon::config::{DaemonConfig, Sources};
use metapu::daemon::kafka::producer_config;
use metapu::daemon::notify;
use metapu::sensor::{
    self, Controls, LiveCapture, LiveOptions, RecordProducer, Sensor, SensorMetrics, SensorSettings,
};
use metapu::wall_clock::unix_now;

#[derive(Debug, Args)]
pub struct SenseArgs {
    /// Configuration file (TOML; [sensor] and [kafka]), layered over the defaults and
    /// /etc/metapu/metapu.toml.
    #[arg(long)]
    config: Option<PathBuf>,
    /// The interface to capture on (a SPAN/mirror port or a bridge); overrides sensor.interface.
    #[arg(long, short)]
    interface: Option<String>,
    /// The devices as `name,mac` lines, re-read on SIGHUP; overrides sensor.devices.
    #[arg(long)]
    devices: Option<PathBuf>,
    /// A BPF filter in tcpdump's syntax; overrides sensor.filter.
    #[arg(long)]
    filter: Option<String>,
    /// Also write every captured frame to this pcap file (forensics; `metapu extract` reads it).
    #[arg(long)]
    save: Option<PathBuf>,
    /// Send the traffic of unlisted MACs too, each as a device named by its MAC (sensor.discover).
    #[arg(long)]
    discover: bool,
}

/// How long the records queued at a stop may take to reach the brokers.
const FLUSH_LIMIT: Duration = Duration::from_secs(10);

pub fn run(a: SenseArgs) -> anyhow::Result<()> {
    let cfg = DaemonConfig::load(&Sources::standard(a.config))?;
    let s = &cfg.sensor;
    let interface = a.interface.unwrap_or_else(|| s.interface.clone());
    if interface.is_empty() {
        bail!("no interface to capture on: give --interface IF or set sensor.interface");
    }
    let discover = a.discover || s.discover;
    let devices_file = a.devices.unwrap_or_else(|| s.devices.clone());
    let settings = SensorSettings {
        // Discovery may start from nothing: a missing file is then an empty list.
        devices_file: (!discover || devices_file.exists()).then_some(devices_file.clone()),
        format: s.format,
        discover,
        max_discovered: s.max_discovered,
        batching: s.batching(),
    };
    let metrics = Arc::new(SensorMetrics::new());
    let mut sensor = Sensor::new(settings, metrics.clone())?;
    if sensor.devices().is_empty() && !discover {
        bail!(
            "{} lists no devices: list them (`name,mac` lines) or run with --discover",
            devices_file.display()
        );
    }
    let options = LiveOptions {
        interface: interface.clone(),
        filter: a.filter.unwrap_or_else(|| s.filter.clone()),
        snaplen: s.snaplen,
        promiscuous: s.promiscuous,
        buffer_bytes: s.buffer_bytes,
        save: a.save,
    };
    let mut capture = LiveCapture::open(&options)?;
    let topic = s.topic(&cfg.kafka).to_string();
    let producer =
        RecordProducer::new(producer_config(&cfg.kafka), &topic, s.max_queued_records, metrics.clone())
            .context("the sensor's producer")?;
    tracing::info!(
        interface,
        devices = sensor.devices().len(),
        discover,
        topic,
        brokers = cfg.kafka.brokers,
        "capturing"
    );

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let controls = Controls::new();
    let result = runtime.block_on(async {
        let (stop_http, stopped) = tokio::sync::oneshot::channel::<()>();
        let addr = sensor::http::serve(&s.listen, metrics.clone(), async {
            let _ = stopped.await;
        })
        .await
        .with_context(|| format!("listening on {}", s.listen))?;
        tracing::info!(http = %addr, "metrics at http://{addr}/metrics");
        let looping = {
            let controls = controls.clone();
            tokio::task::spawn_blocking(move || {
                let outcome = sensor.run(&mut capture, &producer, &controls);
                (outcome, producer)
            })
        };
        notify::notify("READY=1");
        let outcome = supervise(looping, &controls).await;
        let _ = stop_http.send(());
        outcome
    });
    runtime.shutdown_timeout(Duration::from_secs(1));
    let producer = result?;
    let flushed = producer.finish(FLUSH_LIMIT);
    let m = &metrics;
    let dropped = |reason: &str| m.records_dropped.with_label_values(&[reason]).get();
    let (queue_full, undelivered) = (dropped("queue_full"), dropped("undelivered"));
    println!(
        "sense: {} packets captured, {} records delivered, {} dropped (queue full {queue_full}, undelivered {undelivered}), {} kernel drops, {} packets of {} unlisted MACs",
        m.packets.get(),
        m.records_produced.get(),
        queue_full + undelivered,
        m.kernel_drops.get(),
        m.unknown_packets.get(),
        m.unknown_devices.get(),
    );
    if flushed.unsent > 0 {
        tracing::warn!(unsent = flushed.unsent, "records still queued at the stop were not delivered");
    }
    Ok(())
}

/// Wait for a signal or the loop's end: SIGTERM/SIGINT stop it, SIGHUP re-reads the
/// device list, and systemd's watchdog is petted while the loop turns. The producer
/// comes back for its final flush; a capture error is the command's error.
async fn supervise(
    mut looping: tokio::task::JoinHandle<(Result<(), sensor::SensorError>, RecordProducer)>,
    controls: &Arc<Controls>,
) -> anyhow::Result<RecordProducer> {
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let mut hup = signal(SignalKind::hangup())?;
    let watchdog = notify::watchdog_interval();
    let mut pet = tokio::time::interval(watchdog.unwrap_or(Duration::from_secs(3600)));
    loop {
        tokio::select! {
            _ = term.recv() => break,
            _ = int.recv() => break,
            _ = hup.recv() => controls.reload.store(true, Ordering::Relaxed),
            _ = pet.tick(), if watchdog.is_some() => {
                // A loop stuck for more than a few seconds is left to the watchdog.
                if unix_now() as u64 <= controls.alive.load(Ordering::Relaxed) + 5 {
                    notify::notify("WATCHDOG=1");
                }
            }
            joined = &mut looping => {
                let (outcome, _) = joined.context("the capture loop panicked")?;
                outcome?;
                bail!("the capture loop stopped without being asked to");
            }
        }
    }
    tracing::info!("signal received; stopping");
    notify::notify("STOPPING=1");
    controls.stop.store(true, Ordering::Relaxed);
    let (outcome, producer) = looping.await.context("the capture loop panicked")?;
    outcome?;
    Ok(producer)
}
