//! Daemon configuration: embedded defaults (`config/default.toml`), then
//! `/etc/metapu/metapu.toml`, then `--config FILE`, then `METAPU__SECTION__KEY`
//! environment variables. Unknown keys and wrong types are errors naming the key.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::monitor::settings::CoreSettings;
use crate::monitor::RecordOutputs;
use crate::monitor::StateSchedule;
use crate::monitor::{EventCadence, WindowSizes};

pub const DEFAULT_TOML: &str = include_str!("../../config/default.toml");
pub const SYSTEM_PATH: &str = "/etc/metapu/metapu.toml";
/// A sensor batch's records at most: a binary record with its packet's context is at
/// most ~1 KB, so a batch stays far below Kafka's 1 MB default message limit and the
/// daemon's `scoring.max_message_bytes`.
pub const MAX_BATCH_RECORDS: u32 = 256;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DaemonConfig {
    pub kafka: KafkaConfig,
    pub model: ModelConfig,
    pub windows: WindowConfig,
    pub adaptation: AdaptationConfig,
    pub scoring: ScoringConfig,
    pub devices: DeviceConfig,
    pub state: StateConfig,
    pub incidents: IncidentsConfig,
    pub time: TimeConfig,
    pub sinks: crate::daemon::sinks::SinksConfig,
    pub http: HttpConfig,
    pub shutdown: ShutdownConfig,
    pub sensor: SensorConfig,
    pub console: ConsoleConfig,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KafkaConfig {
    pub brokers: String,
    pub group_id: String,
    pub input_topics: Vec<String>,
    pub alerts_topic: String,
    pub priors_topic: String,
    pub deadletter_topic: String,
    pub incidents_topic: String,
    /// Analysts' verdicts on incidents (input, JSON, key = device).
    pub feedback_topic: String,
    /// What members of a device kind share (`kinds.rs`): compacted, read whole by every
    /// daemon.
    pub kinds_topic: String,
    pub state_topic: String,
    pub scores_topic: String,
    pub publish_scores: bool,
    /// One alert per anomalous record on `alerts_topic` (incidents are what analysts read).
    pub publish_alerts: bool,
    pub auto_offset_reset: String,
    #[serde(default)]
    pub options: BTreeMap<String, String>,
    /// Passed to consumers only, after `options` (e.g. `session.timeout.ms`, which a
    /// producer would warn about at every start).
    #[serde(default)]
    pub consumer_options: BTreeMap<String, String>,
    /// Passed to producers only, after `options` (e.g. `compression.type`).
    #[serde(default)]
    pub producer_options: BTreeMap<String, String>,
}

/// The clock incidents, onboarding spans and adaptation run on (`[time]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TimeConfig {
    pub clock: crate::monitor::clock::Clock,
    /// A record stamped further ahead of the wall clock counts as the wall clock plus
    /// this (seconds).
    pub max_ahead_s: u64,
    /// On the event clock, a device silent this long (seconds of the service's time
    /// since its last record) has its time moved on by the whole silence; until then
    /// only its records move it. 0: at once.
    pub idle_after_s: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IncidentsConfig {
    /// Open an incident when `open_k` of a device's last `open_n` decisions are anomalous.
    pub open_k: u32,
    pub open_n: u32,
    /// While open, an update at most this often (seconds).
    pub update_interval_s: u64,
    /// Close after this long without an anomalous decision (seconds).
    pub quiet_s: u64,
    /// A quiet close this recent (seconds) reopens instead of a new incident; 0 = never.
    pub reopen_s: u64,
    /// A behaviour an analyst dismissed is remembered this long (seconds, device time);
    /// a later incident of it is suppressed (recorded, not raised). 0 = never remembered.
    pub remember_dismissed_s: u64,
    /// ...unless it grows past this many times the dismissed incident's bytes.
    pub dismissed_volume_factor: f64,
    /// An incident that closed quietly without a verdict is remembered as dismissed by
    /// the daemon itself (its returns are suppressed; a `confirmed` verdict undoes it),
    /// unless it left an attack's footprint (`monitor/footprint.rs`).
    pub learn_quiet_closes: bool,
    /// What the daemon learned so holds this long after its last return (seconds, device
    /// time; never longer than `remember_dismissed_s`). 0 = nothing is learned.
    pub learned_for_s: u64,
    /// A new device's learning period (seconds of its time from its first record the
    /// model judged): a model-raised incident without an attack's footprint is held and
    /// learned, not raised; a footprint or the fan-out look raises as ever. 0 = none.
    pub learning_period_s: u64,
    /// An incident of the same behaviour as one a sibling of its kind raised at most
    /// this long before (seconds, device time) joins it as one fleet incident. 0 = never.
    pub fleet_within_s: u64,
    /// The fan-out look (`fanout.rs`): within `scan_window_s` of a device's time,
    /// unanswered attempts to `scan_hosts` hosts on one service, to `scan_ports` ports
    /// of one host, or `flood_packets` to one new host raise an incident. 0 = off.
    pub scan_window_s: u64,
    pub scan_hosts: u32,
    pub scan_ports: u32,
    pub flood_packets: u32,
    /// ...or `scan_probes` TCP packets no connection sends (FIN, NULL, Xmas).
    pub scan_probes: u32,
    /// ...or `login_attempts` connections to one login service (half that on one the
    /// device never used).
    pub login_attempts: u32,
    /// ...or packets sent from `spoofed_sources` source addresses (a forged-source flood).
    pub spoofed_sources: u32,
    /// ...or `stranger_bytes` sent to, or `stranger_exchanges` separate exchanges with, a
    /// public peer whose name and address the device never used (data to a stranger);
    /// or, to a known peer within one window, `usual_volume_factor` times the most the
    /// device sent it in one (and at least `stranger_bytes`).
    pub stranger_bytes: u64,
    pub stranger_exchanges: u32,
    pub usual_volume_factor: u32,
    /// A device sending traffic this long without a known-normal record is reported
    /// (once) as unmonitored; 0 = never.
    pub unmonitored_after_s: u64,
    /// Feedback is taken on the open incident, or on the last closed one this long after
    /// it closed (seconds).
    pub feedback_after_close_s: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelConfig {
    pub path: PathBuf,
    pub threshold: f32,
    /// Features per record the model must take (0 = whatever the model file says).
    pub features: usize,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WindowConfig {
    pub positive: usize,
    pub unlabeled: usize,
    /// Of the unlabeled rows, those spread over the device's earlier time.
    pub unlabeled_spread: usize,
    /// Seconds of a device's time per stratum of the spread rows.
    pub spread_bucket_s: u64,
    /// Adapt on draws at the model's trained shape, not on the whole windows.
    pub drawn: bool,
    pub bootstrap_positives: usize,
    pub trust_input_labels: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdaptationConfig {
    pub interval_ms: u64,
    /// Records a device sent since its last adaptation before the interval re-adapts it
    /// (as a share of a full unlabeled window: `engine::records_needed`).
    pub min_records: usize,
    pub after_records: usize,
    pub batch_size: usize,
    /// Threads that solve the event clock's adaptation points (0: one per CPU).
    pub solver_threads: usize,
}

impl AdaptationConfig {
    /// The solver threads to start on `clock` (none on the service clock, whose adapter
    /// thread adapts).
    pub fn solvers(&self, clock: crate::monitor::clock::Clock) -> usize {
        match (clock, self.solver_threads) {
            (crate::monitor::clock::Clock::Service, _) => 0,
            (_, 0) => std::thread::available_parallelism().map_or(1, |n| n.get()),
            (_, n) => n,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScoringConfig {
    pub max_batch: usize,
    pub max_wait_ms: u64,
    pub max_message_bytes: usize,
    /// Records of one device per micro-batch at most (0 = no limit); the rest wait for the next.
    pub max_per_device: usize,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceConfig {
    pub max_tracked: usize,
    pub idle_timeout_s: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StateConfig {
    pub snapshot_interval_s: u64,
    /// A changed device's unlabeled rows are written at most this often (seconds), and
    /// always on revocation and shutdown.
    pub unlabeled_interval_s: u64,
    /// Replicas of the state topic when the daemon creates it (0: the cluster's broker
    /// count, at most 3).
    pub replication: i32,
    /// An existing state topic that is not compacted stops the start (false: a warning).
    pub require_compacted: bool,
    /// A restore that reads nothing and finishes no partition for this long has failed
    /// and is tried again (seconds).
    pub restore_stall_s: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpConfig {
    pub listen: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShutdownConfig {
    pub timeout_s: u64,
}

/// `metapu console`: the analyst's desk and the verdict API (it shares `[kafka]` with the
/// daemon).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConsoleConfig {
    pub listen: String,
    /// The analysts' tokens (`name role sha256:<hex>` a line), when no systemd
    /// credential `console-tokens` is given.
    pub tokens_file: PathBuf,
    pub read_only: bool,
    /// Pages and the read API without a token: only where `listen` is loopback.
    pub anonymous_reads: bool,
    /// Host names it answers to besides addresses and `localhost` (a name that resolves
    /// to it, as analysts type it).
    pub allowed_hosts: Vec<String>,
    /// Incidents held at most; past it the oldest closed ones go.
    pub max_incidents: usize,
}

/// `metapu sense`: the live capture sensor (it shares `[kafka]` with the daemon).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SensorConfig {
    pub interface: String,
    pub devices: PathBuf,
    pub filter: String,
    pub snaplen: i32,
    pub promiscuous: bool,
    /// Kernel capture buffer, bytes.
    pub buffer_bytes: i32,
    pub format: crate::monitor::record::Format,
    /// Empty: the first of `kafka.input_topics`.
    pub topic: String,
    pub max_queued_records: usize,
    /// A device's records per Kafka message at most (1: a message each).
    pub batch_records: u32,
    /// How long a record waits at most for its batch to fill, milliseconds.
    pub batch_wait_ms: u64,
    pub discover: bool,
    pub max_discovered: usize,
    pub listen: String,
}

/// Two of the listeners on one port where both would bind it (the same address, or
/// either on every address): the second process to start could not. Port 0 (any free
/// port) never clashes. The sentence that says which.
fn listeners_clash(listeners: &[(&str, &str)]) -> Option<String> {
    let parsed: Vec<(&str, std::net::SocketAddr)> =
        listeners.iter().filter_map(|(k, v)| Some((*k, v.parse().ok()?))).collect();
    for (i, (a, x)) in parsed.iter().enumerate() {
        for (b, y) in &parsed[i + 1..] {
            let overlap = x.ip() == y.ip() || x.ip().is_unspecified() || y.ip().is_unspecified();
            if x.port() != 0 && x.port() == y.port() && overlap {
                return Some(format!(
                    "{a} ({x}) and {b} ({y}) are one port: run on one host, the second cannot bind"
                ));
            }
        }
    }
    None
}

impl SensorConfig {
    /// How the sensor gathers a device's records into messages.
    pub fn batching(&self) -> crate::sensor::Batching {
        crate::sensor::Batching {
            records: self.batch_records,
            wait: std::time::Duration::from_millis(self.batch_wait_ms),
        }
    }

    /// The topic records go to.
    pub fn topic<'a>(&'a self, kafka: &'a KafkaConfig) -> &'a str {
        if self.topic.is_empty() {
            kafka.input_topics.first().map_or("", String::as_str)
        } else {
            &self.topic
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    // No #[source]: the message already carries the cause, and error chains would print it twice.
    #[error("configuration: {0}")]
    Load(config::ConfigError),
    #[error("configuration: {key}: {reason}")]
    Invalid { key: &'static str, reason: String },
}

impl From<config::ConfigError> for ConfigError {
    fn from(e: config::ConfigError) -> Self {
        Self::Load(e)
    }
}

/// Where configuration comes from, beyond the embedded defaults.
#[derive(Debug, Clone, Default)]
pub struct Sources {
    /// Read `/etc/metapu/metapu.toml` if it exists.
    pub system_file: bool,
    pub file: Option<PathBuf>,
    /// Read METAPU__SECTION__KEY variables.
    pub environment: bool,
}

impl Sources {
    pub fn standard(file: Option<PathBuf>) -> Self {
        Self { system_file: true, file, environment: true }
    }
}

impl DaemonConfig {
    /// What the core decides with, under this configuration.
    pub fn core_settings(&self) -> CoreSettings {
        let cfg = self;
        CoreSettings {
            sizes: WindowSizes {
                positive: cfg.windows.positive,
                unlabeled: cfg.windows.unlabeled,
                bootstrap_positives: cfg.windows.bootstrap_positives,
                unlabeled_spread: cfg.windows.unlabeled_spread,
                spread_bucket_s: cfg.windows.spread_bucket_s,
                drawn: cfg.windows.drawn,
            },
            max_tracked: cfg.devices.max_tracked,
            threshold: cfg.model.threshold,
            max_per_device: cfg.scoring.max_per_device,
            max_batch: cfg.scoring.max_batch,
            max_wait_ms: cfg.scoring.max_wait_ms,
            max_message_bytes: cfg.scoring.max_message_bytes,
            feedback_topic: cfg.kafka.feedback_topic.clone(),
            adaptation_batch: cfg.adaptation.batch_size,
            max_ahead_s: cfg.time.max_ahead_s as f64,
            idle_after_ms: cfg.time.idle_after_s.saturating_mul(1000),
            clock: cfg.time.clock,
            cadence: EventCadence {
                interval_s: cfg.adaptation.interval_ms.max(1) as f64 / 1000.0,
                min_records: cfg.adaptation.min_records,
                after_records: cfg.adaptation.after_records,
            },
            incidents: cfg.incident_rules(),
            outputs: RecordOutputs { scores: cfg.kafka.publish_scores, alerts: cfg.kafka.publish_alerts },
            feedback_max_age_s: cfg.incidents.feedback_after_close_s,
            trust_input_labels: cfg.windows.trust_input_labels,
            idle_timeout_ms: cfg.devices.idle_timeout_s.saturating_mul(1000),
            unmonitored_after_ms: cfg.incidents.unmonitored_after_s.saturating_mul(1000),
            // The input topic's partition count is the broker's: set at start.
            state: Some(StateSchedule {
                interval_ms: cfg.state.snapshot_interval_s.max(1) * 1000,
                unlabeled_interval_ms: cfg.state.unlabeled_interval_s.max(1) * 1000,
                input_partitions: 0,
            }),
        }
    }

    /// The incident rules these settings give (the daemon, the lab and the tests).
    pub fn incident_rules(&self) -> crate::monitor::incidents::IncidentRules {
        let i = &self.incidents;
        crate::monitor::incidents::IncidentRules {
            open_k: i.open_k,
            open_n: i.open_n,
            update_interval_ms: i.update_interval_s * 1000,
            quiet_ms: i.quiet_s * 1000,
            reopen_ms: i.reopen_s * 1000,
            keep_records: self.windows.positive,
            memory: crate::monitor::incidents::behaviours::MemoryRules {
                remember_ms: i.remember_dismissed_s.saturating_mul(1000),
                volume_factor: i.dismissed_volume_factor,
                learn_quiet: i.learn_quiet_closes,
                learned_ms: i.learned_for_s.saturating_mul(1000),
                learning_ms: i.learning_period_s.saturating_mul(1000),
            },
            fleet_ms: i.fleet_within_s.saturating_mul(1000),
            fan_out: crate::monitor::incidents::fanout::FanOutRules {
                window_ms: i.scan_window_s.saturating_mul(1000),
                hosts: i.scan_hosts.max(1),
                ports: i.scan_ports.max(1),
                flood: i.flood_packets.max(1),
                probes: i.scan_probes.max(1),
                logins: i.login_attempts.max(1),
                sources: i.spoofed_sources.max(1),
                stranger_bytes: i.stranger_bytes.max(1),
                stranger_exchanges: i.stranger_exchanges.max(1),
                usual_factor: i.usual_volume_factor.max(1),
            },
        }
    }

    pub fn load(sources: &Sources) -> Result<Self, ConfigError> {
        use config::{Environment, File, FileFormat};
        let mut builder =
            config::Config::builder().add_source(File::from_str(DEFAULT_TOML, FileFormat::Toml));
        if sources.system_file {
            builder = builder.add_source(File::from(Path::new(SYSTEM_PATH)).required(false));
        }
        if let Some(path) = &sources.file {
            builder = builder.add_source(File::from(path.as_path()).format(FileFormat::Toml).required(true));
        }
        if sources.environment {
            builder = builder.add_source(
                Environment::with_prefix("METAPU")
                    .prefix_separator("__")
                    .separator("__")
                    .try_parsing(true)
                    .list_separator(",")
                    .with_list_parse_key("kafka.input_topics"),
            );
        }
        let mut cfg: Self = builder.build()?.try_deserialize()?;
        if sources.environment {
            let credentials = std::env::var_os("CREDENTIALS_DIRECTORY").map(PathBuf::from);
            let vars: Vec<(String, String)> = std::env::vars_os()
                .filter_map(|(n, v)| Some((n.into_string().ok()?, v.into_string().ok()?)))
                .collect();
            for (key, origin) in super::secrets::apply(&mut cfg.kafka.options, credentials.as_deref(), &vars)
                .map_err(|e| ConfigError::Invalid { key: "kafka.options", reason: e.0 })?
            {
                tracing::info!(option = %key, from = %origin, "kafka secret set");
            }
        }
        cfg.validate()?;
        Ok(cfg)
    }

    /// Defaults only (tests, demo).
    pub fn defaults() -> Self {
        Self::load(&Sources::default()).expect("embedded defaults are valid")
    }

    fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |key, reason: &str| Err(ConfigError::Invalid { key, reason: reason.into() });
        if self.kafka.input_topics.is_empty() {
            return invalid("kafka.input_topics", "at least one topic is needed");
        }
        if !matches!(self.kafka.auto_offset_reset.as_str(), "earliest" | "latest") {
            return invalid("kafka.auto_offset_reset", "must be \"earliest\" or \"latest\"");
        }
        if !(0.0..=1.0).contains(&self.model.threshold) {
            return invalid("model.threshold", "must lie in [0, 1]");
        }
        if self.windows.positive == 0 || self.windows.unlabeled == 0 {
            return invalid("windows", "window sizes must be at least 1");
        }
        if self.windows.unlabeled_spread >= self.windows.unlabeled {
            return invalid(
                "windows.unlabeled_spread",
                "must be below windows.unlabeled (the newest rows need room)",
            );
        }
        if self.windows.spread_bucket_s == 0 {
            return invalid("windows.spread_bucket_s", "must be at least 1");
        }
        if self.adaptation.batch_size == 0 || self.scoring.max_batch == 0 {
            return invalid("adaptation.batch_size / scoring", "batch sizes must be at least 1");
        }
        let i = &self.incidents;
        if !(1..=64).contains(&i.open_n) || i.open_k == 0 || i.open_k > i.open_n {
            return invalid("incidents.open_k / open_n", "need 1 ≤ open_k ≤ open_n ≤ 64");
        }
        if !(i.dismissed_volume_factor.is_finite() && i.dismissed_volume_factor >= 1.0) {
            return invalid("incidents.dismissed_volume_factor", "must be a number of at least 1");
        }
        if self.devices.max_tracked == 0 {
            return invalid("devices.max_tracked", "must be at least 1");
        }
        if self.http.listen.parse::<std::net::SocketAddr>().is_err() {
            return invalid("http.listen", "must be an address such as 127.0.0.1:9898");
        }
        let sensor = &self.sensor;
        if sensor.listen.parse::<std::net::SocketAddr>().is_err() {
            return invalid("sensor.listen", "must be an address such as 127.0.0.1:9897");
        }
        let console: std::net::SocketAddr =
            self.console.listen.parse().map_err(|_| ConfigError::Invalid {
                key: "console.listen",
                reason: "must be an address such as 127.0.0.1:9899".into(),
            })?;
        if self.console.anonymous_reads && !console.ip().is_loopback() {
            return invalid(
                "console.anonymous_reads",
                "reading without a token is only for a console on loopback (console.listen)",
            );
        }
        if let Some(clash) = listeners_clash(&[
            ("http.listen", &self.http.listen),
            ("sensor.listen", &sensor.listen),
            ("console.listen", &self.console.listen),
        ]) {
            return invalid("http.listen / sensor.listen / console.listen", &clash);
        }
        if sensor.snaplen < 64 {
            return invalid("sensor.snaplen", "must be at least 64 bytes (the headers AfterImage reads)");
        }
        if sensor.max_queued_records == 0 || sensor.buffer_bytes <= 0 {
            return invalid("sensor.max_queued_records / buffer_bytes", "must be at least 1");
        }
        if !(1..=MAX_BATCH_RECORDS).contains(&sensor.batch_records) {
            return invalid(
                "sensor.batch_records",
                &format!("must be 1 (a message per record) to {MAX_BATCH_RECORDS}"),
            );
        }
        Ok(())
    }

    /// The configuration as TOML (loadable again with `--config`).
    pub fn to_toml(&self) -> String {
        toml::to_string(self).expect("the configuration serialises as TOML")
    }

    /// The effective configuration as TOML, with secret-looking values redacted.
    pub fn redacted_toml(&self) -> String {
        let mut shown = self.clone();
        let kafka = &mut shown.kafka;
        let options =
            kafka.options.iter_mut().chain(&mut kafka.consumer_options).chain(&mut kafka.producer_options);
        for (key, value) in options {
            let k = key.to_ascii_lowercase();
            if ["password", "secret", "key", "token", "credential"].iter().any(|s| k.contains(s)) {
                *value = "<redacted>".into();
            }
        }
        shown.to_toml()
    }
}

#[cfg(test)]
mod core_settings_tests {
    use super::*;
    use crate::monitor::clock::Clock;

    #[test]
    fn the_core_settings_are_the_configuration_s() {
        let mut cfg = DaemonConfig::defaults();
        cfg.scoring.max_per_device = 7;
        cfg.windows.trust_input_labels = true;
        cfg.incidents.feedback_after_close_s = 99;
        for clock in [Clock::Event, Clock::Service] {
            cfg.time.clock = clock;
            let s = cfg.core_settings();
            assert_eq!((s.max_per_device, s.feedback_max_age_s), (7, 99));
            assert_eq!((s.clock, s.trust_input_labels), (clock, true));
            assert_eq!(s.idle_timeout_ms, cfg.devices.idle_timeout_s * 1000);
        }
    }
}
