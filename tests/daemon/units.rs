//! The daemon's public pieces without a broker: configuration, record decoding, the
//! adaptation thread. (The engine, windows, the device table, snapshots and
//! alert ids are tested beside their code.)

use std::io::Write;

use metapu::daemon::adapter::Adapter;
use metapu::daemon::config::{DaemonConfig, Sources};
use metapu::monitor::record::{
    decode, decode_message, encode, encode_binary, records_in, Batch, InvalidRecord,
};

fn config_file(text: &str) -> tempfile::NamedTempFile {
    let mut f = tempfile::Builder::new().suffix(".toml").tempfile().unwrap();
    f.write_all(text.as_bytes()).unwrap();
    f
}

fn load(text: &str) -> Result<DaemonConfig, String> {
    let f = config_file(text);
    DaemonConfig::load(&Sources { file: Some(f.path().into()), ..Sources::default() })
        .map_err(|e| e.to_string())
}

#[test]
fn config_errors_name_the_key_and_the_reason() {
    let e = load("[windows]\npositve = 3\n").unwrap_err();
    assert!(e.contains("unknown field `positve`") && e.contains("windows"), "{e}");
    let e = load("[windows]\npositive = \"many\"\n").unwrap_err();
    assert!(e.contains("windows.positive") && e.contains("expected an integer"), "{e}");
    let e = load("[colour]\nred = 1\n").unwrap_err();
    assert!(e.contains("unknown field `colour`"), "{e}");
    let e = load("[model]\nthreshold = 2.0\n").unwrap_err();
    assert!(e.contains("model.threshold"), "{e}");
    let e = load("[http]\nlisten = \"everywhere\"\n").unwrap_err();
    assert!(e.contains("http.listen"), "{e}");
}

#[test]
fn two_listeners_on_one_port_or_anonymous_reads_off_loopback_are_refused() {
    // The defaults: the daemon, the sensor and the console each have their own port.
    let d = DaemonConfig::defaults();
    let ports = [&d.http.listen, &d.sensor.listen, &d.console.listen];
    assert_eq!(ports, ["127.0.0.1:9898", "127.0.0.1:9897", "127.0.0.1:9899"]);
    let e = load("[sensor]\nlisten = \"127.0.0.1:9899\"\n").unwrap_err();
    assert!(e.contains("sensor.listen (127.0.0.1:9899) and console.listen (127.0.0.1:9899)"), "{e}");
    let e = load("[console]\nlisten = \"0.0.0.0:9898\"\n").unwrap_err();
    assert!(e.contains("http.listen (127.0.0.1:9898) and console.listen (0.0.0.0:9898)"), "{e}");
    // Other addresses of one port, or any free port, do not clash.
    load("[console]\nlisten = \"127.0.0.2:9898\"\n").unwrap();
    load("[http]\nlisten = \"127.0.0.1:0\"\n[sensor]\nlisten = \"127.0.0.1:0\"\n").unwrap();
    let e = load("[console]\nlisten = \"0.0.0.0:9899\"\nanonymous_reads = true\n").unwrap_err();
    assert!(e.contains("console.anonymous_reads"), "{e}");
    load("[console]\nlisten = \"[::1]:9899\"\nanonymous_reads = true\n").unwrap();
}

#[test]
fn config_layers_and_redaction() {
    let cfg = load("[kafka]\nbrokers = \"k1:9092,k2:9092\"\n[kafka.options]\n\"sasl.password\" = \"hunter2\"\n\"security.protocol\" = \"SASL_SSL\"\n").unwrap();
    assert_eq!(cfg.kafka.brokers, "k1:9092,k2:9092");
    assert_eq!(cfg.windows.positive, 50, "defaults stay underneath");
    assert_eq!(cfg.kafka.options["security.protocol"], "SASL_SSL");
    let shown = cfg.redacted_toml();
    assert!(!shown.contains("hunter2") && shown.contains("\"sasl.password\" = \"<redacted>\""), "{shown}");
    assert!(shown.contains("\"security.protocol\" = \"SASL_SSL\""));
    assert_eq!(DaemonConfig::defaults().kafka.input_topics, ["iot.features"]);
    assert_eq!(load(&cfg.to_toml()).unwrap(), cfg, "the printed configuration loads back unchanged");
}

