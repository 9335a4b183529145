//! What a process made by `fork()` inherits, and the rule for it (docs/libumd.md, "fork").
//!
//! A child gets a copy of libumd's tables, but not the threads behind them (the simulator's
//! device thread, the log writer) and, on the kernel backend, it shares the parent's DRM file:
//! work submitted through an inherited handle would never run (simulator) or would act on the
//! parent's contexts (kernel). So the contract is: **in the child, every handle created before
//! the fork fails fast with `UMD_ERR_INVALID_HANDLE` and a detail that says so; the child opens
//! its own device and gets a fully working one** (a fresh simulated GPU, or a new file on the
//! render node). Nothing the parent owns is touched from the child: inherited objects are never
//! destroyed there (that would tear down the parent's contexts through the shared file).
//!
//! The generation below grows in every child (a `pthread_atfork` child handler, which only
//! does atomic stores: it runs in an async-signal-safe context); each object remembers the
//! generation it was created in.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

static GENERATION: AtomicU64 = AtomicU64::new(0);
static INSTALLED: AtomicBool = AtomicBool::new(false);
/// The pid whose objects the current generation's tables hold before a fork (for messages).
static PARENT_PID: AtomicU32 = AtomicU32::new(0);

extern "C" fn in_child() {
    // SAFETY: getppid is async-signal-safe and has no preconditions.
    PARENT_PID.store(unsafe { libc::getppid() } as u32, Ordering::Relaxed);
    GENERATION.fetch_add(1, Ordering::AcqRel);
    crate::registry::forget_inherited_counts();
}

/// Registers the child handler once (every C entry point calls this; after the first call it is
/// one atomic load).
#[inline]
pub fn install() {
    if !INSTALLED.load(Ordering::Relaxed) && !INSTALLED.swap(true, Ordering::AcqRel) {
        // SAFETY: registers a plain extern "C" function without arguments.
        unsafe {
            libc::pthread_atfork(None, None, Some(in_child));
        }
    }
}

/// The current generation: 0 in the process that loaded libumd, +1 per fork on the way to this
/// process.
#[inline]
pub fn generation() -> u64 {
    GENERATION.load(Ordering::Relaxed)
}

/// The parent process of the latest fork (0 when this process was not forked with libumd
/// loaded).
pub fn parent_pid() -> u32 {
    PARENT_PID.load(Ordering::Relaxed)
}
