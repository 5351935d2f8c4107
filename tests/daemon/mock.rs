//! Fast daemon tests on rdkafka's in-process MockCluster: scoring to alerts (batch
//! messages among the records), two daemons through a rebalance, and a broker outage.

use std::collections::HashSet;
use std::time::Duration;

use crate::support::*;
use metapu::daemon;
use metapu::data::Label;
use rdkafka::mocking::MockCluster;
use rdkafka::producer::DefaultProducerContext;

/// A one-broker mock cluster with every topic of `tag` created up front (the mock
/// never answers CreateTopics). Input and state topics get `partitions`.
pub(super) fn mock(tag: &str, partitions: i32) -> MockCluster<'static, DefaultProducerContext> {
    let cluster = MockCluster::new(1).expect("mock cluster");
    for suffix in ["features", "state", "feedback"] {
        cluster.create_topic(&format!("{tag}.{suffix}"), partitions, 1).expect("create topic");
    }
    for suffix in ["alerts", "priors", "deadletter", "scores", "incidents"] {
        cluster.create_topic(&format!("{tag}.{suffix}"), 1, 1).expect("create topic");
    }
    cluster
}

fn sources(scores: &[serde_json::Value]) -> HashSet<(i64, i64)> {
    scores
        .iter()
        .map(|s| (s["source"]["partition"].as_i64().unwrap(), s["source"]["offset"].as_i64().unwrap()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn known_normal_then_mixed_traffic_gives_alerts() {
    let fx = fixture();
    let cluster = mock("m1", 1);
    let boot = cluster.bootstrap_servers();
    let cfg = daemon_config(&boot, "m1");
    let daemon = daemon::start(cfg.clone()).await.unwrap();
    let p = producer(&boot);
    let (normal, attack) = (fx.rows(1, Label::Positive), fx.rows(1, Label::Negative));
    for (i, row) in normal.iter().take(8).enumerate() {
        send_record(&p, "m1.features", "cam-1", i as f64, row, true).await;
    }
    for i in 0..30 {
        let row = if i % 2 == 0 { &normal[20 + i] } else { &attack[i] };
        send_record(&p, "m1.features", "cam-1", 10.0 + i as f64, row, false).await;
    }
    read_topic(&boot, "m1.priors", Duration::from_secs(20), |m| !m.is_empty());
    // The attack as the sensor sends a busy device's records: batches of ten, binary.
    for chunk in attack.iter().skip(50).take(30).enumerate().collect::<Vec<_>>().chunks(10) {
        let mut batch = metapu::monitor::record::Batch::default();
        for (i, row) in chunk {
            batch.push(&metapu::monitor::record::encode_binary("cam-1", 100.0 + *i as f64, row, false, None));
        }
        send(&p, "m1.features", Some("cam-1"), &batch.take()).await;
    }
    // The mixed traffic's alerts come first (cam-1 is adapted before its first records
    // are scored): wait for those of the attack records.
    let alerts = json_values(&read_topic(&boot, "m1.alerts", Duration::from_secs(20), |m| {
        json_values(m).iter().filter(|a| a["ts"].as_f64().is_some_and(|ts| ts >= 100.0)).count() >= 15
    }));
    let late = alerts.iter().filter(|a| a["ts"].as_f64().unwrap() >= 100.0).count();
    assert!(late >= 15, "{late} alerts for 30 attack records");
    // Alert ids are unique per source record, a batch's records each their own.
    let ids: HashSet<&str> = alerts.iter().map(|a| a["alert_id"].as_str().unwrap()).collect();
    assert_eq!(ids.len(), alerts.len());
    assert!(alerts.iter().any(|a| a["source"]["index"].as_u64().is_some_and(|i| i > 0)), "{alerts:?}");
    assert_eq!(daemon.metrics.records_consumed(), 8 + 30 + 30, "records, not messages");
    stop(daemon).await;
}

/// Sum over partitions of the group's committed offsets on `topic`.
fn committed(boot: &str, group: &str, topic: &str, partitions: i32) -> i64 {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    let c: BaseConsumer =
        rdkafka::ClientConfig::new().set("bootstrap.servers", boot).set("group.id", group).create().unwrap();
    let mut tpl = rdkafka::TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition(topic, p);
    }
    let got = c.committed_offsets(tpl, Duration::from_secs(5)).unwrap();
    got.elements().iter().map(|e| e.offset().to_raw().unwrap_or(0).max(0)).sum()
}

/// Offsets are committed only for records whose outputs were acknowledged: the
/// committed total never exceeds the distinct records already in the scores topic.
fn assert_commits_trail_outputs(boot: &str, group: &str, tag: &str) {
    let c = committed(boot, group, &format!("{tag}.features"), 4);
    let delivered =
        sources(&json_values(&read_topic(boot, &format!("{tag}.scores"), Duration::from_secs(2), |_| false)));
    assert!(
        c <= delivered.len() as i64,
        "committed {c} records but only {} have acknowledged outputs",
        delivered.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_daemons_through_a_rebalance_score_every_record() {
    let fx = fixture();
    let cluster = mock("m2", 4);
    let boot = cluster.bootstrap_servers();
    let cfg = daemon_config(&boot, "m2");
    let a = daemon::start(cfg.clone()).await.unwrap();
    let p = producer(&boot);
    let normal = fx.rows(2, Label::Positive);
    let mut sent = 0;
    // Three rounds of 40 records over 12 devices; a second member joins for the
    // middle round, so the partitions are split between the two and back.
    for round in 0..3 {
        let b = if round == 1 {
            let mut cfg_b = cfg.clone();
            cfg_b.http.listen = "127.0.0.1:0".into();
            Some(daemon::start(cfg_b).await.unwrap())
        } else {
            None
        };
        for i in 0..40 {
            let device = format!("dev-{}", i % 12);
            send_record(&p, "m2.features", &device, f64::from(i), &normal[i as usize], i % 4 == 0).await;
            sent += 1;
        }
        tokio::time::sleep(Duration::from_secs(if b.is_some() { 3 } else { 1 })).await;
        if let Some(b) = b {
            assert_commits_trail_outputs(&boot, &cfg.kafka.group_id, "m2");
            stop(b).await;
        }
    }
    let scores = json_values(&read_topic(&boot, "m2.scores", Duration::from_secs(40), |m| {
        sources(&json_values(m)).len() >= sent
    }));
    stop(a).await;
    assert_commits_trail_outputs(&boot, &cfg.kafka.group_id, "m2");
    assert!(committed(&boot, &cfg.kafka.group_id, "m2.features", 4) > 0, "nothing was committed");
    let seen = sources(&scores);
    assert_eq!(seen.len(), sent, "every input record scored at least once ({} score records)", scores.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_outage_is_reported_and_survived() {
    let fx = fixture();
    let cluster = mock("m3", 1);
    let boot = cluster.bootstrap_servers();
    let mut cfg = daemon_config(&boot, "m3");
    cfg.kafka.options.insert("reconnect.backoff.max.ms".into(), "500".into());
    let daemon = daemon::start(cfg).await.unwrap();
    let p = producer(&boot);
    let normal = fx.rows(3, Label::Positive);
    send_record(&p, "m3.features", "plug", 0.0, &normal[0], true).await;
    read_topic(&boot, "m3.scores", Duration::from_secs(20), |m| !m.is_empty());
    assert_eq!(http_get(daemon.http_addr, "/readyz").0, 200);

    cluster.broker_down(1).unwrap();
    let down = wait_until(Duration::from_secs(30), || http_get(daemon.http_addr, "/readyz").0 == 503).await;
    assert!(down, "/readyz did not report the outage");
    assert_eq!(http_get(daemon.http_addr, "/healthz").0, 200, "the process stays up");

    cluster.broker_up(1).unwrap();
    let up = wait_until(Duration::from_secs(30), || http_get(daemon.http_addr, "/readyz").0 == 200).await;
    assert!(up, "/readyz did not recover");
    send_record(&p, "m3.features", "plug", 1.0, &normal[1], false).await;
    let scores = read_topic(&boot, "m3.scores", Duration::from_secs(30), |m| m.len() >= 2);
    assert!(scores.len() >= 2, "no scoring after the broker came back");
    stop(daemon).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_reload_keeps_windows_and_a_bad_model_is_refused() {
    let fx = fixture();
    let cluster = mock("m4", 1);
    let boot = cluster.bootstrap_servers();
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("model.safetensors");
    std::fs::copy(&fx.model_path, &model).unwrap();
    let mut cfg = daemon_config(&boot, "m4");
    cfg.model.path = model.clone();
    let daemon = daemon::start(cfg).await.unwrap();
    let p = producer(&boot);
    let normal = fx.rows(4, Label::Positive);
    for (i, row) in normal.iter().take(6).enumerate() {
        send_record(&p, "m4.features", "hub", i as f64, row, i < 3).await;
    }
    let first = read_topic(&boot, "m4.priors", Duration::from_secs(20), |m| !m.is_empty());
    assert!(!first.is_empty());

    // The same model again: accepted; the device is re-adapted from its kept windows
    // without any new record.
    daemon.send(daemon::Control::Reload);
    let priors = read_topic(&boot, "m4.priors", Duration::from_secs(20), |m| m.len() >= 2);
    let last = json_values(&priors).pop().unwrap();
    assert_eq!((last["positive_window"].as_u64(), last["unlabeled_window"].as_u64()), (Some(3), Some(6)));
    let body = http_get(daemon.http_addr, "/metrics").1;
    assert_eq!(metric(&body, "metapu_model_reloads_total{result=\"ok\"}"), Some(1.0));

    // A corrupt file: refused, counted, and the old model keeps scoring.
    std::fs::write(&model, b"garbage").unwrap();
    daemon.send(daemon::Control::Reload);
    let refused = wait_until(Duration::from_secs(10), || {
        metric(&http_get(daemon.http_addr, "/metrics").1, "metapu_model_reloads_total{result=\"error\"}")
            == Some(1.0)
    })
    .await;
    assert!(refused);
    let scored_total =
        || metric(&http_get(daemon.http_addr, "/metrics").1, "metapu_records_scored_total").unwrap_or(0.0);
    let before = scored_total();
    send_record(&p, "m4.features", "hub", 10.0, &normal[10], false).await;
    let scored = wait_until(Duration::from_secs(10), || scored_total() > before).await;
    assert!(scored, "the old model stopped scoring");
    stop(daemon).await;
}

/// Incident rules for the incident tests: open on 3 of the last 5 decisions, and no
/// quiet close during the test.
fn quick_incidents(cfg: &mut daemon::DaemonConfig) {
    cfg.incidents.open_k = 3;
    cfg.incidents.open_n = 5;
    cfg.incidents.quiet_s = 600;
}

/// The incident events of one kind (`opened`, `closed`, …) among `m`'s messages.
fn events(m: &[(Option<String>, Vec<u8>)], kind: &str) -> Vec<serde_json::Value> {
    json_values(m).into_iter().filter(|v| v["event"] == kind).collect()
}

/// An analyst's verdicts through the feedback topic, as `metapu feedback` sends them:
/// bad ones are dead-lettered with the reason; a false positive closes the incident as
/// dismissed, with who and why, and is counted. (What a dismissal teaches the device
/// is checked on the pipeline core: tests/daemon/core.rs.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn analysts_verdicts_travel_through_the_feedback_topic() {
    let fx = fixture();
    let cluster = mock("m10", 1);
    let boot = cluster.bootstrap_servers();
    let mut cfg = daemon_config(&boot, "m10");
    quick_incidents(&mut cfg);
    let daemon = daemon::start(cfg.clone()).await.unwrap();
    let p = producer(&boot);
    // Target 0's attack rows are far from its normal ones: on the core they scored
    // anomalous 13 to 15 of 15 wherever an adaptation fell among the first 20 of them,
    // so the incident opens however the adapter's timer and the batches fall.
    let (normal, changed) = (fx.rows(0, Label::Positive), fx.rows(0, Label::Negative));
    let input = cfg.kafka.input_topics[0].clone();
    let mut ts = 0.0;
    let mut send = |rows: Vec<&Vec<f32>>, known: bool| {
        let (p, input) = (&p, &input);
        let batch: Vec<(f64, Vec<f32>)> = rows
            .into_iter()
            .map(|r| {
                ts += 1.0;
                (ts, r.clone())
            })
            .collect();
        async move {
            for (ts, row) in batch {
                send_record(p, input, "cam", ts, &row, known).await;
            }
        }
    };
    send(normal.iter().take(10).collect(), true).await;
    send(normal.iter().skip(10).take(20).collect(), false).await;
    // The new behaviour.
    send(changed.iter().take(15).collect(), false).await;
    let got =
        read_topic(&boot, "m10.incidents", Duration::from_secs(20), |m| !events(m, "opened").is_empty());
    let opened = events(&got, "opened");
    assert!(!opened.is_empty(), "the new behaviour opened no incident");
    let id = opened[0]["incident_id"].as_str().unwrap().to_string();

    // Bad feedback first: an unknown incident, and no JSON at all.
    for (incident, device) in [("0000", "cam"), (id.as_str(), "nobody")] {
        let args = ["--incident", incident, "--device", device, "--confirmed", "--brokers", &boot];
        metapu(&[&["feedback", "--topic", "m10.feedback"][..], &args].concat());
    }
    send_raw(&p, "m10.feedback", Some(b"cam"), b"{not json").await;
    let dead = read_topic(&boot, "m10.deadletter", Duration::from_secs(20), |m| m.len() >= 3);
    let reasons: Vec<String> =
        json_values(&dead).iter().map(|v| format!("{}: {}", v["kind"], v["reason"])).collect();
    assert_eq!(reasons.len(), 3, "{reasons:?}");
    assert!(reasons.iter().all(|r| r.starts_with("\"bad_feedback\"")), "{reasons:?}");
    assert!(reasons.iter().any(|r| r.contains("no incident 0000")), "{reasons:?}");
    assert!(reasons.iter().any(|r| r.contains("unknown device nobody")), "{reasons:?}");
    assert!(reasons.iter().any(|r| r.contains("malformed feedback")), "{reasons:?}");

    let out = metapu(&[
        "feedback",
        "--incident",
        &id,
        "--device",
        "cam",
        "--false-positive",
        "--by",
        "ana",
        "--note",
        "firmware update",
        "--brokers",
        &boot,
        "--topic",
        "m10.feedback",
    ]);
    assert!(out.contains("false_positive"), "{out}");
    let got =
        read_topic(&boot, "m10.incidents", Duration::from_secs(20), |m| !events(m, "closed").is_empty());
    let closed = events(&got, "closed");
    assert_eq!(closed[0]["incident_id"], id.as_str());
    assert_eq!(closed[0]["resolution"], "dismissed");
    assert_eq!(closed[0]["feedback"][0]["by"], "ana");
    assert_eq!(closed[0]["feedback"][0]["note"], "firmware update");

    let body = http_get(daemon.http_addr, "/metrics").1;
    assert_eq!(metric(&body, "metapu_feedback_total{result=\"false_positive\"}"), Some(1.0));
    assert_eq!(metric(&body, "metapu_feedback_total{result=\"refused\"}"), Some(3.0));
    assert_eq!(metric(&body, "metapu_incidents_closed_total{resolution=\"dismissed\"}"), Some(1.0));
    // The 45 records, not the four feedback messages: a verdict is no record.
    assert_eq!(metric(&body, "metapu_records_consumed_total"), Some(45.0));
    stop(daemon).await;
}

/// A device with an open incident that the daemon stops tracking (here: a new device
/// past `devices.max_tracked`) closes its incident as `evicted`, explained: an incident
/// an analyst saw open never stays open for ever. A restart does not bring it back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_evicted_device_closes_its_open_incident() {
    let fx = fixture();
    let cluster = mock("m11", 1);
    let boot = cluster.bootstrap_servers();
    let mut cfg = daemon_config(&boot, "m11");
    cfg.devices.max_tracked = 1;
    quick_incidents(&mut cfg);
    let daemon = daemon::start(cfg.clone()).await.unwrap();
    let p = producer(&boot);
    let (normal, attack) = (fx.rows(1, Label::Positive), fx.rows(1, Label::Negative));
    let input = cfg.kafka.input_topics[0].clone();
    for (i, row) in normal.iter().take(10).enumerate() {
        send_record(&p, &input, "cam", i as f64, row, true).await;
    }
    for (i, row) in attack.iter().take(15).enumerate() {
        send_record(&p, &input, "cam", 10.0 + i as f64, row, false).await;
    }
    let got =
        read_topic(&boot, "m11.incidents", Duration::from_secs(20), |m| !events(m, "opened").is_empty());
    let opened = events(&got, "opened");
    assert_eq!(opened.len(), 1, "{opened:?}");
    let body = http_get(daemon.http_addr, "/metrics").1;
    assert_eq!(metric(&body, "metapu_incidents_closed_total{resolution=\"evicted\"}"), Some(0.0));

    // A second device: the table holds one, and cam is the least recently seen.
    send_record(&p, &input, "doorbell", 30.0, &normal[20], true).await;
    let got =
        read_topic(&boot, "m11.incidents", Duration::from_secs(20), |m| !events(m, "closed").is_empty());
    let closed = events(&got, "closed");
    assert_eq!(closed.len(), 1, "{closed:?}");
    assert_eq!(closed[0]["incident_id"], opened[0]["incident_id"]);
    assert_eq!(closed[0]["device"], "cam");
    assert_eq!(closed[0]["resolution"], "evicted");
    assert!(!closed[0]["top_features"].as_array().unwrap().is_empty(), "explained: {}", closed[0]);
    let body = http_get(daemon.http_addr, "/metrics").1;
    assert_eq!(metric(&body, "metapu_incidents_closed_total{resolution=\"evicted\"}"), Some(1.0));
    assert_eq!(metric(&body, "metapu_devices_evicted_total{reason=\"capacity\"}"), Some(1.0));
    stop(daemon).await;

    // cam went idle, not forgotten: its known-normal records stay, in memory and in its
    // snapshot. Restart: both come back from the state topic (cam idle, not counting in
    // max_tracked), and cam's incident, closed in its snapshot, neither reopens nor
    // closes a second time.
    let daemon = daemon::start(cfg.clone()).await.unwrap();
    send_record(&p, &input, "doorbell", 31.0, &normal[21], false).await;
    let restored = wait_until(Duration::from_secs(30), || {
        metric(&http_get(daemon.http_addr, "/metrics").1, "metapu_state_restored_devices_total")
            .unwrap_or(0.0)
            >= 2.0
    })
    .await;
    assert!(restored, "cam and doorbell not restored: {}", http_get(daemon.http_addr, "/metrics").1);
    let got = read_topic(&boot, "m11.incidents", Duration::from_secs(3), |_| false);
    assert_eq!(events(&got, "closed").len(), 1, "{:?}", events(&got, "closed"));
    let body = http_get(daemon.http_addr, "/metrics").1;
    assert_eq!(metric(&body, "metapu_state_restored_devices_total"), Some(2.0));
    assert_eq!(metric(&body, "metapu_devices_evicted_total{reason=\"capacity\"}"), Some(0.0));
    stop(daemon).await;
}
