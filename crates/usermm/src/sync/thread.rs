//! Starting and pausing the engine's own threads and a workload's tasks, each on an emulated
//! CPU.
//!
//! In wall mode these are host threads (`std::thread`). In a virtual run (see [`vhook`]) they
//! are contexts of the run's runtime ([`crate::vtime`]): coroutines on the host thread that
//! runs the machine, each bound to its emulated CPU for life, started at the spawner's virtual
//! time and joined in virtual time. Every thread the engine starts (the workqueue's workers)
//! and every task a workload starts goes through here, so that the same code runs in both.
//!
//! | here | kernel |
//! |---|---|
//! | [`spawn_on`], [`spawn_named_on`] | `kthread_create_on_cpu` + `wake_up_process` |
//! | [`scope`], [`Scope::spawn_on`] | a workload's tasks, joined before the scope ends |
//! | [`JoinHandle::join`] | `kthread_stop` / `waitpid` |
//! | [`sleep`] | `msleep` / `schedule_timeout` |
//!
//! # Differences between the modes
//! - A host thread runs wherever the host schedules it; the CPU it is given is a name it
//!   carries. A context runs on its CPU only: the runtime's scheduler is the CPU's.
//! - A panic in a host thread is returned by `join`; a panic in a context ends the whole run
//!   (it is resumed out of `Machine::run`).
//! - A [`Scope`] of a virtual run is not `Sync`: closures spawned in it cannot capture the
//!   scope to spawn more (host scopes allow that; the engine and workloads never do).

use std::io;
use std::sync::Arc;
use std::time::Duration;

use super::vhook;
use crate::cpu::CpuId;
use crate::vtime;

/// A context's result, filled when it returns; `Send` so that a handle may be kept in `Send`
/// structures (the workqueue's).
type Packet<T> = Arc<parking_lot::Mutex<Option<T>>>;

/// An owned permission to join a thread started by [`spawn_on`].
#[derive(Debug)]
pub struct JoinHandle<T>(Join<T>);

#[derive(Debug)]
enum Join<T> {
    Host(std::thread::JoinHandle<T>),
    Virtual { ctx: u32, packet: Packet<T> },
}

impl<T> JoinHandle<T> {
    /// Wait for the thread to finish and return its result (`Err` with the panic payload when
    /// a host thread panicked). In a virtual run the wait is in virtual time; outside the run
    /// that started the context, it has finished already (a run waits for all its contexts).
    pub fn join(self) -> std::thread::Result<T> {
        match self.0 {
            Join::Host(h) => h.join(),
            Join::Virtual { ctx, packet } => {
                if vhook::active() {
                    vtime::join_id(ctx);
                }
                let v = packet.lock().take();
                v.ok_or_else(|| Box::new("the context left no result (its run failed)") as _)
            }
        }
    }

    /// Whether the thread has finished (without waiting).
    pub fn is_finished(&self) -> bool {
        match &self.0 {
            Join::Host(h) => h.is_finished(),
            Join::Virtual { packet, .. } => packet.lock().is_some(),
        }
    }
}

/// Start `f` on a new thread that stands for emulated CPU `cpu`. `f` receives the CPU.
pub fn spawn_on<F, T>(cpu: CpuId, f: F) -> io::Result<JoinHandle<T>>
where
    F: FnOnce(CpuId) -> T + Send + 'static,
    T: Send + 'static,
{
    spawn_named_on(cpu, String::new(), f)
}

/// [`spawn_on`] with a thread name (`kworker/u:<name>/<i>`); in a virtual run, the context's
/// name in the run's report.
pub fn spawn_named_on<F, T>(cpu: CpuId, name: String, f: F) -> io::Result<JoinHandle<T>>
where
    F: FnOnce(CpuId) -> T + Send + 'static,
    T: Send + 'static,
{
    if vhook::active() {
        let packet: Packet<T> = Arc::new(parking_lot::Mutex::new(None));
        let p = Arc::clone(&packet);
        let h = vtime::spawn_named(cpu.index(), name, move || {
            let v = f(cpu);
            *p.lock() = Some(v);
        });
        return Ok(JoinHandle(Join::Virtual {
            ctx: h.id(),
            packet,
        }));
    }
    let b = std::thread::Builder::new();
    let b = if name.is_empty() { b } else { b.name(name) };
    b.spawn(move || f(cpu)).map(|h| JoinHandle(Join::Host(h)))
}

