//! The console at a large site's size: 1,000 devices, 10,000 incidents (five events
//! each, shaped as a real camera's: traffic, peers by name, features in words) and a
//! full ring of adaptation points per device, served over HTTP on loopback. Prints
//! how long each page and API answer takes (median and slowest of repeated requests)
//! and what the desk took to fill. Target: every page under 300 ms.

use std::time::{Duration, Instant};

#[allow(dead_code, unused_imports)] // the broker-backed benches' helpers
mod common;

use metapu::console::desk::Desk;
use serde_json::{json, Value};

const DEVICES: usize = 1_000;
const INCIDENTS: usize = 10_000;
/// Adaptation points per device: its ring's size (the desk keeps 2,048).
const POINTS: usize = 2_048;
const REPEATS: usize = 15;

fn template() -> Value {
    let text = include_str!("console_incident.json");
    serde_json::from_str(text).expect("the template is an incident event")
}

fn fill() -> Desk {
    let mut desk = Desk::new(INCIDENTS * 2);
    let base = template();
    let start = 1.7e9;
    for i in 0..INCIDENTS {
        let device = format!("device-{:04}", i % DEVICES);
        let opened = start + (i as f64) * 60.0;
        for (k, event) in ["opened", "updated", "updated", "updated", "closed"].iter().enumerate() {
            // Every tenth incident is still open.
            if *event == "closed" && i % 10 == 0 {
                continue;
            }
            let mut v = base.clone();
            v["event"] = json!(event);
            v["incident_id"] = json!(format!("{i:032x}"));
            v["device"] = json!(device);
            v["opened_at"] = json!(opened);
            v["first_ts"] = json!(opened);
            v["last_ts"] = json!(opened + 30.0 * k as f64);
            v["time"] = json!(opened + 30.0 * k as f64);
            v["severity"] = json!(["low", "medium", "high", "critical"][i % 4]);
            if *event == "closed" {
                v["resolution"] = json!("quiet");
            }
            desk.incident_event(v.to_string().as_bytes()).expect("an incident event");
        }
    }
    for d in 0..DEVICES {
        for p in 0..POINTS {
            let ts = start + (p as f64) * 300.0;
            let update = json!({
                "device": format!("device-{d:04}"), "prior": 0.9, "attack_share": 0.1,
                "positive_window": 50, "unlabeled_window": 200, "time": ts, "model_version": "bench",
                "ts": ts, "scored": (p as u64 + 1) * 40, "alerted": (p as u64 + 1) / 3,
            });
            desk.prior_update(update.to_string().as_bytes()).expect("a prior update");
        }
    }
    desk
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let started = Instant::now();
    let desk = fill();
    let filled_s = started.elapsed().as_secs_f64();
    println!(
        "## Console: {DEVICES} devices, {} incidents ({} events), {} prior updates",
        desk.incident_count(),
        INCIDENTS * 5 - INCIDENTS / 10,
        DEVICES * POINTS
    );
    println!("\nfilled in {filled_s:.1} s; resident memory {:.0} MiB\n", common::rss_mib(std::process::id()));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let (addr, server) = metapu::console::serve_read_only(desk, "127.0.0.1:0", async {
        let _ = stopped.await;
    })
    .await
    .expect("serves");
    let client = reqwest::Client::new();
    let id = format!("{:032x}", 4_321);
    let pages = [
        ("incidents page", "/".to_string()),
        ("incidents page, one device", "/?device=device-0042".to_string()),
        ("incidents page, high severity", "/?severity=high".to_string()),
        ("incident page", format!("/incidents/{id}")),
        ("devices page", "/devices".to_string()),
        ("device page", "/devices/device-0321".to_string()),
        ("API: incidents", "/api/incidents".to_string()),
        ("API: open incidents", "/api/incidents?state=open".to_string()),
        ("API: incident", format!("/api/incidents/{id}")),
        ("API: device", "/api/devices/device-0321".to_string()),
    ];
    println!("| answer | median ms | slowest ms | bytes |");
    println!("|---|---:|---:|---:|");
    for (name, path) in pages {
        let mut times = Vec::with_capacity(REPEATS);
        let mut bytes = 0;
        for _ in 0..REPEATS {
            let t = Instant::now();
            let r = client.get(format!("http://{addr}{path}")).send().await.expect("answers");
            assert!(r.status().is_success(), "{path}: {}", r.status());
            bytes = r.bytes().await.expect("a body").len();
            times.push(t.elapsed());
        }
        times.sort();
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        println!("| {name} | {:.1} | {:.1} | {bytes} |", ms(times[REPEATS / 2]), ms(times[REPEATS - 1]));
    }
    let _ = stop.send(());
    let _ = server.await;
}
