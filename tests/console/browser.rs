//! The analyst's desk in Debian's Chromium, driven through chromedriver: the analyst
//! signs in with a token of their own; a device's incident appears on the console's
//! page; the analyst dismisses it with the button; the page shows it dismissed by the
//! name the token carries; the behaviour's return shows as suppressed. A page of
//! another origin reads nothing and gives no verdict, a request naming another host
//! gets nothing, and the API refuses a verdict without a token, from a reader, a
//! replayed one (also after the console and the daemon both restart, and straight on
//! the feedback topic), a malformed one and one on an unknown incident. A screenshot of
//! each page goes under `target/test-output/console/` (or `$METAPU_TEST_OUTPUT/console/`).

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

/// `click`'s element clicked, and the element `then` that the page it leads to holds
/// (a click that submits a form or follows a link returns before the next page loads:
/// reading the page at once may read the old one).
async fn click_then(c: &Client, click: Locator<'_>, then: Locator<'_>) -> fantoccini::elements::Element {
    c.find(click).await.unwrap().click().await.unwrap();
    c.wait().at_most(Duration::from_secs(30)).for_element(then).await.expect("the next page loads")
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
    // two analysts' tokens added with its own command (ana answers, rui reads).
    cfg.console.tokens_file = dir.path().join("console-tokens");
    let console_port = free_port();
    cfg.console.listen = format!("127.0.0.1:{console_port}");
    let config = write_config(&cfg, dir.path());
    let add = |name: &str, role: &str| {
        let out = std::process::Command::new(metapu_binary())
            .args(["console", "--config"])
            .arg(&config)
            .args(["add-analyst", name, "--role", role])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    };
    let (token, reader) = (add("ana", "answer"), add("rui", "read"));
    let tokens = std::fs::read_to_string(&cfg.console.tokens_file).unwrap();
    assert!(!tokens.contains(&token) && tokens.contains("ana answer sha256:"), "{tokens}");
    let mut console = metapu_with_config("console", &config);
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
    // Reading needs a token: the desk sends the analyst to sign in.
    page_until(&c, &format!("{base}/"), "Sign in", Duration::from_secs(30)).await;
    assert!(c.current_url().await.unwrap().path().ends_with("/login"));
    c.find(Locator::Id("login-token")).await.unwrap().send_keys("not-the-token").await.unwrap();
    let refused = click_then(&c, Locator::Id("sign-in"), Locator::Id("login-message")).await;
    let refused = refused.text().await.unwrap();
    assert_eq!(refused, "wrong token");
    c.find(Locator::Id("login-token")).await.unwrap().send_keys(&token).await.unwrap();
    // Signed in (its cookie set) once the incidents' page, with its filter, is back.
    click_then(&c, Locator::Id("sign-in"), Locator::Css("form.filter")).await;
    let listed = page_until(&c, &format!("{base}/"), "device cam", Duration::from_secs(60)).await;
    assert!(listed.contains("ana (answer)"), "signed in by the token's name: {listed}");
    assert!(listed.contains("Open (1)"), "{listed}");
    screenshot(&c, "incidents").await;

    // Its page, and the verdict by button.
    let open_link = Locator::Css("#open-incidents td a[href^='/incidents/']");
    click_then(&c, open_link, Locator::Id("note")).await;
    let incident_url = c.current_url().await.unwrap().to_string();
    let id = incident_url.rsplit('/').next().unwrap().to_string();
    c.find(Locator::Id("note")).await.unwrap().send_keys("nightly upload").await.unwrap();
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
    assert!(verdicts.contains("from console 127.0.0.1"), "who, when and from where: {verdicts}");
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

    // A page of another origin: its script neither reads the desk nor gives a verdict
    // with the analyst's session (no CORS answer, a SameSite=Strict cookie, and a JSON
    // post needs a preflight nothing here answers).
    c.goto("data:text/html,<p>another site</p>").await.unwrap();
    let from_elsewhere = |script: &'static str, url: String| {
        let c = c.clone();
        async move {
            let v = c.execute_async(script, vec![serde_json::json!(url)]).await.unwrap();
            v.as_str().unwrap_or_default().to_string()
        }
    };
    let read = from_elsewhere(
        "const done = arguments[arguments.length - 1];
         fetch(arguments[0], { credentials: 'include' }).then((r) => r.text())
           .then((t) => done('read: ' + t), (e) => done('refused: ' + e));",
        format!("{base}/api/incidents"),
    )
    .await;
    assert!(read.starts_with("refused"), "another origin read the desk: {read}");
    let posted = from_elsewhere(
        "const done = arguments[arguments.length - 1];
         fetch(arguments[0], { method: 'POST', credentials: 'include', headers: { 'Content-Type': 'application/json' },
           body: JSON.stringify({ incident_id: 'x', verdict: 'confirmed' }) })
           .then((r) => done('answered ' + r.status), (e) => done('refused: ' + e));",
        format!("{base}/api/verdicts"),
    )
    .await;
    assert!(posted.starts_with("refused"), "another origin posted a verdict: {posted}");
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
        serde_json::json!({ "incident_id": incident, "verdict": "false_positive" }).to_string()
    };
    let json = "application/json";
    let status = |r: reqwest::Response| r.status().as_u16();
    assert_eq!(status(post(verdict(&id), None, json).await.unwrap()), 401, "no token, no verdict");
    assert_eq!(status(post(verdict(&id), Some("guess"), json).await.unwrap()), 401);
    assert_eq!(
        status(post(verdict(&id), Some(reader.as_str()), json).await.unwrap()),
        403,
        "a reader gives none"
    );
    assert_eq!(
        status(post(verdict(&id), Some(token.as_str()), json).await.unwrap()),
        409,
        "a replayed verdict"
    );
    assert_eq!(status(post(verdict("nope"), Some(token.as_str()), json).await.unwrap()), 404);
    assert_eq!(status(post("{\"incident_id\":".into(), Some(token.as_str()), json).await.unwrap()), 400);
    let signed = serde_json::json!({ "incident_id": id, "verdict": "confirmed", "by": "eve" }).to_string();
    assert_eq!(status(post(signed, Some(token.as_str()), json).await.unwrap()), 400, "`by` is the token's");
    let form = format!("incident_id={id}&verdict=confirmed");
    assert_eq!(
        status(post(form, Some(token.as_str()), "application/x-www-form-urlencoded").await.unwrap()),
        415
    );
    // Reading needs a token; a request naming another host (a rebound DNS name) gets nothing.
    let api = format!("{base}/api/incidents?device=cam");
    assert_eq!(status(http.get(&api).send().await.unwrap()), 401);
    let rebound =
        http.get(&api).bearer_auth(&reader).header("host", "rebound.evil.example").send().await.unwrap();
    assert_eq!(rebound.status().as_u16(), 421);
    assert!(!rebound.text().await.unwrap().contains("cam"));
    let headers = http.get(format!("{base}/login")).send().await.unwrap().headers().clone();
    let csp = headers["content-security-policy"].to_str().unwrap();
    assert!(csp.contains("frame-ancestors 'none'") && csp.contains("script-src 'self'"), "{csp}");
    assert_eq!(headers["x-content-type-options"], "nosniff");
    assert_eq!(headers["referrer-policy"], "no-referrer");
    let rows = |text: String| -> Vec<serde_json::Value> {
        let listed: serde_json::Value = serde_json::from_str(&text).unwrap();
        listed["incidents"].as_array().unwrap().clone()
    };
    let listed = rows(http.get(&api).bearer_auth(&reader).send().await.unwrap().text().await.unwrap());
    assert_eq!(listed.len(), 2, "{listed:?}");
    let verdicts: Vec<serde_json::Value> =
        listed.iter().flat_map(|r| r["verdicts"].as_array().unwrap().clone()).collect();
    assert_eq!(verdicts.len(), 1, "nothing the API refused reached the daemon: {listed:?}");
    let given = verdicts[0].clone();
    assert_eq!((given["by"].as_str(), given["from"].as_str()), (Some("ana"), Some("console 127.0.0.1")));
    assert!(given["at"].as_f64().is_some_and(|t| t > 1.7e9), "{given}");
    let metrics = http.get(format!("{base}/metrics")).send().await.unwrap().text().await.unwrap();
    assert_eq!(metric(&metrics, "metapu_console_verdicts_total{result=\"sent\"}"), Some(1.0), "{metrics}");
    assert_eq!(metric(&metrics, "metapu_console_verdicts_total{result=\"denied\"}"), Some(4.0), "{metrics}");

    // The console and the daemon both restart; the same verdict (its id) again is
    // refused by the console, and straight on the feedback topic by the daemon, whose
    // state keeps the ids: nothing changes.
    drop(console);
    stop(daemon).await;
    let daemon = daemon::start(cfg.clone()).await.expect("daemon starts again");
    console = metapu_with_config("console", &config);
    let replay =
        serde_json::json!({ "incident_id": id, "verdict": "false_positive", "id": given["id"] }).to_string();
    let until = Instant::now() + Duration::from_secs(60);
    let answer = loop {
        match post(replay.clone(), Some(token.as_str()), json).await {
            Ok(r) if r.status().as_u16() != 404 => break r,
            _ if Instant::now() > until => panic!("the restarted console never knew incident {id}"),
            _ => tokio::time::sleep(Duration::from_millis(300)).await,
        }
    };
    let (code, why) = (answer.status().as_u16(), answer.text().await.unwrap());
    assert_eq!(code, 409, "replayed after both restarted: {why}");
    let fb: metapu::daemon::Feedback = serde_json::from_value(given.clone()).unwrap();
    let message = metapu::monitor::feedback::FeedbackMessage::Verdict(fb).encode();
    send(&p, &cfg.kafka.feedback_topic, Some("cam"), &message).await;
    let until = Instant::now() + Duration::from_secs(60);
    let refused = loop {
        let row = http.get(format!("{base}/api/incidents/{id}")).bearer_auth(&reader).send().await.unwrap();
        let row: serde_json::Value = serde_json::from_str(&row.text().await.unwrap()).unwrap_or_default();
        if let Some(r) = row["refused"].as_array().filter(|r| !r.is_empty()) {
            break (r.clone(), row);
        }
        assert!(Instant::now() < until, "the daemon never refused the replay: {row}");
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    let reason = refused.0[0]["reason"].as_str().unwrap_or_default().to_string();
    assert!(reason.contains("taken before"), "{reason}");
    let verdicts = refused.1["verdicts"].as_array().unwrap();
    assert_eq!(verdicts.len(), 1, "the replay changed nothing: {}", refused.1);
    drop(console);
    stop(daemon).await;
}
