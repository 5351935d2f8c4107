//! Who may read the console and who may answer: each analyst has a token of their own,
//! with a role (`read`, or `answer`: read and give verdicts), from a tokens file that
//! holds only the tokens' digests. A verdict is signed by the token's name, never by
//! what the caller writes. A browser signs in once (`/login`) and carries the token in
//! an HttpOnly, SameSite=Strict cookie; a SOC's tool sends `Authorization: Bearer`.
//! Wrong tokens are logged and throttled per address.

use std::collections::HashMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::http::{header, HeaderMap};
use rand::RngCore;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// The systemd credential the tokens file may come from
/// (`LoadCredential=console-tokens:/etc/metapu/console-tokens`).
pub const CREDENTIAL: &str = "console-tokens";
/// The cookie a signed-in browser carries its token in.
pub const COOKIE: &str = "metapu_token";

/// What an analyst may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Role {
    /// The pages and the read API.
    Read,
    /// Read, and give verdicts.
    Answer,
}

impl Role {
    pub const fn as_str(self) -> &'static str {
        match self {
            Role::Read => "read",
            Role::Answer => "answer",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        [Role::Read, Role::Answer].into_iter().find(|r| r.as_str() == s)
    }
}

/// The bearer of a token: the name verdicts are signed with, and the role.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Analyst {
    pub name: String,
    pub role: Role,
}

/// The console's analysts and mode.
pub struct Access {
    /// SHA-256 of each token and its bearer. Tokens are random (`new_token`), so a
    /// plain digest is enough; every entry is compared, in constant time.
    analysts: Vec<([u8; 32], Analyst)>,
    read_only: bool,
    /// Pages and the read API without a token (only on loopback: `console.anonymous_reads`).
    anonymous_reads: bool,
    throttle: Throttle,
    /// Where the tokens came from, for the start-up log (never a token).
    pub origin: String,
}

impl std::fmt::Debug for Access {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Access")
            .field("analysts", &self.analysts.len())
            .field("read_only", &self.read_only)
            .field("anonymous_reads", &self.anonymous_reads)
            .field("origin", &self.origin)
            .finish()
    }
}

/// Why a request is refused before it is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Denied {
    #[error("this console is read-only (console.read_only, or no analyst may answer)")]
    ReadOnly,
    #[error("sign in: a token of your own, as Authorization: Bearer <token> or through /login")]
    NoToken,
    #[error("wrong token")]
    WrongToken,
    #[error("too many wrong tokens from this address: wait a minute")]
    Throttled,
    #[error("your token may read, not answer (role read)")]
    ReadRole,
    #[error("verdicts are JSON (Content-Type: application/json); forms are refused")]
    NotJson,
    #[error("a request from another site's page is refused")]
    CrossSite,
}

impl Denied {
    /// Its label on `metapu_console_denied_total{reason}`.
    pub const fn reason(self) -> &'static str {
        match self {
            Denied::ReadOnly => "read_only",
            Denied::NoToken => "no_token",
            Denied::WrongToken => "wrong_token",
            Denied::Throttled => "throttled",
            Denied::ReadRole => "read_role",
            Denied::NotJson => "not_json",
            Denied::CrossSite => "cross_site",
        }
    }

    pub fn status(self) -> axum::http::StatusCode {
        use axum::http::StatusCode;
        match self {
            Denied::NoToken | Denied::WrongToken => StatusCode::UNAUTHORIZED,
            Denied::Throttled => StatusCode::TOO_MANY_REQUESTS,
            Denied::ReadOnly | Denied::CrossSite | Denied::ReadRole => StatusCode::FORBIDDEN,
            Denied::NotJson => StatusCode::UNSUPPORTED_MEDIA_TYPE,
        }
    }
}

/// The tokens file could not be read.
#[derive(Debug, thiserror::Error)]
#[error("console tokens {path}: {reason}")]
pub struct TokenError {
    pub path: PathBuf,
    pub reason: String,
}

