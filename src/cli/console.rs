//! `metapu console`: the analyst's desk and the verdict API, on the daemon's
//! configuration (`[kafka]` and `[console]`).

use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, Subcommand};
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
    #[command(subcommand)]
    command: Option<ConsoleCommand>,
}

#[derive(Debug, Subcommand)]
enum ConsoleCommand {
    /// Give an analyst a token of their own: a line added to `console.tokens_file` (its
    /// digest only), the token printed once. Verdicts are signed with NAME.
    AddAnalyst {
        /// The analyst's name (letters, digits, . _ - @).
        name: String,
        /// `read` (pages and the read API) or `answer` (read, and give verdicts).
        #[arg(long, default_value = "answer", value_parser = ["read", "answer"])]
        role: String,
        /// The tokens file; overrides `console.tokens_file`.
        #[arg(long)]
        tokens_file: Option<PathBuf>,
    },
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
    match a.command {
        None => super::run_service(serve(cfg)),
        Some(ConsoleCommand::AddAnalyst { name, role, tokens_file }) => {
            add_analyst(&tokens_file.unwrap_or(cfg.console.tokens_file), &name, &role)
        }
    }
}

/// Append `name`'s line to the tokens file (made 0600 if new) and print the token.
fn add_analyst(file: &std::path::Path, name: &str, role: &str) -> anyhow::Result<()> {
    use metapu::console::access::{new_token, tokens_line, valid_name, Role};
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    anyhow::ensure!(valid_name(name), "an analyst's name is 1-64 of letters, digits and . _ - @");
    let role = if role == "read" { Role::Read } else { Role::Answer };
    let existing = std::fs::read_to_string(file).unwrap_or_default();
    let named = existing.lines().any(|l| l.split_whitespace().next() == Some(name));
    anyhow::ensure!(
        !named,
        "{name} already has a token in {}: remove the line to give a new one",
        file.display()
    );
    let token = new_token();
    let mut out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(file)
        .with_context(|| format!("opening {}", file.display()))?;
    let sep = if existing.is_empty() || existing.ends_with('\n') { "" } else { "\n" };
    writeln!(out, "{sep}{}", tokens_line(name, role, &token))
        .with_context(|| format!("writing {}", file.display()))?;
    eprintln!(
        "metapu: {name} ({}) added to {}; the console reads it when it starts",
        role.as_str(),
        file.display()
    );
    println!("{token}");
    Ok(())
}

async fn serve(cfg: DaemonConfig) -> anyhow::Result<()> {
    let credentials = std::env::var_os("CREDENTIALS_DIRECTORY").map(PathBuf::from);
    let mut console = metapu::console::start(&cfg, credentials.as_deref()).await?;
    let mode = if console.read_only { "read-only" } else { "verdicts by analysts' tokens" };
    tracing::info!(tokens = %console.token_origin, analysts = console.analysts, "console at http://{} ({mode})", console.addr);
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
        r = console.feed_stopped() => return r.context("reading the incidents topics"),
    }
    console.stop().await.context("stopping the console")
}
