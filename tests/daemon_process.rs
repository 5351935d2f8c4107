//! The real `metapu run` process: systemd notifications (READY, WATCHDOG, STOPPING)
//! over a notify socket, SIGHUP reload, SIGTERM → clean exit 0.

mod support;

use std::os::unix::net::UnixDatagram;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::*;

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

/// `metapu ARGS…` with a throwaway HTTP port; (success, stderr).
fn metapu(args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_metapu"))
        .args(args)
        .env("METAPU__HTTP__LISTEN", "127.0.0.1:0")
        .env("METAPU__KAFKA__BROKERS", "127.0.0.1:1")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn a_bad_model_stops_start_up_with_a_clear_message() {
    let dir = tempfile::tempdir().unwrap();
    let good = std::fs::read(&fixture().model_path).unwrap();
    let write = |name: &str, bytes: &[u8]| {
        let path = dir.path().join(name);
        std::fs::write(&path, bytes).unwrap();
        path.to_string_lossy().into_owned()
    };
    let corrupt = write("corrupt.safetensors", b"\x13\x37 this is not a model");
    let truncated = write("truncated.safetensors", &good[..good.len() / 2]);
    let two_features = write("two.safetensors", &good);
    let cases: Vec<(Vec<&str>, String)> = vec![
        (
            vec!["--model", "/nonexistent/model.safetensors"],
            "cannot read model file /nonexistent/model.safetensors".into(),
        ),
        (vec!["--model", &corrupt], format!("model file {corrupt} is corrupt")),
        (vec!["--model", &truncated], format!("model file {truncated} is corrupt")),
        // The configuration says 115 features (N-BaIoT); this model takes 2.
        (
            vec!["--model", &two_features],
            format!("model {two_features} takes 2 features per record; the configuration (model.features) says 115"),
        ),
    ];
    for (args, expected) in cases {
        let (ok, err) = metapu(&[&["run"], args.as_slice()].concat());
        assert!(!ok, "{args:?} started");
        assert!(err.contains(&expected), "{args:?}: {err}");
        // Each cause once, not repeated by the error chain.
        assert_eq!(err.matches(&expected).count(), 1, "{args:?}: {err}");
    }
    let (_, err) = metapu(&["run", "--model", "/nonexistent/model.safetensors"]);
    assert_eq!(err.matches("No such file or directory").count(), 1, "{err}");
}

#[test]
fn configuration_faults_name_the_key_in_check_config_and_at_start_up() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        ("[windows]\npositve = 5\n", "unknown field `positve`"),
        ("[windows]\npositive = \"fifty\"\n", "windows.positive"),
        ("[scoring]\nmax_per_device = -1\n", "scoring.max_per_device"),
        ("[model]\nthreshold = 2.0\n", "model.threshold: must lie in [0, 1]"),
        ("[kafka]\nauto_offset_reset = \"newest\"\n", "kafka.auto_offset_reset"),
        ("[colour]\nhue = 1\n", "unknown field `colour`"),
        ("[windows\n", "TOML parse error"),
    ];
    for (i, (text, expected)) in cases.iter().enumerate() {
        let path = dir.path().join(format!("bad-{i}.toml"));
        std::fs::write(&path, text).unwrap();
        let path = path.to_string_lossy();
        for command in ["check-config", "run"] {
            let (ok, err) = metapu(&[command, "--config", &path]);
            assert!(!ok, "{command} accepted {text:?}");
            assert!(err.contains(expected), "{command} {text:?}: {err}");
        }
    }
    let (ok, err) = metapu(&["check-config"]);
    assert!(ok, "the defaults are valid: {err}");
}
