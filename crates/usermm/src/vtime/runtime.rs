//! The runtime: one host thread, every emulated CPU's contexts as coroutines.
//!
//! [`Runtime::run`] makes the first context, installs the runtime as the host thread's
//! *current* one (a thread-local, the analogue of the kernel's `current`: it says which run
//! the code on this host thread belongs to, it is set only while `run` executes and is never a
//! policy), and loops: take the smallest ready context ([`State::next`]), resume its coroutine
//! until it suspends or finishes, repeat. It returns when every context has finished; it
//! panics, naming the blocked contexts, when none can run but some are blocked (deadlock); a
//! panic inside a context ends the run and is resumed out of `run` with its own payload.
//!
//! After a failed run (panic or deadlock) the runtime refuses further runs, and the contexts
//! that were suspended are leaked, never resumed (see `coro.rs` for why).

#![deny(unsafe_code)]

use std::{
    cell::{Cell, RefCell},
    marker::PhantomData,
    panic::{self, AssertUnwindSafe},
    rc::{Rc, Weak},
    sync::Arc,
};

use corosensei::stack::DefaultStack;

use super::{
    coro::{self, Resumed},
    memory::{Memmap, Memory},
    pending::clear_pending,
    profile::{Placement, Profile, ProfileError, Ps},
    report::Report,
    sched::{CtxId, Model, Next, State},
};

/// Contexts' stacks: 1 MiB of address space each (touched lazily, as a host thread's is), plus
/// a guard page. Engine code built without optimisation needs deep frames; an overflow hits
/// the guard page and kills the process (there is no stack-overflow handler for coroutines).
const DEFAULT_STACK_SIZE: usize = 1 << 20;
/// Finished contexts' stacks kept for reuse.
const STACK_POOL: usize = 64;

/// A virtual-time machine: a cost profile, `nr_cpus` emulated CPUs and `nr_nodes` memory
/// nodes, and the state every run on it accumulates (clocks, locks, lines, statistics).
///
/// Not `Send`: a runtime lives on the host thread that runs it.
#[derive(Debug)]
pub struct Runtime {
    inner: Rc<Inner>,
}

pub(super) struct Inner {
    pub state: RefCell<State>,
    /// Every context's coroutine, by id; the scheduler holds this borrowed while it runs and
    /// resumes them in place.
    coros: RefCell<Vec<Option<coro::Context>>>,
    /// Coroutines created while the scheduler runs (a context spawning another), moved into
    /// `coros` by the scheduler when the running context suspends.
    spawned: RefCell<Vec<(CtxId, coro::Context)>>,
    stacks: RefCell<Vec<DefaultStack>>,
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inner")
            .field("state", &self.state)
            .field("pooled_stacks", &self.stacks.borrow().len())
            .finish_non_exhaustive()
    }
}

thread_local! {
    /// The run this host thread is executing, if any (the analogue of `current`).
    static CURRENT: RefCell<Option<Rc<Inner>>> = const { RefCell::new(None) };
    /// `CURRENT.is_some()`, in a const-initialised cell without a destructor: reading it is one
    /// thread-local load, which is all a hook costs outside a run.
    static ACTIVE: Cell<bool> = const { Cell::new(false) };
    /// Depth of [`hooks::atomic`](super::hooks::atomic) sections (debug builds check it).
    static ATOMIC_DEPTH: Cell<u32> = const { Cell::new(0) };
}

/// An [`atomic`](super::hooks::atomic) section: no synchronisation point may be passed while
/// one is open (checked in debug builds at every synchronisation point; release builds keep
/// no count).
#[derive(Debug)]
#[must_use = "the section ends when the guard is dropped"]
pub struct AtomicSection(());

impl AtomicSection {
    #[inline]
    pub fn enter() -> Self {
        #[cfg(debug_assertions)]
        ATOMIC_DEPTH.set(ATOMIC_DEPTH.get() + 1);
        AtomicSection(())
    }
}

