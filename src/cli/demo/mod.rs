//! `metapu demo`: the product on embedded defaults. The bundled broker on loopback,
//! the daemon with its default configuration and the shipped model, and traffic in
//! which some devices come under attack — a simulated fleet, real N-BaIoT rows and a
//! real capture made infected with a real scan. Each device is onboarded as an
//! operator would (its first 10 records labeled normal). The terminal shows what an
//! analyst receives (incidents as they open, update and close) and, every 20 s, each
//! device's ground truth beside the daemon's view; at the end a scorecard.

mod scorecard;
mod traffic;
mod view;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context};
use clap::Args;
use futures::stream::{FuturesUnordered, StreamExt};
use rdkafka::config::ClientConfig;
use rdkafka::producer::{FutureProducer, FutureRecord};
use tokio::signal::unix::{signal, SignalKind};

use metapu::broker::{self, LocalBroker};
use metapu::console;
use metapu::daemon;
use metapu::daemon::config::DaemonConfig;
use metapu::monitor::record;

use scorecard::{scorecard, DeviceLedger};
use traffic::DemoDevice;
use view::Event;

#[derive(Debug, Args)]
pub struct DemoArgs {
    /// The model the daemon loads.
    #[arg(long, default_value = "models/iot-default.safetensors")]
    model: PathBuf,
    /// Stop after this many seconds and print the scorecard (0: at Ctrl-C, or when
    /// the traffic, 10 minutes of it, has been sent).
    #[arg(long, default_value_t = 0)]
    duration: u64,
    /// Seeds the simulated fleet: device types, attack kinds, traffic.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Simulated devices; every third comes under attack.
    #[arg(long, default_value_t = 12)]
    devices: usize,
    /// Seconds of clean traffic before the attacks begin.
    #[arg(long, default_value_t = 30)]
    attack_after: u64,
    /// Real data: N-BaIoT rows (nbaiot/raw) and captures (pcap/); the repository's own
    /// data/ by default (data/README.md). A device whose data is missing is left out.
    #[arg(long, default_value = "data")]
    data: PathBuf,
    /// Where the infected capture is written.
    #[arg(long, default_value = "runs/demo")]
    work: PathBuf,
    /// Broker port on 127.0.0.1 (a free one if taken).
    #[arg(long, default_value_t = 9092)]
    port: u16,
    /// Where the daemon serves /metrics.
    #[arg(long, default_value = "127.0.0.1:9898")]
    http: String,
    /// Where the console serves the analyst's desk (a free port if taken).
    #[arg(long, default_value = "127.0.0.1:9899")]
    console: String,
}

/// Each device's first benign records labeled normal, as an operator onboards it.
const KNOWN_NORMAL: usize = 10;
/// Traffic when no --duration is given.
const DEFAULT_SPAN_S: f64 = 600.0;
const TABLE_EVERY: Duration = Duration::from_secs(20);

fn broker_binary() -> PathBuf {
    let local = broker::binary_in(Path::new("."));
    if local.exists() {
        local
    } else {
        broker::binary_in(Path::new(env!("CARGO_MANIFEST_DIR")))
    }
}

fn build_traffic(a: &DemoArgs, span_s: f64) -> anyhow::Result<Vec<DemoDevice>> {
    let attack_after = a.attack_after as f64;
    let started = Instant::now();
    let mut devices = traffic::simulated_fleet(a.devices, a.seed, attack_after, span_s);
    println!(
        "demo: simulated {} devices, {:.0} s of traffic each, in {:.1} s",
        devices.len(),
        span_s,
        started.elapsed().as_secs_f64()
    );
    match traffic::danmini(&a.data.join("nbaiot/raw"), attack_after) {
        Ok(d) => devices.push(d),
        Err(e) => println!("demo: no real N-BaIoT device ({e:#})"),
    }
    match traffic::infected_capture(&a.data.join("pcap"), &a.work, attack_after) {
        Ok(d) => devices.push(d),
        Err(e) => println!("demo: no real capture ({e:#})"),
    }
    Ok(devices)
}

