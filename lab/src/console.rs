//! `metapu-lab console`: the console's pages over what a replay would have published
//! (`metapu-lab week --published`), read-only: a device's week as an analyst would
//! have seen it, with no broker and no daemon.

use std::io::BufRead;
use std::path::PathBuf;

use anyhow::Context;
use clap::Args;

#[derive(Debug, Args)]
pub struct ConsoleArgs {
    /// The lines `--published` wrote.
    #[arg(long)]
    published: PathBuf,
    #[arg(long, default_value = "127.0.0.1:9899")]
    listen: String,
}

pub fn run(a: ConsoleArgs) -> anyhow::Result<()> {
    let file = std::fs::File::open(&a.published).with_context(|| format!("{}", a.published.display()))?;
    let lines = std::io::BufReader::new(file).lines().map_while(Result::ok);
    let (desk, unreadable) = metapu::console::desk_from_lines(lines, usize::MAX);
    anyhow::ensure!(unreadable == 0, "{}: {unreadable} lines not read", a.published.display());
    let (incidents, devices) = (desk.incident_count(), desk.devices().count());
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    runtime.block_on(async {
        let stop = async {
            let _ = tokio::signal::ctrl_c().await;
        };
        let (addr, server) = metapu::console::serve_read_only(desk, &a.listen, stop).await?;
        println!("console: {incidents} incidents of {devices} devices, at http://{addr}/ (Ctrl-C stops)");
        server.await?;
        anyhow::Ok(())
    })
}
