//! Subcommands. Each module turns arguments into library calls and prints results.

mod console;
mod daemon;
mod datasets;
mod demo;
mod feed;
mod feedback;
mod infect;
mod info;
mod sense;
mod traffic;
mod train;

use clap::{Parser, Subcommand};

// The build's compute as a literal for `--version` ("0.1.0 (cuda build)").
#[cfg(feature = "cuda")]
macro_rules! build_kind {
    () => {
        "cuda"
    };
}
#[cfg(not(feature = "cuda"))]
macro_rules! build_kind {
    () => {
        "cpu"
    };
}

#[derive(Debug, Parser)]
#[command(
    name = "metapu",
    version = concat!(env!("CARGO_PKG_VERSION"), " (", build_kind!(), " build)"),
    about = "Few-shot anomaly detection for IoT fleets by meta-learned PU classification"
)]
pub struct Cli {
    /// More log output: -v info (the default, but in the demo), -vv debug.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Meta-train a model on labeled source tasks (paper Algorithm 1).
    Train(train::TrainArgs),
    /// Generate benchmark datasets.
    #[command(subcommand)]
    Datasets(datasets::DatasetsCommand),
    /// Print a model file's metadata.
    Info(info::InfoArgs),
    /// The product on embedded defaults: broker, daemon, shipped model, IoT traffic with attacks.
    Demo(demo::DemoArgs),
    /// Run the streaming daemon: Kafka in; alerts, priors and metrics out.
    Run(daemon::RunArgs),
    /// The analyst's desk in a browser, and a verdict API for a SOC's tools.
    Console(console::ConsoleArgs),
    /// Replay recorded feature rows (N-BaIoT or labeled-task CSVs) into Kafka.
    Replay(traffic::ReplayArgs),
    /// Packet capture → N-BaIoT's 115 AfterImage features per packet.
    Extract(traffic::ExtractArgs),
    /// Live capture sensor: an interface's packets → per-device features → the input topic.
    Sense(sense::SenseArgs),
    /// Generate an IoT fleet's traffic features: benign profiles and botnet attacks.
    Simulate(traffic::SimulateArgs),
    /// Validate the daemon configuration and print it (secrets redacted).
    CheckConfig(daemon::CheckConfigArgs),
    /// Requests on the feedback topic: `feedback`, `onboard`, `kind`, `forget`.
    #[command(flatten)]
    Request(feedback::Request),
}

/// Run a long-lived service (`run`, `console`) on two worker threads until `service`
/// ends. Blocking tasks that may still hang on an unreachable broker (closing a consumer,
/// flushing) are not waited for: the service applied its own shutdown limit.
fn run_service(service: impl std::future::Future<Output = anyhow::Result<()>>) -> anyhow::Result<()> {
    use anyhow::Context;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let result = runtime.block_on(service);
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    result
}

impl Cli {
    /// The demo's terminal is an analyst's view: the daemon inside it logs warnings
    /// only (librdkafka's configuration notes not even those) unless -v asks for more.
    pub fn log_default(&self) -> &'static str {
        match (self.verbose, &self.command) {
            (0, Command::Demo(_)) => "warn,librdkafka=error",
            (0 | 1, _) => "info",
            (2, _) => "debug",
            _ => "trace",
        }
    }
}

pub fn init_logging(default: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("METAPU_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    // Colours only on a terminal: journald and log files get plain text.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(ansi).init();
}

pub fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Train(a) => train::run(a),
        Command::Datasets(c) => datasets::run(c),
        Command::Info(a) => info::run(a),
        Command::Run(a) => daemon::run(a),
        Command::Console(a) => console::run(a),
        Command::Demo(a) => demo::run(a),
        Command::CheckConfig(a) => daemon::check_config(a),
        Command::Request(r) => r.send(),
        Command::Replay(a) => traffic::replay_cmd(a),
        Command::Extract(a) => traffic::extract(a),
        Command::Sense(a) => sense::run(a),
        Command::Simulate(a) => traffic::simulate_cmd(a),
    }
}
