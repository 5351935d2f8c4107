use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use tokio::signal::unix::{signal, SignalKind};

use metapu::daemon::config::{DaemonConfig, Sources};
use metapu::daemon::{self, Control};

#[derive(Debug, Args)]
pub struct RunArgs {
    /// Configuration file (TOML), layered over the defaults and /etc/metapu/metapu.toml.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Model file; overrides `model.path`.
    #[arg(long)]
    model: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct CheckConfigArgs {
    /// Configuration file (TOML), layered over the defaults and /etc/metapu/metapu.toml.
    #[arg(long)]
    config: Option<PathBuf>,
}

pub fn check_config(a: CheckConfigArgs) -> anyhow::Result<()> {
    let cfg = DaemonConfig::load(&Sources::standard(a.config))?;
    print!("{}", cfg.redacted_toml());
    Ok(())
}

pub fn run(a: RunArgs) -> anyhow::Result<()> {
    let mut cfg = DaemonConfig::load(&Sources::standard(a.config))?;
    if let Some(m) = a.model {
        cfg.model.path = m;
    }
    super::run_service(serve(cfg))
}

async fn serve(cfg: DaemonConfig) -> anyhow::Result<()> {
    let limit = Duration::from_secs(cfg.shutdown.timeout_s);
    daemon::use_one_torch_thread();
    let daemon = daemon::start(cfg).await?;
    tracing::info!(http = %daemon.http_addr, "metrics at http://{}/metrics", daemon.http_addr);
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let mut hup = signal(SignalKind::hangup())?;
    let finished = daemon.finished();
    tokio::pin!(finished);
    loop {
        tokio::select! {
            _ = term.recv() => break,
            _ = int.recv() => break,
            _ = hup.recv() => daemon.send(Control::Reload),
            // The pipeline ended without being asked: exit non-zero (systemd restarts
            // the unit) instead of idling until the watchdog notices.
            () = &mut finished => {
                daemon.wait().await?;
                anyhow::bail!("the daemon's pipeline stopped without being asked to");
            }
        }
    }
    tracing::info!(limit_s = limit.as_secs(), "signal received; stopping");
    match tokio::time::timeout(limit, daemon.shutdown()).await {
        Ok(result) => Ok(result?),
        Err(_) => anyhow::bail!("shutdown did not finish within {}s", limit.as_secs()),
    }
}
