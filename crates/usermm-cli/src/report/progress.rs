//! [`Progress`]: a progress bar on stderr that stays silent unless stderr is a terminal (and
//! `CI` is unset, and this is not a test build), so that piped and logged output never holds
//! bar fragments.

use std::{borrow::Cow, io::IsTerminal, time::Duration};

/// A progress bar on stderr, or nothing: it draws only when stderr is a terminal, `CI` is
/// unset and this is not a test build. Cheap to clone; clones share one bar (hand them to
/// worker threads).
#[derive(Debug, Clone)]
pub struct Progress {
    bar: indicatif::ProgressBar,
}

impl Progress {
    /// Would a progress bar be drawn?
    pub fn enabled() -> bool {
        !cfg!(test) && std::env::var_os("CI").is_none() && std::io::stderr().is_terminal()
    }

    /// A bar counting to `len`, labelled `msg`.
    pub fn bar(len: u64, msg: impl Into<Cow<'static, str>>) -> Self {
        if !Self::enabled() {
            return Progress {
                bar: indicatif::ProgressBar::hidden(),
            };
        }
        let style = indicatif::ProgressStyle::with_template(
            "{msg:24} [{bar:40.cyan/blue}] {pos}/{len} {elapsed_precise} (eta {eta})",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
        .progress_chars("=> ");
        let bar = indicatif::ProgressBar::new(len)
            .with_style(style)
            .with_message(msg);
        bar.enable_steady_tick(Duration::from_millis(200));
        Progress { bar }
    }

    pub fn inc(&self, delta: u64) {
        self.bar.inc(delta);
    }

    pub fn set_message(&self, msg: impl Into<Cow<'static, str>>) {
        self.bar.set_message(msg);
    }

    /// Remove the bar from the terminal.
    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }

    pub fn is_hidden(&self) -> bool {
        self.bar.is_hidden()
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn hidden_in_tests() {
        assert!(Progress::bar(10, "x").is_hidden());
    }
}
