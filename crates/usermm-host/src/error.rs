//! [`HostError`]: why a host child could not be started or used — a system call in the parent
//! failed, the child died, hung or spoke nonsense, or a fresh child's arena was not empty.

use crate::ops::MapsLine;

/// Why a host child could not be started or used.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    /// A system call in the parent failed.
    #[error("{what} failed: {}", std::io::Error::from_raw_os_error(*.errno))]
    Sys { what: &'static str, errno: i32 },
    /// The child died, hung or spoke nonsense.
    #[error("host child failed: {0}")]
    Child(String),
    /// Something is already mapped in the arena of a fresh child.
    #[error("the arena is not empty in a fresh host child: {0:?}")]
    ArenaBusy(Vec<MapsLine>),
}
