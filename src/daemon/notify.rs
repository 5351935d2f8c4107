//! systemd notifications (sd_notify protocol) without libsystemd: one datagram to
//! `$NOTIFY_SOCKET`. A no-op when not started by systemd.

use std::time::Duration;

pub fn notify(state: &str) {
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else { return };
    let Ok(socket) = std::os::unix::net::UnixDatagram::unbound() else { return };
    // Never wait on the reader: a full queue (Linux keeps 10 datagrams by default) would
    // otherwise stop the service loop, watchdog pings and all. A lost ping is what the
    // watchdog is for.
    let _ = socket.set_nonblocking(true);
    let bytes = path.as_encoded_bytes();
    let sent = if let Some(name) = bytes.strip_prefix(b"@") {
        // Abstract socket namespace.
        use std::os::linux::net::SocketAddrExt;
        std::os::unix::net::SocketAddr::from_abstract_name(name)
            .and_then(|a| socket.send_to_addr(state.as_bytes(), &a))
    } else {
        socket.send_to(state.as_bytes(), &path)
    };
    if let Err(e) = sent {
        tracing::debug!(error = %e, state, "sd_notify");
    }
}

/// Half the watchdog interval systemd asked for, if it asked.
pub fn watchdog_interval() -> Option<Duration> {
    let usec: u64 = std::env::var("WATCHDOG_USEC").ok()?.parse().ok()?;
    let pid_ok = std::env::var("WATCHDOG_PID")
        .ok()
        .and_then(|p| p.parse::<u32>().ok())
        .is_none_or(|p| p == std::process::id());
    (pid_ok && usec > 0).then(|| Duration::from_micros(usec / 2))
}
