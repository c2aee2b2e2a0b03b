//! [`UsageError`]: a mistake in the arguments. `main` prints it on one line
//! (`usermm: error: ...`) and exits with status 2, as clap does for its own usage errors, and
//! so it does for a path `usermm_host::files` refuses ([`is_usage_error`]); any other error
//! is a failure while running (status 1).

/// A mistake in the arguments: printed on one line, exit status 2.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

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

/// The variable that lowers the host memory a run may use below `MemAvailable` (a size:
/// `2G`, `512M`): a smaller budget than the host's, e.g. to leave room for other work.
pub const MEM_AVAILABLE_VAR: &str = "USERMM_HOST_MEM_AVAILABLE";

/// The host memory a run may use: `MemAvailable`, or [`MEM_AVAILABLE_VAR`] when that is
/// set lower. `None` when neither says.
pub fn host_memory_budget() -> Option<u64> {
    let avail = usermm_host::facts::mem_available_bytes();
    let budget = std::env::var(MEM_AVAILABLE_VAR)
        .ok()
        .and_then(|v| usermm::config::parse_size(&v).ok());
    match (avail, budget) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Refuse up front a run that would commit more of this host's memory than it may use
/// ([`host_memory_budget`]): `what` says which argument asks for `bytes` and why. No check
/// when the host does not say. Every command's check comes here, most through
/// [`check_machine_memory`].
pub fn check_host_memory(bytes: u64, what: impl FnOnce() -> String) -> anyhow::Result<()> {
    let Some(avail) = host_memory_budget() else {
        return Ok(());
    };
    if bytes > avail {
        return usage(format!(
            "{}: about {} of this host's memory, which has {} available",
            what(),
            crate::report::format::human_bytes(bytes.next_multiple_of(1 << 20)),
            crate::report::format::human_bytes(avail >> 20 << 20)
        ));
    }
    Ok(())
}

/// [`check_host_memory`] for a run on the machine `config`: what the machine commits at
/// boot and for `touched` bytes of RAM the run allocates (`usermm::host_cost`), plus
/// `extra` bytes the workload keeps beside it (threads, histograms, a host copy).
pub fn check_machine_memory(
    config: &usermm::MachineConfig,
    touched: u64,
    extra: u64,
    what: impl FnOnce() -> String,
) -> anyhow::Result<()> {
    let bytes = usermm::host_cost::host_bytes(config, touched).saturating_add(extra);
    check_host_memory(bytes, what)
}

/// Refuse a run of `bytes` on a virtual machine larger than the machine its profile models
/// (`topology.memory_gib`): the figures would be of a machine that cannot exist. `what`
/// names the argument that asks for `bytes`.
pub fn check_profile_memory(
    config: &usermm::MachineConfig,
    bytes: u64,
    what: impl FnOnce() -> String,
) -> anyhow::Result<()> {
    if config.time.mode != usermm::config::TimeMode::Virtual {
        return Ok(());
    }
    let Ok(p) = usermm::vtime::Profile::resolve(&config.time.profile) else {
        return Ok(());
    };
    let Some(gib) = p.topology().memory_gib else {
        return Ok(());
    };
    if bytes > gib << 30 {
        return usage(format!(
            "{}: more than the {} GiB of memory the machine of profile {} has",
            what(),
            gib,
            p.name()
        ));
    }
    Ok(())
}
