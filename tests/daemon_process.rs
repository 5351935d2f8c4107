//! The real `metapu run` process: systemd notifications (READY, WATCHDOG, STOPPING)
//! over a notify socket, SIGHUP reload, SIGTERM → clean exit 0.

mod support;

use std::os::unix::net::UnixDatagram;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::*;

fn signal(pid: u32, sig: &str) {
    let ok = Command::new("kill").args([sig, &pid.to_string()]).status().unwrap().success();
    assert!(ok, "kill {sig} {pid}");
}

fn notifications(socket: &UnixDatagram, until: &str, limit: Duration) -> Vec<String> {
    let started = Instant::now();
    let mut got = Vec::new();
    let mut buf = [0u8; 256];
    while started.elapsed() < limit && !got.iter().any(|m: &String| m.contains(until)) {
        if let Ok(n) = socket.recv(&mut buf) {
            got.push(String::from_utf8_lossy(&buf[..n]).into_owned());
        }
    }
    got
}

#[test]
fn the_daemon_process_speaks_sd_notify_reloads_on_hup_and_exits_cleanly_on_term() {
    let broker = Broker::start();
    let dir = tempfile::tempdir().unwrap();
    let http_port = free_port();
    let mut cfg = daemon_config(&broker.bootstrap(), "proc");
    cfg.http.listen = format!("127.0.0.1:{http_port}");
    cfg.shutdown.timeout_s = 20;
    let config = write_config(&cfg, dir.path());
    let socket_path = dir.path().join("notify.sock");
    let socket = UnixDatagram::bind(&socket_path).unwrap();
    socket.set_read_timeout(Some(Duration::from_millis(200))).unwrap();

    let mut child = KillOnDrop(
        Command::new(env!("CARGO_BIN_EXE_metapu"))
            .args(["run", "--config"])
            .arg(&config)
            .env("NOTIFY_SOCKET", &socket_path)
            .env("WATCHDOG_USEC", "400000")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let pid = child.0.id();
    let addr: std::net::SocketAddr = format!("127.0.0.1:{http_port}").parse().unwrap();

    let ready = notifications(&socket, "READY=1", Duration::from_secs(30));
    assert!(ready.iter().any(|m| m == "READY=1"), "no READY=1: {ready:?}");
    let pings = notifications(&socket, "WATCHDOG=1", Duration::from_secs(5));
    assert!(pings.iter().any(|m| m == "WATCHDOG=1"), "no watchdog ping: {pings:?}");
    assert_eq!(http_get(addr, "/readyz").0, 200);

    signal(pid, "-HUP");
    let started = Instant::now();
    while metric(&http_get(addr, "/metrics").1, "metapu_model_reloads_total{result=\"ok\"}") != Some(1.0) {
        assert!(started.elapsed() < Duration::from_secs(10), "SIGHUP did not reload the model");
        std::thread::sleep(Duration::from_millis(100));
    }

    signal(pid, "-TERM");
    let stopping = notifications(&socket, "STOPPING=1", Duration::from_secs(20));
    assert!(stopping.iter().any(|m| m == "STOPPING=1"), "no STOPPING=1: {stopping:?}");
    let started = Instant::now();
    let status = loop {
        if let Some(s) = child.0.try_wait().unwrap() {
            break s;
        }
        assert!(started.elapsed() < Duration::from_secs(25), "did not exit after SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "exit status {status}");
}

#[test]
fn a_missing_model_stops_start_up_with_a_clear_message() {
    let out = Command::new(env!("CARGO_BIN_EXE_metapu"))
        .args(["run", "--model", "/nonexistent/model.safetensors"])
        .env("METAPU__HTTP__LISTEN", "127.0.0.1:0")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cannot read model file /nonexistent/model.safetensors"), "{err}");
}
