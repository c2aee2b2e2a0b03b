//! Observability in the kernel's vocabulary: `/proc/vmstat` counters ([`vmstat`]), the
//! `/proc/meminfo` rendering ([`meminfo`]) and `/proc/lock_stat` figures ([`lockstat`]).

pub mod lockstat;
pub mod meminfo;
pub mod vmstat;

pub use lockstat::{LockStat, LockStatSnapshot};
pub use meminfo::MemInfo;
pub use vmstat::{VmItem, VmStat, VmStatSnapshot};
