//! The analyst's desk in Debian's Chromium, driven through chromedriver: a device's
//! incident appears on the console's page; the analyst dismisses it with the button,
//! by name; the page shows it dismissed by that name; the behaviour's return shows as
//! suppressed; the API refuses a verdict without the token, a replayed one, a malformed
//! one and one on an unknown incident. A screenshot of each page goes under
//! `target/test-output/console/` (or `$METAPU_TEST_OUTPUT/console/`).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator};

use crate::support::*;
use metapu::daemon;
use metapu::data::Label;

const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
const CHROMIUM: &str = "/usr/bin/chromium";

fn output_dir() -> PathBuf {
    let base = std::env::var_os("METAPU_TEST_OUTPUT")
        .map_or_else(|| repo().join("target/test-output"), PathBuf::from);
    let dir = base.join("console");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// chromedriver on a free port, and a headless Chromium session through it.
async fn browser(profile: &std::path::Path) -> (KillOnDrop, Client) {
    assert!(
        std::path::Path::new(CHROMEDRIVER).exists() && std::path::Path::new(CHROMIUM).exists(),
        "Debian's chromium and chromium-driver are needed (scripts/setup.sh installs them as root: \
         apt-get install chromium chromium-driver)"
    );
    let port = free_port();
    let driver = KillOnDrop(
        std::process::Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("chromedriver starts"),
    );
    let mut caps = serde_json::Map::new();
    // As root, without a GPU, and without reaching for Google's hosts on a closed network.
    let args = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--window-size=1280,1400",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain([format!("--user-data-dir={}", profile.display())])
    .collect::<Vec<_>>();
    caps.insert("goog:chromeOptions".into(), serde_json::json!({ "binary": CHROMIUM, "args": args }));
    let connector = hyper_util::client::legacy::connect::HttpConnector::new();
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        match ClientBuilder::new(connector.clone())
            .capabilities(caps.clone())
            .connect(&format!("http://127.0.0.1:{port}"))
            .await
        {
            Ok(c) => return (driver, c),
            Err(e) if Instant::now() > until => panic!("no browser session: {e}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

/// Load `url` until its page's text contains `want`; the text.
async fn page_until(c: &Client, url: &str, want: &str, limit: Duration) -> String {
    let until = Instant::now() + limit;
    loop {
        c.goto(url).await.expect("page loads");
        let text = c.find(Locator::Css("body")).await.unwrap().text().await.unwrap();
        if text.contains(want) {
            return text;
        }
        assert!(Instant::now() < until, "{url} never showed {want:?}:\n{text}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

async fn screenshot(c: &Client, name: &str) {
    let png = c.screenshot().await.expect("screenshot");
    let path = output_dir().join(format!("{name}.png"));
    std::fs::write(&path, png).unwrap();
    println!("screenshot: {}", path.display());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_analyst_dismisses_an_incident_in_the_browser_and_sees_its_return_suppressed() {
    let fx = fixture();
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start();
    let boot = broker.bootstrap();
    let mut cfg = daemon_config(&boot, "console");
    cfg.incidents.open_k = 3;
    cfg.incidents.open_n = 5;
    let daemon = daemon::start(cfg.clone()).await.expect("daemon starts");

    // The console as an operator runs it: its own process, the daemon's configuration,
    // the token in its file.
    let token = "t0ken-for-the-test";
    cfg.console.token_file = dir.path().join("console-token");
    std::fs::write(&cfg.console.token_file, token).unwrap();
    let console_port = free_port();
    cfg.console.listen = format!("127.0.0.1:{console_port}");
    let config = write_config(&cfg, dir.path());
    let _console = metapu_with_config("console", &config);
    let base = format!("http://127.0.0.1:{console_port}");

    // A camera onboarded, its normal traffic, then an upload to its cloud: an incident.
    let p = producer(&boot);
    let input = cfg.kafka.input_topics[0].clone();
    let (normal, upload) = (fx.rows(0, Label::Positive), fx.rows(0, Label::Negative));
    let mut ts = 1.7e9;
    let mut send_rows = |rows: &[Vec<f32>], known: bool| {
        let values: Vec<Vec<u8>> = rows
            .iter()
            .map(|r| {
                ts += 1.0;
                outbound_record(ts, r, known, ("10.0.0.5", "52.1.2.3", 443), 1_000)
            })
            .collect();
        let (p, input) = (&p, &input);
        async move {
            for v in values {
                send(p, input, Some("cam"), &v).await;
            }
        }
    };
    send_rows(&normal[..10], true).await;
    send_rows(&normal[10..30], false).await;
    send_rows(&upload[..15], false).await;

    let profile = dir.path().join("chromium");
    let (_driver, c) = browser(&profile).await;
    let listed = page_until(&c, &format!("{base}/"), "device cam", Duration::from_secs(60)).await;
    assert!(listed.contains("Open (1)"), "{listed}");
    screenshot(&c, "incidents").await;

    // Its page, and the verdict by button.
    c.find(Locator::Css("#open-incidents td a[href^='/incidents/']")).await.unwrap().click().await.unwrap();
    let incident_url = c.current_url().await.unwrap().to_string();
    let id = incident_url.rsplit('/').next().unwrap().to_string();
    c.find(Locator::Id("by")).await.unwrap().send_keys("ana").await.unwrap();
    c.find(Locator::Id("note")).await.unwrap().send_keys("nightly upload").await.unwrap();
    c.find(Locator::Id("token")).await.unwrap().send_keys(token).await.unwrap();
    screenshot(&c, "incident-open").await;
    c.find(Locator::Id("false-positive")).await.unwrap().click().await.unwrap();
    // The script waits for the daemon's answer and shows the page again.
    let until = Instant::now() + Duration::from_secs(60);
    let standing = loop {
        let text = match c.find(Locator::Id("standing")).await {
            Ok(e) => e.text().await.unwrap_or_default(),
            Err(_) => String::new(),
        };
        if text.contains("dismissed") || Instant::now() > until {
            break text;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    assert_eq!(standing, "closed (dismissed)");
    let verdicts = c.find(Locator::Id("verdict-list")).await.unwrap().text().await.unwrap();
    assert!(verdicts.contains("false_positive by ana: nightly upload"), "{verdicts}");
    screenshot(&c, "incident-dismissed").await;
    let listed = page_until(&c, &format!("{base}/"), "dismissed by ana", Duration::from_secs(10)).await;
    assert!(listed.contains("Open (0)"), "{listed}");

    // The upload comes back: recorded as suppressed under the analyst's dismissal.
    send_rows(&normal[30..50], false).await;
    send_rows(&upload[15..30], false).await;
    let listed = page_until(
        &c,
        &format!("{base}/"),
        &format!("dismissed in incident {id} by ana"),
        Duration::from_secs(60),
    )
    .await;
    assert!(listed.contains("suppressed"), "{listed}");
    assert!(listed.contains("Open (0)"), "a suppressed incident is not raised: {listed}");
    screenshot(&c, "incidents-suppressed").await;
    page_until(&c, &format!("{base}/devices/cam"), "Remembered behaviours", Duration::from_secs(10)).await;
    let remembered = c.find(Locator::Id("remembered")).await.unwrap().text().await.unwrap();
    assert!(remembered.contains(&id) && remembered.contains("dismissed by ana"), "{remembered}");
    screenshot(&c, "device").await;
    c.close().await.unwrap();

    // The API: no token, a replay, malformed JSON, an unknown incident, a form.
    let http = reqwest::Client::new();
    let post = |body: String, bearer: Option<&str>, content_type: &str| {
        let mut r = http
            .post(format!("{base}/api/verdicts"))
            .header("content-type", content_type.to_string())
            .body(body);
        if let Some(t) = bearer {
            r = r.bearer_auth(t);
        }
        r.send()
    };
    let verdict = |incident: &str| {
        serde_json::json!({ "incident_id": incident, "verdict": "false_positive", "by": "eve" }).to_string()
    };
    let json = "application/json";
    let status = |r: reqwest::Response| r.status().as_u16();
    assert_eq!(status(post(verdict(&id), None, json).await.unwrap()), 401, "no token, no verdict");
    assert_eq!(status(post(verdict(&id), Some("guess"), json).await.unwrap()), 401);
    assert_eq!(status(post(verdict(&id), Some(token), json).await.unwrap()), 409, "a replayed verdict");
    assert_eq!(status(post(verdict("nope"), Some(token), json).await.unwrap()), 404);
    assert_eq!(status(post("{\"incident_id\":".into(), Some(token), json).await.unwrap()), 400);
    let form = format!("incident_id={id}&verdict=confirmed&by=eve");
    assert_eq!(status(post(form, Some(token), "application/x-www-form-urlencoded").await.unwrap()), 415);
    let text =
        http.get(format!("{base}/api/incidents?device=cam")).send().await.unwrap().text().await.unwrap();
    let listed: serde_json::Value = serde_json::from_str(&text).unwrap();
    let rows = listed["incidents"].as_array().unwrap();
    assert_eq!(rows.len(), 2, "{listed}");
    let verdicts: Vec<&serde_json::Value> =
        rows.iter().flat_map(|r| r["verdicts"].as_array().unwrap()).collect();
    assert_eq!(verdicts.len(), 1, "nothing the API refused reached the daemon: {listed}");
    let metrics = http.get(format!("{base}/metrics")).send().await.unwrap().text().await.unwrap();
    assert_eq!(metric(&metrics, "metapu_console_verdicts_total{result=\"sent\"}"), Some(1.0), "{metrics}");
    assert_eq!(metric(&metrics, "metapu_console_verdicts_total{result=\"denied\"}"), Some(3.0), "{metrics}");
    daemon.shutdown().await.unwrap();
}
