//! Incident events in the Elastic Common Schema, as SIEMs (Elastic, Splunk's ECS
//! add-ons, OpenSearch, …) read them: `event.kind: alert`, `event.category: [network,
//! intrusion_detection]`, `host.*`, `source.*`, `destination.*`, `network.*`,
//! `related.ip`, `@timestamp` in ISO 8601, and metapu's own event whole under
//! `metapu`. Schema: docs/schema/incident-event.ecs.schema.json.

use serde_json::{json, Map, Value};

use crate::monitor::incidents::incident_traffic::{Severity, TrafficReport};
use crate::monitor::output::{IncidentEvent, IncidentReport};

/// The ECS version the documents follow.
pub const ECS_VERSION: &str = "8.11.0";

/// An incident event as an ECS document.
pub fn document(event: &IncidentEvent) -> Value {
    let metapu = serde_json::to_value(event).expect("an incident event serialises");
    let mut doc = Map::new();
    let (time, message, ev) = match event {
        IncidentEvent::Opened(r) => (r.time, r.summary.clone(), incident_event(r, "opened", "start")),
        IncidentEvent::Updated(r) => (r.time, r.summary.clone(), incident_event(r, "updated", "info")),
        // Active again: a rule that fires on an incident's start fires on this too.
        IncidentEvent::Reopened(r) => (r.time, r.summary.clone(), incident_event(r, "reopened", "start")),
        // Recorded, not raised: an event, not an alert (a rule on alerts does not fire).
        IncidentEvent::Suppressed(r) => (r.time, r.summary.clone(), incident_event(r, "suppressed", "info")),
        IncidentEvent::Closed(r) => (r.time, r.summary.clone(), incident_event(r, "closed", "end")),
        IncidentEvent::Reviewed(r) => (r.time, r.summary.clone(), incident_event(r, "reviewed", "info")),
        // Recorded under a sibling's fleet incident, which is the alert.
        IncidentEvent::Joined(r) => (r.time, r.summary.clone(), incident_event(r, "joined", "info")),
        IncidentEvent::Forgotten { device, known_normal, by, time, .. } => (
            *time,
            format!("device {device} forgotten by {by:?}: {known_normal} known-normal records dropped"),
            device_event("forgotten", "configuration", "deletion"),
        ),
        IncidentEvent::Unlearned { device, incident_id, by, time, .. } => (
            *time,
            format!(
                "device {device}: the behaviour of incident {incident_id} is no longer remembered \
                 ({by:?} confirmed it): its returns are raised"
            ),
            device_event("unlearned", "configuration", "deletion"),
        ),
        IncidentEvent::Onboarding { device, kind, from, until, by, time, .. } => (
            *time,
            format!(
                "device {device} onboarding{} by {by:?}: its traffic for {:.0} s is known-normal",
                kind.as_ref().map(|k| format!(" as a {k}")).unwrap_or_default(),
                until - from
            ),
            device_event("onboarding", "configuration", "change"),
        ),
        IncidentEvent::KindJoined { device, kind, by, time, .. } => (
            *time,
            format!(
                "device {device} is a {kind} (by {by:?}): what it and the kind's other members were \
                 onboarded on and had dismissed is offered to each other"
            ),
            device_event("kind-joined", "configuration", "change"),
        ),
        IncidentEvent::Onboarded { device, records, known_normal, time, .. } => (
            *time,
            format!("device {device} onboarded: {records} records seen, {known_normal} known-normal kept"),
            device_event("onboarded", "configuration", "change"),
        ),
        IncidentEvent::Unmonitored { message, time, .. } => {
            (*time, message.clone(), device_event("unmonitored", "network", "info"))
        }
    };
    doc.insert("@timestamp".into(), json!(iso8601(time)));
    doc.insert("ecs".into(), json!({ "version": ECS_VERSION }));
    doc.insert("message".into(), json!(message));
    doc.insert("event".into(), ev);
    let device = event.device();
    let mut related_ips: Vec<String> = Vec::new();
    let mut host = json!({ "name": device });
    if let IncidentEvent::Opened(r)
    | IncidentEvent::Updated(r)
    | IncidentEvent::Reopened(r)
    | IncidentEvent::Suppressed(r)
    | IncidentEvent::Closed(r)
    | IncidentEvent::Reviewed(r)
    | IncidentEvent::Joined(r) = event
    {
        if let Some(t) = &r.traffic {
            network_fields(t, &mut doc, &mut host, &mut related_ips);
        }
        doc.insert(
            "rule".into(),
            json!({
                "name": "device traffic departs from its known-normal traffic",
                "ruleset": "metapu",
                "version": r.model_version,
            }),
        );
    }
    doc.insert("host".into(), host);
    let mut related = json!({ "hosts": [device] });
    if !related_ips.is_empty() {
        related["ip"] = json!(related_ips);
    }
    doc.insert("related".into(), related);
    doc.insert(
        "observer".into(),
        json!({ "vendor": "metapu", "product": "metapu", "type": "ids", "version": env!("CARGO_PKG_VERSION") }),
    );
    doc.insert("metapu".into(), metapu);
    Value::Object(doc)
}

