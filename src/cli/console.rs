//! `metapu console`: the analyst's desk and the verdict API, on the daemon's
//! configuration (`[kafka]` and `[console]`).

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use tokio::signal::unix::{signal, SignalKind};

use metapu::daemon::config::{DaemonConfig, Sources};

#[derive(Debug, Args)]
pub struct ConsoleArgs {
    /// Configuration file (TOML), layered over the defaults and /etc/metapu/metapu.toml.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Address to serve on; overrides `console.listen`.
    #[arg(long)]
    listen: Option<String>,
    /// Bootstrap servers; overrides the configuration's.
    #[arg(long)]
    brokers: Option<String>,
    /// Show incidents and devices, take no verdicts; overrides `console.read_only`.
    #[arg(long)]
    read_only: bool,
}

pub fn run(a: ConsoleArgs) -> anyhow::Result<()> {
    let mut cfg = DaemonConfig::load(&Sources::standard(a.config))?;
    if let Some(l) = a.listen {
        cfg.console.listen = l;
    }
    if let Some(b) = a.brokers {
        cfg.kafka.brokers = b;
    }
    cfg.console.read_only |= a.read_only;
    super::run_service(serve(cfg))
}

async fn serve(cfg: DaemonConfig) -> anyhow::Result<()> {
    let credentials = std::env::var_os("CREDENTIALS_DIRECTORY").map(PathBuf::from);
    let mut console = metapu::console::start(&cfg, credentials.as_deref()).await?;
    let mode = if console.read_only { "read-only" } else { "verdicts with the token" };
    tracing::info!(token = %console.token_origin, "console at http://{} ({mode})", console.addr);
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
        r = console.feed_stopped() => return r.context("reading the incidents topics"),
    }
    console.stop().await.context("stopping the console")
}
