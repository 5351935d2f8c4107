//! Who may give a verdict through the console: the bearer of its token, from a page of
//! its own or a SOC's tool, never a form posted by another site. Reading needs no token
//! (the console listens on loopback unless an operator says otherwise).

use std::path::{Path, PathBuf};

use axum::http::{header, HeaderMap};
use sha2::{Digest, Sha256};

/// The systemd credential the token may come from (`LoadCredential=console-token:…`).
pub const CREDENTIAL: &str = "console-token";

/// The console's verdict token and mode.
#[derive(Clone)]
pub struct Access {
    /// SHA-256 of the token: compared digest to digest, so the comparison takes the
    /// same time however much of a guess is right.
    token: Option<[u8; 32]>,
    read_only: bool,
    /// Where the token came from, for the start-up log (never the token).
    pub origin: String,
}

impl std::fmt::Debug for Access {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Access").field("read_only", &self.read_only).field("origin", &self.origin).finish()
    }
}

/// Why a verdict is refused before it is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Denied {
    #[error("this console is read-only (console.read_only, or no token configured)")]
    ReadOnly,
    #[error("a verdict needs the console's token: Authorization: Bearer <token>")]
    NoToken,
    #[error("wrong token")]
    WrongToken,
    #[error("verdicts are JSON (Content-Type: application/json); forms are refused")]
    NotJson,
    #[error("a verdict from another site's page is refused")]
    CrossSite,
}

impl Denied {
    pub fn status(self) -> axum::http::StatusCode {
        use axum::http::StatusCode;
        match self {
            Denied::NoToken | Denied::WrongToken => StatusCode::UNAUTHORIZED,
            Denied::ReadOnly | Denied::CrossSite => StatusCode::FORBIDDEN,
            Denied::NotJson => StatusCode::UNSUPPORTED_MEDIA_TYPE,
        }
    }
}

/// The token could not be read.
#[derive(Debug, thiserror::Error)]
#[error("console token {path}: {reason}")]
pub struct TokenError {
    pub path: PathBuf,
    pub reason: String,
}

impl Access {
    /// The token from the systemd credential [`CREDENTIAL`] under `credentials`, else
    /// from `token_file` if it exists; without either the console is read-only. A file
    /// that exists but cannot be read, or holds an empty token, is an error.
    pub fn load(credentials: Option<&Path>, token_file: &Path, read_only: bool) -> Result<Self, TokenError> {
        let credential = credentials.map(|d| d.join(CREDENTIAL)).filter(|p| p.exists());
        let path = credential.or_else(|| token_file.exists().then(|| token_file.to_path_buf()));
        let Some(path) = path else { return Ok(Self::none()) };
        let text = std::fs::read_to_string(&path)
            .map_err(|e| TokenError { path: path.clone(), reason: e.to_string() })?;
        let token = text.trim();
        if token.is_empty() {
            return Err(TokenError { path, reason: "empty".into() });
        }
        Ok(Self { token: Some(digest(token)), read_only, origin: path.display().to_string() })
    }

    /// No token: read-only.
    pub fn none() -> Self {
        Self { token: None, read_only: true, origin: "none: read-only".into() }
    }

    /// With this token (tests, the bench).
    pub fn with_token(token: &str) -> Self {
        Self { token: Some(digest(token)), read_only: false, origin: "given".into() }
    }

    pub fn read_only(&self) -> bool {
        self.read_only || self.token.is_none()
    }

    /// May this request give a verdict?
    pub fn check(&self, headers: &HeaderMap) -> Result<(), Denied> {
        let Some(token) = self.token.filter(|_| !self.read_only) else { return Err(Denied::ReadOnly) };
        let text = |name| headers.get(name).and_then(|v| v.to_str().ok());
        // A browser marks a request another site's page made; a form cannot send JSON
        // (or an Authorization header) without asking first, and nothing here answers
        // such a preflight.
        if text("sec-fetch-site").is_some_and(|s| s == "cross-site")
            || text(header::ORIGIN.as_str()).is_some_and(|o| !same_host(o, text(header::HOST.as_str())))
        {
            return Err(Denied::CrossSite);
        }
        if !text(header::CONTENT_TYPE.as_str()).is_some_and(|c| c.starts_with("application/json")) {
            return Err(Denied::NotJson);
        }
        let given = text(header::AUTHORIZATION.as_str())
            .and_then(|a| a.strip_prefix("Bearer "))
            .ok_or(Denied::NoToken)?;
        if digest(given.trim()) != token {
            return Err(Denied::WrongToken);
        }
        Ok(())
    }
}

/// `origin` (`http://host:port`) names the host the request was sent to.
fn same_host(origin: &str, host: Option<&str>) -> bool {
    let authority = origin.split_once("://").map_or(origin, |(_, rest)| rest);
    host.is_some_and(|h| h.eq_ignore_ascii_case(authority.trim_end_matches('/')))
}

fn digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    const JSON: (&str, &str) = ("content-type", "application/json");

    #[test]
    fn only_the_token_s_bearer_from_this_site_may_give_a_verdict() {
        let a = Access::with_token("s3cret");
        let bearer = ("authorization", "Bearer s3cret");
        assert_eq!(a.check(&headers(&[JSON, bearer])), Ok(()));
        assert_eq!(a.check(&headers(&[JSON])), Err(Denied::NoToken));
        assert_eq!(a.check(&headers(&[JSON, ("authorization", "Bearer s3cre")])), Err(Denied::WrongToken));
        assert_eq!(
            a.check(&headers(&[("content-type", "application/x-www-form-urlencoded"), bearer])),
            Err(Denied::NotJson)
        );
        let here = [JSON, bearer, ("host", "127.0.0.1:9899"), ("origin", "http://127.0.0.1:9899")];
        assert_eq!(a.check(&headers(&here)), Ok(()));
        let there = [JSON, bearer, ("host", "127.0.0.1:9899"), ("origin", "https://evil.example")];
        assert_eq!(a.check(&headers(&there)), Err(Denied::CrossSite));
        assert_eq!(
            a.check(&headers(&[JSON, bearer, ("sec-fetch-site", "cross-site")])),
            Err(Denied::CrossSite)
        );
    }

    #[test]
    fn no_token_no_verdicts_and_an_empty_token_file_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("none");
        let a = Access::load(None, &missing, false).unwrap();
        assert!(a.read_only());
        assert_eq!(a.check(&headers(&[JSON, ("authorization", "Bearer x")])), Err(Denied::ReadOnly));
        let file = dir.path().join("token");
        std::fs::write(&file, "\n").unwrap();
        assert!(Access::load(None, &file, false).is_err());
        std::fs::write(&file, "from-file\n").unwrap();
        let creds = dir.path().join("creds");
        std::fs::create_dir(&creds).unwrap();
        std::fs::write(creds.join(CREDENTIAL), "from-credential").unwrap();
        let a = Access::load(Some(&creds), &file, false).unwrap();
        let bearer = |t: &str| headers(&[JSON, ("authorization", &format!("Bearer {t}"))]);
        assert_eq!(a.check(&bearer("from-credential")), Ok(()), "the credential wins");
        assert!(Access::load(Some(&creds), &file, true).unwrap().check(&bearer("from-credential")).is_err());
    }
}
