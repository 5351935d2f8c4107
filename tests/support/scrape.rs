//! Reading a /metrics page over plain HTTP (the tests' and the benchmarks' scrapes).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// GET a path over plain HTTP/1.1 and return (status, body).
pub fn http_get(addr: std::net::SocketAddr, path: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let status = text.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    (status, body)
}

/// Value of an unlabeled-or-labeled sample in a Prometheus text body.
pub fn metric(body: &str, name_and_labels: &str) -> Option<f64> {
    body.lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|l| l.strip_prefix(name_and_labels).and_then(|rest| rest.trim().parse().ok()))
}
