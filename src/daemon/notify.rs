//! systemd notifications (sd_notify protocol) without libsystemd: one datagram to
//! `$NOTIFY_SOCKET`. A no-op when not started by systemd.

use std::time::Duration;

pub fn notify(state: &str) {
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else { return };
    let Ok(socket) = std::os::unix::net::UnixDatagram::unbound() else { return };
    // A full queue (Linux keeps 10 datagrams by default) must not stop the service loop:
    // a watchdog ping is dropped (the next one follows; a lost one is what the watchdog
    // is for), a change of state (READY, RELOADING, STOPPING) waits for room at most a
    // few seconds.
    let _ = match state.starts_with("WATCHDOG=") {
        true => socket.set_nonblocking(true),
        false => socket.set_write_timeout(Some(Duration::from_secs(5))),
    };
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