impl Access {
    /// The analysts of the systemd credential [`CREDENTIAL`] under `credentials`, else
    /// of `tokens_file` if it exists; without either nobody may answer, and reading
    /// needs `anonymous_reads`. A file that exists but cannot be read, or has a line that
    /// is not `name role sha256:<hex>`, is an error.
    pub fn load(
        credentials: Option<&Path>,
        tokens_file: &Path,
        read_only: bool,
        anonymous_reads: bool,
    ) -> Result<Self, TokenError> {
        let credential = credentials.map(|d| d.join(CREDENTIAL)).filter(|p| p.exists());
        let path = credential.or_else(|| tokens_file.exists().then(|| tokens_file.to_path_buf()));
        let Some(path) = path else {
            return Ok(Self::of(Vec::new(), read_only, anonymous_reads, "none".into()));
        };
        let error = |reason: String| TokenError { path: path.clone(), reason };
        let text = std::fs::read_to_string(&path).map_err(|e| error(e.to_string()))?;
        let analysts = parse_tokens(&text).map_err(error)?;
        Ok(Self::of(analysts, read_only, anonymous_reads, path.display().to_string()))
    }

    fn of(
        analysts: Vec<([u8; 32], Analyst)>,
        read_only: bool,
        anonymous_reads: bool,
        origin: String,
    ) -> Self {
        Self { analysts, read_only, anonymous_reads, throttle: Throttle::default(), origin }
    }

    /// Nobody answers and anyone reads: a desk shown on loopback (the lab, the bench).
    pub fn none() -> Self {
        Self::of(Vec::new(), true, true, "none: read-only".into())
    }

    /// These analysts, as `(name, role, token)` (tests).
    pub fn with_analysts(analysts: &[(&str, Role, &str)], anonymous_reads: bool) -> Self {
        let analysts =
            analysts.iter().map(|(n, r, t)| (digest(t), Analyst { name: n.to_string(), role: *r })).collect();
        Self::of(analysts, false, anonymous_reads, "given".into())
    }

    /// No verdicts here: read-only by configuration, or no analyst may answer.
    pub fn read_only(&self) -> bool {
        self.read_only || !self.analysts.iter().any(|(_, a)| a.role == Role::Answer)
    }

    pub fn anonymous_reads(&self) -> bool {
        self.anonymous_reads
    }

    /// Analysts known.
    pub fn analysts(&self) -> usize {
        self.analysts.len()
    }

    /// The analyst whose token is `token`, throttled per `peer` (a sign-in's form).
    pub fn sign_in(&self, token: &str, peer: IpAddr) -> Result<Analyst, Denied> {
        if self.throttle.throttled(peer, Instant::now()) {
            return Err(Denied::Throttled);
        }
        let found = self.find(token);
        match found {
            Some(a) => Ok(a),
            None => {
                self.throttle.failed(peer, Instant::now());
                tracing::warn!(%peer, "console: wrong token");
                Err(Denied::WrongToken)
            }
        }
    }

    /// Who sent this request: its bearer token, else its cookie; `None` for neither.
    pub fn who(&self, headers: &HeaderMap, peer: IpAddr) -> Result<Option<Analyst>, Denied> {
        match token_of(headers) {
            Some(token) => self.sign_in(token, peer).map(Some),
            None => Ok(None),
        }
    }

    /// May this request read? The analyst, or `None` where reading needs no token.
    pub fn reader(&self, headers: &HeaderMap, peer: IpAddr) -> Result<Option<Analyst>, Denied> {
        match self.who(headers, peer)? {
            Some(a) => Ok(Some(a)),
            None if self.anonymous_reads => Ok(None),
            None => Err(Denied::NoToken),
        }
    }

    /// May this request give a verdict? The analyst who gives it.
    pub fn answerer(&self, headers: &HeaderMap, peer: IpAddr) -> Result<Analyst, Denied> {
        if self.read_only() {
            return Err(Denied::ReadOnly);
        }
        if cross_site(headers) {
            return Err(Denied::CrossSite);
        }
        let text = |name| headers.get(name).and_then(|v| v.to_str().ok());
        if !text(header::CONTENT_TYPE.as_str()).is_some_and(|c| c.starts_with("application/json")) {
            return Err(Denied::NotJson);
        }
        match self.who(headers, peer)? {
            Some(a) if a.role == Role::Answer => Ok(a),
            Some(_) => Err(Denied::ReadRole),
            None => Err(Denied::NoToken),
        }
    }

    fn find(&self, token: &str) -> Option<Analyst> {
        let given = digest(token);
        // Every entry is compared, and each comparison takes the same time however much
        // of a guess is right.
        let mut found = None;
        for (d, a) in &self.analysts {
            if bool::from(d.ct_eq(&given)) {
                found = Some(a.clone());
            }
        }
        found
    }
}

