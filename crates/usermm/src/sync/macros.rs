//! The seam's two pieces of boilerplate, written once: the lock guards' `Deref` and `Debug`, and
//! the constructors that are `const` except under loom.
//!
//! Every guard of the seam ([`SpinLockGuard`](super::SpinLockGuard),
//! [`RwSemReadGuard`](super::RwSemReadGuard), [`MmapWriteGuard`](super::MmapWriteGuard), …) is
//! the proof that its lock is held and the only way to the data: it dereferences to `T`
//! through what it holds, which is one of
//! - a host guard in a field (`inner`), always there while the guard lives;
//! - a guard in an `Option` field, taken out when the hold ends early (a downgrade, an explicit
//!   unlock, or inside `drop`); a caller can never reach the guard then, so `None` is a bug and
//!   the message says which guard;
//! - a method of the guard (the loom `RwSem`'s, whose data sits behind loom's cell pointers).
//!
//! `guard_deref!` writes the `Deref` (and, after `mut`, `DerefMut`) impls for each of the
//! three, and `guard_debug!` the two `Debug` forms the guards use: `T`'s own (the guard is
//! transparent) or a struct named after the guard with the data as its `value`.
//!
//! The engine's locks are built in `static`s and in `const` contexts, so their constructors are
//! `const fn`; loom's primitives have no `const` constructor, so under `--cfg loom` the same
//! constructor is a plain `fn` (`const_unless_loom!`).

/// `Deref<Target = T>` (and with `mut`, `DerefMut`) for a guard type `$guard<'_, T>`:
/// - `guard_deref!(mut SpinLockGuard.inner)`: through the field `inner`;
/// - `guard_deref!(MmapReadGuard.guard?, "read guard used after its hold ended")`: through
///   the `Option` field `guard`, `None` being unreachable;
/// - `guard_deref!(mut RwSemWriteGuard => value, value_mut)`: through those two methods.
macro_rules! guard_deref {
    (mut $guard:ident . $field:ident ?, $ended:literal) => {
        guard_deref!($guard.$field?, $ended);
        impl<T> std::ops::DerefMut for $guard<'_, T> {
            #[inline]
            fn deref_mut(&mut self) -> &mut T {
                match &mut self.$field {
                    Some(guard) => guard,
                    None => unreachable!($ended),
                }
            }
        }
    };
    ($guard:ident . $field:ident ?, $ended:literal) => {
        impl<T> std::ops::Deref for $guard<'_, T> {
            type Target = T;
            #[inline]
            fn deref(&self) -> &T {
                match &self.$field {
                    Some(guard) => guard,
                    None => unreachable!($ended),
                }
            }
        }
    };
    (mut $guard:ident . $field:tt) => {
        guard_deref!($guard.$field);
        impl<T> std::ops::DerefMut for $guard<'_, T> {
            #[inline]
            fn deref_mut(&mut self) -> &mut T {
                &mut self.$field
            }
        }
    };
    ($guard:ident . $field:tt) => {
        impl<T> std::ops::Deref for $guard<'_, T> {
            type Target = T;
            #[inline]
            fn deref(&self) -> &T {
                &self.$field
            }
        }
    };
    (mut $guard:ident => $get:ident, $get_mut:ident) => {
        guard_deref!($guard => $get);
        impl<T> std::ops::DerefMut for $guard<'_, T> {
            #[inline]
            fn deref_mut(&mut self) -> &mut T {
                self.$get_mut()
            }
        }
    };
    ($guard:ident => $get:ident) => {
        impl<T> std::ops::Deref for $guard<'_, T> {
            type Target = T;
            #[inline]
            fn deref(&self) -> &T {
                self.$get()
            }
        }
    };
}

/// `Debug` for guard types `$guard<'_, T>` (each must deref to `T`):
/// - `guard_debug!(SpinLockGuard, …)`: as `T` prints (the guard is transparent);
/// - `guard_debug!(struct RwSemReadGuard, …)`: `RwSemReadGuard { value: … }`.
macro_rules! guard_debug {
    (struct $($guard:ident),+) => {$(
        impl<T: std::fmt::Debug> std::fmt::Debug for $guard<'_, T> {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct(stringify!($guard))
                    .field("value", &**self)
                    .finish()
            }
        }
    )+};
    ($($guard:ident),+) => {$(
        impl<T: std::fmt::Debug> std::fmt::Debug for $guard<'_, T> {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                std::fmt::Debug::fmt(&**self, f)
            }
        }
    )+};
}

/// One constructor, `const fn` in normal builds and a plain `fn` under `--cfg loom` (whose
/// primitives are built at run time, inside a model): attributes and doc comments go to both.
macro_rules! const_unless_loom {
    ($(#[$attr:meta])* $vis:vis fn $name:ident ($($arg:tt)*) -> $ret:ty $body:block) => {
        $(#[$attr])*
        #[cfg(not(loom))]
        $vis const fn $name($($arg)*) -> $ret $body

        $(#[$attr])*
        #[cfg(loom)]
        $vis fn $name($($arg)*) -> $ret $body
    };
}
