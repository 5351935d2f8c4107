//! Input partitions added: a device's records then arrive on a partition that maps to
//! another state partition than the one its snapshot is in. Against the bundled broker:
//! every device keeps its known-normal records, bit for bit, its first record
//! afterwards is scored, and a later restart finds it at once.
//!
//! The bundled broker cannot add partitions (CreatePartitions: "UnsupportedFeature"), so
//! the daemon restarts on a four-partition input topic beside the state topic its
//! two-partition predecessor wrote: what the daemon sees after partitions are added
//! (an input count that is not the state topic's, devices on other partitions).

use std::time::Duration;

use crate::support::*;
use metapu::daemon::{self, kafka};
use metapu::data::Label;

const DEVICES: usize = 6;

fn device(i: usize) -> String {
    format!("dev-{i}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn devices_keep_their_state_when_input_partitions_are_added() {
    let fx = fixture();
    let broker = Broker::start();
    let boot = broker.bootstrap();
    let cfg = daemon_config(&boot, "grow");
    let input = cfg.kafka.input_topics[0].clone();
    kafka::ensure_topics(&cfg.kafka, &[kafka::TopicSpec::plain(&input, 2)], Duration::from_secs(10))
        .await
        .expect("input topic");
    let normal = fx.rows(0, Label::Positive);
    let p = producer(&boot);

    // Two input partitions (and so two state partitions): each device onboarded with
    // 10 known-normal records and 5 more, on partition i mod 2.
    let d = daemon::start(cfg.clone()).await.expect("daemon starts");
    for i in 0..DEVICES {
        for (t, row) in normal.iter().skip(i).take(15).enumerate() {
            send_to(&p, &input, (i % 2) as i32, &device(i), t as f64, row, t < 10).await;
        }
    }
    read_topic(&boot, &cfg.kafka.scores_topic, Duration::from_secs(60), |m| m.len() >= DEVICES * 15);
    stop(d).await;
    let before = read_state(&boot, &cfg.kafka.state_topic, Duration::from_secs(20), |s| s.len() >= DEVICES);
    assert_eq!(before.len(), DEVICES);

    // Four input partitions and two members, one owning partitions 0 and 2 (so reading
    // state partition 0), the other 1 and 3 (state partition 1). Every device's records
    // now come on partition i+1 mod 4: to the member that does not read its snapshot's
    // state partition. (Before parking, each such device scored `unknown`.)
    let mut cfg = cfg;
    let input = format!("{input}4");
    cfg.kafka.input_topics = vec![input.clone()];
    cfg.kafka.consumer_options.insert("partition.assignment.strategy".into(), "roundrobin".into());
    cfg.kafka.group_id = format!("{}-4", cfg.kafka.group_id); // a group that never ran "range"
    kafka::ensure_topics(&cfg.kafka, &[kafka::TopicSpec::plain(&input, 4)], Duration::from_secs(10))
        .await
        .expect("four-partition input topic");
    let parked =
        |d: &daemon::Daemon| metric(&http_get(d.http_addr, "/metrics").1, "metapu_state_parked_devices");
    let first = daemon::start(cfg.clone()).await.expect("first member starts");
    let both = |d: &daemon::Daemon| parked(d) == Some(DEVICES as f64);
    assert!(wait_until(Duration::from_secs(30), || both(&first)).await, "first member: all parked");
    let second = daemon::start(cfg.clone()).await.expect("second member starts");
    assert!(wait_until(Duration::from_secs(60), || both(&second)).await, "second member: all parked");
    let p = producer(&boot);
    for i in 0..DEVICES {
        send_to(&p, &input, ((i + 1) % 4) as i32, &device(i), 100.0, &normal[40 + i], false).await;
    }
    let after = decisions_at(&boot, &cfg, 100.0, DEVICES);
    for i in 0..DEVICES {
        assert_ne!(after.get(&device(i)).map(String::as_str), Some("unknown"), "{}: {after:?}", device(i));
    }
    assert_eq!(after.len(), DEVICES, "{after:?}");
    let restored = |d: &daemon::Daemon| {
        metric(&http_get(d.http_addr, "/metrics").1, "metapu_state_restored_devices_total").unwrap_or(0.0)
    };
    // Each member restored the devices that came to it. (Exact counts would depend on
    // the group: a later rebalance restores again, from snapshots now written under
    // four partitions.)
    let (r1, r2) = (restored(&first), restored(&second));
    assert!(r1 > 0.0 && r2 > 0.0 && r1 + r2 >= DEVICES as f64, "restored {r1} and {r2}");
    stop(first).await;
    stop(second).await;

    // Written back under four partitions, known-normal rows unchanged; a restart finds
    // each device at once (nothing parked) and scores its next record.
    let written = read_state(&boot, &cfg.kafka.state_topic, Duration::from_secs(20), |s| {
        s.values().filter(|s| s.input_partitions == 4).count() >= DEVICES
    });
    for i in 0..DEVICES {
        let (old, new) = (&before[&device(i)], &written[&device(i)]);
        assert_eq!(rows_bits(&new.positive), rows_bits(&old.positive), "{}: known-normal rows", device(i));
        assert_eq!(new.positive.len(), 20, "{}: 10 known-normal rows", device(i));
        let moved_to = new.last_source.as_ref().map(|s| s.partition);
        assert_eq!((new.input_partitions, moved_to), (4, Some(((i + 1) % 4) as i32)), "{}", device(i));
    }
    // One daemon in a group of its own (no member of the two-daemon group to wait out).
    cfg.kafka.consumer_options.remove("partition.assignment.strategy");
    cfg.kafka.group_id = format!("{}-alone", cfg.kafka.group_id);
    let d = daemon::start(cfg.clone()).await.expect("daemon starts a third time");
    let restored_at_once = wait_until(Duration::from_secs(60), || {
        let m = http_get(d.http_addr, "/metrics").1;
        metric(&m, "metapu_state_restored_devices_total") == Some(DEVICES as f64)
            && metric(&m, "metapu_state_parked_devices") == Some(0.0)
    })
    .await;
    assert!(restored_at_once, "devices parked again, or not restored, before they sent");
    for i in 0..DEVICES {
        send_to(&p, &input, ((i + 1) % 4) as i32, &device(i), 200.0, &normal[50 + i], false).await;
    }
    let again = decisions_at(&boot, &cfg, 200.0, DEVICES);
    assert!(again.values().all(|d| d != "unknown") && again.len() == DEVICES, "{again:?}");
    stop(d).await;
}