/// `event.*` of an incident's event.
fn incident_event(r: &IncidentReport, action: &str, kind_of_change: &str) -> Value {
    let mut ev = json!({
        "kind": if r.is_quiet() { "event" } else { "alert" },
        "category": ["network", "intrusion_detection"],
        "type": [kind_of_change],
        "action": format!("incident-{action}"),
        "id": r.incident_id,
        "severity": severity_number(r.severity),
        "risk_score": (f64::from(r.figures.peak_score) * 100.0).round(),
        "start": iso8601(r.figures.first_ts),
        "created": iso8601(r.time),
        "reason": r.summary,
        "dataset": "metapu.incidents",
        "module": "metapu",
        "provider": "metapu",
    });
    if action == "closed" {
        ev["end"] = json!(iso8601(r.figures.last_ts));
        ev["duration"] = json!(((r.figures.last_ts - r.figures.first_ts).max(0.0) * 1e9) as u64);
    }
    ev
}

/// `event.*` of a device's onboarding, forgetting or being unmonitored.
fn device_event(action: &str, category: &str, kind_of_change: &str) -> Value {
    json!({
        "kind": "event",
        "category": [category],
        "type": [kind_of_change],
        "action": format!("device-{action}"),
        "dataset": "metapu.incidents",
        "module": "metapu",
        "provider": "metapu",
    })
}

/// `source`, `destination`, `network` and the IPs of an incident's traffic: the device
/// is the source when most of its anomalous packets were its own.
fn network_fields(
    t: &TrafficReport,
    doc: &mut Map<String, Value>,
    host: &mut Value,
    related: &mut Vec<String>,
) {
    let device_ip = t.device_ip.map(|ip| ip.to_string());
    let peer = t.top_peers.first().map(|p| p.value.clone());
    let peer_domain = t.top_peers.first().and_then(|p| p.name.clone());
    let port: Option<u16> =
        t.top_ports.first().and_then(|p| p.value.split('/').next().and_then(|n| n.parse().ok()));
    let outbound = t.outbound * 2 >= t.packets;
    let (source_ip, destination_ip) =
        if outbound { (device_ip.clone(), peer.clone()) } else { (peer.clone(), device_ip.clone()) };
    if let Some(ip) = &device_ip {
        host["ip"] = json!([ip]);
        related.push(ip.clone());
    }
    if let Some(mac) = t.device_mac {
        // ECS writes MACs in capitals with hyphens.
        host["mac"] = json!([mac.to_string().to_uppercase().replace(':', "-")]);
    }
    related.extend(t.top_peers.iter().map(|p| p.value.clone()));
    let mut source = Map::new();
    if let Some(ip) = source_ip {
        source.insert("ip".into(), json!(ip));
    }
    let mut destination = Map::new();
    if let Some(ip) = destination_ip {
        destination.insert("ip".into(), json!(ip));
    }
    // The peer's name, on the peer's side (the device looked it up; ECS `*.domain`).
    if let Some(domain) = peer_domain {
        let peer_side = if outbound { &mut destination } else { &mut source };
        peer_side.insert("domain".into(), json!(domain));
    }
    if !source.is_empty() {
        doc.insert("source".into(), Value::Object(source));
    }
    if let Some(port) = port {
        destination.insert("port".into(), json!(port));
    }
    if !destination.is_empty() {
        doc.insert("destination".into(), Value::Object(destination));
    }
    let mut network = json!({
        "direction": if outbound { "outbound" } else { "inbound" },
        "packets": t.packets,
        "bytes": t.bytes,
    });
    if let Some(transport) = t.transports.first() {
        // context::transport_name gives ECS's names (tcp, udp, icmp, ipv6-icmp).
        network["transport"] = json!(transport.value);
    }
    doc.insert("network".into(), network);
}

