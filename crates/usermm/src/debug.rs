//! `VM_BUG_ON` and friends (`include/linux/mmdebug.h`).
//!
//! With the `debug_vm` feature (like `CONFIG_DEBUG_VM`) the checks are live: `vm_bug_on!` panics
//! with the kernel's message shape, `vm_warn_on!` reports once per call site through the
//! machine's warning counter. Without it they compile to a type-checked `if false` — the
//! `BUILD_BUG_ON_INVALID` trick — and cost nothing. These are for *internal* misuse only: bad
//! input from a caller is an error value, never a `vm_bug_on!`.

/// Panic when `cond` holds and `debug_vm` is on ("kernel BUG at ...").
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

/// Evaluate to `cond`; under `debug_vm` a true `cond` is a bug worth a panic in tests.
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
