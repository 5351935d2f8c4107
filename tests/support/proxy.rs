//! A TCP proxy in front of the broker that can be switched off: while off, its port
//! refuses connections and every open connection is cut, which is what clients see
//! when a broker restarts (the bundled broker keeps its data only in memory, so the
//! outage is made here rather than by restarting it).

use std::io::ErrorKind;
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

pub struct Proxy {
    pub port: u16,
    up: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    open: Arc<Mutex<Vec<TcpStream>>>,
}

impl Proxy {
    pub fn start(port: u16, target: u16) -> Self {
        let proxy = Self {
            port,
            up: Arc::new(AtomicBool::new(true)),
            stop: Arc::new(AtomicBool::new(false)),
            open: Arc::new(Mutex::new(Vec::new())),
        };
        let (up, stop, open) = (Arc::clone(&proxy.up), Arc::clone(&proxy.stop), Arc::clone(&proxy.open));
        thread::spawn(move || {
            let mut listener: Option<TcpListener> = None;
            while !stop.load(Ordering::Relaxed) {
                if !up.load(Ordering::Relaxed) {
                    listener = None; // the port refuses connections
                    thread::sleep(Duration::from_millis(20));
                    continue;
                }
                let l = match &listener {
                    Some(l) => l,
                    None => match TcpListener::bind(("127.0.0.1", port)) {
                        Ok(l) => {
                            l.set_nonblocking(true).unwrap();
                            listener.insert(l)
                        }
                        Err(_) => {
                            thread::sleep(Duration::from_millis(20));
                            continue;
                        }
                    },
                };
                match l.accept() {
                    Ok((client, _)) => {
                        client.set_nonblocking(false).unwrap();
                        let Ok(server) = TcpStream::connect(("127.0.0.1", target)) else { continue };
                        let mut guard = open.lock().unwrap();
                        guard.push(client.try_clone().unwrap());
                        guard.push(server.try_clone().unwrap());
                        pipe(client.try_clone().unwrap(), server.try_clone().unwrap());
                        pipe(server, client);
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => thread::sleep(Duration::from_millis(5)),
                    Err(_) => thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        proxy
    }

    /// Cut every connection and refuse new ones.
    pub fn down(&self) {
        self.up.store(false, Ordering::Relaxed);
        for s in self.open.lock().unwrap().drain(..) {
            let _ = s.shutdown(Shutdown::Both);
        }
    }

    pub fn up(&self) {
        self.up.store(true, Ordering::Relaxed);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        self.down();
    }
}

fn pipe(mut from: TcpStream, mut to: TcpStream) {
    thread::spawn(move || {
        let _ = std::io::copy(&mut from, &mut to);
        let _ = to.shutdown(Shutdown::Both);
        let _ = from.shutdown(Shutdown::Both);
    });
}
