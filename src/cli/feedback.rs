//! `metapu feedback` (an analyst's verdict on an incident), `metapu onboard`, `metapu
//! kind` and `metapu forget` (an operator's requests), written to the feedback topic the
//! daemons read. Kafka settings (brokers, TLS/SASL options, the topic) come from the
//! daemon's configuration, so on a daemon's host they need no flags but the request.
//! Each request is a line of [`Request`] and its arguments here: the top level's
//! subcommands take them as they are.

use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, Subcommand};

use metapu::daemon::config::{DaemonConfig, Sources};
use metapu::daemon::kafka::FeedbackWriter;
use metapu::daemon::{Feedback, FeedbackVerdict as Verdict};
use metapu::monitor::feedback::{FeedbackMessage, Forget, Kind, Onboard};

/// The requests, each one subcommand of `metapu`.
#[derive(Debug, Subcommand)]
pub enum Request {
    /// An analyst's verdict on an incident: false positive (its behaviour is remembered
    /// and its returns suppressed) or confirmed.
    Feedback(FeedbackArgs),
    /// Onboard a device: its traffic for the next span (--for 1h) is its known-normal
    /// traffic (recorded on the incidents topic).
    Onboard(OnboardArgs),
    /// Name a device's kind (its make and model) without onboarding it again: what it and
    /// the kind's other devices were onboarded on and had dismissed is offered to each
    /// other (recorded on the incidents topic).
    Kind(KindArgs),
    /// Forget a device: its known-normal records, windows and saved state (recorded on
    /// the incidents topic). Idle devices keep theirs; this is how one is let go.
    Forget(ForgetArgs),
}

impl Request {
    pub fn send(self) -> anyhow::Result<()> {
        match self {
            Self::Feedback(a) => run(a),
            Self::Onboard(a) => onboard(a),
            Self::Kind(a) => kind(a),
            Self::Forget(a) => forget(a),
        }
    }
}

#[derive(Debug, Args)]
#[command(group = clap::ArgGroup::new("verdict").required(true))]
pub struct FeedbackArgs {
    /// The incident's `incident_id` (from its event on the incidents topic).
    #[arg(long)]
    incident: String,
    /// The incident's device.
    #[arg(long)]
    device: String,
    /// Normal behaviour: the incident closes and its behaviour is remembered (its returns are suppressed).
    #[arg(long, group = "verdict")]
    false_positive: bool,
    /// A real attack: recorded on the incident; what was remembered of its behaviour is forgotten.
    #[arg(long, group = "verdict")]
    confirmed: bool,
    #[command(flatten)]
    signed: Signed,
    #[command(flatten)]
    kafka: FeedbackTopic,
}

/// Who sends a request and why: recorded with it on the incidents topic.
#[derive(Debug, Args)]
pub struct Signed {
    /// Who says so (default: $USER).
    #[arg(long)]
    by: Option<String>,
    /// Why, in a few words.
    #[arg(long, default_value = "")]
    note: String,
}

impl Signed {
    /// (who, why)
    fn into_parts(self) -> (String, String) {
        (self.by.or_else(|| std::env::var("USER").ok()).unwrap_or_default(), self.note)
    }
}

/// Where requests go: the daemon's feedback topic.
#[derive(Debug, Args)]
pub struct FeedbackTopic {
    /// The daemon's configuration file (brokers, Kafka options, kafka.feedback_topic).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Bootstrap servers; overrides the configuration's.
    #[arg(long)]
    brokers: Option<String>,
    /// The feedback topic; overrides `kafka.feedback_topic`.
    #[arg(long)]
    topic: Option<String>,
}

impl FeedbackTopic {
    /// Send `message` (keyed by its device, so it reaches the daemon that holds the
    /// device); the topic it went to.
    fn send(self, message: &FeedbackMessage) -> anyhow::Result<String> {
        let mut cfg = DaemonConfig::load(&Sources::standard(self.config))?;
        if let Some(b) = self.brokers {
            cfg.kafka.brokers = b;
        }
        if let Some(t) = self.topic {
            cfg.kafka.feedback_topic = t;
        }
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        runtime.block_on(async {
            let writer = FeedbackWriter::new(&cfg.kafka).context("Kafka producer")?;
            writer.send(message).await.map_err(|e| {
                anyhow::anyhow!("not delivered to {} at {}: {e}", writer.topic(), cfg.kafka.brokers)
            })?;
            Ok(writer.topic().to_string())
        })
    }
}

