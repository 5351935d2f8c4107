//! `make package-test`: the .deb's three units on one host, as an operator installs them:
//! each unit's `ExecStartPre` and `ExecStart` from the unpacked package
//! (`METAPU_PACKAGED_ROOT`), all on the package's own `/etc/metapu/metapu.toml` (its
//! listens as shipped) with only what a site must set added: the brokers, the sensor's
//! interface and devices. All three start, each answers on its own port, and each stops
//! cleanly on SIGTERM.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::*;
use metapu::daemon::config::{DaemonConfig, Sources};

const UNITS: [&str; 3] = ["metapu.service", "metapu-sense.service", "metapu-console.service"];

/// The unit's `key=` lines (`ExecStartPre`, `ExecStart`) as argument lists.
fn exec_lines(unit: &str, key: &str) -> Vec<Vec<String>> {
    unit.lines()
        .filter_map(|l| l.strip_prefix(key)?.strip_prefix('='))
        .map(|l| l.split_whitespace().map(str::to_string).collect())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "make package-test runs it on the unpacked package"]
async fn packaged_units_run_together_on_one_host() {
    let tree = PathBuf::from(
        std::env::var("METAPU_PACKAGED_ROOT")
            .expect("METAPU_PACKAGED_ROOT: the unpacked .deb (make package-test)"),
    );
    let bin = tree.join("usr/bin/metapu");
    let packaged = tree.join("etc/metapu/metapu.toml");
    let shipped = DaemonConfig::load(&Sources { file: Some(packaged.clone()), ..Sources::default() })
        .expect("the packaged configuration loads");
    let broker = Broker::start();
    let dir = tempfile::tempdir().unwrap();
    let devices = dir.path().join("devices.csv");
    std::fs::write(&devices, "loopback,00:00:00:00:00:00\n").unwrap();
    // The package's file with what a site must add: its brokers (and, here, the
    // unpacked model's path), the sensor's interface and devices. The listens stay as
    // shipped.
    let mut site = shipped.clone();
    site.kafka.brokers = broker.bootstrap();
    site.model.path = tree.join("usr/share/metapu/models/iot-default.safetensors");
    site.sensor.interface = "lo".into();
    site.sensor.devices = devices.clone();
    let config = dir.path().join("metapu.toml");
    std::fs::write(&config, site.to_toml()).unwrap();
    let listens = [&site.http.listen, &site.sensor.listen, &site.console.listen];
    assert_eq!(listens, ["127.0.0.1:9898", "127.0.0.1:9897", "127.0.0.1:9899"]);

    let mut running = Vec::new();
    for name in UNITS {
        let unit = std::fs::read_to_string(tree.join("usr/lib/systemd/system").join(name)).unwrap();
        let run = |args: &[String]| {
            let mut c = Command::new(&bin);
            c.env_clear().env("PATH", "/usr/bin:/bin").args(&args[1..]).arg("--config").arg(&config);
            c
        };
        for pre in exec_lines(&unit, "ExecStartPre") {
            let out = run(&pre).output().unwrap();
            assert!(out.status.success(), "{name}: {pre:?}: {}", String::from_utf8_lossy(&out.stderr));
        }
        let [start] = &exec_lines(&unit, "ExecStart")[..] else { panic!("{name}: one ExecStart") };
        let log = dir.path().join(format!("{name}.log"));
        let child =
            run(start).stdout(Stdio::null()).stderr(std::fs::File::create(&log).unwrap()).spawn().unwrap();
        running.push((name, KillOnDrop(child), log));
    }

    // Each answers on its own port, all at once.
    let http = reqwest::Client::new();
    for listen in listens {
        let until = Instant::now() + Duration::from_secs(60);
        loop {
            let answer = http.get(format!("http://{listen}/healthz")).send().await;
            if answer.is_ok_and(|r| r.status().is_success()) {
                break;
            }
            for (name, child, log) in &mut running {
                if let Some(status) = child.0.try_wait().unwrap() {
                    panic!("{name} exited ({status}): {}", std::fs::read_to_string(log).unwrap_or_default());
                }
            }
            assert!(Instant::now() < until, "nothing answers on {listen}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    for (name, mut child, log) in running {
        signal(child.0.id(), "-TERM");
        let status = child.0.wait().unwrap();
        assert!(
            status.success(),
            "{name}: exit {status}: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
    }
}