pub fn run(a: DemoArgs) -> anyhow::Result<()> {
    if !a.model.exists() {
        bail!("no model at {} (the repository ships models/iot-default.safetensors; `make iot-model` rebuilds it)", a.model.display());
    }
    let span_s = if a.duration > 0 { a.duration as f64 } else { DEFAULT_SPAN_S };
    let devices = build_traffic(&a, span_s)?;
    let port = if std::net::TcpListener::bind(("127.0.0.1", a.port)).is_ok() {
        a.port
    } else {
        broker::free_port()?
    };
    let broker = LocalBroker::start(&broker_binary(), port)?;
    println!("demo: broker (bundled tansu) on {}", broker.bootstrap());
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let result = runtime.block_on(demo(&a, broker.bootstrap(), devices));
    drop(broker);
    println!("demo: broker stopped");
    result
}

fn daemon_config(a: &DemoArgs, bootstrap: &str) -> DaemonConfig {
    let mut cfg = DaemonConfig::defaults();
    cfg.kafka.brokers = bootstrap.into();
    cfg.model.path = a.model.clone();
    cfg.http.listen = a.http.clone();
    // The demo's producers are its own: their first records per device, labeled normal,
    // onboard the devices.
    cfg.windows.trust_input_labels = true;
    // The bundled broker completes a group join only after a heartbeat-scaled delay:
    // short session settings make the daemon consume within seconds, not twenty.
    cfg.kafka.consumer_options.insert("session.timeout.ms".into(), "6000".into());
    cfg.kafka.consumer_options.insert("heartbeat.interval.ms".into(), "500".into());
    cfg
}

/// GET `path` from the daemon's HTTP server: (status, body).
fn http_get(addr: SocketAddr, path: &str) -> std::io::Result<(u16, String)> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(s, "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n")?;
    let mut text = String::new();
    s.read_to_string(&mut text)?;
    let status = text.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    Ok((status, text.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default()))
}

