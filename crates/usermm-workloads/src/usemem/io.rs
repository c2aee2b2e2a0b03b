//! Where a usemem run's lines go: [`Io`], with [`StdIo`] (the terminal) and [`Capture`]
//! (the tests, and `--json`, which prints a record instead).
//!
//! usemem writes each throughput line with `write(1, ...)` after flushing stdio, and its
//! other stdout lines through stdio — so with `fflush` before every direct write, whatever it
//! prints reaches a file or a pipe in the order it happened. Writing each line as it is made
//! keeps that order; nothing is buffered here. What stdio's buffering does show — a line the
//! parent printed without flushing is copied into every process it forks — is modelled by
//! `program.rs` and the workers, asking [`Io::full_buffered`] whether stdout is a terminal.

use std::collections::VecDeque;
use std::io::{IsTerminal, Read, Write};
use std::sync::Mutex;

/// A usemem run's standard streams.
pub trait Io: Send + Sync {
    /// Write to stdout now.
    fn out(&self, s: &str);
    /// Write to stderr now.
    fn err(&self, s: &str);
    /// One byte of stdin; `None` at its end.
    fn getchar(&self) -> Option<u8>;
    /// Would C stdio buffer stdout fully (a file or a pipe, not a terminal)? Default: no.
    fn full_buffered(&self) -> bool {
        false
    }
}

/// The process's own stdin, stdout and stderr (write errors such as a closed pipe are
/// ignored, as usemem ignores them).
#[derive(Debug, Default)]
pub struct StdIo;

impl Io for StdIo {
    fn out(&self, s: &str) {
        let mut o = std::io::stdout().lock();
        let _ = o.write_all(s.as_bytes());
        let _ = o.flush();
    }

    fn err(&self, s: &str) {
        let _ = std::io::stderr().lock().write_all(s.as_bytes());
    }

    fn getchar(&self) -> Option<u8> {
        let mut b = [0u8; 1];
        match std::io::stdin().lock().read(&mut b) {
            Ok(1) => Some(b[0]),
            _ => None,
        }
    }

    fn full_buffered(&self) -> bool {
        !std::io::stdout().is_terminal()
    }
}

/// The most bytes of stdout a [`Capture`] keeps (a run's lines; `-r` with a billion walks
/// prints a billion dots, which are counted, not kept).
pub const CAPTURE_LIMIT: usize = 16 << 20;

/// Streams kept in memory.
#[derive(Debug, Default)]
pub struct Capture {
    /// Stdout as written, up to [`CAPTURE_LIMIT`] bytes; then how many more were written.
    out: Mutex<(String, u64)>,
    err: Mutex<String>,
    input: Mutex<VecDeque<u8>>,
    /// Also copy stderr to the process's (for `--json` runs, which still show notes).
    tee_err: bool,
    /// Behave as a file would for C stdio ([`Io::full_buffered`]); kept lines are still
    /// kept as they are written.
    as_file: bool,
}

impl Capture {
    /// Kept stdout; stderr also written to the process's stderr.
    pub fn tee_stderr() -> Self {
        Capture {
            tee_err: true,
            ..Default::default()
        }
    }

    /// Kept streams, stdout standing for a file (fully buffered by C stdio).
    pub fn as_file() -> Self {
        Capture {
            as_file: true,
            ..Default::default()
        }
    }

    /// With `input` as stdin.
    pub fn with_input(input: &str) -> Self {
        Capture {
            input: Mutex::new(input.bytes().collect()),
            ..Default::default()
        }
    }

    /// Stdout as written; past [`CAPTURE_LIMIT`] bytes, the first ones and a line that says
    /// how many more were not kept.
    pub fn stdout(&self) -> String {
        let (kept, more) = &*self.out.lock().unwrap_or_else(|e| e.into_inner());
        if *more == 0 {
            return kept.clone();
        }
        format!("{kept}\n[usermm: {more} more bytes of stdout were not kept]\n")
    }

    pub fn stderr(&self) -> String {
        self.err.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

impl Io for Capture {
    fn out(&self, s: &str) {
        let (kept, more) = &mut *self.out.lock().unwrap_or_else(|e| e.into_inner());
        if *more == 0 && kept.len() + s.len() <= CAPTURE_LIMIT {
            kept.push_str(s);
        } else {
            *more += s.len() as u64;
        }
    }

    fn err(&self, s: &str) {
        if self.tee_err {
            StdIo.err(s);
        }
        self.err
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push_str(s);
    }

    fn full_buffered(&self) -> bool {
        self.as_file
    }

    fn getchar(&self) -> Option<u8> {
        self.input
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pop_front()
    }
}
