//! What the analyst sees: the daemon's incident and prior events read back from the
//! broker (a thread of its own: the rdkafka consumer blocks), printed as they arrive,
//! and a periodic table of every device, its ground truth beside the daemon's view.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;
use std::sync::Arc;
use std::time::Duration;

use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};
use serde_json::Value;

use super::scorecard::DeviceLedger;

pub enum Event {
    Incident(Value),
    Prior { device: String, attack_share: f32 },
}

/// Reads `incidents` and `priors` from their start until `stop`; the daemon creates
/// them, so metadata is refreshed often until they appear.
pub fn watch(
    bootstrap: String,
    incidents: String,
    priors: String,
    out: Sender<Event>,
    stop: Arc<AtomicBool>,
) {
    let consumer: BaseConsumer = match ClientConfig::new()
        .set("bootstrap.servers", &bootstrap)
        .set("group.id", "metapu-demo-view")
        .set("topic.metadata.refresh.interval.ms", "1000")
        .create()
    {
        Ok(c) => c,
        Err(e) => {
            eprintln!("demo: cannot read the daemon's events: {e}");
            return;
        }
    };
    let mut tpl = TopicPartitionList::new();
    for t in [&incidents, &priors] {
        // Partition 0: the demo's topics are created with one partition.
        if let Err(e) = tpl.add_partition_offset(t, 0, Offset::Beginning) {
            eprintln!("demo: cannot read {t}: {e}");
            return;
        }
    }
    if let Err(e) = consumer.assign(&tpl) {
        eprintln!("demo: cannot read the daemon's events: {e}");
        return;
    }
    while !stop.load(Ordering::Relaxed) {
        let Some(Ok(m)) = consumer.poll(Duration::from_millis(200)) else { continue };
        let Ok(v) = serde_json::from_slice::<Value>(m.payload().unwrap_or_default()) else { continue };
        let event = if m.topic() == incidents {
            Event::Incident(v)
        } else {
            let (Some(device), Some(share)) = (v["device"].as_str(), v["attack_share"].as_f64()) else {
                continue;
            };
            Event::Prior { device: device.into(), attack_share: share as f32 }
        };
        if out.send(event).is_err() {
            return;
        }
    }
}

fn percent(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{:.0} %", 100.0 * v))
}

/// The device's ground truth at `now_s`, in words.
fn truth(d: &DeviceLedger, now_s: f64) -> String {
    match (&d.attack, d.attack_start_s()) {
        (Some(kind), Some(at)) if at <= now_s => format!("attacked: {kind} since {at:.0} s"),
        (Some(kind), Some(at)) => format!("clean until {at:.0} s ({kind})"),
        _ => "clean".into(),
    }
}

/// An incident's traffic, when its records carried packet context: the sentence, then
/// its top peers and ports with counts.
fn traffic_lines(v: &Value) -> String {
    let t = &v["traffic"];
    let Some(summary) = t["summary"].as_str() else { return String::new() };
    let counted = |key: &str| -> String {
        let items: Vec<String> = t[key]
            .as_array()
            .into_iter()
            .flatten()
            .take(3)
            .map(|c| format!("{} ({})", c["value"].as_str().unwrap_or("?"), c["records"]))
            .collect();
        items.join(", ")
    };
    format!(
        "\n           {summary}\n           peers: {}; ports: {}",
        counted("top_peers"),
        counted("top_ports")
    )
}

/// An incident event as one or two lines; `now_s`: seconds into the demo.
pub fn incident_lines(v: &Value, d: Option<&DeviceLedger>, now_s: f64) -> String {
    let device = v["device"].as_str().unwrap_or("?");
    let event = v["event"].as_str().unwrap_or("?");
    let share = percent(v["attack_share"].as_f64());
    let context = d.map_or(String::new(), |d| format!(" ({}; {})", d.origin, truth(d, now_s)));
    let head = format!("[{now_s:6.1} s]");
    match event {
        "opened" => {
            let words: Vec<String> = v["top_features"]
                .as_array()
                .into_iter()
                .flatten()
                .take(3)
                .filter_map(|f| f["words"].as_str().map(String::from))
                .collect();
            let severity = v["severity"].as_str().unwrap_or("?");
            let mut out = format!("{head} INCIDENT OPENED  {device} [{severity}]{context}");
            out.push_str(&traffic_lines(v));
            for (i, w) in words.iter().enumerate() {
                out.push_str(&format!("\n           {}. {w}", i + 1));
            }
            out
        }
        "updated" => format!(
            "{head} incident updated {device} [{}]: {} of {} records anomalous ({share}) since it opened{}",
            v["severity"].as_str().unwrap_or("?"),
            v["anomalous"],
            v["records"],
            traffic_lines(v)
        ),
        "reopened" => format!(
            "{head} INCIDENT REOPENED {device} [{}] (reopening {}): {} of {} records anomalous while open{}",
            v["severity"].as_str().unwrap_or("?"),
            v["reopened"],
            v["anomalous"],
            v["records"],
            traffic_lines(v)
        ),
        "suppressed" => format!(
            "{head} incident suppressed {device}: {}",
            v["summary"].as_str().unwrap_or("a behaviour an analyst dismissed")
        ),
        "closed" => format!(
            "{head} INCIDENT CLOSED  {device} ({}): {} of {} records anomalous",
            v["resolution"].as_str().unwrap_or("?"),
            v["anomalous"],
            v["records"]
        ),
        "unmonitored" => format!("{head} UNMONITORED {device}: {}", v["message"].as_str().unwrap_or("")),
        other => format!("{head} incident event {other} on {device}"),
    }
}

pub fn table(devices: &[DeviceLedger], now_s: f64) -> String {
    let mut out = format!(
        "{:<18} {:<24} {:<40} {:>9} {:>5} {:>12} {:>8}\n",
        "device", "traffic", "ground truth", "incidents", "open", "attack est.", "records"
    );
    for d in devices {
        out.push_str(&format!(
            "{:<18} {:<24} {:<40} {:>9} {:>5} {:>12} {:>8}\n",
            d.name,
            d.origin,
            truth(d, now_s),
            d.incidents(),
            d.open_incidents(),
            percent(d.attack_share.map(f64::from)),
            d.sent
        ));
    }
    out
}
