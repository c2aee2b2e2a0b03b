//! `VM_BUG_ON` and `VM_WARN_ON` (`include/linux/mmdebug.h`).
//!
//! - `vm_bug_on!(cond)` is live with the `debug_vm` feature (like `CONFIG_DEBUG_VM`) and in
//!   every build with debug assertions (tests, debug builds): a true `cond` panics with the
//!   kernel's message shape. In release builds without `debug_vm` it compiles to a
//!   type-checked `if false` — the `BUILD_BUG_ON_INVALID` trick — and costs nothing.
//! - `vm_warn_on!(cond)` always evaluates `cond` and returns it, so the caller takes its
//!   recovery path (as code using `WARN_ON`'s value does). With `debug_vm`, a true `cond`
//!   panics.
//!
//! Why `vm_warn_on!` panics under `debug_vm` rather than warn and go on as the kernel does:
//! the library never prints, and a warning counted somewhere nobody looks would let the bug it
//! reports pass every test. `debug_vm` is the build that looks for such bugs, so there a
//! warning is fatal; everywhere else it is the recovery path only.
//!
//! Both are for *internal* misuse: bad input from a caller is an error value, never a
//! `vm_bug_on!`.

/// Panic when `cond` holds, under `debug_vm` or debug assertions ("kernel BUG at ...").
#[macro_export]
macro_rules! vm_bug_on {
    ($cond:expr $(, $($arg:tt)+)?) => {{
        if cfg!(any(feature = "debug_vm", debug_assertions)) {
            if $cond {
                panic!(
                    "VM_BUG_ON({}){}",
                    stringify!($cond),
                    { let _m = String::new(); $(let _m = format!(": {}", format_args!($($arg)+));)? _m }
                );
            }
        } else if false {
            let _ = $cond;
        }
    }};
}

/// Evaluate to `cond`; under `debug_vm` a true `cond` panics (see the module doc for why).
#[macro_export]
macro_rules! vm_warn_on {
    ($cond:expr) => {{
        let c: bool = $cond;
        if cfg!(feature = "debug_vm") && c {
            panic!(concat!("VM_WARN_ON(", stringify!($cond), ")"));
        }
        c
    }};
}
