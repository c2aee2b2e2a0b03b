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
