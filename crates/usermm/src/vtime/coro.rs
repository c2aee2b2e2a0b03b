//! The only `unsafe` of virtual time: stackful coroutines whose bodies borrow, and suspending
//! the running one from deep inside a hook.
//!
//! Every context of a run is a `corosensei` coroutine on its own mmap'd stack (with a guard
//! page), resumed by the scheduler on the host thread that called `Runtime::run`. Two things
//! need `unsafe`, and both are fenced here:
//!
//! 1. **Borrowing bodies.** `Runtime::run(cpu, f)` and `scope(|s| s.spawn(..))` take closures
//!    that borrow from their caller's stack, like `std::thread::scope`. `corosensei` checks
//!    `'static` in its safe constructor; [`new_context`] uses its unchecked one. The runtime
//!    upholds the contract (every borrow outlives the coroutine) by construction:
//!    - `run` does not return, normally or by unwinding, before every coroutine of the run has
//!      finished or has been disposed of by [`dispose`];
//!    - a `scope` does not return, normally or by unwinding, before every context it spawned has
//!      finished (it catches its body's panic, joins, then resumes the panic);
//!    - when a run fails (a panic or a deadlock), [`dispose`] never resumes a started coroutine
//!      again: it is leaked with everything on its stack, so no code ever reads a borrow that
//!      may have dangled. Coroutines that never started are dropped (their closure only).
//! 2. **Suspending from a hook.** A context blocks deep inside engine code (a lock acquire
//!    inside `free_pcppages_bulk`), far from the `&Yielder` its body was given. The body stores
//!    the yielder's address ([`YielderPtr`]) in its context's record, and [`suspend`] uses it.
//!    The pointer is valid while the coroutine has not returned (the yielder lives at a fixed
//!    place on the coroutine's own stack), and the runtime only ever calls [`suspend`] with the
//!    pointer of the context that is running (`State::running`), from that context's code.

// The one file of `vtime` allowed `unsafe` (the parent module denies it).
#![expect(unsafe_code)]

use std::{
    any::Any,
    panic::{self, AssertUnwindSafe},
};

use corosensei::{stack::DefaultStack, Coroutine, CoroutineResult, Yielder};

/// A context's coroutine: resumed with `()`, suspends with `()`, returns `Err(panic payload)`
/// when its body panicked.
pub(super) struct Context {
    coro: Coroutine<(), (), Result<(), Box<dyn Any + Send>>, DefaultStack>,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("started", &self.coro.started())
            .field("done", &self.coro.done())
            .finish()
    }
}

/// The address of a context's `Yielder`, set by the context's body when it starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct YielderPtr(*const Yielder<(), ()>);

impl YielderPtr {
    pub(super) const NONE: YielderPtr = YielderPtr(std::ptr::null());
}

/// How a resumed context came back.
pub(super) enum Resumed {
    /// It suspended (blocked, or waits for its turn at a synchronisation point).
    Suspended,
    /// Its body returned.
    Finished,
    /// Its body panicked; the payload, to be resumed by `run`.
    Panicked(Box<dyn Any + Send>),
}

/// Makes a context that runs `body` on `stack`. `body` receives its yielder's address first
/// thing, and must store it where [`suspend`] will be called with it.
pub(super) fn new_context<'a>(
    stack: DefaultStack,
    body: Box<dyn FnOnce(YielderPtr) + 'a>,
) -> Context {
    let f = move |y: &Yielder<(), ()>, ()| {
        let yp = YielderPtr(y as *const _);
        panic::catch_unwind(AssertUnwindSafe(move || body(yp)))
    };
    // SAFETY: `with_stack_unchecked` requires that everything `f` borrows (through `body`,
    // lifetime `'a`) stays valid until the coroutine has finished or has been dropped, and
    // forever if it is leaked. The runtime guarantees it as the module essay says: `run` and
    // `scope` outlive every context they created unless the run failed, and a failed run never
    // resumes or drops a started context (`dispose` leaks it), so a borrow that might dangle is
    // never read. Contexts are created and resumed on one host thread only (`Context` is
    // `!Send`).
    let coro = unsafe { Coroutine::with_stack_unchecked(stack, f) };
    Context { coro }
}

impl Context {
    /// Runs the context until it suspends, returns or panics.
    pub(super) fn resume(&mut self) -> Resumed {
        match self.coro.resume(()) {
            CoroutineResult::Yield(()) => Resumed::Suspended,
            CoroutineResult::Return(Ok(())) => Resumed::Finished,
            CoroutineResult::Return(Err(p)) => Resumed::Panicked(p),
        }
    }

    /// The stack of a finished context, for reuse.
    pub(super) fn into_stack(self) -> DefaultStack {
        self.coro.into_stack()
    }
}

/// Disposes of a context of a failed run: one that never started is dropped (with its
/// closure); one that started is leaked, stack and all, and never resumed (see the essay).
pub(super) fn dispose(ctx: Context) {
    if ctx.coro.started() && !ctx.coro.done() {
        std::mem::forget(ctx);
    }
}

/// Suspends the running context back to the scheduler; returns when the scheduler resumes it.
///
/// The runtime calls this only with the [`YielderPtr`] of the running context, from that
/// context's own code (see the essay); a null pointer is a runtime bug and panics.
pub(super) fn suspend(y: YielderPtr) {
    assert!(!y.0.is_null(), "vtime: suspend outside a started context");
    // SAFETY: `y` is the yielder of the coroutine executing this very call (the runtime passes
    // only `State::running`'s pointer, and only from code running in that context), and that
    // coroutine has not returned, so the `Yielder` it points to is live on its stack.
    unsafe { (*y.0).suspend(()) }
}
