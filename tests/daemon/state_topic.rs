//! The state topic is a changelog: the daemon asks the broker for it compacted, and
//! refuses to start on one that is not (unless told to), naming the fix. Against the
//! bundled broker, which stores and reports topic configs (it does not compact: what
//! is tested here is what the daemon asks for and checks, not the broker's cleaning).

use std::time::Duration;

use crate::support::*;
use metapu::daemon::{self, kafka, DaemonError};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_state_topic_is_created_compacted_and_a_deleting_one_is_refused() {
    let broker = Broker::start();
    let boot = broker.bootstrap();

    // Created by the daemon: compacted.
    let cfg = daemon_config(&boot, "st1");
    let d = daemon::start(cfg.clone()).await.expect("daemon starts");
    stop(d).await;
    let policy =
        kafka::topic_config(&cfg.kafka, &cfg.kafka.state_topic, "cleanup.policy", Duration::from_secs(10))
            .await
            .expect("the broker describes the topic");
    assert_eq!(policy.as_deref(), Some("compact"));

    // An existing state topic that deletes: refused, with the command that fixes it.
    let mut cfg = daemon_config(&boot, "st2");
    let delete = kafka::TopicSpec {
        name: &cfg.kafka.state_topic,
        partitions: 1,
        replication: 1,
        configs: vec![("cleanup.policy", "delete")],
    };
    kafka::ensure_topics(&cfg.kafka, &[delete], Duration::from_secs(10)).await.unwrap();
    let err = match daemon::start(cfg.clone()).await {
        Err(e) => e,
        Ok(d) => {
            stop(d).await;
            panic!("started on a state topic that deletes snapshots");
        }
    };
    assert!(matches!(err, DaemonError::StateTopicNotCompacted { .. }), "{err}");
    let text = err.to_string();
    assert!(
        text.contains("cleanup.policy=delete")
            && text.contains("kafka-configs.sh --bootstrap-server")
            && text.contains("--entity-name st2.state --add-config cleanup.policy=compact"),
        "{text}"
    );

    // The operator may start anyway.
    cfg.state.require_compacted = false;
    let d = daemon::start(cfg).await.expect("starts when told to");
    stop(d).await;
}