#[cfg(debug_assertions)]
impl Drop for AtomicSection {
    fn drop(&mut self) {
        ATOMIC_DEPTH.set(ATOMIC_DEPTH.get() - 1);
    }
}

#[inline]
fn check_not_atomic() {
    debug_assert_eq!(
        ATOMIC_DEPTH.get(),
        0,
        "vtime: a synchronisation point inside an atomic section (an access under the TLB \
         gate's stand-in must not take a lock)"
    );
}

/// The runtime of the run executing on this host thread.
#[inline]
pub(super) fn current() -> Option<Rc<Inner>> {
    if !in_run() {
        return None;
    }
    CURRENT
        .try_with(|c| c.borrow().as_ref().map(Rc::clone))
        .ok()
        .flatten()
}

/// Runs `f` on the current run's runtime without taking a reference count; `f` must not
/// suspend the context (the thread-local stays borrowed while it runs).
#[inline]
pub(super) fn with_current<R>(f: impl FnOnce(&Inner) -> Option<R>) -> Option<R> {
    if !in_run() {
        return None;
    }
    CURRENT
        .try_with(|c| c.borrow().as_deref().and_then(f))
        .ok()
        .flatten()
}

/// Is a run executing on this host thread? One thread-local load and a branch.
#[inline]
pub(super) fn in_run() -> bool {
    ACTIVE.get()
}

pub(super) fn current_or_panic(what: &str) -> Rc<Inner> {
    current().unwrap_or_else(|| panic!("vtime::{what} called outside a virtual run"))
}

/// Clears `CURRENT` when `run` leaves, however it leaves.
struct CurrentGuard;

impl CurrentGuard {
    fn set(rt: Rc<Inner>) -> Self {
        CURRENT.with(|c| {
            let mut c = c.borrow_mut();
            assert!(
                c.is_none(),
                "vtime: Runtime::run called inside a run (one run per host thread)"
            );
            *c = Some(rt);
        });
        ACTIVE.set(true);
        CurrentGuard
    }
}

impl Drop for CurrentGuard {
    fn drop(&mut self) {
        ACTIVE.set(false);
        CURRENT.with(|c| c.borrow_mut().take());
    }
}

enum Failure {
    Panic(Box<dyn std::any::Any + Send>),
    Deadlock(String),
}

impl Runtime {
    /// A runtime for `nr_cpus` CPUs and `nr_nodes` nodes of `profile`'s machine. Fails, naming
    /// the field, when the CPUs exceed the profile's hardware threads or the nodes are not
    /// between 1 and `MAX_NODES` (1024; nodes past the CPUs are memory-only).
    pub fn new(
        profile: Arc<Profile>,
        nr_cpus: usize,
        nr_nodes: usize,
    ) -> Result<Self, ProfileError> {
        let placement = Placement::new(&profile, nr_cpus, nr_nodes)?;
        let state = State::new(Model::new(profile, placement));
        Ok(Runtime {
            inner: Rc::new(Inner {
                state: RefCell::new(state),
                coros: RefCell::new(Vec::new()),
                spawned: RefCell::new(Vec::new()),
                stacks: RefCell::new(Vec::new()),
            }),
        })
    }

    /// Tells the runtime the size of the memmap its runs touch: `nr_frames` frames,
    /// `frames_per_node` to a node (the engine's `page_to_nid`), their line states in a
    /// memmap of the runtime's own. With a profile that has a `[memory]`, the run's line
    /// model starts cold (`vtime/memory.rs`); without, touches stay free.
    pub fn set_memmap(&self, nr_frames: u64, frames_per_node: u64) {
        let mut st = self.inner.state.borrow_mut();
        let m = &st.model;
        st.mem = m.profile.memory.map(|price| {
            Memory::own(
                price,
                &m.placement,
                &m.profile.transfer_ps,
                nr_frames,
                frames_per_node,
            )
        });
    }