/// ECS's `event.severity` is a number: 1 low … 4 critical.
fn severity_number(s: Severity) -> u8 {
    match s {
        Severity::Low => 1,
        Severity::Medium => 2,
        Severity::High => 3,
        Severity::Critical => 4,
    }
}

pub use crate::monitor::output::iso8601;

#[cfg(test)]
mod tests {
    use super::*;

    use crate::monitor::incidents::incident_traffic::syn_to;
    use crate::monitor::incidents::Incident;

    /// A device that scanned 254 hosts on 23/tcp, as an opened incident's ECS document.
    #[test]
    fn a_scan_incident_in_ecs() {
        let mut incident = Incident::sample(300, 254);
        incident.figures.first_ts = 1_500_000_000.1;
        incident.figures.last_ts = 1_500_000_025.4;
        incident.figures.peak_score = 0.97;
        for host in 1..=254u8 {
            let (c, at) = syn_to(host, 1_500_000_000.0 + f64::from(host) * 0.1);
            incident.traffic.add(&c, at);
        }
        let report = IncidentReport::of("cam", &incident, None, "5d2c0f1e9a7b", Vec::new(), 1.7e9);
        let doc = document(&IncidentEvent::Opened(report));
        let at = |path: &str| doc.pointer(path).cloned().unwrap_or_default();
        assert_eq!(at("/event/kind"), "alert");
        assert_eq!(at("/event/category"), json!(["network", "intrusion_detection"]));
        assert_eq!(at("/event/action"), "incident-opened");
        assert_eq!(at("/event/severity"), 4, "critical");
        assert_eq!(at("/event/start"), "2017-07-14T02:40:00.1Z");
        assert_eq!(at("/host/name"), "cam");
        assert_eq!(at("/host/ip"), json!(["192.168.1.7"]));
        assert_eq!(at("/host/mac"), json!(["00-11-22-33-44-55"]));
        assert_eq!(at("/source/ip"), "192.168.1.7");
        assert_eq!(at("/destination/port"), 23);
        assert_eq!(at("/network/transport"), "tcp");
        assert_eq!(at("/network/direction"), "outbound");
        assert_eq!(at("/related/ip").as_array().map(Vec::len), Some(6), "the device and its top 5 peers");
        assert_eq!(at("/metapu/event"), "opened");
        assert!(at("/message").as_str().unwrap().starts_with("device cam sent 254 TCP SYN packets"), "{doc}");
    }

    /// Uploads to a cloud the device looked up: its name is the destination's domain.
    #[test]
    fn a_named_peer_is_the_destination_domain() {
        let mut incident = Incident::sample(30, 20);
        let (mut c, at) = syn_to(9, 1_500_000_000.0);
        c.peer_name = Some(crate::traffic::peer_names::PeerName::new("VS-cam.example.com").unwrap());
        incident.traffic.add(&c, at);
        let report = IncidentReport::of("cam", &incident, None, "5d2c0f1e9a7b", Vec::new(), 1.7e9);
        let doc = document(&IncidentEvent::Opened(report));
        assert_eq!(doc.pointer("/destination/domain"), Some(&json!("vs-cam.example.com")), "{doc}");
        assert_eq!(doc.pointer("/destination/ip"), Some(&json!("10.0.0.9")));
        assert_eq!(doc.pointer("/source/domain"), None);
    }

    /// A reopened incident starts again for a SIEM, under the same id.
    #[test]
    fn a_reopened_incident_is_a_start_of_the_same_incident() {
        let mut incident = Incident::sample(30, 20);
        incident.reopened = 2;
        let report = IncidentReport::of("cam", &incident, None, "5d2c0f1e9a7b", Vec::new(), 1.7e9);
        let doc = document(&IncidentEvent::Reopened(report));
        let at = |path: &str| doc.pointer(path).cloned().unwrap_or_default();
        assert_eq!(at("/event/action"), "incident-reopened");
        assert_eq!(at("/event/type"), json!(["start"]));
        assert_eq!(at("/event/id"), incident.id.as_str());
        assert_eq!((at("/metapu/event"), at("/metapu/reopened")), (json!("reopened"), json!(2)));
    }

    #[test]
    fn times_are_iso_8601_in_utc() {
        assert_eq!(iso8601(1_500_000_000.25), "2017-07-14T02:40:00.25Z");
        assert_eq!(iso8601(0.0), "1970-01-01T00:00:00Z");
    }
}
