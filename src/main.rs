//! The `metapu` command line.

mod cli;

use clap::Parser;

fn main() -> std::process::ExitCode {
    let args = cli::Cli::parse();
    cli::init_logging(args.log_default());
    match cli::run(args) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        // The reader of our output went away (`metapu info M | head -3`): nothing to report.
        Err(e)
            if e.downcast_ref::<std::io::Error>()
                .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe) =>
        {
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {}", causes_once(&e));
            std::process::ExitCode::FAILURE
        }
    }
}

/// The error and its causes, each said once. Our error types name their cause in their
/// own message (so a log line with `%e` is whole), and anyhow's `{:#}` appends every cause
/// again: "cannot read model file M: No such file …" came out three times in one line.
fn causes_once(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain().map(ToString::to_string) {
        if !out.contains(&cause) {
            if !out.is_empty() {
                out.push_str(": ");
            }
            out.push_str(&cause);
        }
    }
    out
}
