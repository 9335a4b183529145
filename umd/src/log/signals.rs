//! Fatal-signal hook: on SIGSEGV, SIGBUS or SIGABRT the emergency ring is written out (with
//! async-signal-safe calls only, see [`super::ring`]), then the previous disposition is put back
//! and the signal is delivered again, so the process still dies the way it would have (core
//! dump, the Rust runtime's stack-overflow message, an application's own handler).
//! `UMD_LOG_SIGNALS=0` leaves the signal dispositions alone.

use std::sync::atomic::{AtomicBool, Ordering};

const SIGNALS: [i32; 3] = [libc::SIGSEGV, libc::SIGBUS, libc::SIGABRT];

struct Old(std::cell::UnsafeCell<[libc::sigaction; 3]>);
// SAFETY: written once in `install` before the handlers that read it are installed.
unsafe impl Sync for Old {}

static OLD: Old = Old(std::cell::UnsafeCell::new(
    // SAFETY: sigaction is plain data; all-zero is SIG_DFL with an empty mask.
    unsafe { std::mem::zeroed() },
));
static INSTALLED: AtomicBool = AtomicBool::new(false);
static FIRED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_fatal(sig: i32, info: *mut libc::siginfo_t, _ctx: *mut libc::c_void) {
    if !FIRED.swap(true, Ordering::AcqRel) {
        super::ring::dump_from_signal(sig);
    }
    let Some(k) = SIGNALS.iter().position(|&s| s == sig) else {
        return;
    };
    // SAFETY: OLD was filled before this handler was installed; sigaction and raise are
    // async-signal-safe.
    unsafe {
        let old = &(*OLD.0.get())[k];
        libc::sigaction(sig, old, std::ptr::null_mut());
        // A fault raised by the kernel (si_code > 0) repeats when the instruction is restarted,
        // now reaching the previous handler; a signal sent by kill/raise/abort must be resent.
        let user = info.is_null() || (*info).si_code <= 0;
        if user {
            libc::raise(sig);
        }
    }
}

/// Installs the handlers once per process.
pub fn install() {
    if INSTALLED.swap(true, Ordering::AcqRel) {
        return;
    }
    // SAFETY: plain sigaction calls with valid structs; OLD is written before any handler that
    // reads it is installed (each entry before its own signal's handler).
    unsafe {
        let olds = &mut *OLD.0.get();
        for (k, &sig) in SIGNALS.iter().enumerate() {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_fatal as *const () as usize;
            sa.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
            libc::sigemptyset(&mut sa.sa_mask);
            if libc::sigaction(sig, std::ptr::null(), &mut olds[k]) != 0 {
                continue;
            }
            if olds[k].sa_sigaction == libc::SIG_IGN {
                continue;
            }
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
}