#[derive(Debug, Args)]
pub struct ForgetArgs {
    /// The device to forget: its known-normal records, windows, classifier and saved
    /// state go; it is unmonitored until onboarded again.
    #[arg(long)]
    device: String,
    #[command(flatten)]
    signed: Signed,
    #[command(flatten)]
    kafka: FeedbackTopic,
}

#[derive(Debug, Args)]
pub struct KindArgs {
    /// The device (its name on the input topic; the daemon must have seen it).
    #[arg(long)]
    device: String,
    /// Its kind, e.g. its make and model (`edimax-ic3115w`); it leaves the kind it was of.
    #[arg(long, value_parser = parse_kind)]
    kind: String,
    #[command(flatten)]
    signed: Signed,
    #[command(flatten)]
    kafka: FeedbackTopic,
}

fn kind(a: KindArgs) -> anyhow::Result<()> {
    let (by, note) = a.signed.into_parts();
    let (device, kind) = (a.device, a.kind);
    let request = FeedbackMessage::Kind(Kind { device: device.clone(), kind: kind.clone(), by, note });
    let topic = a.kafka.send(&request)?;
    println!(
        "kind {kind} for {device} sent to {topic}; the daemon answers on the incidents topic (event \
         \"kind_joined\") or, refusing it, on the dead-letter topic"
    );
    Ok(())
}

fn forget(a: ForgetArgs) -> anyhow::Result<()> {
    let (by, note) = a.signed.into_parts();
    let device = a.device;
    let request = FeedbackMessage::Forget(Forget { device: device.clone(), by, note });
    let topic = a.kafka.send(&request)?;
    println!("forget {device} sent to {topic}");
    Ok(())
}

#[derive(Debug, Args)]
pub struct OnboardArgs {
    /// The device to onboard (its name on the input topic; the daemon must have seen it).
    #[arg(long)]
    device: String,
    /// For how long from now its traffic is its known-normal traffic (10m, 1h, 24h; at
    /// most 31 days). Its known-normal window becomes a sample of the whole span,
    /// replacing what it held; no incident opens meanwhile.
    #[arg(long = "for", value_parser = super::traffic::parse_duration, default_value = "6h")]
    span: f64,
    /// The device's kind (e.g. its make and model, `edimax-ic3115w`): what is onboarded
    /// or dismissed on it is offered to every device of the kind, and theirs to it.
    #[arg(long, value_parser = parse_kind)]
    kind: Option<String>,
    #[command(flatten)]
    signed: Signed,
    #[command(flatten)]
    kafka: FeedbackTopic,
}

fn parse_kind(s: &str) -> Result<String, String> {
    metapu::monitor::devices::kinds::check_name(s).map(|()| s.to_string()).map_err(|e| e.to_string())
}

fn onboard(a: OnboardArgs) -> anyhow::Result<()> {
    let (by, note) = a.signed.into_parts();
    let (device, span) = (a.device, a.span);
    let request = FeedbackMessage::Onboard(Onboard {
        device: device.clone(),
        onboard_for_s: span,
        kind: a.kind,
        by,
        note,
    });
    let topic = a.kafka.send(&request)?;
    println!(
        "onboard {} for {} s sent to {topic}; the daemon answers on the incidents topic (event \"onboarding\", \
         then \"onboarded\" when the span ends) or, refusing it, on the dead-letter topic",
        device, span
    );
    Ok(())
}

fn run(a: FeedbackArgs) -> anyhow::Result<()> {
    let (by, note) = a.signed.into_parts();
    let feedback = Feedback {
        device: a.device,
        incident_id: a.incident,
        verdict: if a.false_positive { Verdict::FalsePositive } else { Verdict::Confirmed },
        by,
        note,
        id: metapu::console::access::new_id(),
        at: metapu::wall_clock::unix_now(),
        from: format!("cli {}", host_name()),
    };
    let topic = a.kafka.send(&FeedbackMessage::Verdict(feedback.clone()))?;
    println!(
        "feedback {} on incident {} of {} sent to {topic} (verdict id {})",
        if a.false_positive { "false_positive" } else { "confirmed" },
        feedback.incident_id,
        feedback.device,
        feedback.id
    );
    Ok(())
}

/// This host's name, for a verdict's `from` (the kernel's; `localhost` if unreadable).
fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".into())
}