    /// [`Runtime::set_memmap`] with a machine's own memmap, whose `PageMeta`s keep the line
    /// states (`Machine::run`), `frames_per_node` to a node: the run's line model starts cold
    /// there too, a generation after the machine's previous run (`vtime/lines.rs`).
    pub(crate) fn set_machine_memmap(&self, memmap: Arc<dyn Memmap>, frames_per_node: u64) {
        let mut st = self.inner.state.borrow_mut();
        let m = &st.model;
        st.mem = m.profile.memory.map(|price| {
            Memory::on_machine(
                price,
                &m.placement,
                &m.profile.transfer_ps,
                Arc::clone(&memmap),
                frames_per_node,
            )
        });
    }

    /// Seeds the jitter of contexts created from now on (`time.seed`).
    pub fn set_seed(&self, seed: u64) {
        self.inner.state.borrow_mut().seed = seed;
    }

    /// Runs `f` as the first context, on `cpu`, at the time the previous run ended (0 the first
    /// time); returns `f`'s result when every context of the run has finished.
    ///
    /// # Panics
    /// On a deadlock (no context can run, some are blocked: the message names them and what
    /// they wait for), with the payload of a context's panic, when `cpu` is not one of the
    /// runtime's, when called inside a run, or after an earlier run of this runtime failed.
    pub fn run<F, T>(&self, cpu: usize, f: F) -> T
    where
        F: FnOnce() -> T,
    {
        let inner = &self.inner;
        assert!(
            !inner.state.borrow().failed,
            "vtime: an earlier run of this runtime failed; make a new runtime"
        );
        let cpu = inner.check_cpu(cpu);
        clear_pending();
        let guard = CurrentGuard::set(Rc::clone(inner));
        let result: RefCell<Option<T>> = RefCell::new(None);
        {
            let result = &result;
            let start = inner.state.borrow().end;
            inner.create(
                cpu,
                "main".into(),
                start,
                Box::new(move || {
                    *result.borrow_mut() = Some(f());
                }),
            );
        }
        // If the scheduler itself unwinds (a runtime bug), no context may outlive `run`.
        let dispose = DisposeOnUnwind(inner);
        let outcome = inner.schedule();
        std::mem::forget(dispose);
        drop(guard);
        match outcome {
            Ok(()) => result
                .into_inner()
                .expect("vtime: the first context finished without a result"),
            Err(Failure::Panic(p)) => panic::resume_unwind(p),
            Err(Failure::Deadlock(msg)) => panic!("{msg}"),
        }
    }

    /// What the runs so far modelled: times, lock_stat, lines (all labelled modelled).
    pub fn report(&self) -> Report {
        Report::from_state(&self.inner.state.borrow())
    }

    /// Whether a clock of the runs so far reached the end of virtual time (`u64::MAX` ps,
    /// 213 days), where it stops: its figures are not times, and no caller may print them.
    pub fn clock_ended(&self) -> bool {
        self.inner.state.borrow().clock_ended()
    }

    /// The virtual time at which the last run ended, in ns.
    pub fn end_ns(&self) -> u64 {
        self.inner.state.borrow().end / 1000
    }

    pub fn profile(&self) -> Arc<Profile> {
        Arc::clone(&self.inner.state.borrow().model.profile)
    }

    pub fn placement(&self) -> Placement {
        self.inner.state.borrow().model.placement.clone()
    }
}

/// Moves the coroutines created since the last call from `spawned` to their places in
/// `coros`.
#[cold]
fn adopt(coros: &mut Vec<Option<coro::Context>>, spawned: &mut Vec<(CtxId, coro::Context)>) {
    for (id, ctx) in spawned.drain(..) {
        if coros.len() <= id as usize {
            coros.resize_with(id as usize + 1, || None);
        }
        coros[id as usize] = Some(ctx);
    }
}

struct DisposeOnUnwind<'a>(&'a Rc<Inner>);

impl Drop for DisposeOnUnwind<'_> {
    fn drop(&mut self) {
        self.0.fail();
    }
}