/// A request another page than the console's own made. A browser says where a request
/// comes from (`Sec-Fetch-Site`): only `same-origin`, or `none` (the analyst's own
/// navigation), passes; `same-site` is refused too, since another service on the same
/// host is the same site. Without it, the `Origin` must name the host the request was
/// sent to (the console's `no-referrer` policy makes a browser's own posts say `null`,
/// which passes only where `Sec-Fetch-Site` vouches for it). A form cannot send JSON (or
/// an Authorization header) without asking first, and nothing here answers such a
/// preflight.
pub fn cross_site(headers: &HeaderMap) -> bool {
    let text = |name| headers.get(name).and_then(|v| v.to_str().ok());
    match text("sec-fetch-site") {
        Some(site) => !matches!(site, "same-origin" | "none"),
        None => text(header::ORIGIN.as_str()).is_some_and(|o| !same_host(o, text(header::HOST.as_str()))),
    }
}

/// The token a request carries: its bearer header, else the sign-in cookie.
fn token_of(headers: &HeaderMap) -> Option<&str> {
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|a| a.strip_prefix("Bearer "))
        .map(str::trim);
    bearer
        .or_else(|| {
            headers
                .get_all(header::COOKIE)
                .iter()
                .filter_map(|v| v.to_str().ok())
                .flat_map(|v| v.split(';'))
                .filter_map(|c| c.trim().split_once('='))
                .find(|(name, _)| *name == COOKIE)
                .map(|(_, value)| value)
        })
        .filter(|t| !t.is_empty())
}

/// `origin` (`http://host:port`) names the host the request was sent to.
fn same_host(origin: &str, host: Option<&str>) -> bool {
    let authority = origin.split_once("://").map_or(origin, |(_, rest)| rest);
    host.is_some_and(|h| h.eq_ignore_ascii_case(authority.trim_end_matches('/')))
}

fn digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn random_hex(bytes: usize) -> String {
    let mut b = vec![0u8; bytes];
    rand::rngs::OsRng.fill_bytes(&mut b);
    hex(&b)
}

/// A new token: 32 random bytes from the OS, as hex (safe in a header and a cookie).
pub fn new_token() -> String {
    random_hex(32)
}

/// A new verdict id: 16 random bytes, as hex.
pub fn new_id() -> String {
    random_hex(16)
}

/// An analyst's name: what a verdict is signed with, shown on pages and written to
/// the topics.
pub fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '@'))
}

/// The tokens file's line for `name` with `role` and `token`: `name role sha256:<hex>`.
pub fn tokens_line(name: &str, role: Role, token: &str) -> String {
    format!("{name} {} sha256:{}", role.as_str(), hex(&digest(token)))
}

/// A tokens file: a `name role sha256:<hex>` line per analyst; `#` comments and blank
/// lines are skipped. Names are unique.
fn parse_tokens(text: &str) -> Result<Vec<([u8; 32], Analyst)>, String> {
    let mut out: Vec<([u8; 32], Analyst)> = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let bad = |why: &str| format!("line {}: {why} (want `name read|answer sha256:<64 hex>`)", n + 1);
        let fields: Vec<&str> = line.split_whitespace().collect();
        let [name, role, hash] = fields[..] else { return Err(bad("three fields")) };
        if !valid_name(name) {
            return Err(bad("a name is 1-64 of letters, digits and . _ - @"));
        }
        let role = Role::parse(role).ok_or_else(|| bad("the role is read or answer"))?;
        let hash = hash.strip_prefix("sha256:").ok_or_else(|| bad("the digest starts sha256:"))?;
        let digest = parse_hex32(hash).ok_or_else(|| bad("the digest is 64 hex digits"))?;
        if out.iter().any(|(_, a)| a.name == name) {
            return Err(bad(&format!("{name} is named twice")));
        }
        if out.iter().any(|(d, _)| *d == digest) {
            return Err(bad("a token is given twice"));
        }
        out.push((digest, Analyst { name: name.to_string(), role }));
    }
    Ok(out)
}