/// `[kafka.options]` reach every client; `consumer_options` only consumers and
/// `producer_options` only producers (a producer warns about consumer properties).
#[test]
fn kafka_options_reach_the_clients_they_are_for() {
    use metapu::daemon::kafka::{consumer_config, producer_config};
    let cfg = load(concat!(
        "[kafka.options]\n\"security.protocol\" = \"SASL_SSL\"\n",
        "[kafka.consumer_options]\n\"session.timeout.ms\" = \"6000\"\n\"ssl.key.password\" = \"s3cret\"\n",
        "[kafka.producer_options]\n\"compression.type\" = \"lz4\"\n",
    ))
    .unwrap();
    let (consumer, producer) = (consumer_config(&cfg.kafka), producer_config(&cfg.kafka));
    for c in [&consumer, &producer] {
        assert_eq!(c.get("security.protocol"), Some("SASL_SSL"));
    }
    assert_eq!(consumer.get("session.timeout.ms"), Some("6000"));
    assert_eq!(consumer.get("compression.type"), None);
    assert_eq!(producer.get("compression.type"), Some("lz4"));
    assert_eq!(producer.get("session.timeout.ms"), None);
    let shown = cfg.redacted_toml();
    assert!(!shown.contains("s3cret") && shown.contains("\"ssl.key.password\" = \"<redacted>\""), "{shown}");
    assert_eq!(load(&cfg.to_toml()).unwrap(), cfg);
}