impl Inner {
    fn check_cpu(&self, cpu: usize) -> u16 {
        let n = self.state.borrow().nr_cpus();
        assert!(cpu < n, "vtime: cpu {cpu} is not one of the run's {n} CPUs");
        cpu as u16
    }

    /// Creates a context on `cpu`, ready at `now`, running `f`.
    fn create<'a>(&self, cpu: u16, name: String, now: Ps, f: Box<dyn FnOnce() + 'a>) -> CtxId {
        let id = self.state.borrow_mut().new_ctx(cpu, name, now);
        let stack = self.stacks.borrow_mut().pop();
        let stack = match stack {
            Some(s) => s,
            None => DefaultStack::new(DEFAULT_STACK_SIZE)
                .unwrap_or_else(|e| panic!("vtime: cannot map a context stack: {e}")),
        };
        let body = move |yp| {
            let rt = current_or_panic("context start");
            rt.state.borrow_mut().ctxs[id as usize].yielder = yp;
            drop(rt);
            f();
            // Thread exit is a synchronisation point.
            if let Some(rt) = current() {
                rt.sync(|st, me| st.exit(me));
            }
        };
        let ctx = coro::new_context(stack, Box::new(body));
        self.spawned.borrow_mut().push((id, ctx));
        id
    }

    /// Resumes the smallest ready context until none is left. The coroutines stay in
    /// `coros`, borrowed by this loop alone and resumed in place; those a context spawned
    /// wait in `spawned` until it suspends.
    fn schedule(&self) -> Result<(), Failure> {
        let failure = {
            let mut coros = self.coros.borrow_mut();
            loop {
                {
                    let mut spawned = self.spawned.borrow_mut();
                    if !spawned.is_empty() {
                        adopt(&mut coros, &mut spawned);
                    }
                }
                let next = self.state.borrow_mut().next();
                let id = match next {
                    Next::Run(id) => id,
                    Next::Done => return Ok(()),
                    Next::Deadlock => {
                        break Failure::Deadlock(self.state.borrow().deadlock_report());
                    }
                };
                let slot = &mut coros[id as usize];
                let ctx = slot
                    .as_mut()
                    .expect("vtime: a ready context has a coroutine");
                match ctx.resume() {
                    Resumed::Suspended => {}
                    Resumed::Finished => {
                        let stack = slot.take().map(coro::Context::into_stack);
                        let mut stacks = self.stacks.borrow_mut();
                        if stacks.len() < STACK_POOL {
                            stacks.extend(stack);
                        }
                    }
                    Resumed::Panicked(p) => break Failure::Panic(p),
                }
            }
        };
        self.fail();
        Err(failure)
    }

    /// The run failed: hooks become no-ops, contexts are disposed of, newest first.
    fn fail(&self) {
        {
            let mut st = self.state.borrow_mut();
            st.failed = true;
            st.running = None;
        }
        let mut coros = std::mem::take(&mut *self.coros.borrow_mut());
        adopt(&mut coros, &mut self.spawned.borrow_mut());
        for c in coros.into_iter().rev().flatten() {
            coro::dispose(c);
        }
    }

    /// Runs `f` at a synchronisation point of the running context, after waiting for its turn
    /// (its key below every ready context's). `None` when no context is running on this host
    /// thread (the run failed, or the caller is the scheduler itself).
    #[inline]
    pub(super) fn sync<R>(&self, f: impl FnOnce(&mut State, CtxId) -> R) -> Option<R> {
        check_not_atomic();
        let mut st = self.state.borrow_mut();
        if st.failed {
            return None;
        }
        let me = st.running?;
        st.apply_pending(me);
        st.counters.sync_points += 1;
        if !st.may_pass(me) {
            st.counters.gate_yields += 1;
            st.yield_ready(me);
            let y = st.ctxs[me as usize].yielder;
            drop(st);
            coro::suspend(y);
            st = self.state.borrow_mut();
            debug_assert!(st.may_pass(me));
        }
        Some(f(&mut st, me))
    }

    /// Suspends the running context, which has queued itself on something, until the
    /// scheduler resumes it.
    pub(super) fn block(&self) {
        check_not_atomic();
        let y = {
            let mut st = self.state.borrow_mut();
            let me = st.running.expect("vtime: block outside a context");
            st.apply_pending(me);
            st.ctxs[me as usize].yielder
        };
        coro::suspend(y);
    }

    /// The running context, outside synchronisation (for clock reads and charges).
    #[inline]
    pub(super) fn with_running<R>(&self, f: impl FnOnce(&mut State, CtxId) -> R) -> Option<R> {
        self.with_running_raw(|st, me| {
            st.apply_pending(me);
            f(st, me)
        })
    }

    /// The running context, outside synchronisation, leaving its pending charges pending (a
    /// memory touch: the batch's charges are applied, and jittered, as one).
    #[inline]
    pub(super) fn with_running_raw<R>(&self, f: impl FnOnce(&mut State, CtxId) -> R) -> Option<R> {
        let mut st = self.state.borrow_mut();
        if st.failed {
            return None;
        }
        let me = st.running?;
        Some(f(&mut st, me))
    }

    /// Spawns a context on `cpu` at the caller's clock (a synchronisation point).
    fn spawn_from_context<'a>(&self, cpu: usize, name: String, f: Box<dyn FnOnce() + 'a>) -> CtxId {
        let cpu = self.check_cpu(cpu);
        let now = self
            .sync(|st, me| st.ctxs[me as usize].now)
            .expect("vtime: spawn outside a context");
        self.create(cpu, name, now, f)
    }

    /// Joins context `id` from the running context.
    fn join_ctx(&self, id: CtxId) {
        let done = self
            .sync(|st, me| st.join_begin(me, id))
            .expect("vtime: join outside a context");
        if !done {
            self.block();
        }
    }
}

