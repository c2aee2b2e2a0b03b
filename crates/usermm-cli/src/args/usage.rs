//! [`UsageError`]: a mistake in the arguments. `main` prints it on one line
//! (`usermm: error: ...`) and exits with status 2, as clap does for its own usage errors, and
//! so it does for a path `usermm_host::files` refuses ([`is_usage_error`]); any other error
//! is a failure while running (status 1).

/// A mistake in the arguments: printed on one line, exit status 2.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsageError(pub String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// Whether `e` is a mistake in the arguments (exit status 2): a [`UsageError`], or a path
/// `usermm_host::files` refused (a link, a device, a directory that is not a report...) before
/// touching anything.
pub fn is_usage_error(e: &anyhow::Error) -> bool {
    e.downcast_ref::<UsageError>().is_some()
        || e.downcast_ref::<usermm_host::files::FileError>()
            .is_some_and(usermm_host::files::FileError::is_refusal)
}

/// `Err(UsageError)` as an `anyhow::Error`.
pub fn usage<T>(msg: impl Into<String>) -> anyhow::Result<T> {
    Err(UsageError(msg.into()).into())
}

/// `s` with every control character shown as an escape (`\u{1b}`), so that an argument or a
/// file's text in an error line cannot drive the terminal ([`usermm::text::visible`]).
pub use usermm::text::visible;

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
