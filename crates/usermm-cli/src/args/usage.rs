//! [`UsageError`]: a mistake in the arguments. `main` prints it on one line
//! (`usermm: error: ...`) and exits with status 2, as clap does for its own usage errors; any
//! other error is a failure while running (status 1).

/// A mistake in the arguments: printed on one line, exit status 2.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsageError(pub String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// `Err(UsageError)` as an `anyhow::Error`.
pub fn usage<T>(msg: impl Into<String>) -> anyhow::Result<T> {
    Err(UsageError(msg.into()).into())
}

/// `s` with every control character shown as an escape (`\u{1b}`), so that an argument or a
/// file's text in an error line cannot drive the terminal.
pub fn visible(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// Refuse up front a run that would commit more of this host's memory than it has available
/// (`MemAvailable`): `what` says which argument asks for `bytes` and why. No check when the
/// host does not say.
pub fn check_host_memory(bytes: u64, what: impl FnOnce() -> String) -> anyhow::Result<()> {
    let Some(avail) = usermm_host::facts::mem_available_bytes() else {
        return Ok(());
    };
    if bytes > avail {
        return usage(format!(
            "{}: about {} MiB of this host's memory, which has {} MiB available",
            what(),
            bytes.div_ceil(1 << 20),
            avail >> 20
        ));
    }
    Ok(())
}
