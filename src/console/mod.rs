//! `metapu console`: the analyst's desk in a browser and a verdict API for a SOC's
//! tools. It reads what the daemons publish (incidents, priors, refused verdicts) with
//! the daemon's configuration and writes verdicts to its feedback topic; it holds no
//! state of its own beyond what it read, so any number may run.
//!
//! - `desk` — what it knows, folded from the topics (the one owner of that state)
//! - `views` — incident rows, device figures and filters, for the pages and the API
//! - `pages`, `plots` — HTML and inline SVG rendered on the server; `assets/` the
//!   stylesheet and the verdict buttons' script, served by the binary
//! - `http` — routes, the JSON API, `POST /api/verdicts`
//! - `access` — analysts' tokens and roles, sign-in, throttled wrong tokens, no
//!   cross-site posts
//! - `guard` — only the console's own host names; security headers on every answer
//! - `feed` — Kafka in (every partition, from the beginning) and verdicts out
//! - `metrics` — its own `/metrics`

pub mod access;
pub mod desk;
pub mod feed;
pub mod guard;
pub mod http;
pub mod metrics;
pub mod pages;
pub mod plots;
pub mod views;

use std::path::Path;
use std::sync::{Arc, RwLock};

use crate::daemon::config::DaemonConfig;

/// Why the console cannot run.
#[derive(Debug, thiserror::Error)]
pub enum ConsoleError {
    #[error(transparent)]
    Token(#[from] access::TokenError),
    #[error("kafka: {0}")]
    Kafka(#[from] rdkafka::error::KafkaError),
    #[error("console.listen {listen}: {source}")]
    Listen { listen: String, source: std::io::Error },
}

/// A console started: where it listens, and how to stop it.
pub struct Running {
    pub addr: std::net::SocketAddr,
    pub read_only: bool,
    /// Where the analysts' tokens came from, and how many there are (for the log).
    pub token_origin: String,
    pub analysts: usize,
    stop: tokio::sync::watch::Sender<bool>,
    server: tokio::task::JoinHandle<()>,
    feed: tokio::task::JoinHandle<Result<(), rdkafka::error::KafkaError>>,
}

impl Running {
    /// Stop serving and reading; an error the feed stopped with.
    pub async fn stop(self) -> Result<(), ConsoleError> {
        let _ = self.stop.send(true);
        let _ = self.server.await;
        match self.feed.await {
            Ok(r) => r.map_err(ConsoleError::from),
            Err(_) => Ok(()),
        }
    }

    /// Runs until the feed stops by itself (a Kafka error it cannot go on from).
    pub async fn feed_stopped(&mut self) -> Result<(), ConsoleError> {
        match (&mut self.feed).await {
            Ok(r) => r.map_err(ConsoleError::from),
            Err(_) => Ok(()),
        }
    }
}

/// Start the console on `cfg.console` with the daemon's Kafka settings; the analysts'
/// tokens from the systemd credentials folder `credentials` or `console.tokens_file`.
pub async fn start(cfg: &DaemonConfig, credentials: Option<&Path>) -> Result<Running, ConsoleError> {
    let c = &cfg.console;
    let access = access::Access::load(credentials, &c.tokens_file, c.read_only, c.anonymous_reads)?;
    let (read_only, analysts, token_origin) = (access.read_only(), access.analysts(), access.origin.clone());
    let desk = Arc::new(RwLock::new(desk::Desk::new(c.max_incidents)));
    let metrics = Arc::new(metrics::ConsoleMetrics::default());
    let console = http::Console {
        desk: desk.clone(),
        access: Arc::new(access),
        sink: Arc::new(crate::daemon::kafka::FeedbackWriter::new(&cfg.kafka)?),
        metrics: metrics.clone(),
        hosts: guard::Hosts::new(&c.allowed_hosts),
    };
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let until = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };
    let (addr, server) =
        crate::endpoints::serve_router(&c.listen, http::router(console), until(stopped.clone()))
            .await
            .map_err(|source| ConsoleError::Listen { listen: c.listen.clone(), source })?;
    let feed = tokio::spawn(feed::follow(cfg.kafka.clone(), desk, metrics, until(stopped)));
    Ok(Running { addr, read_only, token_origin, analysts, stop, server, feed })
}

/// Takes no verdicts: the sink of a console that only shows (`serve_read_only`).
struct NoVerdicts;

impl http::VerdictSink for NoVerdicts {
    fn send(
        &self,
        _: crate::monitor::incidents::Feedback,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), String>> + Send + '_>> {
        Box::pin(async { Err("this console takes no verdicts".to_string()) })
    }
}

/// Serve `desk` as it is, read-only, until `shutdown` resolves (the lab shows what a
/// replay would have published; the bench measures the pages). The bound address.
pub async fn serve_read_only(
    desk: desk::Desk,
    listen: &str,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<(std::net::SocketAddr, tokio::task::JoinHandle<()>)> {
    let console = http::Console {
        desk: Arc::new(RwLock::new(desk)),
        access: Arc::new(access::Access::none()),
        sink: Arc::new(NoVerdicts),
        metrics: Arc::new(metrics::ConsoleMetrics::default()),
        hosts: guard::Hosts::default(),
    };
    crate::endpoints::serve_router(listen, http::router(console), shutdown).await
}

/// A desk from lines of `{"topic": "incidents" | "priors", "value": …}` (what `metapu-lab
/// --published` writes); how many lines it could not read.
pub fn desk_from_lines(lines: impl Iterator<Item = String>, max_incidents: usize) -> (desk::Desk, usize) {
    let mut d = desk::Desk::new(max_incidents);
    let mut unreadable = 0;
    for line in lines {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(&line) else {
            unreadable += 1;
            continue;
        };
        let value = serde_json::to_vec(&v["value"]).unwrap_or_default();
        let read = match v["topic"].as_str() {
            Some("incidents") => d.incident_event(&value),
            Some("priors") => d.prior_update(&value),
            _ => Err(desk::Unreadable { topic: "published", reason: "no such topic".into() }),
        };
        unreadable += usize::from(read.is_err());
    }
    (d, unreadable)
}
