//! What every answer of the console goes through: the request must name the console
//! by a name it answers to (`Host`), so that a page of another site that rebinds its
//! DNS name to the console's address reads nothing; every answer carries headers that
//! keep it out of frames, scripts of other origins and other sites' referrers.

use std::net::{IpAddr, SocketAddr};

use axum::extract::{ConnectInfo, Request, State};
use axum::http::{header, HeaderName, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

/// The address a request came from (the TCP peer; unspecified where none is known).
#[derive(Debug, Clone, Copy)]
pub struct Peer(pub IpAddr);

impl Peer {
    /// Where none is known (a request that did not come over a socket: tests).
    pub const UNKNOWN: Peer = Peer(IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED));
}

/// The names the console answers to.
#[derive(Debug, Clone, Default)]
pub struct Hosts {
    /// Lower-case names an operator added (`console.allowed_hosts`), without ports.
    names: Vec<String>,
}

impl Hosts {
    pub fn new(names: &[String]) -> Self {
        Self { names: names.iter().map(|n| n.trim().to_ascii_lowercase()).collect() }
    }

    /// May a request with this `Host` be answered? An address (`127.0.0.1:9899`,
    /// `[::1]:9899`) always may: a browser sends the name it resolved, so a rebound name
    /// never arrives as an address. So may `localhost`, which a page of another site
    /// cannot rebind, and the operator's names.
    pub fn allows(&self, host: &str) -> bool {
        let name = match host.strip_prefix('[') {
            Some(v6) => {
                return v6.split_once(']').is_some_and(|(a, _)| a.parse::<std::net::Ipv6Addr>().is_ok())
            }
            None => host.rsplit_once(':').map_or(host, |(n, _)| n),
        };
        name.parse::<std::net::Ipv4Addr>().is_ok()
            || name.eq_ignore_ascii_case("localhost")
            || self.names.iter().any(|n| name.eq_ignore_ascii_case(n))
    }
}

/// Paths a scraper or a health check reaches by whatever name it was given: they say
/// nothing of incidents or devices.
const ANY_HOST: [&str; 2] = ["/healthz", "/metrics"];

/// The content security policy: scripts and styles only from the console itself, no
/// inline script, no frames of it anywhere, forms only to itself.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
                   connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// The Host check, the peer's address for the handlers, and the security headers.
pub async fn guard(State(hosts): State<Hosts>, mut request: Request, next: Next) -> Response {
    let peer =
        request.extensions().get::<ConnectInfo<SocketAddr>>().map_or(Peer::UNKNOWN, |c| Peer(c.0.ip()));
    request.extensions_mut().insert(peer);
    let peer = peer.0;
    let host = request.headers().get(header::HOST).and_then(|h| h.to_str().ok());
    let mut response = if ANY_HOST.contains(&request.uri().path()) || host.is_some_and(|h| hosts.allows(h)) {
        next.run(request).await
    } else {
        tracing::warn!(%peer, host = host.unwrap_or("(none)"), "console: a request for another host name refused");
        (
            StatusCode::MISDIRECTED_REQUEST,
            "this console does not answer to that host name (console.allowed_hosts)\n",
        )
            .into_response()
    };
    let headers = response.headers_mut();
    for (name, value) in [
        (header::CONTENT_SECURITY_POLICY, CSP),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::REFERRER_POLICY, "no-referrer"),
        (HeaderName::from_static("cross-origin-opener-policy"), "same-origin"),
        (HeaderName::from_static("cross-origin-resource-policy"), "same-origin"),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    // What an analyst reads is not kept by caches or the browser's history.
    headers.entry(header::CACHE_CONTROL).or_insert(HeaderValue::from_static("no-store"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_localhost_and_the_operator_s_names_are_answered() {
        let hosts = Hosts::new(&["Console.Example".to_string()]);
        for ok in
            ["127.0.0.1:9899", "10.1.2.3", "[::1]:9899", "localhost:9899", "LOCALHOST", "console.example:443"]
        {
            assert!(hosts.allows(ok), "{ok}");
        }
        for refused in
            ["evil.example:9899", "127.0.0.1.evil.example", "[::1", "[evil]:80", "", "console.example.evil"]
        {
            assert!(!hosts.allows(refused), "{refused}");
        }
    }
}
