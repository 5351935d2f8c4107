//! The real `metapu run` process: systemd notifications (READY, WATCHDOG, STOPPING)
//! over a notify socket, SIGHUP reload, SIGTERM → clean exit 0.

use std::os::unix::net::UnixDatagram;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::*;

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
    // Ready once the group's first assignment is restored (READY=1 comes before it: a
    // long restore must not run into systemd's start timeout).
    let ready_by = Instant::now() + Duration::from_secs(30);
    while http_get(addr, "/readyz").0 != 200 && Instant::now() < ready_by {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(http_get(addr, "/readyz").0, 200, "never ready");

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

/// `key=value` pairs of the demo's one-line scorecard.
fn scorecard_fields(line: &str) -> std::collections::HashMap<String, String> {
    line.split_whitespace()
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// `make demo` as a user runs it, shorter: the shipped model, the bundled broker, the
/// simulated fleet and both real devices; Ctrl-C ends it with the scorecard and no
/// process left behind.
#[test]
fn the_demo_detects_every_attacked_device_without_false_incidents_and_cleans_up_on_ctrl_c() {
    use std::io::BufRead;
    let work = tempfile::tempdir().unwrap();
    let (port, http_port) = (free_port(), free_port());
    let root = env!("CARGO_MANIFEST_DIR");
    let mut child = KillOnDrop(
        Command::new(env!("CARGO_BIN_EXE_metapu"))
            .current_dir(root)
            .args(["demo", "--attack-after", "20", "--seed", "3", "--port", &port.to_string()])
            .args(["--http", &format!("127.0.0.1:{http_port}")])
            .arg("--work")
            .arg(work.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap(),
    );
    let pid = child.0.id();
    let (tx, rx) = std::sync::mpsc::channel();
    let stdout = child.0.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    let mut lines = Vec::new();
    let mut sending_since = None;
    let limit = Instant::now() + Duration::from_secs(240);
    // Ctrl-C 50 s after the traffic starts: the attacks begin at 20–27.5 s.
    while sending_since.is_none_or(|t: Instant| t.elapsed() < Duration::from_secs(50)) {
        assert!(Instant::now() < limit, "the demo did not start sending:\n{}", lines.join("\n"));
        if let Ok(Some(status)) = child.0.try_wait() {
            lines.extend(rx.try_iter());
            panic!("the demo ended ({status}) before it was stopped:\n{}", lines.join("\n"));
        }
        if let Ok(line) = rx.recv_timeout(Duration::from_millis(200)) {
            if line.contains("records to send") {
                sending_since = Some(Instant::now());
            }
            lines.push(line);
        }
    }
    signal(pid, "-INT");
    let status = child.0.wait().unwrap();
    lines.extend(rx.try_iter());
    let text = lines.join("\n");
    assert!(status.success(), "exit status {status}:\n{text}");

    let card = lines
        .iter()
        .find(|l| l.starts_with("demo-scorecard:"))
        .unwrap_or_else(|| panic!("no scorecard:\n{text}"));
    let f = scorecard_fields(card);
    let (detected, attacked) = f["detected"].split_once('/').unwrap();
    let (detected, attacked): (usize, usize) = (detected.parse().unwrap(), attacked.parse().unwrap());
    let already_open: usize = f["already_open"].parse().unwrap();
    // Four simulated devices, the Danmini doorbell and the infected capture: every one
    // has an incident. The real ones may have had it open on benign traffic since
    // their first seconds (issue #37's false alarms on real traffic): at most those two.
    assert_eq!(attacked, 6, "{card}");
    assert_eq!(f["missed"], "0", "{card}");
    assert_eq!(detected + already_open, 6, "{card}");
    assert!(already_open <= 2, "{card}");
    assert_eq!(f["false_incidents_clean"], "0", "{card}");
    let records: f64 = f["median_records_to_incident"].parse().unwrap_or(f64::INFINITY);
    assert!(records <= 20.0, "{card}");
    assert!(f["records_per_s"].parse::<f64>().is_ok_and(|r| r > 10.0), "{card}");
    // What the analyst saw: incidents in words, and the table with the ground truth.
    assert!(text.contains("INCIDENT OPENED"), "{text}");
    assert!(text.contains("           1. "), "no feature in words:\n{text}");
    assert!(text.contains("ground truth") && text.contains("attacked: real syn scan since 20 s"), "{text}");
    // Nothing left running: the broker and the daemon's HTTP server are gone.
    for p in [port, http_port] {
        assert!(
            std::net::TcpStream::connect(("127.0.0.1", p)).is_err(),
            "port {p} still open after the demo"
        );
    }
}