fn scraped(body: &str, name: &str) -> Option<f64> {
    body.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

async fn demo(a: &DemoArgs, bootstrap: String, devices: Vec<DemoDevice>) -> anyhow::Result<()> {
    // From here on Ctrl-C (or a TERM) ends the demo with its scorecard and stops what it started.
    let mut interrupt = signal(SignalKind::interrupt())?;
    let mut terminate = signal(SignalKind::terminate())?;
    let cfg = daemon_config(a, &bootstrap);
    daemon::use_one_torch_thread();
    let daemon = daemon::start(cfg.clone()).await.context("starting the daemon")?;
    let http = daemon.http_addr;
    println!("demo: daemon running with the default configuration and {}", a.model.display());
    println!("demo: metrics at http://{http}/metrics (health: /healthz, /readyz)");
    println!(
        "demo: Grafana: point a Prometheus at it (dashboards/prometheus-scrape.yaml), then import \
         dashboards/metapu.json (or provision dashboards/provisioning/)"
    );
    let console = start_console(a, &cfg).await?;
    let ready = async {
        for _ in 0..600 {
            if matches!(http_get(http, "/readyz"), Ok((200, _))) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        false
    };
    tokio::select! {
        ok = ready => if !ok {
            println!("demo: the daemon is not ready after 60 s; sending anyway (it reads from the topic's start)");
        },
        _ = interrupt.recv() => return stop_early(daemon, console).await,
        _ = terminate.recv() => return stop_early(daemon, console).await,
    }

    let mut ledgers: Vec<DeviceLedger> = devices
        .iter()
        .map(|d| {
            let times = d.records.iter().map(|r| r.at_s).collect();
            // The table shows what the traffic is, not where it was written.
            let origin = d.origin.split(',').next().unwrap_or_default();
            DeviceLedger::new(&d.name, origin, d.attack.as_deref(), times, d.attack_start())
        })
        .collect();
    // The simulated fleet's span; the real capture is longer and is cut there too.
    let until_s = if a.duration > 0 { a.duration as f64 } else { DEFAULT_SPAN_S };
    let schedule = traffic::schedule(&devices, until_s);
    println!(
        "demo: {} devices, {} records to send; Ctrl-C stops everything and prints the scorecard",
        devices.len(),
        schedule.len()
    );
    for d in &devices {
        let what = match (&d.attack, d.attack_start()) {
            (Some(kind), Some(i)) => format!("attacked by {kind} from {:.0} s", d.records[i].at_s),
            _ => "clean".into(),
        };
        println!("demo:   {:<18} {what:<36} {}", d.name, d.origin);
    }

    let (tx, rx) = mpsc::channel();
    let stop = Arc::new(AtomicBool::new(false));
    let watcher = {
        let (b, s) = (bootstrap.clone(), Arc::clone(&stop));
        let (incidents, priors) = (cfg.kafka.incidents_topic.clone(), cfg.kafka.priors_topic.clone());
        std::thread::spawn(move || view::watch(b, incidents, priors, tx, s))
    };
    let producer: FutureProducer = ClientConfig::new().set("bootstrap.servers", &bootstrap).create()?;
    let input = cfg.kafka.input_topics[0].clone();
    let epoch = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64());
    let started = Instant::now();
    let mut pending = FuturesUnordered::new();
    let mut produce_errors = 0u64;
    let mut labeled = vec![0usize; devices.len()];
    let mut next = 0usize;
    let mut last_table = Instant::now();
    let mut interrupted = false;
    let show = |rx: &mpsc::Receiver<Event>, ledgers: &mut Vec<DeviceLedger>, now_s: f64| {
        while let Ok(event) = rx.try_recv() {
            match event {
                Event::Prior { device, attack_share } => {
                    if let Some(d) = ledgers.iter_mut().find(|d| d.name == device) {
                        d.attack_share = Some(attack_share);
                    }
                }
                Event::Incident(v) => {
                    let device = v["device"].as_str().unwrap_or_default();
                    let id = v["incident_id"].as_str().unwrap_or_default();
                    if let Some(d) = ledgers.iter_mut().find(|d| d.name == device) {
                        match v["event"].as_str() {
                            Some("opened") => {
                                d.opened(id, v["first_ts"].as_f64().unwrap_or(0.0) - epoch, now_s)
                            }
                            Some("reopened") => d.reopened(id),
                            Some("closed") => d.closed(id, now_s),
                            _ => {}
                        }
                    }
                    let ledger = ledgers.iter().find(|d| d.name == device);
                    println!("{}", view::incident_lines(&v, ledger, now_s));
                }
            }
        }
    };
    loop {
        let now_s = started.elapsed().as_secs_f64();
        while let Some(&(at, d, i)) = schedule.get(next) {
            if at > now_s {
                break;
            }
            let dev = &devices[d];
            let r = &dev.records[i];
            let known_normal = !r.attack && labeled[d] < KNOWN_NORMAL;
            labeled[d] += usize::from(known_normal);
            let value = record::encode_with_context(
                &dev.name,
                epoch + r.at_s,
                &r.row,
                known_normal,
                r.context.as_ref(),
            );
            match producer.send_result(FutureRecord::to(&input).key(&dev.name).payload(&value)) {
                Ok(delivery) => pending.push(delivery),
                Err((e, _)) => {
                    produce_errors += 1;
                    if produce_errors == 1 {
                        eprintln!("demo: produce failed: {e}");
                    }
                }
            }
            ledgers[d].sent += 1;
            next += 1;
        }
        show(&rx, &mut ledgers, now_s);
        if last_table.elapsed() >= TABLE_EVERY {
            last_table = Instant::now();
            println!("\n[{now_s:6.1} s] {next} records sent\n{}", view::table(&ledgers, now_s));
        }
        if next >= schedule.len() || now_s >= until_s {
            break;
        }
        let wait = schedule.get(next).map_or(0.1, |&(at, _, _)| (at - now_s).clamp(0.001, 0.1));
        tokio::select! {
            _ = interrupt.recv() => { interrupted = true; break; }
            _ = terminate.recv() => { interrupted = true; break; }
            _ = tokio::time::sleep(Duration::from_secs_f64(wait)) => {}
            Some(result) = pending.next(), if !pending.is_empty() => {
                let failure = match result {
                    Ok(Ok(_)) => None,
                    Ok(Err((e, _))) => Some(e.to_string()),
                    Err(_) => Some("the producer dropped the record".to_string()),
                };
                if let Some(e) = failure {
                    produce_errors += 1;
                    if produce_errors == 1 {
                        eprintln!("demo: delivery failed: {e}");
                    }
                }
            }
        }
    }
    let elapsed_s = started.elapsed().as_secs_f64();
    println!(
        "\ndemo: {} after {elapsed_s:.0} s; waiting 3 s for the last events",
        if interrupted { "stopping" } else { "traffic sent" }
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    show(&rx, &mut ledgers, started.elapsed().as_secs_f64());
    let scored =
        http_get(http, "/metrics").ok().and_then(|(_, body)| scraped(&body, "metapu_records_scored_total"));
    stop.store(true, Ordering::Relaxed);
    let _ = watcher.join();
    daemon.shutdown().await?;
    console.stop().await?;
    println!("demo: daemon and console stopped");
    println!("\n{}", view::table(&ledgers, elapsed_s));
    let card = scorecard(&ledgers, elapsed_s, scored);
    print_scorecard(&card);
    if produce_errors > 0 {
        println!("demo: {produce_errors} records could not be sent");
    }
    Ok(())
}

async fn stop_early(daemon: daemon::Daemon, console: console::Running) -> anyhow::Result<()> {
    println!("demo: stopping before any traffic was sent");
    daemon.shutdown().await?;
    console.stop().await?;
    Ok(())
}

/// The console beside the daemon, on its configuration, with one analyst, `demo`, whose
/// fresh token is in the work folder's tokens file (printed: the demo's analyst is
/// whoever runs it). On loopback the pages need no token; a verdict does.
async fn start_console(a: &DemoArgs, daemon: &DaemonConfig) -> anyhow::Result<console::Running> {
    use console::access::{new_token, tokens_line, Role};
    let mut cfg = daemon.clone();
    std::fs::create_dir_all(&a.work).with_context(|| format!("creating {}", a.work.display()))?;
    let token = new_token();
    cfg.console.tokens_file = a.work.join("console-tokens");
    std::fs::write(&cfg.console.tokens_file, tokens_line("demo", Role::Answer, &token) + "\n")
        .context("writing the console's tokens")?;
    cfg.console.listen = if std::net::TcpListener::bind(&a.console).is_ok() {
        a.console.clone()
    } else {
        "127.0.0.1:0".into()
    };
    cfg.console.anonymous_reads =
        cfg.console.listen.parse::<std::net::SocketAddr>().is_ok_and(|a| a.ip().is_loopback());
    let console = console::start(&cfg, None).await.context("starting the console")?;
    println!(
        "demo: console at http://{}/ (incidents, devices; to give verdicts, sign in as the analyst demo with the token {token})",
        console.addr,
    );
    Ok(console)
}

fn print_scorecard(card: &scorecard::Scorecard) {
    let opt = |v: Option<f64>, unit: &str| v.map_or("-".into(), |v| format!("{v:.1}{unit}"));
    println!("scorecard");
    println!("  attacked devices detected        {} of {}", card.detected, card.attacked);
    if !card.already_open.is_empty() {
        println!(
            "  not detected, but an incident     {} (opened on benign traffic before the attack, still open)",
            card.already_open.join(", ")
        );
    }
    if !card.missed.is_empty() {
        println!("  missed                           {}", card.missed.join(", "));
    }
    println!("  attack records to the incident   {} (median)", opt(card.median_records_to_incident, ""));
    println!("  attack start to the incident     {} (median)", opt(card.median_seconds_to_incident, " s"));
    println!("  false incidents, clean devices   {} on {}", card.false_incidents_clean, card.clean);
    println!("  false incidents before an attack {}", card.false_incidents_before_attack);
    println!(
        "  records scored                   {} ({} records/s)",
        opt(card.records_scored, ""),
        opt(card.records_scored.map(|n| n / card.elapsed_s.max(1e-9)), "")
    );
    println!("{}", card.line());
}