fn parse_hex32(s: &str) -> Option<[u8; 32]> {
    if s.len() != 64 || !s.is_ascii() {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, b) in out.iter_mut().enumerate() {
        *b = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

/// Wrong tokens per address: after [`Throttle::LIMIT`] within a minute, the address is
/// refused until that minute is over, before its token is even looked at.
#[derive(Default)]
struct Throttle {
    failures: Mutex<HashMap<IpAddr, (Instant, u32)>>,
}

impl Throttle {
    const LIMIT: u32 = 5;
    const WINDOW: Duration = Duration::from_secs(60);
    /// Addresses tracked at most: past it, those whose minute is over go (and if none
    /// has, all do: a flood of addresses must not grow the console's memory).
    const MAX_TRACKED: usize = 10_000;

    fn throttled(&self, peer: IpAddr, now: Instant) -> bool {
        let failures = self.failures.lock().expect("the throttle's lock is never poisoned");
        failures
            .get(&peer)
            .is_some_and(|(since, n)| *n >= Self::LIMIT && now.duration_since(*since) < Self::WINDOW)
    }

    fn failed(&self, peer: IpAddr, now: Instant) {
        let mut failures = self.failures.lock().expect("the throttle's lock is never poisoned");
        if failures.len() >= Self::MAX_TRACKED && !failures.contains_key(&peer) {
            failures.retain(|_, (since, _)| now.duration_since(*since) < Self::WINDOW);
            if failures.len() >= Self::MAX_TRACKED {
                failures.clear();
            }
        }
        let entry = failures.entry(peer).or_insert((now, 0));
        if now.duration_since(entry.0) >= Self::WINDOW {
            *entry = (now, 0);
        }
        entry.1 += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    const JSON: (&str, &str) = ("content-type", "application/json");
    const HERE: IpAddr = IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);

    fn access() -> Access {
        Access::with_analysts(&[("ana", Role::Answer, "s3cret"), ("rui", Role::Read, "r3ad")], false)
    }

    #[test]
    fn only_an_answering_analyst_from_this_site_may_give_a_verdict_signed_with_their_name() {
        let a = access();
        let bearer = ("authorization", "Bearer s3cret");
        let ana = Analyst { name: "ana".into(), role: Role::Answer };
        assert_eq!(a.answerer(&headers(&[JSON, bearer]), HERE), Ok(ana.clone()));
        assert_eq!(a.answerer(&headers(&[JSON]), HERE), Err(Denied::NoToken));
        let reader = headers(&[JSON, ("authorization", "Bearer r3ad")]);
        assert_eq!(a.answerer(&reader, HERE), Err(Denied::ReadRole));
        assert_eq!(
            a.answerer(&headers(&[("content-type", "application/x-www-form-urlencoded"), bearer]), HERE),
            Err(Denied::NotJson)
        );
        let here = [JSON, bearer, ("host", "127.0.0.1:9899"), ("origin", "http://127.0.0.1:9899")];
        assert_eq!(a.answerer(&headers(&here), HERE), Ok(ana.clone()));
        let there = [JSON, bearer, ("host", "127.0.0.1:9899"), ("origin", "https://evil.example")];
        assert_eq!(a.answerer(&headers(&there), HERE), Err(Denied::CrossSite));
        for site in ["cross-site", "same-site"] {
            let fetched = [JSON, bearer, ("sec-fetch-site", site), ("origin", "null")];
            assert_eq!(a.answerer(&headers(&fetched), HERE), Err(Denied::CrossSite), "{site}");
        }
        // The console's own page under its no-referrer policy: the browser vouches.
        let own = [JSON, bearer, ("sec-fetch-site", "same-origin"), ("origin", "null")];
        assert_eq!(a.answerer(&headers(&own), HERE), Ok(ana.clone()));
        let unvouched = [JSON, bearer, ("host", "127.0.0.1:9899"), ("origin", "null")];
        assert_eq!(a.answerer(&headers(&unvouched), HERE), Err(Denied::CrossSite));
        // A signed-in browser's cookie, among others.
        let cookie = [JSON, ("cookie", "theme=dark; metapu_token=s3cret"), ("cookie", "x=1")];
        assert_eq!(a.answerer(&headers(&cookie), HERE), Ok(ana));
    }

    #[test]
    fn reading_needs_a_token_unless_anonymous_reads_are_on() {
        let a = access();
        assert_eq!(a.reader(&headers(&[]), HERE), Err(Denied::NoToken));
        let rui = a.reader(&headers(&[("authorization", "Bearer r3ad")]), HERE).unwrap();
        assert_eq!(rui.map(|r| r.name), Some("rui".to_string()));
        let open = Access::with_analysts(&[("ana", Role::Answer, "s3cret")], true);
        assert_eq!(open.reader(&headers(&[]), HERE), Ok(None));
        // A wrong token is wrong even where reading needs none.
        assert_eq!(open.reader(&headers(&[("authorization", "Bearer nope")]), HERE), Err(Denied::WrongToken));
    }

    #[test]
    fn wrong_tokens_are_throttled_per_address_for_a_minute() {
        let a = access();
        let guess = headers(&[("authorization", "Bearer guess")]);
        let right = headers(&[("authorization", "Bearer s3cret")]);
        let (eve, bob): (IpAddr, IpAddr) = ("10.0.0.66".parse().unwrap(), "10.0.0.7".parse().unwrap());
        for _ in 0..Throttle::LIMIT {
            assert_eq!(a.who(&guess, eve), Err(Denied::WrongToken));
        }
        assert_eq!(a.who(&right, eve), Err(Denied::Throttled), "not even the right token, for now");
        assert!(a.who(&right, bob).unwrap().is_some(), "another address is not held back");
        // A minute later the address may try again.
        let later = Instant::now() + Throttle::WINDOW;
        assert!(!a.throttle.throttled(eve, later));
        a.throttle.failed(eve, later);
        assert!(!a.throttle.throttled(eve, later), "a new minute counts anew");
    }

    #[test]
    fn the_throttle_forgets_addresses_rather_than_grow_without_bound() {
        let t = Throttle::default();
        let now = Instant::now();
        for i in 0..Throttle::MAX_TRACKED as u32 + 10 {
            t.failed(IpAddr::V4(std::net::Ipv4Addr::from(i)), now);
        }
        assert!(t.failures.lock().unwrap().len() <= Throttle::MAX_TRACKED);
    }

    #[test]
    fn a_tokens_file_holds_digests_and_a_bad_line_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("none");
        let a = Access::load(None, &missing, false, false).unwrap();
        assert!(a.read_only());
        assert_eq!(a.answerer(&headers(&[JSON, ("authorization", "Bearer x")]), HERE), Err(Denied::ReadOnly));
        let file = dir.path().join("tokens");
        let (ana, rui) = (new_token(), new_token());
        assert_ne!(ana, rui);
        let text = format!(
            "# analysts\n{}\n\n{}\n",
            tokens_line("ana", Role::Answer, &ana),
            tokens_line("rui", Role::Read, &rui)
        );
        assert!(!text.contains(&ana), "the file holds no token");
        std::fs::write(&file, &text).unwrap();
        let a = Access::load(None, &file, false, false).unwrap();
        assert_eq!((a.analysts(), a.read_only()), (2, false));
        let bearer = |t: &str| headers(&[JSON, ("authorization", &format!("Bearer {t}"))]);
        assert_eq!(a.answerer(&bearer(&ana), HERE).map(|a| a.name), Ok("ana".into()));
        for bad in [
            "ana answer",
            "ana write sha256:00",
            &format!("ana answer md5:{}", "0".repeat(64)),
            &format!("a/b answer sha256:{}", "0".repeat(64)),
            &format!("{}\n{}", tokens_line("ana", Role::Read, "x"), tokens_line("ana", Role::Answer, "y")),
            &format!("{}\n{}", tokens_line("ana", Role::Read, "x"), tokens_line("bo", Role::Answer, "x")),
        ] {
            std::fs::write(&file, bad).unwrap();
            assert!(Access::load(None, &file, false, false).is_err(), "{bad}");
        }
        // The systemd credential wins over the file; read_only keeps everyone to reading.
        std::fs::write(&file, tokens_line("file", Role::Answer, "from-file")).unwrap();
        let creds = dir.path().join("creds");
        std::fs::create_dir(&creds).unwrap();
        std::fs::write(creds.join(CREDENTIAL), tokens_line("cred", Role::Answer, "from-credential")).unwrap();
        let a = Access::load(Some(&creds), &file, false, false).unwrap();
        assert_eq!(a.answerer(&bearer("from-credential"), HERE).map(|a| a.name), Ok("cred".into()));
        assert_eq!(a.answerer(&bearer("from-file"), HERE), Err(Denied::WrongToken));
        let a = Access::load(Some(&creds), &file, true, false).unwrap();
        assert_eq!(a.answerer(&bearer("from-credential"), HERE), Err(Denied::ReadOnly));
    }
}
