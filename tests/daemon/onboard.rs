//! Onboarding is the operator's act, not the input topic's: by default a record labeled
//! normal is scored as any other (and counted), and `metapu onboard --device D --for
//! SPAN` makes the device's traffic over the span its known-normal traffic, recorded on
//! the incidents topic when it starts and when it ends. What it cannot do is refused.

use std::time::Duration;

use crate::support::*;
use metapu::daemon;
use metapu::data::Label;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metapu_onboard_takes_a_span_of_traffic_as_known_normal_and_says_so() {
    let fx = fixture();
    let tag = "onboard";
    let cluster = super::mock::mock(tag, 1);
    let boot = cluster.bootstrap_servers();
    let mut cfg = daemon_config(&boot, tag);
    cfg.windows.trust_input_labels = false; // the default
    let input = cfg.kafka.input_topics[0].clone();
    let normal = fx.rows(0, Label::Positive);
    let daemon = daemon::start(cfg.clone()).await.expect("daemon starts");
    let p = producer(&boot);
    let scored = |n: usize| {
        json_values(&read_topic(&boot, &cfg.kafka.scores_topic, Duration::from_secs(20), |m| m.len() >= n))
    };

    // Labels on the input topic are not taken: the device stays unmonitored.
    for (i, row) in normal.iter().take(5).enumerate() {
        send_record(&p, &input, "cam", i as f64, row, true).await;
    }
    let scores = scored(5);
    assert!(scores.iter().all(|s| s["decision"] == "unknown"), "{scores:?}");
    let body = http_get(daemon.http_addr, "/metrics").1;
    assert_eq!(metric(&body, "metapu_records_label_ignored_total"), Some(5.0));

    // The operator onboards it for a few seconds; refusals go to the dead letters.
    let topic_args = ["--brokers", boot.as_str(), "--topic", cfg.kafka.feedback_topic.as_str()];
    let onboard = |device: &str, span: &str| {
        metapu(
            &[
                &["onboard", "--device", device, "--for", span, "--by", "ops", "--note", "joined"][..],
                &topic_args,
            ]
            .concat(),
        )
    };
    assert!(onboard("cam", "8s").contains("onboard cam for 8 s sent"));
    let events = |what: &'static str| {
        json_values(&read_topic(&boot, &cfg.kafka.incidents_topic, Duration::from_secs(20), |m| {
            json_values(m).iter().any(|e| e["event"] == what)
        }))
    };
    let started = events("onboarding");
    let o = started.iter().find(|e| e["event"] == "onboarding").unwrap();
    assert_eq!((&o["device"], &o["by"], &o["note"]), (&"cam".into(), &"ops".into(), &"joined".into()));
    assert_eq!(o["until"].as_f64().unwrap() - o["from"].as_f64().unwrap(), 8.0);
    // Its traffic during the span (on the records' clock, from its newest record, 4 s)
    // becomes its known-normal window...
    for (i, row) in normal.iter().skip(5).take(20).enumerate() {
        send_record(&p, &input, "cam", 5.0 + 0.1 * i as f64, row, false).await;
    }
    scored(25);
    // Refused meanwhile: a second onboarding, an unknown device, a span of nothing.
    onboard("cam", "1h");
    onboard("nobody", "1h");
    let dead = json_values(&read_topic(&boot, &cfg.kafka.deadletter_topic, Duration::from_secs(20), |m| {
        m.len() >= 2
    }));
    let reasons: Vec<&str> = dead.iter().filter_map(|d| d["reason"].as_str()).collect();
    assert!(reasons.iter().any(|r| r.contains("cam is already being onboarded")), "{reasons:?}");
    assert!(reasons.iter().any(|r| r.contains("unknown device nobody")), "{reasons:?}");
    let refused = metapu_refused(&[&["onboard", "--device", "cam", "--for", "0"][..], &topic_args].concat());
    assert!(refused.contains("'0' must be positive"), "{refused}");

    let ended = events("onboarded");
    let done = ended.iter().find(|e| e["event"] == "onboarded").unwrap();
    assert_eq!((&done["records"], &done["known_normal"]), (&20.into(), &20.into()), "{done}");
    // ...and the device is scored from then on.
    send_record(&p, &input, "cam", 100.0, &normal[40], false).await;
    let scores = json_values(&read_topic(&boot, &cfg.kafka.scores_topic, Duration::from_secs(20), |m| {
        json_values(m).iter().any(|s| s["ts"] == 100.0)
    }));
    let after = scores.iter().find(|s| s["ts"] == 100.0).unwrap();
    assert_ne!(after["decision"], "unknown", "{after}");
    stop(daemon).await;
}