#[test]
fn records_decode_or_say_why_not() {
    let ok = decode(Some(b"d1"), br#"{"ts": 1.5, "features": [1, 2], "label": "normal"}"#, 2, 1024).unwrap();
    assert_eq!(
        (ok.device.as_str(), ok.ts, ok.features.as_slice(), ok.known_normal),
        ("d1", 1.5, &[1.0f32, 2.0][..], true)
    );
    let from_field = decode(None, br#"{"device": "d2", "ts": 0, "features": [1, 2]}"#, 2, 1024).unwrap();
    assert_eq!(from_field.device, "d2");
    assert!(!from_field.known_normal);
    let big = vec![b' '; 2000];
    type Case<'a> = (Option<&'a [u8]>, &'a [u8], &'a str);
    let cases: Vec<Case<'_>> = vec![
        (Some(b"d"), b"", "empty"),
        (Some(b"d"), &big, "oversized"),
        (Some(b"d"), b"\xff\xfe", "not_utf8"),
        (Some(b"d"), b"{", "malformed"),
        (Some(b"d"), br#"{"ts": 1, "features": [1, 2], "colour": 1}"#, "malformed"),
        (None, br#"{"ts": 1, "features": [1, 2]}"#, "no_device"),
        (Some(b"a"), br#"{"device": "b", "ts": 1, "features": [1, 2]}"#, "device_mismatch"),
        (Some(b"d"), br#"{"ts": 1, "features": [1]}"#, "wrong_dimension"),
        (Some(b"d"), br#"{"ts": 1, "features": [1e300, 2]}"#, "non_finite"),
        (Some(b"d"), br#"{"ts": 1, "features": [1, NaN]}"#, "non_finite"),
        (Some(b"d"), b"{\"ts\": 1,\n \"features\": [-Infinity, 2]}", "non_finite"),
        (Some(b"d"), br#"{"ts": 1, "features": [1, Nope]}"#, "malformed"),
        (Some(b"d"), br#"{"ts": 1, "features": [1e400, 2]}"#, "malformed"),
        (Some(b"d"), br#"{"ts": 1, "features": [1, 2], "label": "evil"}"#, "bad_label"),
    ];
    for (key, value, kind) in cases {
        let e = decode(key, value, 2, 1024).unwrap_err();
        assert_eq!(e.kind(), kind, "{e}");
        assert!(InvalidRecord::KINDS.contains(&kind));
    }
    // encode ↔ decode
    let bytes = encode("d9", 3.0, &[0.5, -1.0], true);
    let back = decode(None, &bytes, 2, 1024).unwrap();
    assert_eq!((back.device.as_str(), back.features, back.known_normal), ("d9", vec![0.5, -1.0], true));
}

#[test]
fn binary_records_decode_like_json_or_say_why_not() {
    let bin = encode_binary("d1", 1.5, &[1.0, -2.5], true, None);
    let json = encode("d1", 1.5, &[1.0, -2.5], true);
    assert!(bin.len() < json.len());
    assert_eq!(decode(None, &bin, 2, 1024).unwrap(), decode(None, &json, 2, 1024).unwrap());
    // The key may name the device instead; a different name is refused as in JSON.
    let keyed = encode_binary("", 0.0, &[1.0, 2.0], false, None);
    assert_eq!(decode(Some(b"d9"), &keyed, 2, 1024).unwrap().device, "d9");
    assert_eq!(decode(None, &keyed, 2, 1024).unwrap_err(), InvalidRecord::NoDevice);
    assert!(matches!(decode(Some(b"d2"), &bin, 2, 1024), Err(InvalidRecord::DeviceMismatch { .. })));
    let kind = |v: &[u8]| decode(None, v, 2, 1024).unwrap_err().kind();
    assert_eq!(kind(&encode_binary("d1", 0.0, &[1.0], false, None)), "wrong_dimension");
    assert_eq!(kind(&encode_binary("d1", 0.0, &[1.0, f32::NAN], false, None)), "non_finite");
    assert_eq!(kind(&encode_binary("d1", f64::INFINITY, &[1.0, 2.0], false, None)), "bad_timestamp");
    let mut truncated = bin.clone();
    truncated.pop();
    let e = decode(None, &truncated, 2, 1024).unwrap_err();
    assert_eq!(e.kind(), "malformed");
    assert!(e.to_string().contains("ends inside the features"), "{e}");
    let mut trailing = bin.clone();
    trailing.push(0);
    assert!(decode(None, &trailing, 2, 1024).unwrap_err().to_string().contains("1 bytes after"));
    let mut flags = bin.clone();
    flags[4] = 0x80;
    assert!(decode(None, &flags, 2, 1024).unwrap_err().to_string().contains("unknown flag bits"));
    let mut bad_name = encode_binary("dx", 0.0, &[1.0, 2.0], false, None);
    bad_name[7] = 0xff;
    assert_eq!(kind(&bad_name), "not_utf8");
}

/// A batch message holds records of either format, each decoded and refused on its own;
/// broken framing refuses the message, and a message over the limit is not opened.
#[test]
fn a_batch_message_holds_records_each_checked_on_its_own() {
    let mut batch = Batch::default();
    batch.push(&encode_binary("d1", 1.0, &[1.0, 2.0], true, None));
    batch.push(&encode("d1", 2.0, &[3.0, 4.0], false));
    batch.push(&encode_binary("d1", 3.0, &[1.0], false, None));
    batch.push(&encode_binary("d2", 4.0, &[1.0, 2.0], false, None));
    assert_eq!(batch.records(), 4);
    let bytes = batch.take();
    assert_eq!(batch.records(), 0, "taking empties it");
    assert_eq!(records_in(&bytes), 4, "counted without decoding (micro-batches fill by records)");
    let got = decode_message(Some(b"d1"), &bytes, 2, 1 << 20);
    let ts: Vec<Result<f64, &str>> =
        got.iter().map(|r| r.as_ref().map(|r| r.ts).map_err(|e| e.kind())).collect();
    assert_eq!(ts, [Ok(1.0), Ok(2.0), Err("wrong_dimension"), Err("device_mismatch")]);
    assert!(got[0].as_ref().unwrap().known_normal);
    // A lone record's message decodes as before.
    let one = encode_binary("d1", 1.0, &[1.0, 2.0], false, None);
    assert_eq!(decode_message(None, &one, 2, 1024), vec![decode(None, &one, 2, 1024)]);
    assert_eq!((records_in(&one), records_in(b"MPB1")), (1, 1));
    // Framing: a length past the end, a cut length, no records at all.
    let refusal = |v: &[u8]| {
        let got = decode_message(None, v, 2, 1 << 20);
        assert_eq!(got.len(), 1, "one refusal for the message");
        got[0].as_ref().unwrap_err().to_string()
    };
    assert!(
        refusal(&bytes[..bytes.len() - 1]).contains("record 3 says"),
        "{}",
        refusal(&bytes[..bytes.len() - 1])
    );
    assert!(refusal(&[b"MPB1".as_slice(), &[7, 0]].concat()).contains("ends inside the length of record 0"));
    assert!(refusal(b"MPB1").contains("no records"));
    // Over the message limit: refused whole, unopened.
    assert!(refusal_kind(decode_message(None, &bytes, 2, 64)) == "oversized");
}

fn refusal_kind(got: Vec<Result<metapu::monitor::record::FeatureRecord, InvalidRecord>>) -> &'static str {
    assert_eq!(got.len(), 1);
    got[0].as_ref().unwrap_err().kind()
}

/// A record may carry its packet's context, in JSON and in binary; one without is as
/// valid; a context with an unknown field or a bad address is refused, never guessed.
#[test]
fn records_carry_packet_context_in_both_formats() {
    use metapu::monitor::record::encode_with_context;
    use metapu::traffic::context::{Context, Direction};
    let ctx = Context {
        src_ip: Some("192.168.1.7".parse().unwrap()),
        dst_ip: Some("2001:db8::1".parse().unwrap()),
        src_port: 40000,
        dst_port: 23,
        proto: 6,
        tcp_flags: 2,
        bytes: 74,
        direction: Some(Direction::Outbound),
        device_mac: Some(metapu::traffic::context::Mac(0x0011_2233_4455)),
        arp: None,
        peer_name: Some(metapu::traffic::peer_names::PeerName::new("cloud.example.com").unwrap()),
    };
    let json = encode_with_context("d1", 1.5, &[1.0, -2.5], false, Some(&ctx));
    let bin = encode_binary("d1", 1.5, &[1.0, -2.5], false, Some(&ctx));
    let (from_json, from_bin) = (decode(None, &json, 2, 1024).unwrap(), decode(None, &bin, 2, 1024).unwrap());
    assert_eq!(from_json.context, Some(ctx));
    assert_eq!(from_json, from_bin);
    let text = String::from_utf8(json).unwrap();
    assert!(
        text.contains(r#""dst_ip":"2001:db8::1""#) && text.contains(r#""direction":"outbound""#),
        "{text}"
    );
    assert!(text.contains(r#""device_mac":"00:11:22:33:44:55""#), "{text}");
    assert_eq!(decode(None, &encode("d1", 1.5, &[1.0, -2.5], false), 2, 1024).unwrap().context, None);
    let partial =
        br#"{"device": "d1", "ts": 1, "features": [1, 2], "context": {"dst_port": 53, "proto": 17}}"#;
    let c = decode(None, partial, 2, 1024).unwrap().context.unwrap();
    assert_eq!((c.dst_port, c.proto, c.src_ip, c.direction), (53, 17, None, None));
    for bad in [
        r#"{"device": "d1", "ts": 1, "features": [1, 2], "context": {"port": 53}}"#,
        r#"{"device": "d1", "ts": 1, "features": [1, 2], "context": {"src_ip": "10.0.0.300"}}"#,
        r#"{"device": "d1", "ts": 1, "features": [1, 2], "context": {"direction": "sideways"}}"#,
        r#"{"device": "d1", "ts": 1, "features": [1, 2], "context": {"device_mac": "00:11:22"}}"#,
        r#"{"device": "d1", "ts": 1, "features": [1, 2], "context": {"peer_name": "a b.com"}}"#,
    ] {
        assert_eq!(decode(None, bad.as_bytes(), 2, 1024).unwrap_err().kind(), "malformed", "{bad}");
    }
    let bad_name = br#"{"device": "d1", "ts": 1, "features": [1, 2], "context": {"peer_name": "a b.com"}}"#;
    let why = decode(None, bad_name, 2, 1024).unwrap_err().to_string();
    assert!(why.contains(r#"peer name "a b.com" is not a DNS name"#), "{why}");
    let mut cut = bin.clone();
    cut.truncate(bin.len() - 3);
    assert!(decode(None, &cut, 2, 1024).unwrap_err().to_string().contains("ends inside the context"));
}

/// The nice value in a /proc `stat` file (field 19).
#[cfg(target_os = "linux")]
fn nice_in(stat: &str) -> Option<i32> {
    let after_name = &stat[stat.rfind(')')? + 1..];
    after_name.split_whitespace().nth(16)?.parse().ok()
}

/// Nice value of this process's thread named `name`.
#[cfg(target_os = "linux")]
fn thread_nice(name: &str) -> Option<i32> {
    std::fs::read_dir("/proc/self/task").ok()?.flatten().find_map(|task| {
        let comm = std::fs::read_to_string(task.path().join("comm")).ok()?;
        if comm.trim() != name {
            return None;
        }
        nice_in(&std::fs::read_to_string(task.path().join("stat")).ok()?)
    })
}

#[cfg(target_os = "linux")]
#[test]
fn the_adaptation_thread_yields_the_cpu_to_scoring() {
    let model = metapu::model::file::load(&crate::support::fixture().model_path, tch::Device::Cpu).unwrap();
    let own = nice_in(&std::fs::read_to_string("/proc/thread-self/stat").unwrap()).unwrap();
    let _adapter = Adapter::spawn(model, 0, 8);
    let expected = (own + 10).min(19);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let mut nice = thread_nice("metapu-adapt");
    while nice != Some(expected) && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(10));
        nice = thread_nice("metapu-adapt");
    }
    assert_eq!(nice, Some(expected), "the adapter runs 10 nice levels below the thread that started it");
}
