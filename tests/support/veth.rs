//! A network namespace with one end of a veth pair in it (root only): the sensor's tests
//! and its benchmark send real frames out of the namespace's end and capture the other
//! (`outside`), which stays where the sensor and the broker run. Deleted on drop.

use std::os::unix::fs::MetadataExt;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

pub struct Veth {
    pub netns: String,
    pub outside: String,
    pub inside: String,
}

impl Veth {
    /// Why not, where namespaces cannot be made (not root, no `ip`).
    pub fn make() -> Result<Self, String> {
        static N: AtomicU32 = AtomicU32::new(0);
        // /proc/self belongs to the process's effective user.
        if std::fs::metadata("/proc/self").map(|m| m.uid()).unwrap_or(u32::MAX) != 0 {
            return Err("it needs root for a network namespace".into());
        }
        let tag = format!("{}{}", std::process::id() % 100_000, N.fetch_add(1, Ordering::Relaxed));
        let v =
            Self { netns: format!("mpu-{tag}"), outside: format!("mpo{tag}"), inside: format!("mpi{tag}") };
        ip(&["netns", "add", &v.netns]).map_err(|e| format!("cannot make a network namespace ({e})"))?;
        let setup = || -> Result<(), String> {
            ip(&["link", "add", &v.outside, "type", "veth", "peer", "name", &v.inside])?;
            ip(&["link", "set", &v.inside, "netns", &v.netns])?;
            // No IPv6 autoconfiguration chatter on either end: the link carries only
            // what is sent.
            sysctl(None, &format!("net.ipv6.conf.{}.disable_ipv6=1", v.outside))?;
            sysctl(Some(&v.netns), "net.ipv6.conf.all.disable_ipv6=1")?;
            ip(&["link", "set", &v.outside, "up"])?;
            ip(&["-n", &v.netns, "link", "set", &v.inside, "up"])
        };
        match setup() {
            Ok(()) => Ok(v),
            Err(e) => panic!("setting up {}: {e}", v.netns),
        }
    }
}

pub fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip").args(args).output().map_err(|e| format!("ip: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("ip {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim()))
    }
}

fn sysctl(netns: Option<&str>, setting: &str) -> Result<(), String> {
    let out = match netns {
        Some(n) => Command::new("ip").args(["netns", "exec", n, "sysctl", "-qw", setting]).output(),
        None => Command::new("sysctl").args(["-qw", setting]).output(),
    }
    .map_err(|e| format!("sysctl: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("sysctl {setting}: {}", String::from_utf8_lossy(&out.stderr).trim()))
    }
}

impl Drop for Veth {
    fn drop(&mut self) {
        // Deleting one end deletes the pair; the namespace goes with its end.
        let _ = ip(&["link", "del", &self.outside]);
        let _ = ip(&["netns", "del", &self.netns]);
    }
}