/// A scope whose threads may borrow from the caller and are all joined before [`scope`]
/// returns (`std::thread::Scope` in wall mode, `vtime::Scope` in a virtual run).
pub struct Scope<'scope, 'env: 'scope>(ScopeImp<'scope, 'env>);

enum ScopeImp<'scope, 'env: 'scope> {
    Host(&'scope std::thread::Scope<'scope, 'env>),
    Virtual(&'scope vtime::Scope<'scope, 'env>),
}

/// A handle to join a thread of a [`Scope`].
pub struct ScopedJoinHandle<'scope, T>(ScopedJoin<'scope, T>);

enum ScopedJoin<'scope, T> {
    Host(std::thread::ScopedJoinHandle<'scope, T>),
    Virtual(vtime::ScopedJoinHandle<'scope, T>),
}

impl<T> ScopedJoinHandle<'_, T> {
    /// Wait for the thread and return its result (see [`JoinHandle::join`]).
    pub fn join(self) -> std::thread::Result<T> {
        match self.0 {
            ScopedJoin::Host(h) => h.join(),
            ScopedJoin::Virtual(h) => Ok(h.join()),
        }
    }
}

impl std::fmt::Debug for Scope<'_, '_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match self.0 {
            ScopeImp::Host(_) => "host",
            ScopeImp::Virtual(_) => "virtual",
        };
        f.debug_tuple("Scope").field(&kind).finish()
    }
}

impl<T> std::fmt::Debug for ScopedJoinHandle<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScopedJoinHandle").finish_non_exhaustive()
    }
}

impl<'scope> Scope<'scope, '_> {
    /// Start `f` as a task on emulated CPU `cpu`.
    pub fn spawn_on<F, T>(&self, cpu: CpuId, f: F) -> ScopedJoinHandle<'scope, T>
    where
        F: FnOnce() -> T + Send + 'scope,
        T: Send + 'scope,
    {
        self.spawn_named_on(cpu, String::new(), f)
    }

    /// [`Scope::spawn_on`] with a name (the host thread's, or the context's in the report).
    pub fn spawn_named_on<F, T>(
        &self,
        cpu: CpuId,
        name: String,
        f: F,
    ) -> ScopedJoinHandle<'scope, T>
    where
        F: FnOnce() -> T + Send + 'scope,
        T: Send + 'scope,
    {
        match self.0 {
            ScopeImp::Host(s) => {
                let b = std::thread::Builder::new();
                let b = if name.is_empty() { b } else { b.name(name) };
                let h = b
                    .spawn_scoped(s, f)
                    .unwrap_or_else(|e| panic!("cannot start a host thread: {e}"));
                ScopedJoinHandle(ScopedJoin::Host(h))
            }
            ScopeImp::Virtual(s) => {
                ScopedJoinHandle(ScopedJoin::Virtual(s.spawn_named(cpu.index(), name, f)))
            }
        }
    }
}

/// Run `f` with a [`Scope`] whose threads are all joined before `scope` returns.
pub fn scope<'env, F, T>(f: F) -> T
where
    F: for<'scope> FnOnce(&Scope<'scope, 'env>) -> T,
{
    if vhook::active() {
        return vtime::scope(|s| f(&Scope(ScopeImp::Virtual(s))));
    }
    std::thread::scope(|s| f(&Scope(ScopeImp::Host(s))))
}

/// Sleep for `d`: in virtual time in a virtual run, on the host otherwise.
pub fn sleep(d: Duration) {
    let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
    if vhook::active() && vhook::sleep_ns(ns) {
        return;
    }
    std::thread::sleep(d);
}
