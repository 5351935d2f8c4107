//! An HTTP webhook: each event POSTed as JSON. 2xx is delivered; 408, 429, 5xx and
//! network errors are tried again; any other status is a refusal (dead-lettered).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{Failure, Receiver, SinkFormat};
use crate::monitor::output::IncidentEvent;

/// The systemd credential (or, without one, the environment variable) holding the
/// webhook's token.
pub const TOKEN_CREDENTIAL: &str = "webhook.token";
pub const TOKEN_ENV: &str = "METAPU_WEBHOOK_TOKEN";

/// `[sinks.webhook]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebhookConfig {
    /// Where to POST; empty: no webhook.
    pub url: String,
    pub format: SinkFormat,
    /// Put the document under this key (`"event"` for Splunk HEC); empty: as is.
    pub wrap_key: String,
    /// Extra headers, e.g. `"X-Source" = "metapu"`.
    pub headers: BTreeMap<String, String>,
    /// `Authorization: <auth_scheme> <token>` when a token is given (`Splunk` for HEC).
    pub auth_scheme: String,
    pub timeout_s: u64,
    pub max_queued: usize,
}

pub(super) struct Webhook {
    client: reqwest::Client,
    url: reqwest::Url,
    format: SinkFormat,
    wrap_key: String,
    headers: reqwest::header::HeaderMap,
}

impl Webhook {
    pub(super) fn new(cfg: &WebhookConfig, credentials: Option<&Path>) -> Result<Self, String> {
        let url =
            reqwest::Url::parse(&cfg.url).map_err(|e| format!("sinks.webhook.url {:?}: {e}", cfg.url))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(format!("sinks.webhook.url {:?}: not http or https", cfg.url));
        }
        let mut headers = reqwest::header::HeaderMap::new();
        for (name, value) in &cfg.headers {
            let name = reqwest::header::HeaderName::from_bytes(name.as_bytes())
                .map_err(|e| format!("sinks.webhook.headers {name:?}: {e}"))?;
            let value = reqwest::header::HeaderValue::from_str(value)
                .map_err(|e| format!("sinks.webhook.headers {name}: {e}"))?;
            headers.insert(name, value);
        }
        if let Some(token) = token(credentials)? {
            let mut value = reqwest::header::HeaderValue::from_str(&format!("{} {token}", cfg.auth_scheme))
                .map_err(|_| "the webhook token is not a valid header value".to_string())?;
            value.set_sensitive(true);
            headers.insert(reqwest::header::AUTHORIZATION, value);
        }
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(cfg.timeout_s.max(1)))
            .build()
            .map_err(|e| format!("the webhook's HTTP client: {e}"))?;
        Ok(Self { client, url, format: cfg.format, wrap_key: cfg.wrap_key.clone(), headers })
    }
}

/// The token from the systemd credential `webhook.token`, else `METAPU_WEBHOOK_TOKEN`.
fn token(credentials: Option<&Path>) -> Result<Option<String>, String> {
    let from_file = match credentials.map(|d| d.join(TOKEN_CREDENTIAL)).filter(|p| p.exists()) {
        Some(path) => {
            let text = std::fs::read_to_string(&path)
                .map_err(|e| format!("cannot read credential {}: {e}", path.display()))?;
            Some(text.strip_suffix('\n').unwrap_or(&text).to_string())
        }
        None => None,
    };
    let token = from_file.or_else(|| std::env::var(TOKEN_ENV).ok());
    match token {
        Some(t) if t.is_empty() => Err("the webhook token is empty".into()),
        t => Ok(t),
    }
}

impl Receiver for Webhook {
    fn name(&self) -> &'static str {
        "webhook"
    }

    async fn send(&mut self, event: &IncidentEvent) -> Result<(), Failure> {
        let doc = self.format.render(event);
        let body =
            if self.wrap_key.is_empty() { doc } else { serde_json::json!({ self.wrap_key.clone(): doc }) };
        let response = self
            .client
            .post(self.url.clone())
            .headers(self.headers.clone())
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(serde_json::to_vec(&body).expect("a document serialises"))
            .send()
            .await
            .map_err(|e| Failure::Retry(e.to_string()))?;
        let status = response.status();
        match status.as_u16() {
            200..=299 => Ok(()),
            408 | 429 | 500..=599 => Err(Failure::Retry(format!("HTTP {status}"))),
            _ => {
                let text = response.text().await.unwrap_or_default();
                Err(Failure::Refused(format!(
                    "HTTP {status}: {}",
                    text.chars().take(200).collect::<String>()
                )))
            }
        }
    }
}
