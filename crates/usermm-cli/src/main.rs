//! `usermm`: parse, run, map the outcome to an exit status.
//!
//! Every error is printed as one line, `usermm: error: ...`. Mistakes in the arguments (clap's
//! usage errors, `UsageError`s and the paths `usermm_host::files` refuses) exit with 2,
//! failures while running with 1.
//!
//! A closed stdout (`usermm vmstat | head -1`) is not an error: like the coreutils we stop
//! quietly with status 0 rather than report a broken pipe nobody will read.

#![deny(unsafe_code)]

use std::process::ExitCode;

use usermm_cli::{args::is_usage_error, cli};

fn main() -> ExitCode {
    // A link or copy named `usemem` is vm-scalability's usemem (busybox style).
    if let Some(code) = usermm_cli::cmd::usemem::busybox() {
        return code;
    }
    // So is a link named `TEST_processes` or `TEST_threads` will-it-scale's binary: its
    // options become a `usermm will-it-scale` command line.
    let parsed = match usermm_cli::cmd::will_it_scale::busybox() {
        Some(Ok(argv)) => cli::parse_from(argv),
        Some(Err(status)) => return status,
        None => cli::parse(),
    };
    let cli = match parsed {
        Ok(cli) => cli,
        Err(status) => return status,
    };
    let result = cli::run(cli);
    // After a Ctrl-C the run dies of it, whatever it got done meanwhile.
    usermm_host::files::cleanup::end_if_interrupted();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            let status = if is_usage_error(&e) { 2 } else { 1 };
            eprintln!("usermm: error: {}", one_line(&format!("{e:#}")));
            ExitCode::from(status)
        }
    }
}

fn one_line(s: &str) -> String {
    usermm_cli::args::visible(&s.split_whitespace().collect::<Vec<_>>().join(" "))
}

fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain()
        .filter_map(|c| c.downcast_ref::<std::io::Error>())
        .any(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
}
