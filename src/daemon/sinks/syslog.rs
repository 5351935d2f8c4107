//! Syslog: RFC 5424 messages over TCP with octet-counting framing (RFC 6587), or over
//! TLS (RFC 5425). Each message's MSG is the event's JSON document; its severity
//! follows the incident's. TCP acknowledges bytes, not messages: an event written just
//! before the connection breaks can be lost in the receiver's buffers (a write that
//! fails is sent again on a new connection).

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

use super::ecs::iso8601;
use super::{Failure, Receiver, SinkFormat};
use crate::monitor::incidents::incident_traffic::Severity;
use crate::monitor::output::IncidentEvent;

/// `[sinks.syslog]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SyslogConfig {
    /// `host:port` of the receiver; empty: no syslog.
    pub address: String,
    /// TLS (RFC 5425), checked against `ca_file` (PEM) or the bundled Mozilla roots.
    pub tls: bool,
    pub ca_file: String,
    pub format: SinkFormat,
    /// Syslog facility (16 = local0).
    pub facility: u8,
    pub app_name: String,
    pub max_queued: usize,
}

type Connection = Box<dyn AsyncWrite + Unpin + Send + Sync>;

pub(super) struct Syslog {
    address: String,
    tls: Option<(tokio_rustls::TlsConnector, rustls_pki_types::ServerName<'static>)>,
    format: SinkFormat,
    facility: u8,
    app_name: String,
    hostname: String,
    connection: Option<Connection>,
}

impl Syslog {
    pub(super) fn new(cfg: &SyslogConfig) -> Result<Self, String> {
        if cfg.facility > 23 {
            return Err(format!("sinks.syslog.facility {} is not 0-23", cfg.facility));
        }
        let host = cfg
            .address
            .rsplit_once(':')
            .map(|(h, _)| h.trim_matches(['[', ']']).to_string())
            .ok_or_else(|| format!("sinks.syslog.address {:?}: not host:port", cfg.address))?;
        let tls = if cfg.tls { Some(connector(cfg, &host)?) } else { None };
        Ok(Self {
            address: cfg.address.clone(),
            tls,
            format: cfg.format,
            facility: cfg.facility,
            app_name: cfg.app_name.clone(),
            hostname: hostname(),
            connection: None,
        })
    }

    async fn connect(&self) -> Result<Connection, String> {
        let tcp =
            TcpStream::connect(&self.address).await.map_err(|e| format!("connect {}: {e}", self.address))?;
        Ok(match &self.tls {
            None => Box::new(tcp),
            Some((connector, name)) => Box::new(
                connector
                    .connect(name.clone(), tcp)
                    .await
                    .map_err(|e| format!("TLS with {}: {e}", self.address))?,
            ),
        })
    }

    /// One RFC 5424 message, octet-counted.
    fn frame(&self, event: &IncidentEvent) -> Vec<u8> {
        let (severity, time) = match event {
            // Recorded, not raised: informational, whatever the incident's severity.
            IncidentEvent::Suppressed(r) | IncidentEvent::Joined(r) => (6, r.time),
            IncidentEvent::Closed(r) if r.is_quiet() => (6, r.time),
            IncidentEvent::Opened(r)
            | IncidentEvent::Updated(r)
            | IncidentEvent::Reopened(r)
            | IncidentEvent::Closed(r)
            | IncidentEvent::Reviewed(r) => {
                let s = match r.severity {
                    Severity::Critical => 2,
                    Severity::High => 3,
                    Severity::Medium => 4,
                    Severity::Low => 5,
                };
                (s, r.time)
            }
            IncidentEvent::Forgotten { time, .. }
            | IncidentEvent::Unlearned { time, .. }
            | IncidentEvent::Onboarding { time, .. }
            | IncidentEvent::Onboarded { time, .. }
            | IncidentEvent::KindJoined { time, .. }
            | IncidentEvent::Unmonitored { time, .. } => (6, *time),
        };
        let doc = self.format.render(event);
        let msgid = doc["event"]["action"].as_str().unwrap_or(event.name());
        let message = format!(
            "<{}>1 {} {} {} {} {} [metapu@32473 device=\"{}\"] {}",
            u32::from(self.facility) * 8 + severity,
            iso8601(time),
            self.hostname,
            self.app_name,
            std::process::id(),
            msgid,
            sd_escape(event.device()),
            doc
        );
        let mut out = format!("{} ", message.len()).into_bytes();
        out.extend_from_slice(message.as_bytes());
        out
    }
}

/// RFC 5424's escapes inside a structured-data value.
fn sd_escape(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"").replace(']', "\\]")
}

fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most buf.len() bytes into the buffer we own.
    let ok = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) } == 0;
    let name = if ok {
        String::from_utf8_lossy(&buf[..buf.iter().position(|&b| b == 0).unwrap_or(0)]).into_owned()
    } else {
        String::new()
    };
    let printable: String = name.chars().filter(|c| c.is_ascii_graphic()).collect();
    if printable.is_empty() {
        "-".into()
    } else {
        printable
    }
}

fn connector(
    cfg: &SyslogConfig,
    host: &str,
) -> Result<(tokio_rustls::TlsConnector, rustls_pki_types::ServerName<'static>), String> {
    use rustls_pki_types::pem::PemObject;
    let mut roots = tokio_rustls::rustls::RootCertStore::empty();
    if cfg.ca_file.is_empty() {
        roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    } else {
        for cert in rustls_pki_types::CertificateDer::pem_file_iter(&cfg.ca_file)
            .map_err(|e| format!("sinks.syslog.ca_file {}: {e}", cfg.ca_file))?
        {
            let cert = cert.map_err(|e| format!("sinks.syslog.ca_file {}: {e}", cfg.ca_file))?;
            roots.add(cert).map_err(|e| format!("sinks.syslog.ca_file {}: {e}", cfg.ca_file))?;
        }
    }
    let provider = Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
    let config = tokio_rustls::rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let name = rustls_pki_types::ServerName::try_from(host.to_string())
        .map_err(|e| format!("sinks.syslog.address: {host:?} is no TLS server name: {e}"))?;
    Ok((tokio_rustls::TlsConnector::from(Arc::new(config)), name))
}

impl Receiver for Syslog {
    fn name(&self) -> &'static str {
        "syslog"
    }

    async fn send(&mut self, event: &IncidentEvent) -> Result<(), Failure> {
        let frame = self.frame(event);
        if self.connection.is_none() {
            self.connection = Some(self.connect().await.map_err(Failure::Retry)?);
        }
        let connection = self.connection.as_mut().expect("connected above");
        let written = async {
            connection.write_all(&frame).await?;
            connection.flush().await
        }
        .await;
        if let Err(e) = written {
            self.connection = None; // a new connection at the next attempt
            return Err(Failure::Retry(format!("write to {}: {e}", self.address)));
        }
        Ok(())
    }
}
