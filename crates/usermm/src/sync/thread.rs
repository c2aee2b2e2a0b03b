//! Starting and pausing the engine's own threads: kthreads and workers on an emulated CPU.
//!
//! In wall mode these are host threads (`std::thread`). A virtual run (see [`vhook`]) runs them
//! as contexts of the runtime instead; the virtual-time work adds that here, so every thread
//! the engine starts goes through this module (the workqueue's workers do).
//!
//! | here | kernel |
//! |---|---|
//! | [`spawn_on`], [`spawn_named_on`] | `kthread_create_on_cpu` + `wake_up_process` |
//! | [`scope`] | a workload's tasks, joined before the scope ends |
//! | [`sleep`] | `msleep` / `schedule_timeout` |

use std::io;
use std::time::Duration;

pub use std::thread::{JoinHandle, Scope, ScopedJoinHandle};

use super::vhook;
use crate::cpu::CpuId;

/// Start `f` on a new thread that stands for emulated CPU `cpu`. `f` receives the CPU.
pub fn spawn_on<F, T>(cpu: CpuId, f: F) -> io::Result<JoinHandle<T>>
where
    F: FnOnce(CpuId) -> T + Send + 'static,
    T: Send + 'static,
{
    std::thread::Builder::new().spawn(move || f(cpu))
}

/// [`spawn_on`] with a thread name (`kworker/u:<name>/<i>`).
pub fn spawn_named_on<F, T>(cpu: CpuId, name: String, f: F) -> io::Result<JoinHandle<T>>
where
    F: FnOnce(CpuId) -> T + Send + 'static,
    T: Send + 'static,
{
    std::thread::Builder::new().name(name).spawn(move || f(cpu))
}

/// Run `f` with a scope whose threads are all joined before `scope` returns
/// (`std::thread::scope` in wall mode).
pub fn scope<'env, F, T>(f: F) -> T
where
    F: for<'scope> FnOnce(&'scope Scope<'scope, 'env>) -> T,
{
    std::thread::scope(f)
}

/// Sleep for `d`: in virtual time in a virtual run, on the host otherwise.
pub fn sleep(d: Duration) {
    let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
    if vhook::active() && vhook::sleep_ns(ns) {
        return;
    }
    std::thread::sleep(d);
}
