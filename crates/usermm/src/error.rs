//! Error values: the kernel's errnos for syscall-like entry points, and allocation failure.
//!
//! Running out of emulated memory is an ordinary result, never a panic.

use serde::Serialize;

/// A Linux errno, with the x86-64 numbering (so values compare 1:1 with a real kernel).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub struct Errno(pub i32);

impl Errno {
    pub const EPERM: Errno = Errno(1);
    pub const ENOENT: Errno = Errno(2);
    pub const EINTR: Errno = Errno(4);
    pub const EBADF: Errno = Errno(9);
    pub const EAGAIN: Errno = Errno(11);
    pub const ENOMEM: Errno = Errno(12);
    pub const EACCES: Errno = Errno(13);
    pub const EFAULT: Errno = Errno(14);
    pub const EBUSY: Errno = Errno(16);
    pub const EEXIST: Errno = Errno(17);
    pub const EINVAL: Errno = Errno(22);
    pub const ENOSPC: Errno = Errno(28);
    pub const EOVERFLOW: Errno = Errno(75);
    pub const EOPNOTSUPP: Errno = Errno(95);

    pub fn name(self) -> &'static str {
        match self.0 {
            1 => "EPERM",
            2 => "ENOENT",
            4 => "EINTR",
            9 => "EBADF",
            11 => "EAGAIN",
            12 => "ENOMEM",
            13 => "EACCES",
            14 => "EFAULT",
            16 => "EBUSY",
            17 => "EEXIST",
            22 => "EINVAL",
            28 => "ENOSPC",
            75 => "EOVERFLOW",
            95 => "EOPNOTSUPP",
            _ => "E?",
        }
    }
}

impl std::fmt::Display for Errno {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.name(), self.0)
    }
}

impl std::error::Error for Errno {}

/// Why a page allocation failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, thiserror::Error)]
pub enum AllocError {
    /// No free block of the requested order in any zone.
    #[error("out of memory")]
    NoMem,
    /// An order above `MAX_PAGE_ORDER`.
    #[error("order above MAX_PAGE_ORDER")]
    BadOrder,
}

impl From<AllocError> for Errno {
    fn from(_: AllocError) -> Errno {
        Errno::ENOMEM
    }
}