/// An owned permission to join a spawned context (like `std::thread::JoinHandle`).
#[derive(Debug)]
pub struct JoinHandle<T> {
    id: CtxId,
    packet: Rc<RefCell<Option<T>>>,
    rt: Weak<Inner>,
}

impl<T> JoinHandle<T> {
    /// Waits (in virtual time, off the CPU) for the context to finish; returns its result.
    /// The joiner runs again at the child's end plus the wake-up latency if it had to wait.
    ///
    /// A panic in the child is not returned here: it ends the whole run.
    pub fn join(self) -> T {
        join_packet(&self.rt, self.id, &self.packet)
    }

    /// The context's id in the run (its row in [`Report::contexts`]).
    pub fn id(&self) -> u32 {
        self.id
    }
}

fn join_packet<T>(rt: &Weak<Inner>, id: CtxId, packet: &RefCell<Option<T>>) -> T {
    if let Some(cur) = current() {
        if let Some(rt) = rt.upgrade() {
            assert!(
                Rc::ptr_eq(&rt, &cur),
                "vtime: joining a context of another runtime"
            );
            rt.join_ctx(id);
        }
    }
    // Outside a run, every context of the run has finished.
    packet
        .borrow_mut()
        .take()
        .expect("vtime: joined context left no result")
}

/// Spawns a context on `cpu` running `f`, at the caller's virtual time. Call it from inside a
/// run; the context may outlive its handle (the run waits for it anyway).
pub fn spawn<F, T>(cpu: usize, f: F) -> JoinHandle<T>
where
    F: FnOnce() -> T + 'static,
    T: 'static,
{
    spawn_named(cpu, String::new(), f)
}

