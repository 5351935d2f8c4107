//! Incidents on the records' own clock, through Kafka and the daemon: the same records
//! sent at their own pace (1×) and all at once (as a replay at over 1,000× or a backlog
//! after an outage would arrive) give the same incidents — ids, records, anomalous —
//! and the same reopening of an incident that closed quietly a moment before, with
//! every core kept busy by a load generator.

use std::time::{Duration, Instant};

use super::mock::mock;
use crate::support::*;
use metapu::daemon;
use metapu::data::Label;

/// Two devices, 20 s of their time: known-normal records, normal traffic, an attack
/// of 2.5 s on each (at different times), normal traffic again for over `quiet_s`; on
/// cam-1 the attack comes back for 2.5 s after its incident closed (within `reopen_s`).
fn records() -> Vec<(String, f64, Vec<f32>, bool)> {
    let fx = fixture();
    let (normal, attack) = (fx.rows(1, Label::Positive), fx.rows(1, Label::Negative));
    let mut out = Vec::new();
    for i in 0..400usize {
        let t = i as f64 * 0.05;
        for (d, device) in ["cam-1", "cam-2"].iter().enumerate() {
            let attacks: &[f64] = if d == 0 { &[3.0, 9.5] } else { &[7.0] };
            let under_attack = attacks.iter().any(|a| (*a..a + 2.5).contains(&t));
            let row =
                if under_attack { &attack[i % attack.len()] } else { &normal[(i + 7 * d) % normal.len()] };
            out.push((device.to_string(), 1.7e9 + t, row.clone(), i < 20));
        }
    }
    out
}

/// The incidents a fresh daemon raises on the records, sent at `pace` (their own
/// time, in wall-clock seconds per record second; 0: all at once).
async fn incidents(pace: f64) -> Vec<(String, String, String, u64, u64)> {
    let cluster = mock("ev", 1);
    let boot = cluster.bootstrap_servers();
    let mut cfg = daemon_config(&boot, "ev");
    cfg.incidents.quiet_s = 2;
    cfg.incidents.reopen_s = 60;
    cfg.incidents.update_interval_s = 1;
    cfg.adaptation.interval_ms = 2_000;
    // The test is of time, not of the model: a lenient threshold, so that the normal
    // traffic after an attack closes its incident whatever few normal records the
    // fixture model (which differs between machines of different CPUs) calls
    // anomalous at 0.5. The attack's records still score far below it.
    cfg.model.threshold = 0.2;
    let daemon = daemon::start(cfg.clone()).await.unwrap();
    let p = producer(&boot);
    let records = records();
    let (t0, started) = (records[0].1, Instant::now());
    for (device, ts, row, normal) in &records {
        let due = Duration::from_secs_f64((ts - t0) * pace);
        if let Some(wait) = due.checked_sub(started.elapsed()) {
            tokio::time::sleep(wait).await;
        }
        send_record(&p, "ev.features", device, *ts, row, *normal).await;
    }
    let closed = |m: &[(Option<String>, Vec<u8>)]| {
        json_values(m).iter().filter(|e| e["event"] == "closed").count() >= 3
    };
    let events = json_values(&read_topic(&boot, "ev.incidents", Duration::from_secs(30), closed));

    stop(daemon).await;
    let mut out: Vec<_> = events
        .iter()
        .filter(|e| ["opened", "reopened", "closed"].contains(&e["event"].as_str().unwrap_or_default()))
        .map(|e| {
            (
                e["device"].as_str().unwrap().to_string(),
                e["event"].as_str().unwrap().to_string(),
                e["incident_id"].as_str().unwrap().to_string(),
                e["records"].as_u64().unwrap(),
                e["anomalous"].as_u64().unwrap(),
            )
        })
        .collect();
    out.sort();
    out
}

/// Both halves run while every core is kept busy: a slow machine decides as a fast one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_at_any_speed_raises_the_incidents_live_traffic_raised() {
    let _busy = load::Load::every_core();
    let live = incidents(1.0).await;
    let opened = live.iter().filter(|e| e.1 == "opened").count();
    assert_eq!(opened, 2, "one incident per device: {live:?}");
    let reopened: Vec<_> = live.iter().filter(|e| e.1 == "reopened").collect();
    assert!(
        matches!(reopened.as_slice(), [r] if r.0 == "cam-1"
            && live.iter().any(|o| o.1 == "opened" && o.0 == "cam-1" && o.2 == r.2)),
        "cam-1's attack came back within reopen_s: its incident reopened under its id: {live:?}"
    );
    assert_eq!(live.iter().filter(|e| e.1 == "closed").count(), 3, "each closed on quiet: {live:?}");
    let replayed = incidents(0.0).await;
    assert_eq!(replayed, live, "all at once");
}