/// [`spawn`] with a name for reports and deadlock messages (like a kthread's comm).
pub fn spawn_named<F, T>(cpu: usize, name: impl Into<String>, f: F) -> JoinHandle<T>
where
    F: FnOnce() -> T + 'static,
    T: 'static,
{
    let rt = current_or_panic("spawn");
    let packet = Rc::new(RefCell::new(None));
    let p = Rc::clone(&packet);
    let id = rt.spawn_from_context(
        cpu,
        name.into(),
        Box::new(move || {
            let v = f();
            *p.borrow_mut() = Some(v);
        }),
    );
    JoinHandle {
        id,
        packet,
        rt: Rc::downgrade(&rt),
    }
}

/// Joins context `id` of the current run (a [`JoinHandle::id`] whose handle was dropped):
/// waits in virtual time, as [`JoinHandle::join`] does, without taking its result.
///
/// # Panics
/// Outside a run, or when `id` is not a context of the current run.
pub fn join_id(id: u32) {
    let rt = current_or_panic("join_id");
    let n = rt.state.borrow().ctxs.len();
    assert!(
        (id as usize) < n,
        "vtime: joining context {id}, which is not one of this run's {n}"
    );
    rt.join_ctx(id);
}

/// A scope for contexts that borrow from the caller (like `std::thread::Scope`).
#[derive(Debug)]
pub struct Scope<'scope, 'env: 'scope> {
    rt: Rc<Inner>,
    children: RefCell<Vec<CtxId>>,
    scope: PhantomData<&'scope mut &'scope ()>,
    env: PhantomData<&'env mut &'env ()>,
}

/// A handle to join a scoped context.
#[derive(Debug)]
pub struct ScopedJoinHandle<'scope, T> {
    id: CtxId,
    packet: Rc<RefCell<Option<T>>>,
    rt: Weak<Inner>,
    scope: PhantomData<&'scope ()>,
}

impl<T> ScopedJoinHandle<'_, T> {
    /// Waits for the context; returns its result (see [`JoinHandle::join`]).
    pub fn join(self) -> T {
        join_packet(&self.rt, self.id, &self.packet)
    }

    pub fn id(&self) -> u32 {
        self.id
    }
}

/// Runs `f` with a [`Scope`] whose contexts may borrow from the caller; returns after every
/// one of them has finished, even when `f` panics (the panic is resumed after the joins).
pub fn scope<'env, F, T>(f: F) -> T
where
    F: for<'scope> FnOnce(&'scope Scope<'scope, 'env>) -> T,
{
    let rt = current_or_panic("scope");
    let scope = Scope {
        rt,
        children: RefCell::new(Vec::new()),
        scope: PhantomData,
        env: PhantomData,
    };
    let r = panic::catch_unwind(AssertUnwindSafe(|| f(&scope)));
    // A finished child is joined at once; `join_ctx` may block for the others.
    for id in scope.children.take() {
        scope.rt.join_ctx(id);
    }
    match r {
        Ok(v) => v,
        Err(p) => panic::resume_unwind(p),
    }
}

impl<'scope> Scope<'scope, '_> {
    /// Spawns a context on `cpu` that may borrow anything that outlives the scope.
    pub fn spawn<F, T>(&'scope self, cpu: usize, f: F) -> ScopedJoinHandle<'scope, T>
    where
        F: FnOnce() -> T + 'scope,
        T: 'scope,
    {
        self.spawn_named(cpu, String::new(), f)
    }

    /// [`Scope::spawn`] with a name.
    pub fn spawn_named<F, T>(
        &'scope self,
        cpu: usize,
        name: impl Into<String>,
        f: F,
    ) -> ScopedJoinHandle<'scope, T>
    where
        F: FnOnce() -> T + 'scope,
        T: 'scope,
    {
        let packet = Rc::new(RefCell::new(None));
        let p = Rc::clone(&packet);
        let id = self.rt.spawn_from_context(
            cpu,
            name.into(),
            Box::new(move || {
                let v = f();
                *p.borrow_mut() = Some(v);
            }),
        );
        self.children.borrow_mut().push(id);
        ScopedJoinHandle {
            id,
            packet,
            rt: Rc::downgrade(&self.rt),
            scope: PhantomData,
        }
    }
}
